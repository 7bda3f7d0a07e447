"""Chain graphs as arrays: Kaldi's DenominatorGraph and the numerator's supervision graphs.

Arcs carry pdf-ids (Kaldi's FSTs label them pdf-id + 1) and log-probabilities (`-weight`,
kept as logs: the weights that `nnet3-chain-get-egs`'s normalization FST puts on a numerator's
arcs reach tens of nats, and Kaldi accepts any). The denominator graph has no final weights
(every state ends a sequence with probability 1, as in Kaldi) and initial probabilities found by
running the HMM from the start state for 100 iterations and averaging (Kaldi's
DenominatorGraph::SetInitialProbs). A numerator graph starts in its start state and ends with its
final weights.
"""

from __future__ import annotations

from collections.abc import Sequence
from dataclasses import dataclass

import numpy as np

from ..base.errors import ChainError
from ..kaldi_io.fst import Fst, parse_fst_text, read_fst

__all__ = [
    "ChainGraph",
    "denominator_graph",
    "fst_from_arcs",
    "INITIAL_PROB_ITERS",
    "initial_probs",
    "numerator_graph",
    "numerator_graph_from_text",
    "read_denominator_graph",
]

#: Iterations of HMM propagation averaged for the initial probabilities (Kaldi's fixed number).
INITIAL_PROB_ITERS = 100


@dataclass(frozen=True, eq=False)
class ChainGraph:
    """An acceptor over pdf-ids as arrays: arcs `src`, `dst`, `pdf`, `log_prob`; `log_initial` and `log_final`
    log-probabilities per state (-inf: none). The forward-backward starts from the initial probabilities and ends
    weighted by the final ones (float64, which holds Kaldi's float32 weights and symnet's own probabilities
    exactly). `prob`, `initial` and `final` are the same as probabilities."""

    num_pdfs: int
    src: np.ndarray
    dst: np.ndarray
    pdf: np.ndarray
    log_prob: np.ndarray
    log_initial: np.ndarray
    log_final: np.ndarray

    @property
    def prob(self) -> np.ndarray:
        return np.exp(self.log_prob)

    @property
    def initial(self) -> np.ndarray:
        return np.exp(self.log_initial)

    @property
    def final(self) -> np.ndarray:
        return np.exp(self.log_final)

    @property
    def num_states(self) -> int:
        return int(self.log_initial.shape[0])

    @property
    def num_arcs(self) -> int:
        return int(self.src.shape[0])


def _pdfs_of(fst: Fst, num_pdfs: int, what: str) -> np.ndarray:
    if not isinstance(num_pdfs, (int, np.integer)) or num_pdfs < 1:
        raise ChainError(f"num_pdfs must be a positive integer, not {num_pdfs!r}")
    pdf = fst.ilabel.astype(np.int64) - 1
    bad = (pdf < 0) | (pdf >= num_pdfs)
    if bad.any():
        raise ChainError(
            f"{what}: arc label {int(fst.ilabel[bad][0])} is not a pdf-id + 1 for {num_pdfs} pdfs "
            "(labels must be 1..num_pdfs; epsilon arcs are not allowed)"
        )
    return pdf.astype(np.int32)


def initial_probs(fst: Fst) -> np.ndarray:
    """Kaldi's initial probabilities: start with all mass in the start state, propagate through the arcs
    normalised per state (final probability included), renormalise, and average the first 100 iterations."""
    out = np.exp(-fst.weight.astype(np.float64))
    tot = np.exp(-fst.final.astype(np.float64)) + np.bincount(fst.src, out, minlength=fst.num_states)
    if not ((tot > 0) & (tot < 100)).all():
        s = int(np.flatnonzero(~((tot > 0) & (tot < 100)))[0])
        raise ChainError(f"state {s} has total outgoing probability {tot[s]:g}, not in (0, 100) as Kaldi requires")
    cur = np.zeros(fst.num_states)
    cur[fst.start] = 1.0
    avg = np.zeros(fst.num_states)
    for _ in range(INITIAL_PROB_ITERS):
        avg += cur / INITIAL_PROB_ITERS
        cur = np.bincount(fst.dst, (cur / tot)[fst.src] * out, minlength=fst.num_states).astype(np.float64)
        total = cur.sum()
        if not total > 0:
            raise ChainError("the denominator graph loses all probability mass: no state reachable goes on")
        cur /= total
    return avg


