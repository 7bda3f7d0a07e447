"""Training examples: sequences cut into chunks with the context the network needs (like nnet3-get-egs).

Every chunk has `chunk` output frames and `left + right` extra input frames
around them, taken from its own sequence with frame indices clamped to the
first and last frame (Kaldi's edge convention). Frames past a sequence's end
in its last chunk get weight 0, and each chunk records where its sequence
ends (`ends`), so that a network whose outputs depend on where a sequence
ends (a backward recurrence, an IfDefined of a later frame) is trained on
the sequence as it ends, not on repeats of its last frame. All chunks have
one shape, so every minibatch is the same regular request: one compiled
computation, slices only. From the ends, `Chunks.widths` gives each chunk the
smallest of several widths that holds its frames, and `minibatch` cuts a
minibatch down to one (`fit(chunk=(300, 200, 100))`).
"""

from __future__ import annotations

from collections.abc import Sequence

import attrs
import numpy as np

from ..base.errors import ShapeError

__all__ = ["Chunks", "cut_chunk", "make_chunks", "stack_chunks"]


@attrs.frozen(eq=False)
class Chunks:
    """Fixed-size examples: `features [num, chunk + left + right, dim]`, `targets [num, chunk(, dim)]`."""

    features: np.ndarray
    targets: np.ndarray
    weights: np.ndarray  # [num, chunk], 0 where a frame is padding
    left: int
    right: int
    # [num]: each chunk's sequence end in chunk time (output frame 0 is time 0): its first input frame past the
    # sequence and the right context there (`Network.compute`'s end of a whole sequence; past the chunk's last
    # input frame where the sequence goes on), or None where unknown. Training requests with sequence ends take
    # it (symnet._src.engine.ends, which reads an end past the request's frames as the request's end).
    ends: np.ndarray | None = None

    def __len__(self) -> int:
        return len(self.features)

    @property
    def chunk(self) -> int:
        return self.targets.shape[1]

    @property
    def num_frames(self) -> int:
        return int(self.weights.sum())

    def widths(self, allowed: Sequence[int], indexes: np.ndarray | None = None) -> np.ndarray:
        """Per chunk (of `indexes`, else all), the smallest of the `allowed` widths (output frames) that holds
        all its frames up to its sequence's end, or where the ends are unknown all its `chunk` frames."""
        sizes = np.sort(np.asarray(allowed, dtype=np.int64))
        count = len(self) if indexes is None else len(indexes)
        if self.ends is None:  # all `chunk` frames count (an eg of Kaldi's is all there is)
            frames = np.full(count, self.chunk)
        else:
            ends = self.ends if indexes is None else self.ends[indexes]
            frames = np.clip(ends - self.right, 1, self.chunk)  # output frames before the sequence ends
        return sizes[np.minimum(np.searchsorted(sizes, frames), len(sizes) - 1)]

    def minibatch(self, indexes: np.ndarray, width: int | None = None) -> tuple[np.ndarray, np.ndarray, np.ndarray]:
        """Matrices in Kaldi's row order (t, then n): features `[frames_in * n, dim]`, targets, weights.

        `width` (at most `chunk`) keeps each chunk's first `width` output frames and their context only.
        """
        width = self.chunk if width is None else width
        feats = self.features[indexes][:, : width + self.left + self.right].transpose(1, 0, 2)
        targets = np.swapaxes(self.targets[indexes][:, :width], 0, 1)
        weights = self.weights[indexes][:, :width].T
        return (
            feats.reshape(-1, feats.shape[-1]),
            targets.reshape((-1,) + targets.shape[2:]),
            weights.reshape(-1),
        )


#: One chunk cut from a sequence: features, targets, weights, where its sequence ends (`Chunks.ends`).
Piece = tuple[np.ndarray, np.ndarray, np.ndarray, int | None]


def make_chunks(
    features: Sequence[np.ndarray],
    targets: Sequence[np.ndarray],
    *,
    chunk: int,
    left: int,
    right: int,
) -> Chunks:
    """Cut each `[T, D]` sequence (with `[T]` labels or `[T, K]` targets) into chunks of `chunk` frames."""
    if not len(features):
        raise ShapeError("no sequences to cut into chunks (empty data)")
    if len(features) != len(targets):
        raise ShapeError(f"{len(features)} feature sequences but {len(targets)} target sequences")
    if chunk <= 0:
        raise ShapeError(f"chunk must be positive, got {chunk}")
    pieces: list[Piece] = []
    for i, (feats, tgt) in enumerate(zip(features, targets)):
        feats = np.asarray(feats, dtype=np.float32)
        tgt = np.asarray(tgt)
        if feats.ndim != 2 or len(feats) == 0:
            raise ShapeError(f"sequence {i}: features must be [T, D] with T > 0, got shape {feats.shape}")
        if feats.shape[1] != np.shape(features[0])[-1]:
            raise ShapeError(
                f"sequence {i}: features of dim {feats.shape[1]}, but sequence 0 has dim {np.shape(features[0])[-1]}"
            )
        if tgt.ndim == 0 or len(tgt) != len(feats):
            raise ShapeError(f"sequence {i}: {len(feats)} frames of features but targets of shape {tgt.shape}")
        if tgt.shape[1:] != np.shape(targets[0])[1:]:
            raise ShapeError(
                f"sequence {i}: targets of shape {tgt.shape}, but sequence 0 has targets of shape "
                f"{np.shape(targets[0])}"
            )
        if not np.isfinite(feats).all():
            frame, dim = (int(j) for j in np.argwhere(~np.isfinite(feats))[0])
            raise ShapeError(f"sequence {i}: the features are {feats[frame, dim]} at frame {frame}, dim {dim}")
        pieces += [
            cut_chunk(feats, tgt, start, chunk=chunk, left=left, right=right) for start in range(0, len(feats), chunk)
        ]
    return stack_chunks(pieces, left, right)


def cut_chunk(feats: np.ndarray, tgt: np.ndarray, start: int, *, chunk: int, left: int, right: int) -> Piece:
    """`(features, targets, weights, end)` of the chunk of a sequence whose output frames start at `start`: input
    frames clamped to the sequence (Kaldi's edge convention), weight 0 past its end, and where it ends."""
    length = len(feats)
    frames_in = np.clip(np.arange(start - left, start + chunk + right), 0, length - 1)
    frames_out = np.arange(start, start + chunk)
    weights = (frames_out < length).astype(np.float32)
    return feats[frames_in], tgt[np.minimum(frames_out, length - 1)], weights, length - start + right


def stack_chunks(pieces: Sequence[Piece], left: int, right: int) -> Chunks:
    """`Chunks` of pieces cut by `cut_chunk` (one width, one context; ends None where the pieces have none)."""
    features, targets, weights, ends = zip(*pieces, strict=True)
    known = None if any(e is None for e in ends) else np.asarray(ends, np.int64)
    return Chunks(np.stack(features), np.stack(targets), np.stack(weights), left, right, known)
