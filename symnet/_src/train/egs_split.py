"""Utterances cut into chunks as Kaldi's `nnet3-get-egs` cuts them (its UtteranceSplitter), for egs made on the fly.

Kaldi's `--num-frames=150,110,100` names a principal chunk size (the first) and alternatives. For each utterance
length it keeps the *splits* (a multiset of chunk sizes: any number of principal ones and at most two
alternatives) whose total is closest to the length, penalising a total shorter than the utterance twice as much
as a longer one (`--num-frames-overlap` counts against the total), and picks one of those within 2 of the best
at random. The sizes are sorted, reversed on a coin flip, and placed: an overlap is shared between neighbours
in proportion to the smaller of the two (Kaldi's DistributeRandomly, whose fractional parts are truncated to 0,
so the remainder goes to the first gaps), a gap is spread evenly over the start, the end and between chunks,
in random order. An output frame in k chunks gets weight 1/k in each (Kaldi's output weights).

Kaldi draws with its own generator and `std::random_device` (so Kaldi's own egs differ from run to run); symnet
draws from NumPy's, seeded by the run's seed and the utterance, so the chunks are the same every epoch and
every run. The choices (the splits, their placement rules, the weights) are Kaldi's: tests compare egs made
here at the chunks Kaldi chose with the egs `nnet3-get-egs` wrote.
"""

from __future__ import annotations

from collections.abc import Sequence

import attrs
import numpy as np

from ..base.errors import TrainingError
from .examples import Piece

__all__ = ["KaldiChunk", "KaldiSplitter", "cut_kaldi_chunk", "parse_num_frames", "placed_chunks"]

_F32 = np.float32


def parse_num_frames(num_frames: str | int | Sequence[int]) -> tuple[int, ...]:
    """Kaldi's `--num-frames` (`"150,110,100"`, an int, or a sequence; the first is the principal size)."""
    if isinstance(num_frames, str):
        try:
            values = tuple(int(v) for v in num_frames.split(","))
        except ValueError:
            raise TrainingError(f"num_frames {num_frames!r}: expected sizes such as '150,110,100'") from None
    elif isinstance(num_frames, (int, np.integer)) and not isinstance(num_frames, bool):
        values = (int(num_frames),)
    elif isinstance(num_frames, Sequence) and all(isinstance(v, (int, np.integer)) for v in num_frames):
        values = tuple(int(v) for v in num_frames)
    else:
        raise TrainingError(f"num_frames must be sizes such as '150,110,100', got {num_frames!r}")
    if not values or min(values) < 1:
        raise TrainingError(f"num_frames {num_frames!r}: chunk sizes must be >= 1 (Kaldi's -1, whole utterances, "
                            "is not offered)")  # fmt: skip
    return values


@attrs.frozen
class KaldiChunk:
    """One chunk: its first frame, its size, and the weight of each of its output frames."""

    first_frame: int
    num_frames: int
    output_weights: np.ndarray = attrs.field(eq=False)


