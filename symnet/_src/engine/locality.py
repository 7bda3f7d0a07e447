"""Whether a network's outputs are local in time: each output frame a fixed function of the input frames at
fixed offsets from it, so that how a sequence is cut into chunks (each with its context) cannot change it.

nnet3-compute computes every chunk of an utterance on its own, its input the
chunk's frames plus the network's context (edge frames repeated). For most
feed-forward networks (a TDNN) that gives exactly what one pass over the
whole utterance gives, and the whole pass is cheaper: no context recomputed
at every chunk. `chunking_dependence(graph)` says when that holds, by a rule
read off the graph, or names the node that breaks it:

- a recurrence restarts at every chunk's first input frame;
- IfDefined and Failover read a frame only where the chunk's window makes it
  computable, and a non-simple component (an `IndexedLayer`, e.g. statistics
  pooling) reads the frames the window holds;
- a descriptor that maps time other than by a fixed offset (`ReplaceIndex` of
  `t`) reads a frame fixed in chunk-relative time, so another frame in every
  chunk.

A descriptor with a period in `t` (`time_modulus()`: `Round`, `Switch`) depends on
`t` modulo the network's modulus, which chunks
starting at multiples of it (nnet3-compute rounds the chunk size up to one)
leave unchanged. Row-wise layers read only their own frame.
"""

from __future__ import annotations

from ..core.descriptor import Descriptor, IndexedLayer
from .graph import Graph
from .inspect import recurrent_edges
from .semantics import optional_reads

__all__ = ["chunking_dependence"]


def chunking_dependence(graph: Graph) -> str | None:
    """None where every output is local in time (see the module doc); else why chunks can change an output,
    naming the node."""
    for user, _ in sorted(recurrent_edges(graph)):
        return f"{graph.describe(user)} closes a recurrence, which restarts at every chunk"
    for nid, layer in enumerate(graph.layers):
        if isinstance(layer, IndexedLayer):
            return f"{graph.describe(nid)} reads the set of frames a chunk's window holds"
        if optional_reads(layer):
            return f"{graph.describe(nid)} reads frames only where a chunk's window makes them computable"
        if isinstance(layer, Descriptor) and layer.time_offset() is None and layer.time_modulus() == 1:
            return f"{graph.describe(nid)} maps time other than by a fixed offset"
    return None
