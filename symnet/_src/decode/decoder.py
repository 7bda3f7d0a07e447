"""A beam-search Viterbi decoder over a Kaldi decoding graph (HCLG), as Kaldi's decoders search it.

The graph's input labels are transition-ids (0: epsilon), its output labels words, its weights -log
probabilities. Each frame (Kaldi's LatticeFasterDecoder order): every live token takes every emitting arc,
paying the arc's weight plus `acoustic_scale` times minus the log-likelihood of the arc's pdf at this frame;
tokens more than `beam` worse than the frame's best are dropped, and so are all but the `max_active` best; then
epsilon arcs are followed within the frame until no token improves. At the end the final weights are added;
where no token is in a final state, the best token is taken as it is (Kaldi's `--allow-partial`). The best
path gives the words, the transition-ids per frame (an alignment), and its graph and acoustic costs.

Each frame is vectorised over tokens and arcs (NumPy), and the graph's arcs are grouped by source state once
(`DecodingGraph`), so a frame costs its live arcs, not the graph's size.
"""

from __future__ import annotations

import os

import attrs
import numpy as np

from ..base.errors import ModelFormatError, SymnetError
from ..base.safe_read import read_file
from ..kaldi.models.transition_model import read_transition_model
from ..kaldi_io.binary import make_reader
from ..kaldi_io.fst import Fst, read_fst

__all__ = ["DecodeError", "DecodingGraph", "Hypothesis", "decode", "read_decoding_graph"]


class DecodeError(SymnetError, ValueError):
    """A graph, a transition model or log-likelihoods that cannot be decoded together."""


@attrs.frozen(eq=False)
class DecodingGraph:
    """An HCLG `Fst` with its arcs grouped by source state (emitting and epsilon apart) and its transition-ids
    mapped to pdfs (`transition_pdfs[tid]`, Kaldi's TransitionIdToPdf)."""

    fst: Fst
    transition_pdfs: np.ndarray
    emitting: tuple[np.ndarray, np.ndarray]  # (arc indexes sorted by source, offsets per state)
    epsilon: tuple[np.ndarray, np.ndarray]

    @classmethod
    def of(cls, fst: Fst, transition_pdfs: np.ndarray) -> DecodingGraph:
        pdfs = np.asarray(transition_pdfs, dtype=np.int64)
        if len(fst.ilabel) and int(fst.ilabel.max()) >= len(pdfs):
            raise DecodeError(
                f"the graph has transition-id {int(fst.ilabel.max())}, but the transition model has "
                f"{len(pdfs) - 1}: was it built with this model?"
            )

        def grouped(mask: np.ndarray) -> tuple[np.ndarray, np.ndarray]:
            arcs = np.flatnonzero(mask)
            arcs = arcs[np.argsort(fst.src[arcs], kind="stable")]
            offsets = np.searchsorted(fst.src[arcs], np.arange(fst.num_states + 1))
            return arcs, offsets

        return cls(fst, pdfs, grouped(fst.ilabel > 0), grouped(fst.ilabel == 0))


@attrs.frozen
class Hypothesis:
    """The best path: its words (output labels, 0s left out), transition-ids per frame, and costs (-log, the
    acoustic cost scaled by the acoustic scale); `final`: whether it ends in a final state."""

    words: tuple[int, ...]
    alignment: tuple[int, ...]
    graph_cost: float
    acoustic_cost: float
    final: bool

    @property
    def cost(self) -> float:
        return self.graph_cost + self.acoustic_cost

    def log_like_per_frame(self) -> float:
        """What Kaldi's decoders log as "Log-like per frame": -(graph + acoustic cost) / frames."""
        return -self.cost / max(len(self.alignment), 1)


