"""Dense convenience: run a network on `[N, T, D]` arrays (or ragged sequences) without writing requests.

`context(network)` is the (left, right) frames an output frame needs, as
nnet3-info's left-context/right-context. `compute(network, x)` follows
nnet3-compute's edge convention (`mode='same'`): every sequence is padded with
copies of its first and last frames so that every input frame gets an output;
`mode='valid'` returns only the frames computable without padding.
"""

from __future__ import annotations

from typing import Any, Mapping, Sequence

import jax.numpy as jnp
import numpy as np

from ..errors import PlanError, ShapeError
from ..core.index import IndexSet, decode
from .computation import compile
from .graph import Graph
from .plan import Planner, plan_recursion_limit
from .request import ComputationRequest

_PROBE = 200  # frames of input offered when probing for the context


def output_name(network: Any, output: str | None) -> str:
    """The output `output` names, checked; for None, `output` or the only output."""
    names = [name for name, _ in network.structure.outputs]
    if output is None:
        if "output" in names:
            return "output"
        if len(names) == 1:
            return names[0]
        raise PlanError(f"the network has outputs {names}: name the one you want")
    if output not in names:
        raise PlanError(f"no output {output!r}; the network has {names}")
    return output


def context(network: Any, output: str | None = None) -> tuple[int, int]:
    """The (left, right) context of `output`: input frames before and after an output frame.

    Found as Kaldi's nnet3 does, by computability: with every input provided on a
    window of frames, the first and last computable output frames tell how many
    input frames each side an output needs.
    """
    name = output_name(network, output)
    graph = Graph(dict(network.structure.outputs))
    window = IndexSet.range(n=1, t=_PROBE)
    request = ComputationRequest(
        inputs={input_name: window for input_name in graph.inputs}, outputs={name: window}
    )
    undo = plan_recursion_limit()
    try:
        planner = Planner(graph, request)
        ok = planner.computable(graph.outputs[name], planner.wanted[name])
    finally:
        undo()
    if not ok.any():
        raise PlanError(f"output {name!r}: no frame is computable from a {_PROBE}-frame window of every input")
    # The longest run of computable frames: with Round or Switch the edges of
    # the window can be computable here and there; the context must cover the run.
    t = decode(planner.wanted[name][ok])[1]
    breaks = np.flatnonzero(np.diff(t) != 1)
    starts = np.concatenate([[0], breaks + 1])
    ends = np.concatenate([breaks, [len(t) - 1]])
    longest = int(np.argmax(ends - starts))
    return int(t[starts[longest]]), int(_PROBE - 1 - t[ends[longest]])


def compute(
    network: Any,
    x: Any,
    *,
    mode: str = "same",
    output: str | None = None,
    frames_per_chunk: int | None = None,
) -> Any:
    """Outputs for `[N, T, D]` input (or a list of `[T_i, D]` sequences, or a dict of such per input).

    `mode='same'` gives one output frame per input frame, repeating the first
    and last input frames for the context (nnet3-compute's convention);
    `mode='valid'` gives the `T - left - right` frames that need no padding.
    `frames_per_chunk` computes `mode='same'` output in chunks of that many
    frames, carrying every recurrent state from one chunk to the next (as in
    online decoding): the result equals one pass over the whole sequence.
    A list in gives a list out; sequences of one length share one computation.
    """
    if mode not in ("same", "valid"):
        raise PlanError(f"mode must be 'same' or 'valid', got {mode!r}")
    if frames_per_chunk is not None and (mode != "same" or frames_per_chunk <= 0):
        raise PlanError("frames_per_chunk needs mode='same' and a positive number of frames")
    name = output_name(network, output)
    inputs = x if isinstance(x, Mapping) else {"input": x}
    ragged = {k: not hasattr(v, "ndim") or v.ndim != 3 for k, v in inputs.items()}
    seqs = {k: ([np.asarray(s) for s in v] if ragged[k] else list(np.asarray(v))) for k, v in inputs.items()}
    counts = {len(v) for v in seqs.values()}
    if len(counts) != 1:
        raise ShapeError(f"inputs have different numbers of sequences: { {k: len(v) for k, v in seqs.items()} }")
    count = counts.pop()
    for k, v in seqs.items():
        for i, s in enumerate(v):
            if s.ndim != 2:
                raise ShapeError(f"input {k!r} sequence {i}: expected [T, D], got shape {s.shape}")
    left, right = context(network, name)
    main = "input" if "input" in seqs else next(iter(seqs))
    lengths = [len(s) for s in seqs[main]]
    results: list[Any] = [None] * count
    for length in sorted(set(lengths)):
        members = [i for i, n in enumerate(lengths) if n == length]
        group = {k: [v[i] for i in members] for k, v in seqs.items()}
        if frames_per_chunk is None:
            out = _compute_span(network, name, group, length, (0, length) if mode == "same" else (left, length - right),
                                mode, left, right, {})[0]
        else:
            out = _compute_chunked(network, name, group, length, frames_per_chunk, left, right)
        for j, i in enumerate(members):
            results[i] = out[:, j]
    if all(not r for r in ragged.values()):
        return jnp.stack(results)
    return results


def _compute_span(network, name, group, length, out_t, mode, left, right, state, state_out=()):
    """Output frames `out_t` of sequences of `length` frames; `state` gives node values before them.

    Returns `([frames, n, dim] output, {state node: [frames, n, dim] at the span's last frames})`.
    """
    if out_t[1] <= out_t[0]:
        raise ShapeError(f"sequences of {length} frames are too short for context ({left}, {right})")
    n = len(next(iter(group.values())))
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
    states = recurrent_states(network, name)
    pieces, state = [], {}
    for start in range(0, length, chunk):
        end = min(start + chunk, length)
        out, state = _compute_span(network, name, group, length, (start, end), "same", left, right, state,
                                   tuple(states.items()))
        pieces.append(out)
    return jnp.concatenate(pieces, axis=0)


def recurrent_states(network: Any, output: str | None = None) -> dict[str, int]:
    """The recurrent nodes whose values carry from frame to frame, with how many frames back they are read."""
    name = output_name(network, output)
    left, right = context(network, name)
    request = ComputationRequest(
        inputs={k: IndexSet.range(n=1, t=(-left, 8 + right)) for k in Graph(dict(network.structure.outputs)).inputs},
        outputs={name: IndexSet.range(n=1, t=8)},
    )
    computation = compile(network, request)
    states: dict[str, int] = {}
    for step in computation.steps:
        for nid, depth in getattr(step, "depth", {}).items():
            layer = computation.graph.layers[nid]
            node_name = getattr(layer, "name", None)
            if not isinstance(node_name, str):
                raise PlanError(f"cannot carry the state of {computation.graph.describe(nid)}: it is not a named Node")
            states[node_name] = max(states.get(node_name, 0), depth)
    return states
