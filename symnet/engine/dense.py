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
from ..index import IndexSet, decode
from .computation import compile
from .graph import Graph
from .plan import Planner, plan_recursion_limit
from .request import ComputationRequest

_PROBE = 200  # frames of input offered when probing for the context


def _output_name(network: Any, output: str | None) -> str:
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
    name = _output_name(network, output)
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
    t = decode(planner.wanted[name][ok])[1]
    return int(t.min()), int(_PROBE - 1 - t.max())


def compute(
    network: Any,
    x: Any,
    *,
    mode: str = "same",
    output: str | None = None,
) -> Any:
    """Outputs for `[N, T, D]` input (or a list of `[T_i, D]` sequences, or a dict of such per input).

    `mode='same'` gives one output frame per input frame, repeating the first
    and last input frames for the context (nnet3-compute's convention);
    `mode='valid'` gives the `T - left - right` frames that need no padding.
    A list in gives a list out; sequences of one length share one computation.
    """
    if mode not in ("same", "valid"):
        raise PlanError(f"mode must be 'same' or 'valid', got {mode!r}")
    name = _output_name(network, output)
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
        if mode == "same":
            in_t, out_t = (-left, length + right), (0, length)
        else:
            in_t, out_t = (0, length), (left, length - right)
            if out_t[1] <= out_t[0]:
                raise ShapeError(f"sequences of {length} frames are too short for context ({left}, {right})")
        request = ComputationRequest(
            inputs={k: IndexSet.range(n=len(members), t=in_t) for k in seqs},
            outputs={name: IndexSet.range(n=len(members), t=out_t)},
        )
        frames = np.clip(np.arange(*in_t), 0, length - 1)
        matrices = {}
        for k, v in seqs.items():
            block = np.stack([v[i][np.clip(frames, 0, len(v[i]) - 1)] for i in members], axis=1)  # [T', n, D]
            matrices[k] = jnp.asarray(block.reshape(-1, block.shape[-1]))
        out = compile(network, request)(network, matrices)[name]
        out = out.reshape(out_t[1] - out_t[0], len(members), -1)
        for j, i in enumerate(members):
            results[i] = out[:, j]
    if all(not r for r in ragged.values()):
        return jnp.stack(results)
    return results