def _arcs_from(states: np.ndarray, grouping: tuple[np.ndarray, np.ndarray]) -> tuple[np.ndarray, np.ndarray]:
    """(for each arc leaving `states`: the position of its state in `states`, the arc's index)."""
    arcs, offsets = grouping
    starts, ends = offsets[states], offsets[states + 1]
    counts = ends - starts
    owner = np.repeat(np.arange(len(states)), counts)
    within = np.arange(counts.sum()) - np.repeat(np.cumsum(counts) - counts, counts)
    return owner, arcs[np.repeat(starts, counts) + within]


def _best_per_state(states: np.ndarray, costs: np.ndarray) -> np.ndarray:
    """Indexes of the cheapest entry for each distinct state (ties: the first)."""
    order = np.lexsort((np.arange(len(costs)), costs, states))
    first = np.ones(len(order), dtype=bool)
    first[1:] = states[order][1:] != states[order][:-1]
    return order[first]


def decode(
    graph: DecodingGraph,
    loglikes: np.ndarray,
    *,
    acoustic_scale: float = 0.1,
    beam: float = 16.0,
    max_active: int | None = None,
) -> Hypothesis:
    """The best path through `graph` for `loglikes` `[frames, pdfs]` (log-likelihoods: a network's log
    posteriors minus log priors, or a chain model's outputs)."""
    fst = graph.fst
    loglikes = np.asarray(loglikes, dtype=np.float64)
    if loglikes.ndim != 2:
        raise DecodeError(f"log-likelihoods must be [frames, pdfs], got shape {loglikes.shape}")
    num_pdfs = int(graph.transition_pdfs[1:].max()) + 1 if len(graph.transition_pdfs) > 1 else 0
    if loglikes.shape[1] < num_pdfs:
        raise DecodeError(f"log-likelihoods of {loglikes.shape[1]} pdfs for a transition model of {num_pdfs}")
    if not np.isfinite(loglikes).all():
        raise DecodeError("the log-likelihoods have values that are not finite")
    if not beam > 0:
        raise DecodeError(f"beam must be positive, got {beam}")
    # per frame: token states, costs, and back-pointers (the previous token: in the previous frame for an
    # emitting arc, in this frame for an epsilon arc; the arc taken, -1 at the start)
    frames: list[tuple[np.ndarray, np.ndarray, np.ndarray, np.ndarray, np.ndarray]] = []
    states, costs = np.array([fst.start]), np.array([0.0])
    back, arcs_taken, same_frame = np.array([-1]), np.array([-1]), np.array([False])
    where = np.full(fst.num_states, -1, dtype=np.int64)  # state -> its token in the frame being closed
    states, costs, back, arcs_taken, same_frame = _epsilon_closure(
        graph, states, costs, back, arcs_taken, same_frame, where
    )
    frames.append((states, costs, back, arcs_taken, same_frame))
    for t in range(len(loglikes)):
        live = np.flatnonzero(costs <= costs.min() + beam)  # Kaldi's cutoff: the beam, then max_active
        if max_active is not None and len(live) > max_active:
            live = live[np.argsort(costs[live], kind="stable")[:max_active]]
        owner, arcs = _arcs_from(states[live], graph.emitting)
        if not len(arcs):
            break  # no emitting arc: the search ends here (partial)
        acoustic = -acoustic_scale * loglikes[t, graph.transition_pdfs[fst.ilabel[arcs]]]
        new_costs = costs[live][owner] + fst.weight[arcs] + acoustic
        keep = _best_per_state(fst.dst[arcs], new_costs)
        states, costs = fst.dst[arcs][keep], new_costs[keep]
        back, arcs_taken, same_frame = live[owner[keep]], arcs[keep], np.zeros(len(keep), dtype=bool)
        states, costs, back, arcs_taken, same_frame = _epsilon_closure(
            graph, states, costs, back, arcs_taken, same_frame, where
        )
        frames.append((states, costs, back, arcs_taken, same_frame))
    final_costs = costs + fst.final[states]
    is_final = np.isfinite(final_costs)
    best = int(np.argmin(np.where(is_final, final_costs, np.inf))) if is_final.any() else int(np.argmin(costs))
    total = float(final_costs[best]) if is_final.any() else float(costs[best])
    words, alignment = [], []
    acoustic_cost = 0.0
    frame, token = len(frames) - 1, best
    while True:
        _, _, back_f, arcs_f, same_f = frames[frame]
        arc = int(arcs_f[token])
        if arc < 0:
            break
        if fst.olabel[arc]:
            words.append(int(fst.olabel[arc]))
        if not same_f[token]:
            tid = int(fst.ilabel[arc])
            alignment.append(tid)
            acoustic_cost += -acoustic_scale * float(loglikes[frame - 1, graph.transition_pdfs[tid]])
            token, frame = int(back_f[token]), frame - 1
        else:
            token = int(back_f[token])
    return Hypothesis(
        tuple(words[::-1]), tuple(alignment[::-1]), total - acoustic_cost, acoustic_cost, bool(is_final.any())
    )


