"""Planning: which Indexes every node must compute for a request (Kaldi's computation graph).

Pure numpy, outside JAX. Indexes are int64 keys (`symnet._src.core.index`), so sets are
sorted arrays and every rule below is vectorised.

Computability, as in Kaldi's `nnet-computation-graph.cc`: an input Index is
computable when the request provides it; a row-wise node when all its indexed
operands are, at the same Index; descriptors by their rules (see
`symnet._src.core.descriptor`). Requirements then walk from the requested outputs to the
inputs, taking an IfDefined branch only where it is computable and a Failover
branch only where the first is not. What no output needs is pruned.
A request with `sequence_ends` takes a Failover's second branch wherever it is
computable: a sequence that ends earlier may need it where the first branch
exists in the request (`symnet._src.engine.ends`).

A request is *regular* when every input and output is the same sequences
`0..N-1` times one list of (t, x) each, in Kaldi's order. Then the plan is made
for one sequence, symbolically in n (Kaldi's shortcut compilation): planning
time does not grow with N, and each node's matrix is `[rows, N, dim]`.
"""

from __future__ import annotations

import heapq
import weakref
from collections.abc import Sequence

import numpy as np

from ..base.errors import PlanError
from ..core.descriptor import Descriptor, IndexedLayer, Node, Rule
from ..core.index import decode, format_indexes
from .graph import Graph, strongly_connected
from .request import ComputationRequest
from .semantics import operand_keys, rule, selected

__all__ = ["EMPTY", "Planner", "time_reach", "unstarted_recurrence"]

EMPTY = np.zeros(0, dtype=np.int64)


def _member(keys: np.ndarray, sorted_set: np.ndarray) -> np.ndarray:
    """Boolean mask: which `keys` are in `sorted_set`."""
    if not len(sorted_set):
        return np.zeros(len(keys), dtype=bool)
    pos = np.searchsorted(sorted_set, keys)
    pos[pos == len(sorted_set)] = 0
    found: np.ndarray = sorted_set[pos] == keys
    return found


def unstarted_recurrence(nodes: Sequence[str]) -> str:
    """What to say of nodes that read themselves at other frames with no IfDefined or Failover to start them."""
    first = nodes[0]
    return (
        f"node(s) {', '.join(nodes)} read themselves at other frames with no IfDefined or Failover to start "
        f"the recurrence, so no frame of them is computable: wrap the read of the other frame in IfDefined "
        f"(zeros where that frame is not computed, as IfDefined(Offset(Ref({first!r}), -1))) or in a Failover "
        f"to a start value (Failover(Offset(Ref({first!r}), -1), Const(0.5, dim)))"
    )


