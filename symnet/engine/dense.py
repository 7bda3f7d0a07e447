"""Dense convenience: run a network on `[N, T, D]` arrays (or ragged sequences) without writing requests.

`context(network)` is the (left, right) frames an output frame needs, as
nnet3-info's left-context/right-context. `compute(network, x)` follows
nnet3-compute's edge convention (`mode='same'`): every sequence is padded with
copies of its first and last frames so that every input frame gets an output;
`mode='valid'` returns only the frames computable without padding.
"""

from __future__ import annotations

import numbers
from typing import Any, Mapping

import jax.numpy as jnp
import numpy as np

from ..errors import PlanError, ShapeError
from ..core.descriptor import Node
from ..core.index import IndexSet
from .computation import compile
from .graph import Graph
from .plan import time_reach
from .context import context, output_name
from .recurrence import RecurrentBlock
from .request import ComputationRequest

def compute(
    network: Any,
    x: Any,
    *,
    mode: str = "same",
    output: str | None = None,
    frames_per_chunk: int | None = None,
    carry_state: bool = True,
    extra_left_context: int = 0,
    extra_right_context: int = 0,
) -> Any:
    """Outputs for `[N, T, D]` input (or a list of `[T_i, D]` sequences, or a dict of such per input).

    `mode='same'` gives one output frame per input frame, repeating the first
    and last input frames for the context (nnet3-compute's convention);
    `mode='valid'` gives the `T - left - right` frames that need no padding.
    A list in gives a list out; sequences of one length share one computation.

    `frames_per_chunk` computes `mode='same'` output in chunks of that many
    frames, in one of two ways:

    - `carry_state=True` (the default): every recurrent state is carried from
      one chunk to the next, as in online decoding, so the result equals one
      pass over the whole sequence. A recurrence that reads later frames of
      itself (a backward recurrence) cannot be carried forward in time: that
      is a PlanError naming the node.
    - `carry_state=False`: each chunk is computed on its own, as nnet3-compute
      does: its input is the chunk's frames plus the context, plus
      `extra_left_context`/`extra_right_context` more frames (real ones where
      the sequence has them, repeated edge frames elsewhere), and every
      recurrence restarts at the chunk's first input frame.
    """
    if mode not in ("same", "valid"):
        raise PlanError(f"mode must be 'same' or 'valid', got {mode!r}")
    if frames_per_chunk is not None:
        if isinstance(frames_per_chunk, bool) or not isinstance(frames_per_chunk, numbers.Integral) \
                or frames_per_chunk <= 0 or mode != "same":
            raise PlanError(f"frames_per_chunk must be a positive number of frames (with mode='same'), "
                            f"got {frames_per_chunk!r}")
    for what, extra in (("extra_left_context", extra_left_context), ("extra_right_context", extra_right_context)):
        if isinstance(extra, bool) or not isinstance(extra, numbers.Integral) or extra < 0:
            raise PlanError(f"{what} must be a number of frames >= 0, got {extra!r}")
        if extra and (frames_per_chunk is None or carry_state):
            raise PlanError(f"{what} applies to chunks computed on their own: pass frames_per_chunk and "
                            "carry_state=False")
    name = output_name(network, output)
    graph = Graph(dict(network.structure.outputs))
    seqs, ragged = _sequences(x, graph)
    left, right = context(network, name)
    main = "input" if "input" in seqs else next(iter(seqs))
    lengths = [len(s) for s in seqs[main]]
    results: list[Any] = [None] * len(lengths)
    for length in sorted(set(lengths)):
        members = [i for i, n in enumerate(lengths) if n == length]
        group = {k: [v[i] for i in members] for k, v in seqs.items()}
        if frames_per_chunk is None:
            out = _compute_span(network, name, group, length, (0, length) if mode == "same" else (left, length - right),
                                mode, left, right, {})[0]
        elif carry_state:
            out = _compute_chunked(network, name, group, length, frames_per_chunk, left, right)
        else:
            out = jnp.concatenate([
                _compute_span(network, name, group, length, (start, min(start + frames_per_chunk, length)), "same",
                              left + extra_left_context, right + extra_right_context, {})[0]
                for start in range(0, length, frames_per_chunk)], axis=0)
        for j, i in enumerate(members):
            results[i] = out[:, j]
    if not ragged:
        return jnp.stack(results)
    return results


def _sequences(x: Any, graph: Graph) -> tuple[dict[str, list[np.ndarray]], bool]:
    """The input sequences per input name, checked (ShapeError naming what is wrong); whether they were a list."""
    inputs = x if isinstance(x, Mapping) else {"input": x}
    unknown = sorted(set(inputs) - set(graph.inputs))
    if unknown:
        raise PlanError(f"inputs {unknown} are not inputs of the network (it has {sorted(graph.inputs)})")
    missing = sorted(set(graph.inputs) - set(inputs))
    if missing:
        raise PlanError(f"the network needs input(s) {missing}")
    seqs: dict[str, list[np.ndarray]] = {}
    ragged = False
    for k, v in inputs.items():
        if hasattr(v, "ndim") and hasattr(v, "shape"):
            if v.ndim == 2:
                raise ShapeError(f"input {k!r}: compute takes a batch [N, T, D] or a list of [T, D] sequences; got "
                                 f"one array of shape {tuple(v.shape)}: add the batch axis (x[None]) for one sequence")
            if v.ndim != 3:
                raise ShapeError(f"input {k!r}: expected a batch of shape [N, T, D], got shape {tuple(v.shape)}")
            seqs[k] = list(_numeric(v, f"input {k!r}"))
        elif isinstance(v, (list, tuple)):
            ragged = True
            seqs[k] = [_numeric(s, f"input {k!r} sequence {i}") for i, s in enumerate(v)]
        else:
            raise ShapeError(f"input {k!r}: expected an [N, T, D] array or a list of [T, D] arrays, "
                             f"got a {type(v).__name__}")
    counts = {k: len(v) for k, v in seqs.items()}
    if len(set(counts.values())) != 1:
        raise ShapeError(f"inputs have different numbers of sequences: {counts}")
    if not next(iter(counts.values())):
        raise ShapeError("no sequences to compute (N = 0)")
    for k, v in seqs.items():
        dim = graph.input_dims.get(k)
        for i, s in enumerate(v):
            if s.ndim != 2:
                raise ShapeError(f"input {k!r} sequence {i}: expected [T, D], got shape {s.shape}")
            if not len(s):
                raise ShapeError(f"input {k!r} sequence {i} has no frames")
            if dim is not None and s.shape[1] != dim:
                raise ShapeError(f"input {k!r} sequence {i} has {s.shape[1]} features, but the network's input "
                                 f"{k!r} takes {dim}")
    return seqs, ragged