def _log_of(p: np.ndarray | Sequence[float]) -> np.ndarray:
    """Probabilities as log-probabilities (0 as -inf)."""
    with np.errstate(divide="ignore"):
        return np.log(np.asarray(p, np.float64))


def _graph(fst: Fst, pdf: np.ndarray, num_pdfs: int, log_initial: np.ndarray, log_final: np.ndarray) -> ChainGraph:
    """The ChainGraph of `fst`'s arcs (log-probabilities -weight) with these initial and final log-probabilities."""
    return ChainGraph(
        num_pdfs=int(num_pdfs),
        src=fst.src.astype(np.int32),
        dst=fst.dst.astype(np.int32),
        pdf=pdf,
        log_prob=-fst.weight.astype(np.float64),
        log_initial=log_initial.astype(np.float64),
        log_final=log_final.astype(np.float64),
    )


def denominator_graph(fst: Fst, num_pdfs: int) -> ChainGraph:
    """Kaldi's DenominatorGraph of a den.fst: arcs labelled pdf-id + 1, all states final, Kaldi's
    initial probabilities."""
    pdf = _pdfs_of(fst, num_pdfs, "denominator FST")
    return _graph(fst, pdf, num_pdfs, _log_of(initial_probs(fst)), np.zeros(fst.num_states))


def numerator_graph(fst: Fst, num_pdfs: int) -> ChainGraph:
    """A supervision FST (labels pdf-id + 1, as in Kaldi's chain egs) as a numerator graph: it starts in
    the start state and ends with the final weights; no leaky HMM."""
    pdf = _pdfs_of(fst, num_pdfs, "supervision FST")
    log_initial = np.full(fst.num_states, -np.inf)
    log_initial[fst.start] = 0.0
    return _graph(fst, pdf, num_pdfs, log_initial, -fst.final)


def fst_from_arcs(
    src: Sequence[int] | np.ndarray,
    dst: Sequence[int] | np.ndarray,
    pdf: Sequence[int] | np.ndarray,
    weight: Sequence[float] | np.ndarray,
    *,
    num_states: int | None = None,
    start: int = 0,
    final: Sequence[float] | np.ndarray | None = None,
    log: bool = True,
) -> Fst:
    """An `Fst` from arc arrays with 0-based `pdf`s (stored as labels pdf + 1, as Kaldi does). `weight` is
    -log probability as OpenFst stores it when `log`, else probabilities; `final` likewise (default:
    every state final with probability 1)."""
    src_a, dst_a = np.asarray(src, np.int64), np.asarray(dst, np.int64)
    pdf_a = np.asarray(pdf, np.int64)
    w = np.asarray(weight, np.float64)
    if num_states is None:
        num_states = int(max(src_a.max(initial=-1), dst_a.max(initial=-1), start)) + 1
    if final is None:
        f = np.zeros(num_states) if log else np.ones(num_states)
    else:
        f = np.asarray(final, np.float64)
    if f.shape != (num_states,):
        raise ChainError(f"final has shape {f.shape}, expected ({num_states},) for {num_states} states")
    if not log:
        if (w < 0).any() or (f < 0).any():
            raise ChainError("probabilities must not be negative")
        with np.errstate(divide="ignore"):
            w, f = -np.log(w), -np.log(f)
    if (pdf_a < 0).any():
        raise ChainError(f"pdf {int(pdf_a[pdf_a < 0][0])} is negative")
    return Fst(
        start=int(start),
        final=f.astype(np.float32),
        src=src_a.astype(np.int32),
        dst=dst_a.astype(np.int32),
        ilabel=(pdf_a + 1).astype(np.int32),
        olabel=(pdf_a + 1).astype(np.int32),
        weight=w.astype(np.float32),
    )


def read_denominator_graph(path: str, num_pdfs: int) -> ChainGraph:
    """Kaldi's den.fst (OpenFst binary, from chain-make-den-fst) as a denominator graph."""
    return denominator_graph(read_fst(path), num_pdfs)


def numerator_graph_from_text(text: str, num_pdfs: int) -> ChainGraph:
    """A supervision FST in the text form of a chain egs text archive, as a numerator graph."""
    return numerator_graph(parse_fst_text(text, name="supervision FST"), num_pdfs)
