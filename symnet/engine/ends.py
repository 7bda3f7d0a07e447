"""Sequence ends: which optional reads each sequence of a regular request makes, when sequences end early.

A request with `sequence_ends` is planned once for all its frames; each call
then gives every sequence n its end, `ends[n]`: its input frames at or beyond
it count as not given. Only optional reads (IfDefined, Failover) can tell the
difference: every other read of a frame a sequence can compute is made in its
own request too. So the program reads as the full request does and masks each
optional read per row and sequence with whether the sequence's own request
(the request's frames before its end) makes it (`Planner.dependencies` of
that request). The masks are arrays of the call, one program serves every set
of ends; planning them is numpy, once per distinct end.
"""

from __future__ import annotations

from collections.abc import Mapping, Sequence
from typing import Any

import numpy as np

from ..core.descriptor import Failover, IfDefined
from ..core.index import IndexSet, decode
from ..errors import PlanError
from .cache import Cache
from .graph import Graph
from .plan import Planner
from .request import ComputationRequest

#: Distinct ends whose read masks are kept, per Computation.
KEPT_ENDS = 4096


class SequenceEnds:
    """The optional reads of a planned request with `sequence_ends`, and their masks for given ends.

    `reads` lists them as (node id, operand position), for every planned
    IfDefined or Failover node and each of its indexed operands.
    """

    def __init__(self, graph: Graph, request: ComputationRequest, rows: Mapping[int, np.ndarray], batch: int):
        self.graph, self.batch = graph, batch
        self.rows = {nid: keys for nid, keys in rows.items() if isinstance(graph.layers[nid], (IfDefined, Failover))}
        self.reads = [
            (nid, pos) for nid in sorted(self.rows) for pos, op in enumerate(graph.operands[nid]) if graph.indexed[op]
        ]
        one = {name: s.grid() for name, s in (*request.inputs.items(), *request.outputs.items())}
        self._inputs = {name: one[name][1] for name in request.inputs}  # type: ignore[index]
        self._outputs = {name: IndexSet(one[name][1]) for name in request.outputs}  # type: ignore[index]
        self._masks: Cache[list[np.ndarray]] = Cache(KEPT_ENDS)

    def masks(self, ends: Any) -> tuple[np.ndarray, ...]:
        """Per optional read, `[rows of its node, batch]` booleans: whether each sequence makes it there."""
        ends = self._check(ends)
        per_end = {e: self._one(e) for e in set(ends)}
        return tuple(np.stack([per_end[e][k] for e in ends], axis=1) for k in range(len(self.reads)))

    def _check(self, ends: Any) -> list[int]:
        try:
            values = [int(e) for e in ends]
            exact = all(int(e) == e and not isinstance(e, bool) for e in ends)
        except (TypeError, ValueError):
            raise PlanError(f"ends must be one frame number per sequence, got {ends!r:.80}") from None
        if not exact or len(values) != self.batch:
            raise PlanError(f"ends must be {self.batch} frame numbers (one per sequence), got {ends!r:.80}")
        return values

    def _one(self, end: int) -> list[np.ndarray]:
        """Per optional read, whether one sequence that ends at `end` makes it, per row of the read's node."""
        hit = self._masks.get(end)
        if hit is not None:
            return hit
        inputs = {name: IndexSet(keys[decode(keys)[1] < end]) for name, keys in self._inputs.items()}
        inputs = {name: keys for name, keys in inputs.items() if len(keys)}
        planner = Planner(self.graph, ComputationRequest(inputs=inputs, outputs=self._outputs))
        used: dict[int, list[np.ndarray]] = {}
        for nid, keys in self.rows.items():
            used[nid] = [u for _, _, u in planner.dependencies(nid, keys)]
        masks = []
        for nid, pos in self.reads:
            indexed = sum(self.graph.indexed[op] for op in self.graph.operands[nid][:pos])
            masks.append(used[nid][indexed])
        return self._masks.put(end, masks)
