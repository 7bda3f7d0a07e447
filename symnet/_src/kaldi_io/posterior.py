"""Kaldi's posteriors (hmm/posterior.h), binary or text, read with every size checked before it is read.

Apart from `ark`'s matrices and vectors: a posterior is frames of (pdf, weight) pairs, not an array, and only the
tables that ask for posteriors read one.
"""

from __future__ import annotations

import re
from typing import IO, NamedTuple

import numpy as np

from ..base.errors import KaldiDataError
from .ark import _INT_WORD
from .ark_stream import _int32, _Reader

__all__ = ["MAX_POSTERIOR_FRAMES", "Posterior", "read_posterior"]


class Posterior(NamedTuple):
    """Kaldi's Posterior of one utterance (hmm/posterior.h), as the file has it: frame t's (pdf, weight)
    pairs are `pdfs[offsets[t]:offsets[t + 1]]` (int32) and `weights[...]` (float32); `offsets` is int64 [T + 1]."""

    offsets: np.ndarray
    pdfs: np.ndarray
    weights: np.ndarray

    @property
    def num_frames(self) -> int:
        return len(self.offsets) - 1


#: The most frames ReadPosterior takes (Kaldi's "improbably large size").
MAX_POSTERIOR_FRAMES = 10_000_000
_PAIR = np.dtype([("s1", "u1"), ("pdf", "<i4"), ("s2", "u1"), ("weight", "<f4")])
_REAL_WORD = re.compile(r"[+-]?([0-9]+\.?[0-9]*|\.[0-9]+)([eE][+-]?[0-9]+)?\Z")


def read_posterior(fd: IO[bytes], where: str, key: str | None, quote: bool = True) -> Posterior:
    """One Kaldi Posterior from `fd` (binary, or text `[ pdf weight ... ] [ ... ]` on one line), sizes
    checked before reading (`key`: for messages)."""
    return _read_posterior(_Reader(fd, where, quote=quote), key)


def _read_posterior(r: _Reader, key: str | None) -> Posterior:
    if r.peek(2) == b"\0B":
        r.read(2, key, "the binary marker")
        _, frames = _int32(r, key, "the number of frames")
        if frames > MAX_POSTERIOR_FRAMES:
            raise r.error(key, f"a posterior of {frames} frames (more than {MAX_POSTERIOR_FRAMES})")
        counts = np.zeros(frames, np.int64)
        parts = []
        try:
            for t in range(frames):
                _, counts[t] = _int32(r, key, f"the number of pairs of frame {t}")
                parts.append(r.read(_PAIR.itemsize * int(counts[t]), key, f"the {counts[t]} pairs of frame {t}"))
        except KaldiDataError as e:
            raise KaldiDataError(f"{e} (cut short, or an alignment, not posteriors?)") from None
        pairs = np.frombuffer(b"".join(parts), _PAIR)
        if len(pairs) and not ((pairs["s1"] == 4).all() and (pairs["s2"] == 4).all()):
            raise r.error(key, "a (pdf, weight) pair without its size bytes 4 (an alignment, not posteriors?)")
        offsets = np.concatenate([[0], np.cumsum(counts)])
        return Posterior(offsets, pairs["pdf"].astype(np.int32), pairs["weight"].astype(np.float32))
    line, _ = r.read_until(b"\n", r.available(), key, "a text posterior")
    words = line.decode("latin-1").split()
    counts_list: list[int] = []
    pdfs: list[int] = []
    weights: list[float] = []
    i = 0
    while i < len(words):
        if words[i] != "[":
            hint = " (alignments rather than posteriors?)" if _INT_WORD.match(words[i]) and r.quote else ""
            raise r.error(
                key, f"a text posterior: expected [ to start frame {len(counts_list)}, got {r.shown(words[i])}{hint}"
            )
        i += 1
        start = len(pdfs)
        while i < len(words) and words[i] != "]":
            if i + 1 >= len(words) or not _INT_WORD.match(words[i]) or not _REAL_WORD.match(words[i + 1]):
                shown = " ".join(words[i : i + 2])
                raise r.error(
                    key,
                    f"a text posterior: expected a pdf and a weight in frame {len(counts_list)}, got {r.shown(shown)}",
                )
            pdfs.append(int(words[i]))
            weights.append(float(words[i + 1]))
            i += 2
        if i >= len(words):
            raise r.error(key, f"a text posterior: frame {len(counts_list)} has no closing ]")
        i += 1
        counts_list.append(len(pdfs) - start)
    if any(not -(2**31) <= p < 2**31 for p in pdfs):
        raise r.error(key, "a text posterior: a pdf beyond int32")
    offsets = np.concatenate([[0], np.cumsum(np.array(counts_list, np.int64))]).astype(np.int64)
    return Posterior(offsets, np.array(pdfs, np.int32), np.array(weights, np.float64).astype(np.float32))
