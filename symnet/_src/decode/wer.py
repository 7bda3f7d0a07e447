"""Word and sentence error rates as Kaldi's `compute-wer` counts and prints them.

Each reference is aligned with its hypothesis by Levenshtein distance, and the insertions, deletions and
substitutions are counted along the alignment Kaldi's `LevenshteinEditDistance` picks
(`symnet._src.base.levenshtein.edit_counts`), so the three counts, not only their sum, are Kaldi's.
`str(ErrorRate)` is `compute-wer`'s output, to the character. Modes as Kaldi's: "strict" (a reference without
hypothesis is an error), "present" (it is not scored), "all" (it is scored against an empty hypothesis).
"""

from __future__ import annotations

import os
from collections.abc import Mapping, Sequence

import attrs
import numpy as np

from ..base.errors import SymnetError
from ..base.levenshtein import edit_counts

__all__ = ["ErrorRate", "ScoringError", "compute_wer", "read_text"]

MODES = ("strict", "present", "all")


class ScoringError(SymnetError, ValueError):
    """Transcripts that cannot be scored: a missing hypothesis in strict mode, an unreadable text file."""


@attrs.frozen
class ErrorRate:
    """The counts `compute-wer` reports: reference words, word errors (insertions + deletions + substitutions),
    sentences scored, sentences with an error, and references that had no hypothesis."""

    words: int
    errors: int
    insertions: int
    deletions: int
    substitutions: int
    sentences: int
    sentence_errors: int
    absent: int

    @property
    def wer(self) -> float:
        """Word errors per reference word, in percent (as `compute-wer`: float, nan for no words)."""
        return _percent(self.errors, self.words)

    @property
    def ser(self) -> float:
        return _percent(self.sentence_errors, self.sentences)

    def __str__(self) -> str:
        partial = " [PARTIAL]" if self.absent else ""
        return (
            f"%WER {_fixed(self.wer)} [ {self.errors} / {self.words}, {self.insertions} ins, {self.deletions} del, "
            f"{self.substitutions} sub ]{partial}\n"
            f"%SER {_fixed(self.ser)} [ {self.sentence_errors} / {self.sentences} ]\n"
            f"Scored {self.sentences} sentences, {self.absent} not present in hyp.\n"
        )


def _percent(count: int, total: int) -> float:
    with np.errstate(divide="ignore", invalid="ignore"):
        return float(np.float32(np.float64(100.0) * np.float32(count) / np.float32(total)))


def _fixed(value: float) -> str:
    """C++'s `std::fixed` with precision 2 (glibc prints 0/0 as -nan)."""
    if np.isnan(value):
        return "-nan"
    return f"{value:.2f}"


def compute_wer(
    refs: Mapping[str, Sequence[object]], hyps: Mapping[str, Sequence[object]], mode: str = "strict"
) -> ErrorRate:
    """The error rate of `hyps` against `refs` (utterance id -> words), the references in their order, as
    `compute-wer --mode=MODE` scores them."""
    if mode not in MODES:
        raise ScoringError(f"mode must be one of {MODES}, got {mode!r}")
    words = errors = ins = dels = subs = sentences = sentence_errors = absent = 0
    for key, ref in refs.items():
        ref = list(ref)
        if key not in hyps:
            if mode == "strict":
                raise ScoringError(f"no hypothesis for utterance {key!r} (mode 'strict'; 'present' skips it)")
            absent += 1
            if mode == "present":
                continue
            hyp: list[object] = []
        else:
            hyp = list(hyps[key])
        words += len(ref)
        e, i, d, s = edit_counts(ref, hyp)
        errors, ins, dels, subs = errors + e, ins + i, dels + d, subs + s
        sentences += 1
        sentence_errors += ref != hyp
    return ErrorRate(words, errors, ins, dels, subs, sentences, sentence_errors, absent)


def read_text(path: str | os.PathLike[str]) -> dict[str, list[str]]:
    """A Kaldi `text` file (`utterance-id word word ...` per line) as utterance id -> words; a later line with
    the same id wins, as in Kaldi's table readers."""
    out: dict[str, list[str]] = {}
    try:
        with open(path, encoding="utf-8") as f:
            for line in f:
                fields = line.split()
                if not fields:
                    continue
                out[fields[0]] = fields[1:]
    except (OSError, UnicodeDecodeError) as e:
        raise ScoringError(f"{path}: cannot read it ({e})") from None
    return out
