"""Exact evaluation: every output frame the input makes computable, with no padding and no chunks.

`exact_outputs(network, features)` is what the Kaldi corpus's `nnet3-eval-exact`
helper computes over Kaldi's `NnetComputer` (its README): the network in test
mode (batch-norm statistics, dropout off), input row i of an utterance at
Index (0, i, 0), an i-vector (if any) the one row at (0, 0, 0), and every
output requested on the frames `-margin .. T - 1 + margin`, of which only the
computable ones are computed (Kaldi's `EvaluateComputationRequest`). Unlike
nnet3-compute it needs no context, so it also runs networks whose context
Kaldi's probe cannot find (`ReplaceIndex(input, t, 0)`) or whose computable
frames have holes (`Switch`, `Round`).

Utterances are independent sequences, so a network without recurrences
computes all of them in one request (each its own n); a recurrence needs a
regular request, one per utterance.
"""

from __future__ import annotations

from collections.abc import Sequence
from typing import Any

import numpy as np

from ...base.errors import ShapeError, SymnetError
from ...core.index import decode
from ...engine.graph import Graph
from ...engine.inspect import recurrent_edges
from ...engine.plan import Planner
from ...engine.runner import request_each, run_each
from ..text.scales import check_descriptor_scales
from .float32 import with_kaldi_float32

__all__ = ["ExactOutput", "exact_outputs"]

#: An output's computable frames `t` (sorted) and its values there, `[len(t), dim]`.
ExactOutput = tuple[np.ndarray, np.ndarray]


@with_kaldi_float32
def exact_outputs(
    network: Any,
    features: Sequence[np.ndarray],
    *,
    ivectors: Sequence[np.ndarray] | None = None,
    outputs: Sequence[str] | None = None,
    margin: int = 30,
) -> list[dict[str, ExactOutput]]:
    """Per utterance (`features[i]`, `[T_i, D]`), per output (`outputs`, default all): the computable frames
    in `-margin .. T_i - 1 + margin` and the output there (see the module doc)."""
    from ...components import set_test_mode

    check_descriptor_scales(network)
    net = set_test_mode(network, True)
    graph = Graph(dict(net.structure.outputs))
    names = list(outputs) if outputs is not None else list(graph.outputs)
    unknown = [name for name in names if name not in graph.outputs]
    if unknown:
        raise SymnetError(f"no output {unknown[0]!r}; the network has {list(graph.outputs)}")
    if margin < 0:
        raise SymnetError(f"margin must be >= 0, got {margin}")
    utterances = [np.asarray(f, dtype=np.float32) for f in features]
    if ivectors is not None and len(ivectors) != len(utterances):
        raise SymnetError(f"{len(utterances)} utterances but {len(ivectors)} i-vectors")
    if ("ivector" in graph.inputs) != (ivectors is not None):
        raise ShapeError(
            "the network "
            + ("takes" if "ivector" in graph.inputs else "has no")
            + " 'ivector' input, but i-vectors "
            + ("were not given" if ivectors is None else "were given")
        )
    for feats in utterances:
        if feats.ndim != 2 or not len(feats):
            raise ShapeError(f"features must be a non-empty [T, D] matrix, got shape {feats.shape}")
    frames = [_computable(graph, len(feats), names, margin, ivectors is not None) for feats in utterances]
    rows = [np.asarray(v, np.float32).reshape(1, -1) for v in ivectors] if ivectors is not None else None
    values: list[dict[str, np.ndarray]] = [{} for _ in utterances]
    todo = [i for i, f in enumerate(frames) if any(len(t) for t in f.values())]
    batches = [[i] for i in todo] if recurrent_edges(graph) else ([todo] if todo else [])
    for batch in batches:
        for i, got in zip(batch, _compute(net, batch, utterances, rows, frames), strict=True):
            values[i] = got
    return [
        {name: (frames[i][name], values[i].get(name, np.zeros((0, 0), np.float32))) for name in names}
        for i in range(len(utterances))
    ]


def _computable(graph: Graph, length: int, names: Sequence[str], margin: int, ivector: bool) -> dict[str, np.ndarray]:
    """Per output, the frames in `-margin .. length - 1 + margin` that input frames `0 .. length - 1` make
    computable (sequence 0)."""
    inputs = {"input": [np.arange(length)], **({"ivector": [np.zeros(1, np.int64)]} if ivector else {})}
    request = request_each(inputs, {name: [np.arange(-margin, length + margin)] for name in names})
    planner = Planner(graph, request)
    out = {}
    for name in names:
        keys = planner.wanted[name]
        ok = planner.computable(graph.outputs[name], keys)
        out[name] = np.sort(decode(keys[ok])[1])
    return out


def _compute(
    net: Any,
    batch: Sequence[int],
    utterances: Sequence[np.ndarray],
    ivectors: Sequence[np.ndarray] | None,
    frames: Sequence[dict[str, np.ndarray]],
) -> list[dict[str, np.ndarray]]:
    """The computable outputs of the utterances `batch`, each its own sequence n of one request."""
    inputs = {"input": [(np.arange(len(utterances[i])), utterances[i]) for i in batch]}
    if ivectors is not None:
        inputs["ivector"] = [(np.zeros(1, np.int64), ivectors[i]) for i in batch]
    names = frames[batch[0]]
    result = run_each(net, inputs, {name: [frames[i][name] for i in batch] for name in names})
    out: list[dict[str, np.ndarray]] = [{} for _ in batch]
    for name, pieces in result.items():
        for j, piece in enumerate(pieces):
            if len(frames[batch[j]][name]):
                out[j][name] = piece
    return out
