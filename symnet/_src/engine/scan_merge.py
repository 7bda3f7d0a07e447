"""Scanned groups that can share one loop: independent recurrences over the same frames.

A bidirectional layer is two recurrences, one forward and one backward in
time, that do not read each other. Run as two scans they are two loops of
small products one after the other; run as one loop (the backward one
flipped in time, `recurrence.scan_tapes`) every frame does both, so each loop
iteration has twice the work for the same overhead and XLA can run the two
directions' products side by side. Only fused groups merge (their lanes
share `fused_scan`'s loop); a plain group is its own `lax.scan`.

`run_schedule` keeps the Computation's steps (which the display and the
dense helpers read) and gives the order to run them in: each set of merged
groups becomes one `MergedScans` unit, placed after everything any of its
groups reads.
"""

from __future__ import annotations

import heapq
from collections.abc import Mapping, Sequence
from typing import Any

from ..core.tape import Tape
from .recurrence import RecurrentBlock, scan_tapes

__all__ = ["MergedScans", "run_schedule"]


class MergedScans:
    """Recurrent groups run in one loop."""

    def __init__(self, blocks: Sequence[RecurrentBlock]):
        self.blocks = list(blocks)

    def tapes(
        self,
        tapes: dict[int, Tape],
        rows: Mapping[int, Any],
        params: Any,
        given: Mapping[int, Tape] | None = None,
        reads: Mapping[tuple[int, int], Any] | None = None,
    ) -> None:
        """Add the groups' Tape node and their exported members' tapes to `tapes`."""
        scan_tapes(self.blocks, tapes, rows, params, given, reads)

    def __repr__(self) -> str:
        return f"MergedScans({len(self.blocks)} groups, {self.blocks[0].num_steps} frames)"


def _produced(unit: Any) -> list[int]:
    return list(unit.order) if isinstance(unit, RecurrentBlock) else [unit.nid]


def run_schedule(steps: Sequence[Any], graph: Any) -> list[Any]:
    """`steps` in an order to run them, with independent scans over the same frames merged (`MergedScans`)."""
    producer = {nid: i for i, unit in enumerate(steps) for nid in _produced(unit)}
    deps: list[set[int]] = []
    for i, unit in enumerate(steps):
        reads = {producer[op] for nid in _produced(unit) for op in graph.operands[nid] if op in producer}
        deps.append(reads - {i})
    # The scans each unit depends on, directly or through other units (steps are in dependency order).
    scans_above: list[set[int]] = []
    for i in range(len(steps)):
        above: set[int] = set()
        for d in deps[i]:
            above |= scans_above[d]
            if isinstance(steps[d], RecurrentBlock):
                above.add(d)
        scans_above.append(above)
    groups: list[list[int]] = []
    for i, unit in enumerate(steps):
        if not isinstance(unit, RecurrentBlock) or unit.given or unit.lowering != "fused":
            continue
        for group in groups:
            first = steps[group[0]]
            if (first.num_steps, first.batch) == (unit.num_steps, unit.batch) and not any(
                g in scans_above[i] or i in scans_above[g] for g in group
            ):
                group.append(i)
                break
        else:
            groups.append([i])
    merged = [g for g in groups if len(g) > 1]
    if not merged:
        return list(steps)
    # Kahn's algorithm over the units with each merged set as one, earliest original position first.
    owner = {i: min(g) for g in merged for i in g}
    members: dict[int, list[int]] = {}
    for i in range(len(steps)):
        members.setdefault(owner.get(i, i), []).append(i)
    waiting = {u: {owner.get(d, d) for i in group for d in deps[i]} - {u} for u, group in members.items()}
    users: dict[int, list[int]] = {}
    for u, ds in waiting.items():
        for d in ds:
            users.setdefault(d, []).append(u)
    count = {u: len(ds) for u, ds in waiting.items()}
    ready = [u for u, c in count.items() if not c]
    heapq.heapify(ready)
    out: list[Any] = []
    while ready:
        u = heapq.heappop(ready)
        group = members[u]
        out.append(MergedScans([steps[i] for i in group]) if len(group) > 1 else steps[u])
        for v in users.get(u, ()):
            count[v] -= 1
            if not count[v]:
                heapq.heappush(ready, v)
    return out
