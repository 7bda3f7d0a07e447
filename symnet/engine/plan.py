"""Planning: which Indexes every node must compute for a request (Kaldi's computation graph).

Pure numpy, outside JAX. Indexes are int64 keys (`symnet.index`), so sets are
sorted arrays and every rule below is vectorised.

Computability, as in Kaldi's `nnet-computation-graph.cc`: an input Index is
computable when the request provides it; a row-wise node when all its indexed
operands are, at the same Index; descriptors by their rules (see
`symnet.descriptor`). Requirements then walk from the requested outputs to the
inputs, taking an IfDefined branch only where it is computable and a Failover
branch only where the first is not. What no output needs is pruned.

A request is *regular* when every input and output is the same sequences
`0..N-1` times one list of (t, x) each, in Kaldi's order. Then the plan is made
for one sequence, symbolically in n (Kaldi's shortcut compilation): planning
time does not grow with N, and each node's matrix is `[rows, N, dim]`.
"""

from __future__ import annotations

import heapq
import sys
from typing import Callable

import numpy as np

from ..core.descriptor import (
    Append,
    Const,
    Failover,
    IfDefined,
    IndexedLayer,
    Input,
    Node,
    Offset,
    ReplaceIndex,
    Round,
    Sum,
    Switch,
)
from ..errors import PlanError, at
from ..core.index import decode, encode, format_indexes, shift
from ..core.layer import Identity
from .graph import DEFAULT_INPUT, Graph
from .request import ComputationRequest

EMPTY = np.zeros(0, dtype=np.int64)


def _replace(keys: np.ndarray, variable: str, value: int) -> np.ndarray:
    n, t, x = decode(keys)
    if variable == "t":
        t = np.full_like(t, value)
    else:
        x = np.full_like(x, value)
    return encode(n, t, x)


