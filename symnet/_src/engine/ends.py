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

Planning a whole request per end would cost more than computing it, so ends
far from the first frame are derived from two plans: whether a read is made at
frame t depends only on the input frames within `2 * time_reach` of t (the
least fixed point of the computability rules is local when no Failover lies
on a cycle: every cycle then passes an IfDefined, which is always computable),
so rows well before the end read as in the full request, and rows near the end
as in a reference end as far from the start, shifted (by a multiple of the
network's time modulus). Networks where that does not hold (a Failover inside
a recurrence, ReplaceIndex of t) plan every end, and so do ends near the
first frame or past the last output frame.
"""

from __future__ import annotations

from collections.abc import Mapping
from typing import Any, NamedTuple

import numpy as np

from ..base.errors import PlanError
from ..core.descriptor import Descriptor, IndexedLayer, Rule
from ..core.index import IndexSet, decode, shift
from .context import modulus
from .graph import Graph, strongly_connected
from .memo import Cache
from .plan import Planner, time_reach
from .request import ComputationRequest
from .semantics import optional_reads, rule

__all__ = ["EndMasks", "KEPT_ENDS", "SequenceEnds"]

#: Distinct ends whose read masks are kept, per Computation.
KEPT_ENDS = 4096


class EndMasks(NamedTuple):
    """A call's optional-read masks for its sequences' ends (`Computation.end_masks`), a pytree for `jax.jit`."""

    masks: tuple[Any, ...]


class SequenceEnds:
    """The optional reads of a planned request with `sequence_ends`, and their masks for given ends.

    `reads` lists them as (node id, operand position), for every planned
    IfDefined or Failover node and each of its indexed operands.
    """

    def __init__(self, graph: Graph, request: ComputationRequest, rows: Mapping[int, np.ndarray], batch: int):
        indexed = [layer for nid, layer in enumerate(graph.layers) if nid in rows and isinstance(layer, IndexedLayer)]
        if indexed:
            raise PlanError(
                f"a request with sequence_ends cannot compute {type(indexed[0]).__name__}: its value depends on how "
                "many input frames exist, which differs per sequence"
            )
        self.graph, self.batch = graph, batch
        self.rows = {nid: keys for nid, keys in rows.items() if optional_reads(graph.layers[nid])}
        self.reads = [
            (nid, pos) for nid in sorted(self.rows) for pos, op in enumerate(graph.operands[nid]) if graph.indexed[op]
        ]
        one = {name: s.grid() for name, s in (*request.inputs.items(), *request.outputs.items())}
        self._inputs = {name: one[name][1] for name in request.inputs}  # type: ignore[index]
        self._outputs = {name: IndexSet(one[name][1]) for name in request.outputs}  # type: ignore[index]
        self._masks: Cache[list[np.ndarray]] = Cache(KEPT_ENDS)
        self.first = min(int(decode(keys)[1].min()) for keys in self._inputs.values())
        self.last = max(int(decode(keys)[1].max()) for keys in self._inputs.values()) + 1
        self.radius = 2 * time_reach(graph)
        self.modulus = modulus(graph)
        self.near = self.first + 2 * self.radius + 1  # the first end whose rows near it are `radius` from the start
        # Up to the last output frame, the planner's time window (`Planner._time_window`) does not move with the end.
        self.wanted_end = max(int(decode(s.keys)[1].max()) for s in self._outputs.values()) + 1
        cyclic = {
            m for g in strongly_connected(list(range(len(graph.layers))), graph.operands) if len(g) > 1 for m in g
        }
        self.local = not any(
            (rule(layer) is Rule.FIRST and nid in cyclic)
            or (isinstance(layer, Descriptor) and layer.fixed_time() is not None)
            for nid, layer in enumerate(graph.layers)
        )

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
        end = min(end, self.last)  # frames the request does not give are not given either way
        hit = self._masks.get(end)
        if hit is not None:
            return hit
        if self.local and self.near + self.modulus < end <= self.wanted_end and end < self.last:
            reference = self.near + (end - self.near) % self.modulus
            masks = self._shifted(self._one(self.last), self._one(reference), end, end - reference)
            if masks is not None:
                return self._masks.put(end, masks)
        return self._masks.put(end, self._planned(end))

    def _shifted(
        self, full: list[np.ndarray], reference: list[np.ndarray], end: int, by: int
    ) -> list[np.ndarray] | None:
        """Rows before `end - radius` as in the full request, the others as `by` frames earlier in the reference
        end's masks; None if such a row is not planned."""
        masks = []
        for (nid, _), whole, ref in zip(self.reads, full, reference, strict=True):
            keys = self.rows[nid]
            late = decode(keys)[1] >= end - self.radius
            source = shift(keys[late], -by, 0)
            at = np.minimum(np.searchsorted(keys, source), len(keys) - 1)
            if not np.array_equal(keys[at], source):
                return None
            mask = whole.copy()
            mask[late] = ref[at]
            masks.append(mask)
        return masks

    def _planned(self, end: int) -> list[np.ndarray]:
        """The masks for `end` from a plan of the request's frames before it."""
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
        return masks
