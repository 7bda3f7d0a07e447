"""symnet's own chain supervision from frame-level pdf alignments: numerator graphs and a pdf-bigram denominator.

Neither is Kaldi's construction. Kaldi's `chain-get-supervision` builds a numerator from a *phone*
alignment through the tree and the chain topology, letting each phone start up to `left_tolerance`
frames early and end `right_tolerance` frames late (default 5 each, at the input frame rate), then
subsamples; its denominator is `chain-make-den-fst`'s graph of a phone LM (`chain-est-phone-lm`)
compiled with the tree and topology. symnet makes those too, for monophone systems (`phone_numerator`,
`estimate_phone_lm`, `phone_lm_denominator`), or reads Kaldi's: `read_denominator_graph` (den.fst) and
`symnet.kaldi.read_cegs` + `numerator_graph` (chain egs).

Here, from an alignment of pdf-ids `a[0..n)` at the input frame rate with frame subsampling `k`:

- `alignment_numerator(a, num_pdfs, subsampling=k, tolerance=d)`: a linear acceptor with one state per
  output frame, states `0..T` (`T = ceil(n / k)`), start 0, final `T` (probability 1); from state `j` to
  `j + 1` one arc (probability 1) for each distinct pdf in `a[max(0, jk - d) .. min(n - 1, jk + d)]`.
  Its paths are every sequence that takes at output frame `j` a pdf aligned within `d` input frames of
  frame `jk`; with `d = 0` exactly one path, the subsampled alignment `a[::k]`. There is no constraint
  between neighbouring frames (Kaldi's numerator follows the phone topology).
- `denominator_from_alignments(alignments, num_pdfs, subsampling=k)`: a pdf-bigram graph at the output
  frame rate: state 0 is the start, state `p + 1` means "the last pdf was p"; the arc from state `s` to
  `q + 1` is labelled `q` with probability `count(s -> q) / count(s -> anything)` counted on every phase
  of the subsampled alignments (`a[r::k]`, `r < k`), the start's arcs from the first pdfs. Only seen
  transitions have arcs (`smoothing > 0` adds that count to every pdf pair: a dense graph of
  `num_pdfs^2` arcs). All states are final (as in every Kaldi denominator graph).
"""

from __future__ import annotations

from collections.abc import Sequence

import numpy as np

from ..base.errors import ChainError
from .graph import ChainGraph, denominator_graph, fst_from_arcs

__all__ = ["alignment_numerator", "allowed_pdfs", "denominator_from_alignments"]


def _check_alignment(alignment: np.ndarray, num_pdfs: int, what: str) -> np.ndarray:
    a = np.asarray(alignment)
    if a.ndim != 1 or not np.issubdtype(a.dtype, np.integer):
        raise ChainError(f"{what}: an alignment must be a 1-d array of integer pdf-ids, got {a.dtype} {a.shape}")
    if a.size and (a.min() < 0 or a.max() >= num_pdfs):
        bad = int(a[(a < 0) | (a >= num_pdfs)][0])
        raise ChainError(f"{what}: pdf {bad} is out of range for {num_pdfs} pdfs")
    return a.astype(np.int64)


def _check_options(num_pdfs: int, subsampling: int, tolerance: int = 0) -> None:
    if not isinstance(num_pdfs, (int, np.integer)) or isinstance(num_pdfs, bool) or num_pdfs < 1:
        raise ChainError(f"num_pdfs must be a positive integer, not {num_pdfs!r}")
    if not isinstance(subsampling, (int, np.integer)) or isinstance(subsampling, bool) or subsampling < 1:
        raise ChainError(f"frame subsampling factor {subsampling!r} must be a positive integer")
    if not isinstance(tolerance, (int, np.integer)) or isinstance(tolerance, bool) or tolerance < 0:
        raise ChainError(f"tolerance {tolerance!r} must be an integer >= 0 (input frames)")


def allowed_pdfs(alignment: np.ndarray, subsampling: int = 1, tolerance: int = 0) -> list[np.ndarray]:
    """Per output frame `j`, the sorted distinct pdfs of `alignment` within `tolerance` input frames of `j * k`."""
    a = np.asarray(alignment)
    n = len(a)
    return [np.unique(a[max(0, t - tolerance) : min(n, t + tolerance + 1)]) for t in range(0, n, subsampling)]


def alignment_numerator(
    alignment: np.ndarray | Sequence[int], num_pdfs: int, *, subsampling: int = 1, tolerance: int = 0
) -> ChainGraph:
    """symnet's numerator graph of a pdf alignment at the input frame rate (see the module docstring): a linear
    acceptor, one state per output frame, arcs for the pdfs aligned within `tolerance` input frames. Not
    Kaldi's chain-get-supervision (which works on phones through the tree and topology)."""
    _check_options(num_pdfs, subsampling, tolerance)
    a = _check_alignment(np.asarray(alignment), num_pdfs, "numerator")
    if not a.size:
        raise ChainError("numerator: an empty alignment has no numerator")
    sets = allowed_pdfs(a, subsampling, tolerance)
    src = np.concatenate([np.full(len(s), j) for j, s in enumerate(sets)])
    pdf = np.concatenate(sets)
    frames = len(sets)
    log_initial = np.full(frames + 1, -np.inf)
    log_initial[0] = 0.0
    log_final = np.full(frames + 1, -np.inf)
    log_final[frames] = 0.0
    return ChainGraph(
        num_pdfs=int(num_pdfs),
        src=src.astype(np.int32),
        dst=(src + 1).astype(np.int32),
        pdf=pdf.astype(np.int32),
        log_prob=np.zeros(len(src)),
        log_initial=log_initial,
        log_final=log_final,
    )


def denominator_from_alignments(
    alignments: Sequence[np.ndarray], num_pdfs: int, *, subsampling: int = 1, smoothing: float = 0.0
) -> ChainGraph:
    """symnet's pdf-bigram denominator graph estimated from training alignments (pdf-ids at the input frame
    rate), at the output frame rate (see the module docstring). Not Kaldi's den.fst (a phone LM from
    chain-est-phone-lm compiled by chain-make-den-fst): read that with `read_denominator_graph`."""
    _check_options(num_pdfs, subsampling)
    if not isinstance(smoothing, (int, float)) or isinstance(smoothing, bool) or not smoothing >= 0:
        raise ChainError(f"smoothing {smoothing!r} must be a number >= 0")
    counts = np.zeros((num_pdfs + 1, num_pdfs), np.float64)  # row 0: the start; row p + 1: after pdf p
    seen = 0
    for i, alignment in enumerate(alignments):
        a = _check_alignment(np.asarray(alignment), num_pdfs, f"alignment {i}")
        for phase in range(min(subsampling, len(a))):
            s = a[phase::subsampling]
            np.add.at(counts, (np.concatenate([[0], s[:-1] + 1]), s), 1.0)
            seen += 1
    if not seen:
        raise ChainError("no non-empty alignments to estimate a denominator from")
    counts += smoothing
    src, dst = np.nonzero(counts)
    prob = counts[src, dst] / counts.sum(1)[src]
    fst = fst_from_arcs(src, dst + 1, dst, prob, num_states=num_pdfs + 1, log=False)
    return denominator_graph(fst, num_pdfs)