class KaldiSplitter:
    """Kaldi's UtteranceSplitter for `num_frames` (principal first), `num_frames_overlap` and
    `frame_subsampling_factor` (sizes rounded up to multiples of it, as Kaldi's ComputeDerived rounds them)."""

    def __init__(
        self, num_frames: str | int | Sequence[int], num_frames_overlap: int = 0, frame_subsampling_factor: int = 1
    ):
        sf = int(frame_subsampling_factor)
        if sf < 1:
            raise TrainingError(f"frame_subsampling_factor must be >= 1, got {frame_subsampling_factor}")
        self.sf = sf
        self.num_frames = tuple(-(-n // sf) * sf for n in parse_num_frames(num_frames))
        self.overlap = int(num_frames_overlap)
        if not 0 <= self.overlap < self.num_frames[0]:
            raise TrainingError(
                f"num_frames_overlap {num_frames_overlap} must be >= 0 and below the principal chunk size "
                f"{self.num_frames[0]}"
            )
        self.max_length = 2 * max(self.num_frames) + self.num_frames[0]
        splits = self._splits()
        durations = [self._duration(s) for s in splits]
        self.splits_for_length: list[list[tuple[int, ...]]] = []
        for u in range(self.max_length + 1):
            costs = []
            for split, duration in zip(splits, durations):
                cost = duration - _F32(u) if duration > _F32(u) else _F32(2.0) * (_F32(u) - duration)
                costs.append(np.finfo(np.float32).max if u < max(split) else _F32(cost))
            best = min(costs)
            if best == np.finfo(np.float32).max:
                self.splits_for_length.append([])
                continue
            self.splits_for_length.append(
                [s for s, c in zip(splits, costs) if c < _F32(best + _F32(1.9999))]  # float, as Kaldi compares
            )

    def _duration(self, split: Sequence[int]) -> np.float32:
        """Kaldi's DefaultDurationOfSplit, in float."""
        if not split:
            return _F32(0.0)
        proportion = _F32(self.overlap) / _F32(self.num_frames[0])
        total = _F32(sum(split))
        for a, b in zip(split[:-1], split[1:]):
            total = _F32(total - _F32(proportion * _F32(min(a, b))))
        return total

    def _splits(self) -> list[tuple[int, ...]]:
        primary = self.num_frames[0]
        ceiling = self.max_length + primary
        found: set[tuple[int, ...]] = set()
        n = len(self.num_frames)
        for i in range(n):
            for j in range(n):
                vec = ([self.num_frames[i]] if i else []) + ([self.num_frames[j]] if j else [])
                while self._duration(vec) <= ceiling:
                    if vec:
                        found.add(tuple(vec))
                    vec = sorted(vec + [primary])
        return sorted(found)

    def sizes(self, length: int, rng: np.random.Generator) -> list[int]:
        """The chunk sizes for an utterance of `length` frames, in order (Kaldi's GetChunkSizesForUtterance)."""
        primary, repeats = self.num_frames[0], 0
        while length > self.max_length:
            length -= primary - self.overlap
            repeats += 1
        possible = self.splits_for_length[length]
        if not possible:
            return []
        sizes = sorted(list(possible[int(rng.integers(len(possible)))]) + [primary] * repeats)
        return sizes[::-1] if int(rng.integers(2)) == 0 else sizes

    def _gaps(self, length: int, sizes: list[int], rng: np.random.Generator, subsampled: bool = True) -> list[int]:
        if subsampled and self.sf > 1:
            reduced = self._gaps((length + self.sf - 1) // self.sf, [s // self.sf for s in sizes], rng, False)
            return [g * self.sf for g in reduced]
        total_gap = length - sum(sizes)
        if total_gap < 0:
            if len(sizes) == 1:
                raise TrainingError(f"chunk size {sizes[0]} is longer than the utterance ({length} frames)")
            magnitudes = [min(a, b) for a, b in zip(sizes[:-1], sizes[1:])]
            return [0] + [-o for o in _distribute(-total_gap, magnitudes)]
        gaps = _uniform(total_gap, len(sizes) + 1, rng)
        return gaps[: len(sizes)]

    def chunks(self, length: int, rng: np.random.Generator) -> list[KaldiChunk]:
        """The chunks of an utterance of `length` frames (none where it is shorter than every size), with Kaldi's
        output weights (1 / the number of chunks an output frame is in)."""
        sizes = self.sizes(length, rng)
        if not sizes:
            return []
        gaps = self._gaps(length, sizes, rng)
        t, placed = 0, []
        for gap, size in zip(gaps, sizes):
            t += gap
            placed.append((t, size))
            t += size
        return placed_chunks(length, placed, self.sf)


def placed_chunks(length: int, placed: Sequence[tuple[int, int]], sf: int = 1) -> list[KaldiChunk]:
    """Chunks at `(first_frame, num_frames)` of an utterance of `length` frames, with Kaldi's output weights
    (SetOutputWeights: 1 / the number of chunks each output frame is in)."""
    count = np.zeros((length + sf - 1) // sf, dtype=np.int64)
    for first, size in placed:
        count[first // sf : (first + size) // sf] += 1
    return [
        KaldiChunk(first, size, (1.0 / count[first // sf : (first + size) // sf]).astype(np.float32))
        for first, size in placed
    ]


def cut_kaldi_chunk(features: np.ndarray, targets: np.ndarray, chunk: KaldiChunk, *, left: int, right: int) -> Piece:
    """The chunk as `nnet3-get-egs` writes it (at frame subsampling k, each output weight held for its k frames, of
    which fit trains the first): input rows `first - left` to
    `first + size + right - 1` clamped to the utterance (ExtractRowRangeWithPadding), and per output frame its
    target with the chunk's output weight, weight 0 past the targets' end; no sequence end (`end` None: an eg
    is all its network sees)."""
    first, size = chunk.first_frame, chunk.num_frames
    rows = np.clip(np.arange(first - left, first + size + right), 0, len(features) - 1)
    frames = np.arange(first, first + size)
    known = frames < len(targets)
    per_frame = np.repeat(chunk.output_weights, size // len(chunk.output_weights))  # held for each output's k frames
    weights = np.where(known, per_frame, 0.0).astype(np.float32)
    return features[rows], targets[np.minimum(frames, len(targets) - 1)], weights, None


def _distribute(n: int, magnitudes: list[int]) -> list[int]:
    """Kaldi's DistributeRandomly for n >= 0: shares of n in proportion to `magnitudes`, in float, truncated;
    the rest one each to the first (Kaldi's fractional parts are stored as int32, so all are 0)."""
    total = _F32(sum(magnitudes))
    out = [int(_F32(_F32(n) * _F32(m)) / total) for m in magnitudes]
    rest = n - sum(out)
    for i in range(rest):
        out[i] += 1
    return out


def _uniform(n: int, size: int, rng: np.random.Generator) -> list[int]:
    """Kaldi's DistributeRandomlyUniform for n >= 0: n spread evenly over `size` places, in random order."""
    common, remainder = divmod(n, size)
    values = np.array([common + 1] * remainder + [common] * (size - remainder), dtype=np.int64)
    return [int(v) for v in rng.permutation(values)]