class Planner:
    """Computability and requirements of every node for one request.

    Computability is found in two passes, both iterative (no recursion, so a
    network of any depth plans): first the *demand*, every (node, Index) whose
    computability some requested output can depend on, closed under the
    descriptors' rules; then the least fixed point of the rules on that demand,
    strongly connected node groups (recurrences) iterated to convergence,
    operands before users. A later query outside the demand extends both.
    """

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
        if request.sequence_ends and not self.regular:
            raise PlanError(
                "a request with sequence_ends must be regular (every sequence with the same frames: IndexSet.range)"
            )
        if self.regular:
            self.provided = {name: np.sort(g[1]) for name, g in in_grids.items()}  # type: ignore[index]
            self.wanted = {name: g[1] for name, g in out_grids.items()}  # type: ignore[index]
        else:
            self.provided = {name: np.sort(s.keys) for name, s in request.inputs.items()}
            self.wanted = {name: s.keys for name, s in request.outputs.items()}
        # Node values the request gives (inputs, and states of named nodes), by node id.
        self.given = {graph.endpoint(name, "input"): keys for name, keys in self.provided.items()}
        self.output_ids = {name: graph.endpoint(name, "output") for name in request.outputs}
        self.window = self._time_window()
        self._keys = [EMPTY] * len(graph.layers)  # the demand of each node, sorted
        self._values = [np.zeros(0, dtype=bool)] * len(graph.layers)  # its computability, aligned
        self._rank = _topological_rank(graph)
        indexed = [nid for nid in range(len(graph.layers)) if graph.indexed[nid]]
        self._groups = [sorted(g, key=lambda n: -self._rank[n]) for g in strongly_connected(indexed, graph.operands)]
        #: The nodes on a recurrence (each in a strongly connected group, or reading itself).
        self.cyclic = {n for g in self._groups if len(g) > 1 or g[0] in graph.operands[g[0]] for n in g}
        self._needed: list[np.ndarray] | None = None

    def requirements(self) -> list[np.ndarray]:
        """The sorted keys every node must compute (empty for pruned nodes); computed once."""
        if self._needed is None:
            self._needed = self._requirements()
        return self._needed

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
        margin = 1 + time_reach(self.graph)
        for layer in self.graph.layers:
            fixed = layer.fixed_time() if isinstance(layer, Descriptor) else None
            if fixed is not None:
                lo, hi = min(lo, fixed), max(hi, fixed)
        return lo - margin, hi + margin

    # ----- computability --------------------------------------------------------------

    def computable(self, nid: int, keys: np.ndarray) -> np.ndarray:
        """Which of `keys` (int64 Index keys) node `nid` can compute."""
        keys = np.asarray(keys, dtype=np.int64)
        if not self.graph.indexed[nid]:
            return np.ones(len(keys), dtype=bool)
        known = _member(keys, self._keys[nid])
        if not known.all():
            self._extend({nid: np.unique(keys[~known])})
        return self._lookup(nid, keys)

    def _lookup(self, nid: int, keys: np.ndarray) -> np.ndarray:
        if not self.graph.indexed[nid]:
            return np.ones(len(keys), dtype=bool)
        return self._values[nid][np.searchsorted(self._keys[nid], keys)]

    def _extend(self, seeds: dict[int, np.ndarray]) -> None:
        """Add `seeds` (node -> keys) and everything they depend on to the demand, then solve for them."""
        new: dict[int, np.ndarray] = {}
        pending = dict(seeds)
        heap = [(self._rank[nid], nid) for nid in pending]
        heapq.heapify(heap)
        while heap:  # users before operands, so that each node's new demand is gathered before it spreads
            _, nid = heapq.heappop(heap)
            keys = pending.pop(nid, None)
            if keys is None:
                continue
            fresh = np.setdiff1d(keys, self._keys[nid], assume_unique=True)
            if nid in new:
                fresh = np.setdiff1d(fresh, new[nid], assume_unique=True)
            if not len(fresh):
                continue
            new[nid] = np.union1d(new[nid], fresh) if nid in new else fresh
            for op, op_keys in self._demands(nid, fresh):
                if not self.graph.indexed[op] or not len(op_keys):
                    continue
                if op in pending:
                    pending[op] = np.union1d(pending[op], op_keys)
                else:
                    pending[op] = np.unique(op_keys)
                    heapq.heappush(heap, (self._rank[op], op))
        fresh_mask: dict[int, np.ndarray] = {}
        for nid, keys in new.items():
            merged = np.concatenate([self._keys[nid], keys])
            order = np.argsort(merged, kind="stable")
            self._keys[nid] = merged[order]
            self._values[nid] = np.concatenate([self._values[nid], np.zeros(len(keys), dtype=bool)])[order]
            fresh_mask[nid] = np.concatenate([np.zeros(len(merged) - len(keys), bool), np.ones(len(keys), bool)])[order]
        for group in self._groups:  # operands' groups first
            members = [m for m in group if m in new]
            if not members:
                continue
            while True:  # Kleene iteration from "not computable": the least fixed point, Kaldi's semantics
                changed = False
                for m in members:
                    mask = fresh_mask[m]
                    values = self._rule(m, self._keys[m][mask])
                    if not np.array_equal(values, self._values[m][mask]):
                        self._values[m][mask] = values
                        changed = True
                if not changed or not any(m in self.cyclic for m in members):
                    break

    def _outside(self, keys: np.ndarray) -> np.ndarray:
        lo, hi = self.window
        t = decode(keys)[1]
        return (t < lo) | (t > hi)

    def _demands(self, nid: int, keys: np.ndarray) -> list[tuple[int, np.ndarray]]:
        """The operand Indexes whose computability decides that of `keys` of node `nid`."""
        layer = self.graph.layers[nid]
        ops = self.graph.operands[nid]
        given = self.given.get(nid)
        if self.graph.is_input[nid] or not ops:
            return []
        if given is not None:
            keys = keys[~_member(keys, given)]
        if rule(layer) is not Rule.OPTIONAL:  # only cyclic derivations get outside: none reaches an input
            keys = keys[~self._outside(keys)]
        if not len(keys):
            return []
        if isinstance(layer, IndexedLayer):
            return [(ops[0], layer.requirements(keys)[0])]
        mapped = operand_keys(layer, keys)
        return [(op, mapped[sel]) for op, sel in zip(ops, selected(layer, keys, len(ops)))]

    def _rule(self, nid: int, keys: np.ndarray) -> np.ndarray:
        """Computability of `keys` of node `nid` from its operands' current values (all demanded)."""
        layer = self.graph.layers[nid]
        ops = self.graph.operands[nid]
        given = self.given.get(nid)
        if self.graph.is_input[nid]:
            return _member(keys, given if given is not None else EMPTY)
        if rule(layer) is Rule.OPTIONAL:
            return np.ones(len(keys), dtype=bool)
        out = np.zeros(len(keys), dtype=bool)
        todo = ~self._outside(keys)
        if given is not None:
            have = _member(keys, given)
            out |= have
            todo &= ~have
        if not todo.any():
            return out
        k = keys[todo]
        if isinstance(layer, IndexedLayer):
            required, owner = layer.requirements(k)
            available = self._lookup(ops[0], required) if len(required) else np.zeros(0, dtype=bool)
            out[todo] = layer.computable_from(available, owner, len(k))
            return out
        mapped = operand_keys(layer, k)
        first = rule(layer) is Rule.FIRST
        value = np.zeros(len(k), dtype=bool) if first else np.ones(len(k), dtype=bool)
        for op, sel in zip(ops, selected(layer, k, len(ops))):
            have = ~sel  # rows that do not read this operand do not wait for it
            if sel.any():
                have[sel] = self._lookup(op, mapped[sel])
            value = (value | (have & sel)) if first else (value & have)
        out[todo] = value
        return out

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
        if self.graph.is_input[nid] or not ops:
            return []
        if isinstance(layer, IndexedLayer):  # one entry per input Index read, not per row
            required, _ = layer.requirements(keys)
            return [(ops[0], required, self.computable(ops[0], required))]
        mapped = operand_keys(layer, keys)
        how = rule(layer)
        deps = []
        taken = np.zeros(len(keys), dtype=bool)  # Rule.FIRST: rows an earlier operand serves
        for i, (op, sel) in enumerate(zip(ops, selected(layer, keys, len(ops)))):
            if not self.graph.indexed[op]:
                continue
            used = sel
            if how is Rule.FIRST and not self.request.sequence_ends and i == len(ops) - 1:
                used = sel & ~taken  # the last operand serves every row the others do not
            elif how is not Rule.ALL:
                used = sel.copy()
                if sel.any():
                    used[sel] = self.computable(op, mapped[sel])
                if how is Rule.FIRST and not self.request.sequence_ends:
                    used, taken = used & ~taken, taken | used
            deps.append((op, mapped, used))
        return deps

    def _requirements(self) -> list[np.ndarray]:
        graph = self.graph
        rank = _topological_rank(graph)
        needed = [EMPTY] * len(graph.layers)
        pending: dict[int, np.ndarray] = {}
        for name, keys in self.wanted.items():
            nid = self.output_ids[name]
            ok = self.computable(nid, keys)
            if not ok.all():
                raise PlanError(self.uncomputable_message(name, nid, keys[~ok]))
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

    def uncomputable_message(self, name: str, nid: int, bad: np.ndarray) -> str:
        """Why Indexes `bad` of output `name` (node `nid`) are not computable: the inputs they lack, or the
        recurrence that never starts."""
        missing, recurrent = self.why_uncomputable(nid, bad)
        each = f" in each of the {self.batch} sequences" if self.regular else ""
        lines = [f"output {name!r}: {len(bad)} requested Index(es){each} cannot be computed: {format_indexes(bad, 8)}"]
        for input_name, keys in missing.items():
            arr = np.array(sorted(keys), dtype=np.int64)
            lines.append(f"  they lack input {input_name!r} at {format_indexes(arr, 8)}")
        if recurrent:
            lines.append("  " + unstarted_recurrence(recurrent))
        elif not missing:
            lines.append("  (no input reaches them)")
        return "\n".join(lines)

    def why_uncomputable(self, nid: int, bad: np.ndarray) -> tuple[dict[str, set[int]], list[str]]:
        """The input Indexes the first few of `bad` (Indexes of node `nid`) lack, by input name, and the nodes
        that read themselves at other frames with nothing to start them (a recurrence with no IfDefined)."""
        missing: dict[str, set[int]] = {}
        seen: set[tuple[int, int]] = set()
        for key in bad[:5]:
            self._explain(nid, int(key), missing, seen)
        counts: dict[int, int] = {}
        for nid_seen, _ in seen:
            counts[nid_seen] = counts.get(nid_seen, 0) + 1
        recurrent = sorted(
            {layer.name for n, c in counts.items() if c > 1 and isinstance(layer := self.graph.layers[n], Node)}
        )
        return missing, recurrent

    def _explain(self, nid: int, key: int, missing: dict[str, set[int]], seen: set[tuple[int, int]]) -> None:
        """Collect the input Indexes whose absence makes (nid, key) uncomputable (a bounded search)."""
        lo, hi = self.window
        stack = [(nid, key)]
        while stack and len(seen) < 2000:
            nid, key = stack.pop()
            if (nid, key) in seen:
                continue
            seen.add((nid, key))
            keys = np.array([key], dtype=np.int64)
            t = int(decode(keys)[1][0])
            name = self.graph.input_name(nid)
            if name is not None:
                missing.setdefault(name, set()).add(key)
                continue
            if not lo <= t <= hi:
                continue
            for op, op_keys in self._demands(nid, keys):  # what it waits for that is not computable
                if self.graph.indexed[op] and len(op_keys):
                    absent = op_keys[~self.computable(op, op_keys)]
                    stack.extend((op, int(k)) for k in absent[:8])