def _numeric(value: Any, what: str) -> np.ndarray:
    array = np.asarray(value) if not isinstance(value, str) else None
    if array is None or not (np.issubdtype(array.dtype, np.number) or array.dtype == np.bool_):
        raise ShapeError(f"{what}: expected numbers, got {type(value).__name__}"
                         + (f" of dtype {array.dtype}" if array is not None else ""))
    return array


def _compute_span(network, name, group, length, out_t, mode, left, right, state, state_out=(), in_t=None):
    """Output frames `out_t` of sequences of `length` frames; `state` gives node values before them.

    The input is given on frames `in_t` (by default the span and its context),
    edge frames repeated where they lie outside the sequence.
    Returns `([frames, n, dim] output, {state node: [frames, n, dim] at the span's last frames})`.
    """
    if out_t[1] <= out_t[0]:
        raise ShapeError(f"sequences of {length} frames are too short for context ({left}, {right})")
    n = len(next(iter(group.values())))
    if in_t is None:
        in_t = (out_t[0] - left, out_t[1] + right) if mode == "same" else (0, length)
    frames = np.clip(np.arange(*in_t), 0, length - 1)
    inputs = {k: IndexSet.range(n=n, t=in_t) for k in group}
    matrices = {}
    for k, v in group.items():
        block = np.stack([s[np.clip(frames, 0, len(s) - 1)] for s in v], axis=1)  # [T', n, D]
        matrices[k] = jnp.asarray(block.reshape(-1, block.shape[-1]))
    for node, (frames_given, value) in state.items():
        inputs[node] = IndexSet.range(n=n, t=frames_given)
        matrices[node] = value.reshape(-1, value.shape[-1])
    outputs = {name: IndexSet.range(n=n, t=out_t)}
    for node, depth in state_out:
        outputs[node] = IndexSet.range(n=n, t=(out_t[1] - depth, out_t[1]))
    result = compile(network, ComputationRequest(inputs=inputs, outputs=outputs))(network, matrices)
    out = result[name].reshape(out_t[1] - out_t[0], n, -1)
    carried = {
        node: ((out_t[1] - depth, out_t[1]), result[node].reshape(depth, n, -1)) for node, depth in state_out
    }
    return out, carried


def _compute_chunked(network, name, group, length, chunk, left, right):
    """Chunks equal to one pass: each chunk sees every input frame that any of its outputs could read in
    one pass (optional reads through IfDefined and Failover reach beyond the context), and recurrent
    states carry over from the chunk before."""
    states = recurrent_states(network, name)
    reach = time_reach(Graph(dict(network.structure.outputs)))
    pieces, state = [], {}
    for start in range(0, length, chunk):
        end = min(start + chunk, length)
        in_t = (max(-left, start - left - reach), min(length + right, end + right + reach))
        out, state = _compute_span(network, name, group, length, (start, end), "same", left, right, state,
                                   tuple(states.items()), in_t)
        pieces.append(out)
    return jnp.concatenate(pieces, axis=0)


def recurrent_states(network: Any, output: str | None = None) -> dict[str, int]:
    """The recurrent nodes whose values carry from frame to frame, with how many frames back they are read.

    A PlanError names a recurrence that reads later frames of itself: its state
    would have to come from the future, so it cannot be carried forward.
    """
    name = output_name(network, output)
    left, right = context(network, name)
    request = ComputationRequest(
        inputs={k: IndexSet.range(n=1, t=(-left, 8 + right)) for k in Graph(dict(network.structure.outputs)).inputs},
        outputs={name: IndexSet.range(n=1, t=8)},
    )
    computation = compile(network, request)
    states: dict[str, int] = {}
    for step in computation.steps:
        if not isinstance(step, RecurrentBlock):
            continue
        if step.reverse:
            graph = computation.graph
            named = [graph.describe(m) for m in step.order if isinstance(graph.layers[m], Node)]
            nodes = ", ".join(named or [graph.describe(m) for m in step.order])
            raise PlanError(
                f"cannot carry the state of a backward recurrence ({nodes}) from one chunk to the next: it reads "
                "later frames of itself. Compute without frames_per_chunk (one pass), or compute each chunk on its "
                "own as nnet3-compute does (carry_state=False, with extra_right_context frames of lookahead).")
        for nid, depth in step.depth.items():
            layer = computation.graph.layers[nid]
            if not isinstance(layer, Node):
                raise PlanError(f"cannot carry the state of {computation.graph.describe(nid)}: it is not a named Node")
            states[layer.name] = max(states.get(layer.name, 0), depth)
    return states
