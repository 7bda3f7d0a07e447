"""The context of a network: how many input frames before and after an output frame it needs.

`context(network)` is what nnet3-info prints as left-context/right-context,
found the way Kaldi's `ComputeSimpleNnetContext` (nnet3/nnet-utils.cc) finds it:
a probe by computability. For each input start `s` from 0 to the network's
modulus, every input is given on the frames `[s, s + W)` (an input named
`ivector` from `s - modulus`, since it may be read at rounded frames) and the
output is asked on the same frames; the left context is how many outputs at
the start of the window are not computable, the right context how many after
the first run of computable ones; the result is the largest over all starts.
A probe with no computable output means the window is too small: `W` starts
at 40 frames and doubles, as Kaldi's does up to 640. Beyond Kaldi's largest
window symnet goes on doubling up to a bound from the network's own offsets,
so a long context (`Offset(x, 250)`) is found exactly where Kaldi gives up.

The modulus (Kaldi's `Nnet::Modulus`) is the least common multiple of every
`Round` modulus and `Switch` size: the network is invariant to time shifts by
multiples of it, so shifts modulo it are all that can differ.
"""

from __future__ import annotations

import math
from collections.abc import Iterator, Sequence

import numpy as np

from ..base.errors import PlanError
from ..core.descriptor import Descriptor
from ..core.index import IndexSet, decode, format_indexes
from ..core.structure import NetworkLike, Structure
from .graph import Graph
from .memo import Cache
from .plan import Planner, time_reach, unstarted_recurrence
from .request import ComputationRequest

__all__ = ["context", "modulus", "node_contexts", "output_name", "structure_context"]

#: Kaldi's first probe window, and the largest it tries (it doubles 40 -> 640, stopping below 800).
FIRST_WINDOW, KALDI_LAST_WINDOW = 40, 640

_CONTEXTS: Cache[tuple[int, int]] = Cache(256)


def output_name(network: NetworkLike, output: str | None) -> str:
    """The output a call means: `output` if given (checked), else `output`, else the only output."""
    names: list[str] = [name for name, _ in network.structure.outputs]
    if output is None:
        if "output" in names:
            return "output"
        if len(names) == 1:
            return names[0]
        raise PlanError(f"the network has outputs {names}: name the one you want")
    if output not in names:
        raise PlanError(f"no output {output!r}; the network has {names}")
    return output


def modulus(graph: Graph) -> int:
    """The time-shift modulus of a network's graph: lcm of its Round moduli and Switch sizes."""
    return math.lcm(1, *(layer.time_modulus() for layer in graph.layers if isinstance(layer, Descriptor)))


def context(network: NetworkLike, output: str | None = None) -> tuple[int, int]:
    """The (left, right) context of `output`, as nnet3-info computes it (see the module doc); cached."""
    return structure_context(network.structure, output_name(network, output))


def structure_context(structure: Structure, name: str) -> tuple[int, int]:
    """`context` of the output `name` of a network's structure: it needs no parameter arrays."""
    key = (structure, name)
    hit = _CONTEXTS.get(key)
    if hit is not None:
        return hit
    graph = Graph(dict(structure.outputs))
    found = node_contexts(graph, [graph.outputs[name]])[graph.outputs[name]]
    if found is None:
        raise PlanError(_no_context(graph, name))
    return _CONTEXTS.put(key, found)


def node_contexts(graph: Graph, nids: Sequence[int]) -> dict[int, tuple[int, int] | None]:
    """The (left, right) context of each node `nids`, as if it were the output; None where there is none.

    One plan per probe serves every node: the planner answers computability
    for any node, so a table of all nodes' contexts costs about one context.
    """
    m = modulus(graph)
    result: dict[int, tuple[int, int] | None] = {}
    pending = list(dict.fromkeys(nids))
    for window in _windows(graph, m):
        found: dict[int, list[tuple[int, int] | None]] = {nid: [] for nid in pending}
        for start in range(m + 1):
            planner, keys = _planner(graph, start, window, m)
            for nid in pending:
                found[nid].append(_probe(planner.computable(nid, keys), keys, window))
        for nid in pending:
            probes = found[nid]
            if all(f is not None for f in probes):
                result[nid] = (max(f[0] for f in probes), max(f[1] for f in probes))  # type: ignore[index]
        pending = [nid for nid in pending if nid not in result]
        if not pending:
            break
    result.update({nid: None for nid in pending})
    return result


def _windows(graph: Graph, m: int) -> Iterator[int]:
    """The probe windows: 40 frames, doubling, up to the first beyond Kaldi's largest and the network's reach."""
    bound = max(KALDI_LAST_WINDOW, 2 * (time_reach(graph) + m) + FIRST_WINDOW)
    window = FIRST_WINDOW
    while True:
        yield window
        if window > bound:
            return
        window *= 2


def _no_context(graph: Graph, name: str) -> str:
    """Why no window gave a context: the planner's explanation for the widest window, first input start."""
    m = modulus(graph)
    window = list(_windows(graph, m))[-1]
    nid = graph.outputs[name]
    for start in range(m + 1):
        planner, keys = _planner(graph, start, window, m)
        ok = planner.computable(nid, keys)
        if _probe(ok, keys, window) is None:
            break
    missing: dict[str, set[int]] = {}
    recurrent: list[str] = []
    if not ok.all():
        missing, recurrent = planner.why_uncomputable(nid, keys[~ok])
    if recurrent:  # the input is there, the recurrence never starts: say that first, and only that
        return f"output {name!r} has no context: " + unstarted_recurrence(recurrent)
    lacking = [
        f"  they lack input {input_name!r} at {format_indexes(np.array(sorted(k), dtype=np.int64), 8)}"
        for input_name, k in missing.items()
    ]
    if not ok.all() and not missing:
        lacking.append("  (no input reaches them)")
    return "\n".join(
        [
            f"output {name!r} has no context: with every input given on {window} frames (from t={start}) "
            "no output frame in them is computable (an output that depends on absolute time, like "
            "ReplaceIndex(input, t, 0), has none)",
            *lacking,
        ]
    )


def _planner(graph: Graph, start: int, window: int, m: int) -> tuple[Planner, np.ndarray]:
    """A planner with every input given on the window from `start`, and the keys of the window's frames."""
    frames = IndexSet.range(n=1, t=(start, start + window))
    inputs = {
        input_name: IndexSet.range(n=1, t=(start - m, start + window)) if input_name == "ivector" else frames
        for input_name in graph.inputs
    }
    name = next(iter(graph.outputs))
    planner = Planner(graph, ComputationRequest(inputs=inputs, outputs={name: frames}))
    return planner, planner.wanted[name]


def _probe(ok: np.ndarray, keys: np.ndarray, window: int) -> tuple[int, int] | None:
    """(left, right) from which frames of the window are computable (`ok`, aligned with `keys`), or None if none is."""
    if not ok.any():
        return None
    t = decode(keys)[1]
    order = np.argsort(t)
    ok = ok[order]
    first_ok = int(np.argmax(ok))
    after = np.flatnonzero(~ok[first_ok:])
    first_not_ok = first_ok + int(after[0]) if len(after) else window
    return first_ok, window - first_not_ok
