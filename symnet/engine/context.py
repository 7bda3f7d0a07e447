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
from typing import Any

import numpy as np

from ..core.descriptor import Round, Switch
from ..core.index import IndexSet, decode
from ..errors import PlanError
from .cache import Cache
from .graph import Graph
from .plan import Planner, time_reach
from .request import ComputationRequest

#: Kaldi's first probe window, and the largest it tries (it doubles 40 -> 640, stopping below 800).
FIRST_WINDOW, KALDI_LAST_WINDOW = 40, 640

_CONTEXTS: Cache[tuple[int, int]] = Cache(256)


def output_name(network: Any, output: str | None) -> str:
    """The output a call means: `output` if given (checked), else `output`, else the only output."""
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


def modulus(graph: Graph) -> int:
    """The time-shift modulus of a network's graph: lcm of its Round moduli and Switch sizes."""
    result = 1
    for layer in graph.layers:
        if isinstance(layer, Round):
            result = math.lcm(result, layer.t_modulus)
        elif isinstance(layer, Switch):
            result = math.lcm(result, len(layer.parts))
    return result


def context(network: Any, output: str | None = None) -> tuple[int, int]:
    """The (left, right) context of `output`, as nnet3-info computes it (see the module doc); cached."""
    name = output_name(network, output)
    key = (network.structure, name)
    hit = _CONTEXTS.get(key)
    if hit is not None:
        return hit
    graph = Graph(dict(network.structure.outputs))
    m = modulus(graph)
    bound = 2 * (time_reach(graph) + m) + FIRST_WINDOW
    window = FIRST_WINDOW
    while True:
        found = [_probe(graph, name, start, window, m) for start in range(m + 1)]
        if all(f is not None for f in found):
            left = max(f[0] for f in found)  # type: ignore[index]
            right = max(f[1] for f in found)  # type: ignore[index]
            return _CONTEXTS.put(key, (left, right))
        if window > max(KALDI_LAST_WINDOW, bound):
            raise PlanError(_no_context(graph, name, window, m))
        window *= 2


def _no_context(graph: Graph, name: str, window: int, m: int) -> str:
    """Why no window gave a context: the planner's explanation for the widest window, first input start."""
    start = next(s for s in range(m + 1) if _probe(graph, name, s, window, m) is None)
    planner, keys, ok = _plan(graph, name, start, window, m)
    why = planner.uncomputable_message(name, graph.outputs[name], keys[~ok]).split("\n")[1:] if not ok.all() else []
    return "\n".join([f"output {name!r} has no context: with every input given on {window} frames (from t={start}) "
                      "no output frame in them is computable (an output that depends on absolute time, like "
                      "ReplaceIndex(input, t, 0), has none)", *why])


def _plan(graph: Graph, name: str, start: int, window: int, m: int) -> tuple[Planner, np.ndarray, np.ndarray]:
    frames = IndexSet.range(n=1, t=(start, start + window))
    inputs = {input_name: IndexSet.range(n=1, t=(start - m, start + window)) if input_name == "ivector" else frames
              for input_name in graph.inputs}
    planner = Planner(graph, ComputationRequest(inputs=inputs, outputs={name: frames}))
    keys = planner.wanted[name]
    return planner, keys, planner.computable(graph.outputs[name], keys)


def _probe(graph: Graph, name: str, start: int, window: int, m: int) -> tuple[int, int] | None:
    """(left, right) for one input start, or None if no output in the window is computable."""
    _, keys, ok = _plan(graph, name, start, window, m)
    if not ok.any():
        return None
    t = decode(keys)[1]
    order = np.argsort(t)
    ok = ok[order]
    first_ok = int(np.argmax(ok))
    after = np.flatnonzero(~ok[first_ok:])
    first_not_ok = first_ok + int(after[0]) if len(after) else window
    return first_ok, window - first_not_ok
