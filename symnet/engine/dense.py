"""Dense convenience: run a network on `[N, T, D]` arrays (or ragged sequences) without writing requests.

`context(network)` is the (left, right) frames an output frame needs, as
nnet3-info's left-context/right-context. `compute(network, x)` follows
nnet3-compute's edge convention (`mode='same'`): every sequence is padded with
copies of its first and last frames so that every input frame gets an output;
`mode='valid'` returns only the frames computable without padding.
"""

from __future__ import annotations

import numbers
from collections.abc import Mapping
from typing import Any

import jax
import jax.numpy as jnp
import numpy as np

from ..core.descriptor import Node
from ..core.index import IndexSet
from ..errors import PlanError, ShapeError
from .buckets import batch_size, bucket_length, fill, padding_side
from .computation import compile
from .context import context, output_name
from .context import modulus as graph_modulus
from .graph import Graph
from .plan import time_reach
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
    A list in gives a list out. Without `frames_per_chunk`, sequences are
    padded to bucket lengths where that changes no output
    (`symnet.engine.buckets`), so any set of lengths up to 2,000 frames
    compiles at most 8 programs.

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
        if (
            isinstance(frames_per_chunk, bool)
            or not isinstance(frames_per_chunk, numbers.Integral)
            or frames_per_chunk <= 0
            or mode != "same"
        ):
            raise PlanError(
                f"frames_per_chunk must be a positive number of frames (with mode='same'), got {frames_per_chunk!r}"
            )
    for what, extra in (("extra_left_context", extra_left_context), ("extra_right_context", extra_right_context)):
        if isinstance(extra, bool) or not isinstance(extra, numbers.Integral) or extra < 0:
            raise PlanError(f"{what} must be a number of frames >= 0, got {extra!r}")
        if extra and (frames_per_chunk is None or carry_state):
            raise PlanError(
                f"{what} applies to chunks computed on their own: pass frames_per_chunk and carry_state=False"
            )
    name = output_name(network, output)
    graph = Graph(dict(network.structure.outputs))
    seqs, ragged = _sequences(x, graph)
    left, right = context(network, name)
    main = "input" if "input" in seqs else next(iter(seqs))
    lengths = [len(s) for s in seqs[main]]
    results: list[Any] = [None] * len(lengths)
    if frames_per_chunk is None:
        _compute_bucketed(network, name, graph, seqs, lengths, mode, left, right, results)
    else:
        for length in sorted(set(lengths)):
            members = [i for i, n in enumerate(lengths) if n == length]
            group = {k: [v[i] for i in members] for k, v in seqs.items()}
            if carry_state:
                out = _compute_chunked(network, name, group, length, frames_per_chunk, left, right)
            else:
                out = jnp.concatenate(
                    [
                        _compute_span(
                            network,
                            name,
                            group,
                            length,
                            (start, min(start + frames_per_chunk, length)),
                            "same",
                            left + extra_left_context,
                            right + extra_right_context,
                            {},
                        )[0]
                        for start in range(0, length, frames_per_chunk)
                    ],
                    axis=0,
                )
            out = host(out)
            for j, i in enumerate(members):
                results[i] = out[:, j]
    if any(isinstance(r, jax.core.Tracer) for r in results):  # under jax.grad and the like
        return results if ragged else jnp.stack(results)
    if not ragged:  # device_put, unlike jnp.asarray, compiles nothing per shape
        return jax.device_put(np.stack(results))
    return [jax.device_put(r) for r in results]


def host(value: Any) -> Any:
    """A concrete array as numpy (slicing it compiles nothing); a traced one (under jax.grad) as it is."""
    return value if isinstance(value, jax.core.Tracer) else np.asarray(value)


def _compute_bucketed(
    network: Any,
    name: str,
    graph: Graph,
    seqs: dict[str, list[np.ndarray]],
    lengths: list[int],
    mode: str,
    left: int,
    right: int,
    results: list[Any],
) -> None:
    """One pass per sequence, sequences padded to bucket lengths (symnet.engine.buckets) and computed a fixed
    number per call, so that a few programs serve every length; fills `results[i]` `[frames, dim]`.

    With padding side `'ends'` each call gives every sequence its own end (its last input frame + 1), so
    that optional reads past it see the sequence as ended there."""
    side = padding_side(graph, with_ends=True)
    step = graph_modulus(graph) if side == "start" else 1
    groups: dict[int, list[int]] = {}
    for i, length in enumerate(lengths):
        if mode == "valid" and length <= left + right:
            raise ShapeError(f"sequences of {length} frames are too short for context ({left}, {right})")
        padded = length if side is None else bucket_length(length)
        padded += (length - padded) % step  # a start shift must be a multiple of the modulus
        groups.setdefault(padded, []).append(i)
    for padded, members in sorted(groups.items()):
        size = len(members) if side is None else batch_size(padded)
        in_t = (-left, padded + right) if mode == "same" else (0, padded)
        out_t = (0, padded) if mode == "same" else (left, padded - right)
        for batch in fill(members, size):
            shifts = [padded - lengths[i] if side == "start" else 0 for i in batch]
            blocks = {
                k: np.stack(
                    [
                        v[i][np.clip(np.arange(*in_t) - s, 0, min(lengths[i], len(v[i])) - 1)]
                        for i, s in zip(batch, shifts, strict=True)
                    ],
                    axis=1,
                )
                for k, v in seqs.items()
            }
            ends = [lengths[i] + in_t[1] - padded for i in batch] if side == "ends" else None
            out = _run(network, name, blocks, in_t, out_t, ends)
            for j, (i, s) in enumerate(zip(batch, shifts, strict=True)):
                count = lengths[i] if mode == "same" else lengths[i] - left - right
                results[i] = out[s : s + count, j]