def _epsilon_closure(
    graph: DecodingGraph,
    states: np.ndarray,
    costs: np.ndarray,
    back: np.ndarray,
    arcs_taken: np.ndarray,
    same_frame: np.ndarray,
    where: np.ndarray,
) -> tuple[np.ndarray, np.ndarray, np.ndarray, np.ndarray, np.ndarray]:
    """The frame's tokens with epsilon arcs followed until no token improves (Bellman-Ford over the frame, each
    round vectorised). `where` maps a state to its token (-1: none): all -1 on entry, and again on return."""
    fst = graph.fst
    where[states] = np.arange(len(states))
    frontier = np.arange(len(states))
    for _ in range(fst.num_states + 1):
        owner, arcs = _arcs_from(states[frontier], graph.epsilon)
        if not len(arcs):
            break
        candidate = costs[frontier][owner] + fst.weight[arcs]
        best = _best_per_state(fst.dst[arcs], candidate)
        dst, candidate, source, arcs = fst.dst[arcs][best], candidate[best], frontier[owner[best]], arcs[best]
        fresh = dst[where[dst] < 0]
        if len(fresh):  # states reached for the first time in this frame: tokens of infinite cost, to improve
            where[fresh] = len(states) + np.arange(len(fresh))
            states = np.concatenate([states, fresh])
            costs = np.concatenate([costs, np.full(len(fresh), np.inf)])
            back = np.concatenate([back, np.full(len(fresh), -1)])
            arcs_taken = np.concatenate([arcs_taken, np.full(len(fresh), -1)])
            same_frame = np.concatenate([same_frame, np.ones(len(fresh), dtype=bool)])
        tokens = where[dst]
        better = candidate < costs[tokens]
        frontier = tokens[better]
        costs[frontier], back[frontier], arcs_taken[frontier] = candidate[better], source[better], arcs[better]
        same_frame[frontier] = True
        if not len(frontier):
            break
    else:
        where[states] = -1
        raise DecodeError("the graph has an epsilon cycle of negative weight: no best path within a frame")
    where[states] = -1
    return states, costs, back, arcs_taken, same_frame


#: A transition model of a large recipe is a few MB.
MAX_MODEL_BYTES = 1 << 30


def read_decoding_graph(graph: str | os.PathLike[str], model: str | os.PathLike[str]) -> DecodingGraph:
    """The decoding graph `graph` (an OpenFst VectorFst, Kaldi's HCLG.fst) with the transition model at the
    start of `model` (a Kaldi acoustic model, nnet3 or GMM, or `copy-transition-model`'s output; text or
    binary)."""
    fst = read_fst(os.fspath(graph))
    data = read_file(os.fspath(model), MAX_MODEL_BYTES, error=DecodeError, what="model file")
    try:
        transitions = read_transition_model(make_reader(data, os.fspath(model)))
    except ModelFormatError as e:
        raise DecodeError(f"{model}: no transition model at its start ({e})") from None
    return DecodingGraph.of(fst, transitions.transition_pdfs())