def _round(keys: np.ndarray, modulus: int) -> np.ndarray:
    n, t, x = decode(keys)
    return encode(n, (t // modulus) * modulus, x)


def _member(keys: np.ndarray, sorted_set: np.ndarray) -> np.ndarray:
    """Boolean mask: which `keys` are in `sorted_set`."""
    if not len(sorted_set):
        return np.zeros(len(keys), dtype=bool)
    pos = np.searchsorted(sorted_set, keys)
    pos[pos == len(sorted_set)] = 0
    return sorted_set[pos] == keys


class Planner:
    """Computability and requirements of every node for one request."""

    def __init__(self, graph: Graph, request: ComputationRequest):
        self.graph = graph
        self.request = request
        self._check_request()
        in_grids = {name: s.grid() for name, s in request.inputs.items()}
        out_grids = {name: s.grid() for name, s in request.outputs.items()}
        grids = [*in_grids.values(), *out_grids.values()]
        sizes = {g[0] for g in grids if g is not None}
        self.regular = all(g is not None for g in grids) and len(sizes) == 1
        self.batch = sizes.pop() if self.regular else 1
        if self.regular:
            self.provided = {name: np.sort(g[1]) for name, g in in_grids.items()}
            self.wanted = {name: g[1] for name, g in out_grids.items()}
        else:
            self.provided = {name: np.sort(s.keys) for name, s in request.inputs.items()}
            self.wanted = {name: s.keys for name, s in request.outputs.items()}
        # Node values the request gives (inputs, and states of named nodes), by node id.
        self.given = {graph.endpoint(name, "input"): keys for name, keys in self.provided.items()}
        self.output_ids = {name: graph.endpoint(name, "output") for name in request.outputs}
        self._window = self._time_window()
        self._memo_keys = [EMPTY] * len(graph.layers)
        self._memo_vals = [np.zeros(0, dtype=bool)] * len(graph.layers)
        self._busy: list[set[int]] = [set() for _ in graph.layers]
        self._depth = 0
        self._assume: dict[int, dict[int, bool]] = {}
        self._hits: list[tuple[int, int, bool]] = []

    def requirements(self) -> list[np.ndarray]:
        """The sorted keys every node must compute (empty for pruned nodes)."""
        return self._requirements()

    # ----- the request ---------------------------------------------------------------

    def _check_request(self) -> None:
        for name in self.request.outputs:
            self.graph.endpoint(name, "output")
        for name in self.request.inputs:
            self.graph.endpoint(name, "input")

    def _time_window(self) -> tuple[int, int]:
        """Frames outside which a cyclic derivation can never reach an input again."""
        ts = [decode(k)[1] for k in (*self.provided.values(), *self.wanted.values()) if len(k)]
        lo = min(int(t.min()) for t in ts)
        hi = max(int(t.max()) for t in ts)
        margin = 1
        for layer in self.graph.layers:
            if isinstance(layer, Offset):
                margin += abs(layer.t_offset)
            elif isinstance(layer, Round):
                margin += layer.t_modulus
            elif isinstance(layer, ReplaceIndex) and layer.variable == "t":
                lo, hi = min(lo, layer.value), max(hi, layer.value)
            elif isinstance(layer, IndexedLayer):
                margin += layer.reach()
        return lo - margin, hi + margin

    # ----- computability --------------------------------------------------------------

    def computable(self, nid: int, keys: np.ndarray) -> np.ndarray:
        """Which of `keys` node `nid` can compute (memoised per node).

        Keys are evaluated in vectorised batches, so a recurrence can make a batch
        wait on its own members (h at t waits on h at t - 2 in the same batch).
        Those reads take an assumed value (first "not computable"); when the
        finished batch disagrees with an assumption the query runs again with the
        corrected assumptions. Values only grow from False to True, so this is
        Kleene's iteration to the least fixed point, Kaldi's semantics.
        """
        if self._depth:
            return self._computable(nid, keys)
        saved = (list(self._memo_keys), list(self._memo_vals))
        while True:
            self._hits = []
            self._depth += 1
            try:
                result = self._computable(nid, keys)
            finally:
                self._depth -= 1
            wrong = [(n, k) for n, k, assumed in self._hits if self._known(n, k) != assumed]
            if not wrong:
                return result
            for n, k in wrong:
                self._assume.setdefault(n, {})[k] = True
            self._memo_keys, self._memo_vals = list(saved[0]), list(saved[1])

    def _known(self, nid: int, key: int) -> bool:
        keys = self._memo_keys[nid]
        pos = int(np.searchsorted(keys, key))
        return bool(pos < len(keys) and keys[pos] == key and self._memo_vals[nid][pos])

    def _computable(self, nid: int, keys: np.ndarray) -> np.ndarray:
        if not self.graph.indexed[nid]:
            return np.ones(len(keys), dtype=bool)
        memo_keys = self._memo_keys[nid]
        known = _member(keys, memo_keys)
        result = np.empty(len(keys), dtype=bool)
        if known.any():
            result[known] = self._memo_vals[nid][np.searchsorted(memo_keys, keys[known])]
        if not known.all():
            todo = np.unique(keys[~known])
            busy = self._busy[nid]
            cyclic = np.fromiter((k in busy for k in todo.tolist()), bool, len(todo)) if busy else None
            values = np.zeros(len(todo), dtype=bool)
            if cyclic is not None and cyclic.any():
                assumed = self._assume.get(nid, {})
                for i in np.flatnonzero(cyclic):
                    key = int(todo[i])
                    values[i] = assumed.get(key, False)
                    self._hits.append((nid, key, bool(values[i])))
            fresh = todo if cyclic is None else todo[~cyclic]
            if len(fresh):
                busy.update(fresh.tolist())
                try:
                    fresh_values = self._compute(nid, fresh)
                finally:
                    busy.difference_update(fresh.tolist())
                values[np.searchsorted(todo, fresh)] = fresh_values
                # Re-read the memo: recursion may have added keys of this node meanwhile.
                merged = np.concatenate([self._memo_keys[nid], fresh])
                order = np.argsort(merged, kind="stable")
                self._memo_keys[nid] = merged[order]
                self._memo_vals[nid] = np.concatenate([self._memo_vals[nid], fresh_values])[order]
            result[~known] = values[np.searchsorted(todo, keys[~known])]
        return result

    def _compute(self, nid: int, keys: np.ndarray) -> np.ndarray:
        layer = self.graph.layers[nid]
        ops = self.graph.operands[nid]
        given = self.given.get(nid)
        if isinstance(layer, (Input, Identity)):
            return _member(keys, given if given is not None else EMPTY)
        if given is not None:
            out = _member(keys, given)
            if not out.all():
                out[~out] = self._compute_rule(nid, keys[~out])
            return out
        return self._compute_rule(nid, keys)

    def _compute_rule(self, nid: int, keys: np.ndarray) -> np.ndarray:
        layer = self.graph.layers[nid]
        ops = self.graph.operands[nid]
        if isinstance(layer, (Const, IfDefined)):
            return np.ones(len(keys), dtype=bool)
        lo, hi = self._window
        t = decode(keys)[1]
        inside = (t >= lo) & (t <= hi)
        if not inside.all():  # only cyclic derivations get this far out: none reaches an input
            out = np.zeros(len(keys), dtype=bool)
            out[inside] = self._compute_rule(nid, keys[inside]) if inside.any() else out[inside]
            return out
        if isinstance(layer, Failover):
            first = self.computable(ops[0], keys)
            out = first.copy()
            if not first.all():
                out[~first] = self.computable(ops[1], keys[~first])
            return out
        if isinstance(layer, IndexedLayer):
            required, owner = layer.requirements(keys)
            available = self.computable(ops[0], required) if len(required) else np.zeros(0, dtype=bool)
            return layer.computable_from(available, owner, len(keys))
        if isinstance(layer, Switch):
            out = np.zeros(len(keys), dtype=bool)
            which = t % len(ops)
            for i, op in enumerate(ops):
                sel = which == i
                if sel.any():
                    out[sel] = self.computable(op, keys[sel])
            return out
        out = np.ones(len(keys), dtype=bool)
        for op, child_keys in zip(ops, self._same_or_mapped(layer, keys, len(ops))):
            if not self.graph.indexed[op]:
                continue
            sel = out
            if sel.any():
                out[sel] = self.computable(op, child_keys[sel])
        return out

    def _same_or_mapped(self, layer, keys: np.ndarray, count: int) -> list[np.ndarray]:
        """Operand keys for layers whose every operand is needed at one mapped Index."""
        if isinstance(layer, Offset):
            return [shift(keys, layer.t_offset, layer.x_offset)]
        if isinstance(layer, Round):
            return [_round(keys, layer.t_modulus)]
        if isinstance(layer, ReplaceIndex):
            return [_replace(keys, layer.variable, layer.value)]
        return [keys] * count  # row-wise layers, Append, Sum, Node, Scale, DimRange

    # ----- requirements -------------------------------------------------------------------

    def dependencies(self, nid: int, keys: np.ndarray) -> list[tuple[int, np.ndarray, np.ndarray]]:
        """For computable `keys` of node `nid`: `(operand, operand_keys, used)` per operand.

        `used[i]` says whether row i reads that operand (IfDefined, Failover and
        Switch read an operand at some rows only; rows the request gives read none).
        """
        deps = self._dependencies(nid, keys)
        given = self.given.get(nid)
        if given is not None:
            computed = ~_member(keys, given)
            deps = [(op, child_keys, used & computed) for op, child_keys, used in deps]
        return deps

    def _dependencies(self, nid: int, keys: np.ndarray) -> list[tuple[int, np.ndarray, np.ndarray]]:
        layer = self.graph.layers[nid]
        ops = self.graph.operands[nid]
        if isinstance(layer, (Input, Identity, Const)):
            return []
        if isinstance(layer, IfDefined):
            return [(ops[0], keys, self.computable(ops[0], keys))]
        if isinstance(layer, IndexedLayer):  # one entry per input Index read, not per row
            required, _ = layer.requirements(keys)
            return [(ops[0], required, self.computable(ops[0], required))]
        if isinstance(layer, Failover):
            first = self.computable(ops[0], keys)
            return [(ops[0], keys, first), (ops[1], keys, ~first)]
        if isinstance(layer, Switch):
            which = decode(keys)[1] % len(ops)
            return [(op, keys, which == i) for i, op in enumerate(ops)]
        all_rows = np.ones(len(keys), dtype=bool)
        return [
            (op, child_keys, all_rows)
            for op, child_keys in zip(ops, self._same_or_mapped(layer, keys, len(ops)))
            if self.graph.indexed[op]
        ]

    def _requirements(self) -> list[np.ndarray]:
        graph = self.graph
        rank = _topological_rank(graph)
        needed = [EMPTY] * len(graph.layers)
        pending: dict[int, np.ndarray] = {}
        for name, keys in self.wanted.items():
            nid = self.output_ids[name]
            ok = self.computable(nid, keys)
            if not ok.all():
                raise PlanError(self._uncomputable_message(name, nid, keys[~ok]))
            pending[nid] = np.union1d(pending.get(nid, EMPTY), keys)
        heap = [(rank[nid], nid) for nid in pending]
        heapq.heapify(heap)
        while heap:
            _, nid = heapq.heappop(heap)
            keys = pending.pop(nid, None)
            if keys is None:
                continue
            new = np.setdiff1d(keys, needed[nid], assume_unique=True)
            if not len(new):
                continue
            needed[nid] = np.union1d(needed[nid], new)
            for op, child_keys, used in self.dependencies(nid, new):
                child_keys = np.unique(child_keys[used])
                if not len(child_keys):
                    continue
                if op not in pending:
                    heapq.heappush(heap, (rank[op], op))
                    pending[op] = child_keys
                else:
                    pending[op] = np.union1d(pending[op], child_keys)
        for name, nid in graph.inputs.items():
            if name in self.provided:
                needed[nid] = self.provided[name] if len(needed[nid]) else EMPTY
        return needed

    def _uncomputable_message(self, name: str, nid: int, bad: np.ndarray) -> str:
        missing: dict[str, set[int]] = {}
        seen: set[tuple[int, int]] = set()
        for key in bad[:5]:
            self._explain(nid, int(key), missing, seen)
        each = f" in each of the {self.batch} sequences" if self.regular else ""
        lines = [f"output {name!r}: {len(bad)} requested Index(es){each} cannot be computed: {format_indexes(bad, 8)}"]
        for input_name, keys in missing.items():
            arr = np.array(sorted(keys), dtype=np.int64)
            lines.append(f"  they lack input {input_name!r} at {format_indexes(arr, 8)}")
        counts: dict[int, int] = {}
        for nid_seen, _ in seen:
            counts[nid_seen] = counts.get(nid_seen, 0) + 1
        recurrent = sorted({self.graph.layers[n].name for n, c in counts.items()
                            if c > 1 and isinstance(self.graph.layers[n], Node)})
        if recurrent:
            lines.append(f"  node(s) {', '.join(recurrent)} read themselves at other frames with no IfDefined or "
                         "Failover to start the recurrence, so no frame of them is computable")
        elif not missing:
            lines.append("  (no input reaches them)")
        return "\n".join(lines)

    def _explain(self, nid: int, key: int, missing: dict[str, set[int]], seen: set[tuple[int, int]]) -> None:
        """Collect the input Indexes whose absence makes (nid, key) uncomputable (a bounded search)."""
        lo, hi = self._window
        stack = [(nid, key)]
        while stack and len(seen) < 2000:
            nid, key = stack.pop()
            if (nid, key) in seen:
                continue
            seen.add((nid, key))
            layer = self.graph.layers[nid]
            keys = np.array([key], dtype=np.int64)
            t = int(decode(keys)[1][0])
            if isinstance(layer, (Input, Identity)):
                name = layer.name if isinstance(layer, Input) else DEFAULT_INPUT
                missing.setdefault(name, set()).add(key)
                continue
            if not lo <= t <= hi:
                continue
            ops = self.graph.operands[nid]
            if isinstance(layer, IndexedLayer):
                required, _ = layer.requirements(keys)
                missing_inputs = required[~self.computable(ops[0], required)] if len(required) else required
                stack.extend((ops[0], int(k)) for k in missing_inputs[:8])
            elif isinstance(layer, Failover):
                stack.extend((op, key) for op in ops)
            elif isinstance(layer, Switch):
                stack.append((ops[t % len(ops)], key))
            else:
                for op, child_keys in zip(ops, self._same_or_mapped(layer, keys, len(ops))):
                    if self.graph.indexed[op] and not self.computable(op, child_keys)[0]:
                        stack.append((op, int(child_keys[0])))


def _topological_rank(graph: Graph) -> list[int]:
    """A rank per node with users before their operands where the graph is acyclic."""
    order: list[int] = []
    state = [0] * len(graph.layers)
    for root in list(graph.outputs.values()) + list(range(len(graph.layers))):
        if state[root]:
            continue
        stack = [(root, iter(graph.operands[root]))]
        state[root] = 1
        while stack:
            nid, it = stack[-1]
            nxt = next(it, None)
            if nxt is None:
                stack.pop()
                order.append(nid)
                state[nid] = 2
            elif not state[nxt]:
                state[nxt] = 1
                stack.append((nxt, iter(graph.operands[nxt])))
    rank = [0] * len(graph.layers)
    for i, nid in enumerate(reversed(order)):
        rank[nid] = i
    return rank


def plan_recursion_limit() -> Callable[[], None]:
    """Raise Python's recursion limit for planning cyclic graphs; returns the undo."""
    old = sys.getrecursionlimit()
    sys.setrecursionlimit(max(old, 100_000))
    return lambda: sys.setrecursionlimit(old)