def _run(
    network: Any,
    name: str,
    blocks: dict[str, np.ndarray],
    in_t: tuple[int, int],
    out_t: tuple[int, int],
    ends: list[int] | None = None,
) -> Any:
    """Output frames `out_t` `[frames, n, dim]` for input blocks `[frames of in_t, n, dim]`, one regular request
    (with each sequence's end frame, if `ends` is given)."""
    n = len(next(iter(blocks.values()))[0])
    inputs = {k: IndexSet.range(n=n, t=in_t) for k in blocks}
    matrices = {k: jax.device_put(b.reshape(-1, b.shape[-1])) for k, b in blocks.items()}
    outputs = {name: IndexSet.range(n=n, t=out_t)}
    request = ComputationRequest(inputs=inputs, outputs=outputs, sequence_ends=ends is not None)
    result = compile(network, request)(network, matrices, ends=ends)
    return host(result[name]).reshape(out_t[1] - out_t[0], n, -1)


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
                raise ShapeError(
                    f"input {k!r}: compute takes a batch [N, T, D] or a list of [T, D] sequences; got "
                    f"one array of shape {tuple(v.shape)}: add the batch axis (x[None]) for one sequence"
                )
            if v.ndim != 3:
                raise ShapeError(f"input {k!r}: expected a batch of shape [N, T, D], got shape {tuple(v.shape)}")
            seqs[k] = list(_numeric(v, f"input {k!r}"))
        elif isinstance(v, (list, tuple)):
            ragged = True
            seqs[k] = [_numeric(s, f"input {k!r} sequence {i}") for i, s in enumerate(v)]
        else:
            raise ShapeError(
                f"input {k!r}: expected an [N, T, D] array or a list of [T, D] arrays, got a {type(v).__name__}"
            )
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
                raise ShapeError(
                    f"input {k!r} sequence {i} has {s.shape[1]} features, but the network's input {k!r} takes {dim}"
                )
    return seqs, ragged


def _numeric(value: Any, what: str) -> np.ndarray:
    array = np.asarray(value) if not isinstance(value, str) else None
    if array is None or not (np.issubdtype(array.dtype, np.number) or array.dtype == np.bool_):
        raise ShapeError(
            f"{what}: expected numbers, got {type(value).__name__}"
            + (f" of dtype {array.dtype}" if array is not None else "")
        )
    return array


def _compute_span(
    network: Any,
    name: str,
    group: dict[str, list[np.ndarray]],
    length: int,
    out_t: tuple[int, int],
    mode: str,
    left: int,
    right: int,
    state: dict[str, tuple[tuple[int, int], Any]],
    state_out: tuple[tuple[str, int], ...] = (),
    in_t: tuple[int, int] | None = None,
) -> tuple[Any, dict[str, tuple[tuple[int, int], Any]]]:
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
    carried = {node: ((out_t[1] - depth, out_t[1]), result[node].reshape(depth, n, -1)) for node, depth in state_out}
    return out, carried


def _compute_chunked(
    network: Any, name: str, group: dict[str, list[np.ndarray]], length: int, chunk: int, left: int, right: int
) -> Any:
    """Chunks equal to one pass: each chunk sees every input frame that any of its outputs could read in
    one pass (optional reads through IfDefined and Failover reach beyond the context), and recurrent
    states carry over from the chunk before."""
    states = recurrent_states(network, name)
    reach = time_reach(Graph(dict(network.structure.outputs)))
    pieces: list[Any] = []
    state: dict[str, tuple[tuple[int, int], Any]] = {}
    for start in range(0, length, chunk):
        end = min(start + chunk, length)
        in_t = (max(-left, start - left - reach), min(length + right, end + right + reach))
        out, state = _compute_span(
            network, name, group, length, (start, end), "same", left, right, state, tuple(states.items()), in_t
        )
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
                "own as nnet3-compute does (carry_state=False, with extra_right_context frames of lookahead)."
            )
        for nid, depth in step.depth.items():
            layer = computation.graph.layers[nid]
            if not isinstance(layer, Node):
                raise PlanError(f"cannot carry the state of {computation.graph.describe(nid)}: it is not a named Node")
            states[layer.name] = max(states.get(layer.name, 0), depth)
    return states