def time_reach(graph: Graph) -> int:
    """An upper bound on how many frames any derivation in the graph moves away from its frame.

    A path through the graph that crosses no node twice (an acyclic derivation)
    passes its strongly connected groups in order, each at most once, and
    crosses each time-moving descriptor of a group (an Offset |t offset|, a
    Round its modulus, an IndexedLayer its reach) at most once: so no acyclic
    derivation reaches further than the heaviest chain of groups, each weighing
    the sum of its descriptors' reaches. Parallel reads (the 21 Offsets of an
    attention window of 10 frames each way) count once, as the furthest, not
    as their sum. It bounds contexts and planning windows.
    """
    reach = _REACH.get(graph)
    if reach is None:
        reach = _REACH[graph] = _heaviest_chain(graph)
    return reach


_REACH: weakref.WeakKeyDictionary[Graph, int] = weakref.WeakKeyDictionary()


def _heaviest_chain(graph: Graph) -> int:
    """`time_reach`: the heaviest chain of strongly connected groups (operands' groups come first)."""
    group_of: dict[int, int] = {}
    heaviest: list[int] = []
    for g, members in enumerate(strongly_connected(list(range(len(graph.layers))), graph.operands)):
        group_of.update(dict.fromkeys(members, g))
        layers = [graph.layers[m] for m in members]
        weight = sum(layer.time_reach() for layer in layers if isinstance(layer, Descriptor))
        below = [heaviest[group_of[op]] for m in members for op in graph.operands[m] if group_of[op] != g]
        heaviest.append(weight + max(below, default=0))
    return max(heaviest, default=0)


def _topological_rank(graph: Graph) -> list[int]:
    """A rank per node with users before their operands where the graph is acyclic."""
    rank = [0] * len(graph.layers)
    for i, nid in enumerate(reversed(graph.operands_first())):
        rank[nid] = i
    return rank
