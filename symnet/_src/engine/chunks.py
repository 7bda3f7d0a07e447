"""Chunks computed on their own, many in one call: what `compute(..., frames_per_chunk=..., carry_state=False)`
and nnet3-compute (symnet._src.kaldi.compute.nnet3_compute) do.

A chunk is `count` output frames of one sequence from its frame `start` (every `subsampling`-th frame), given
`left` input frames before its first output frame and `right` after its last, the sequence's edge frames
repeated beyond its ends (nnet3-compute's convention). Each chunk is its own computation: recurrences start
afresh at its first input frame, and optional reads see its input window as all there is.

No descriptor or component lets one sequence n of a request see another, so the chunks of one shape are the
sequences of one regular request, in chunk-relative time (a chunk's first output frame at its start modulo
the network's modulus, so that rounding and switches see each frame as they would). Where padding changes no
output (`padding_side`), a short chunk is padded to a bucket length (at most the full chunk): after its end,
with that end given to the request where optional reads need it (`'ends'`), or before its start
(`'start'`), so that the chunks of any lengths are a few shapes, each computed in calls of one size
(`batches`): a few programs serve any job.
"""

from __future__ import annotations

from collections.abc import Mapping, Sequence
from typing import Any

import attrs
import numpy as np

from ..core.precision import Precision
from ..core.structure import NetworkLike
from .buckets import Side, batches, bucket_length
from .recurrence import Lowering
from .runner import Block, Ends, clamped, run

__all__ = ["Chunk", "compute_chunks", "padded_chunk"]


@attrs.frozen
class Chunk:
    """One chunk of sequence `sequence`, as computed: `frames` output frames (every `subsampling`-th) from
    sequence frame `first`, of which the `count` from the `skip`-th are its own (the rest is padding), with
    `left` and `right` input frames of context; `rows`: inputs given as one row at frame 0 (Kaldi's
    i-vector)."""

    sequence: int
    first: int
    frames: int
    count: int
    skip: int
    left: int
    right: int
    rows: Mapping[str, np.ndarray] = attrs.field(factory=dict, eq=False)


def padded_chunk(
    sequence: int,
    start: int,
    count: int,
    *,
    frames_per_chunk: int,
    left: int,
    right: int,
    side: Side | None,
    modulus: int,
    subsampling: int = 1,
    rows: Mapping[str, np.ndarray] | None = None,
) -> Chunk:
    """The chunk of `count` output frames from sequence frame `start` (at most `frames_per_chunk` output frames,
    every `subsampling`-th), padded where `side` allows to a bucket length no longer than a full chunk; not
    before its start where that would move its frames off their phase modulo `modulus`."""
    frames = count if side is None else min(frames_per_chunk, bucket_length(count))
    if side == "start" and (frames - count) * subsampling % modulus:
        frames = count
    skip = frames - count if side == "start" else 0
    return Chunk(sequence, start - skip * subsampling, frames, count, skip, left, right, rows or {})


def compute_chunks(
    network: NetworkLike,
    name: str,
    chunks: Sequence[Chunk],
    sequences: Mapping[str, Sequence[np.ndarray]],
    *,
    side: Side | None,
    modulus: int,
    subsampling: int = 1,
    lowering: Lowering = "auto",
    precision: Precision | None = None,
) -> list[Any]:
    """Output `name` of each chunk (`[count, dim]`, in the order given), the chunks of one shape as the sequences
    of calls of one size; `sequences` holds every input read along time, one array `[T, D]` per sequence."""
    groups: dict[tuple[Any, ...], list[int]] = {}
    for k, c in enumerate(chunks):
        shape = (c.frames, c.left, c.right, c.first % modulus, tuple(sorted(c.rows)))
        groups.setdefault(shape, []).append(k)
    out: list[Any] = [None] * len(chunks)
    f = subsampling
    for (frames, left, right, phase, row_inputs), members in groups.items():
        last = phase + (frames - 1) * f
        in_t = (phase - left, last + right + 1)
        for batch in batches(members, frames * f):
            cs = [chunks[k] for k in batch]
            blocks = {
                key: Block(
                    in_t,
                    np.stack(
                        [
                            clamped(seqs[c.sequence], np.arange(c.first - left, c.first - phase + last + right + 1))
                            for c in cs
                        ],
                        axis=1,
                    ),
                )
                for key, seqs in sequences.items()
            }
            for key in row_inputs:
                blocks[key] = Block((0, 1), np.stack([c.rows[key] for c in cs])[None])
            # A chunk padded after its end is given that end (the end of its context) where optional reads need it.
            ends = Ends(tuple(phase + (c.count - 1) * f + right + 1 for c in cs)) if side == "ends" else None
            values = run(
                network,
                blocks,
                {name: range(phase, last + 1, f)},
                ends=ends,
                lowering=lowering,
                precision=precision,
            )[name]
            for j, (k, c) in enumerate(zip(batch, cs, strict=True)):
                out[k] = values[c.skip : c.skip + c.count, j]
    return out
