"""Levenshtein edit distance, counted along Kaldi's alignment: the one implementation behind `compute-wer`'s
counts (`symnet.decode`), phone error rates (`symnet.datasets`) and `symnet.train.edit_distance`.

The alignment is the one Kaldi's `LevenshteinEditDistance` picks where several are equally short (a
substitution only when it is strictly cheaper than both others, then a deletion when strictly cheaper than an
insertion, else an insertion), so the three counts, not only their sum, are Kaldi's. (The CTC training step
computes its distances inside the jitted program, in JAX: `symnet._src.train.objectives.edit_distances`.)
"""

from __future__ import annotations

from collections.abc import Iterable, Sequence

__all__ = ["edit_counts", "edit_distance"]


def edit_counts(ref: Sequence[object], hyp: Sequence[object]) -> tuple[int, int, int, int]:
    """`(errors, insertions, deletions, substitutions)` of `hyp` against `ref`, along Kaldi's alignment."""
    # per reference prefix: (cost, insertions, deletions, substitutions) of the best alignment with a hyp prefix
    row = [(i, 0, i, 0) for i in range(len(ref) + 1)]
    for h in hyp:
        new = [(row[0][0] + 1, row[0][1] + 1, row[0][2], row[0][3])]
        for j, r in enumerate(ref, 1):
            insertion = row[j][0] + 1
            deletion = new[j - 1][0] + 1
            substitution = row[j - 1][0] + (h != r)
            if substitution < insertion and substitution < deletion:
                c, i, d, s = row[j - 1]
                new.append((substitution, i, d, s + (h != r)))
            elif deletion < insertion:
                c, i, d, s = new[j - 1]
                new.append((deletion, i, d + 1, s))
            else:
                c, i, d, s = row[j]
                new.append((insertion, i + 1, d, s))
        row = new
    return row[-1]


def edit_distance(ref: Iterable[object], hyp: Iterable[object]) -> int:
    """Levenshtein distance between two sequences (substitutions, insertions, deletions cost 1)."""
    return int(edit_counts(list(ref), list(hyp))[0])
