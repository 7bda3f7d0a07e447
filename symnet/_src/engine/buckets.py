"""Shape classes for inference: pad sequences to a few lengths so that one compiled program serves many.

Every distinct request is its own XLA program, so computing utterances of
many lengths one length at a time compiles once per length. Padding each
sequence to a bucket length (and grouping a fixed number of sequences per
call) leaves a handful of shapes. Padding may not change any output, which
decides where the padding frames go (`padding_side`):

- `'end'`: after the last frame (repeating it, as the edge frames already
  are), when nothing reads later frames without needing them: no recurrence
  or only forward ones (reading earlier frames of themselves);
- `'start'`: with time shifted by a multiple of the network's modulus, when
  every recurrence is backward (reads later frames of itself): a backward
  recurrence then starts at the real last frame and never reads padding;
- `'ends'` (for callers that can give each sequence's end, `with_ends=True`;
  None for the others): after the last frame, the request given each
  sequence's own end (`ComputationRequest(sequence_ends=True)`,
  `symnet._src.engine.ends`), when
  recurrences run both ways (a BLSTM), when an optional read (IfDefined,
  Failover) lies outside a recurrence, or when a recurrence moves time other
  than by an Offset: a frame past a sequence's end then counts as absent for
  that sequence (IfDefined reads zeros, Failover its second part, a backward
  recurrence starts at the sequence's end), per sequence, by masks that are
  arrays of the call, so one program still serves every length of a bucket;
- nowhere (one shape per length) when the network has an IndexedLayer (its
  value depends on how many input frames exist, which masks do not change)
  or a node whose rows depend on other rows (batch-norm in training mode:
  padding frames and repeated sequences would enter its statistics).
"""

from __future__ import annotations

from collections.abc import Sequence
from typing import Literal, TypeVar

from ..core.descriptor import Descriptor, IndexedLayer
from .graph import Graph
from .inspect import matrixwise_node, recurrent_edges, strongly_connected_groups
from .semantics import optional_reads

__all__ = ["BATCH_FRAMES", "batch_size", "batches", "bucket_length", "BUCKETS", "fill", "padding_side", "Side"]

#: Bucket lengths in frames; longer sequences are padded to a multiple of the last.
BUCKETS: tuple[int, ...] = (128, 256, 384, 512, 768, 1024, 1536, 2048)

#: Sequences of one bucket computed in one call: at most as many as fill this many frames (at least one). A
#: recurrence steps through its frames one at a time whatever the batch, so the batch is what makes it fast
#: (benchmarks/ragged_compute.py: a 2-layer BLSTM against calls of 1024 frames).
BATCH_FRAMES = 8192

Side = Literal["start", "end", "ends"]
T = TypeVar("T")


def bucket_length(length: int, modulus: int = 1) -> int:
    """The padded length for a sequence of `length` frames: the smallest bucket that holds it, a multiple of
    `modulus` (beyond the last bucket, the next multiple of the last bucket)."""
    padded = next((b for b in BUCKETS if b >= length), -(-length // BUCKETS[-1]) * BUCKETS[-1])
    return -(-padded // modulus) * modulus


def batch_size(padded_length: int, count: int) -> int:
    """How many sequences of `padded_length` frames share one call when `count` are to be computed: the
    smallest power of two that holds them all, at most `BATCH_FRAMES // padded_length` (and at least 1).

    A call then computes at most twice the sequences it was given (a single sequence computes alone), one
    call's sequences of a bucket share one program, and a bucket has a handful of programs (one per power
    of two up to the largest), however many calls are made."""
    largest = max(1, BATCH_FRAMES // padded_length)
    return min(largest, 1 << max(count - 1, 0).bit_length())


def batches(members: Sequence[T], padded_length: int) -> list[list[T]]:
    """`members` (sequences of `padded_length` frames) in calls of `batch_size`, the last filled up (`fill`)."""
    return fill(members, batch_size(padded_length, len(members)))


def padding_side(graph: Graph, with_ends: bool = False) -> Side | None:
    """Where padding frames leave every output unchanged: `'end'`, `'start'`, `'ends'` (at the end, with each
    sequence's end given to the request: only `with_ends`), or None (nowhere)."""
    if any(isinstance(layer, IndexedLayer) for layer in graph.layers) or matrixwise_node(graph) is not None:
        return None
    ends: Side | None = "ends" if with_ends else None
    directions = set()
    for user, _ in recurrent_edges(graph):
        layer = graph.layers[user]
        offset = layer.time_offset() if isinstance(layer, Descriptor) else None
        if not offset:
            return ends
        directions.add("end" if offset < 0 else "start")
    recurrent = {m for group in strongly_connected_groups(graph) if len(group) > 1 for m in group}
    recurrent |= {user for user, _ in recurrent_edges(graph)}
    for nid, layer in enumerate(graph.layers):
        if optional_reads(layer) and nid not in recurrent:
            return ends
    if len(directions) > 1:
        return ends
    return "start" if directions == {"start"} else "end"


def fill(members: Sequence[T], size: int) -> list[list[T]]:
    """`members` in batches of `size`, the last filled up with repeats of its last member (outputs dropped)."""
    batches = [list(members[i : i + size]) for i in range(0, len(members), size)]
    batches[-1] += [batches[-1][-1]] * (size - len(batches[-1]))
    return batches
