"""The numerator of a chunk cut from an utterance's, as `nnet3-chain-get-egs` makes each chain eg's supervision.

Kaldi (src/chain/chain-supervision.cc) cuts the utterance's time-synchronous supervision acceptor at the chunk's
output frames `[begin, begin + frames)` (SupervisionSplitter::GetFrameRange): the chunk may start in any state
of frame `begin` and ends by any arc out of its last frame; no other weight is added. It then composes the
chunk with the denominator's normalization FST (`chain-make-den-fst`'s second output: the den graph entered
from a start state whose arcs carry the initial probabilities) and determinizes the result in the tropical
semiring (AddWeightToSupervisionFst): every pdf sequence the chunk allows is kept once, weighted by its *best*
path through the normalization FST (not the sum over paths: its start state has many arcs of one pdf).

`chunk_numerator` computes that acceptor directly, by subset construction over pairs (utterance state,
normalization state) frame by frame, so its forward-backward is Kaldi's numerator of that eg. The normalization
is Kaldi's normalization.fst, or made from a denominator graph as chain-make-den-fst makes it (its initial
probabilities on the arcs out of a new start state; every state final). A chunk whose sequences the
normalization accepts none of has no final state (Kaldi warns and keeps the eg unnormalized; symnet's callers
warn and leave it out).
"""

from __future__ import annotations

import threading
import weakref
from collections import defaultdict
from collections.abc import Callable

import numpy as np

from ..base.errors import ChainError
from ..kaldi_io.fst import Fst
from .graph import ChainGraph

__all__ = ["chunk_numerator", "state_frames"]


def state_frames(graph: ChainGraph) -> np.ndarray:
    """The frame of each state of a time-synchronous acceptor (every arc one frame; initial states at frame 0),
    -1 for states no initial state reaches. ChainError where a state would be at two frames."""
    frame = np.full(graph.num_states, -1, np.int64)
    frontier = np.flatnonzero(graph.log_initial > -np.inf)
    frame[frontier] = 0
    out_arcs = _arcs_out(graph.src, graph.num_states)
    t = 0
    while frontier.size:
        nxt = np.unique(graph.dst[out_arcs(frontier)])
        clash = nxt[(frame[nxt] >= 0) & (frame[nxt] != t + 1)]
        if clash.size:
            raise ChainError(f"numerator state {int(clash[0])} is reached at frames {int(frame[clash[0]])} and {t + 1}")
        fresh = nxt[frame[nxt] < 0]
        frame[fresh] = t + 1
        frontier, t = fresh, t + 1
    return frame


def _arcs_out(src: np.ndarray, num_states: int) -> Callable[[np.ndarray], np.ndarray]:
    """A function giving the arcs whose source (`src`) is any of the given states: one sort of the arcs, then
    each query gathers its states' runs at once."""
    order = np.argsort(src, kind="stable")
    starts = np.searchsorted(src[order], np.arange(num_states + 1))

    def arcs(states: np.ndarray) -> np.ndarray:
        first, counts = starts[states], starts[states + 1] - starts[states]
        within = np.arange(int(counts.sum())) - np.repeat(np.cumsum(counts) - counts, counts)
        return order[np.repeat(first, counts) + within]

    return arcs


def _trimmed(graph: ChainGraph) -> np.ndarray:
    """Which states lie on a path from an initial to a final state."""
    forward = graph.log_initial > -np.inf
    backward = graph.log_final > -np.inf
    for alive, a, b in ((forward, graph.src, graph.dst), (backward, graph.dst, graph.src)):
        while True:
            grown = alive.copy()
            grown[b[alive[a]]] = True
            if (grown == alive).all():
                break
            alive[:] = grown
    return forward & backward


def _utterance_states(utterance: ChainGraph) -> tuple[np.ndarray, np.ndarray]:
    """`state_frames` and `_trimmed` of `utterance`, made once per utterance graph: each of its chunks needs them."""
    with _ARCS_LOCK:
        found = _FRAMES.get(utterance)
    if found is None:
        found = state_frames(utterance), _trimmed(utterance)
        with _ARCS_LOCK:
            _FRAMES[utterance] = found
    return found


def chunk_numerator(utterance: ChainGraph, begin: int, frames: int, normalization: Fst | ChainGraph) -> ChainGraph:
    """The numerator of output frames `[begin, begin + frames)` of `utterance`'s (a whole utterance's numerator,
    such as `phone_numerator`'s or `chain-get-supervision`'s), composed with `normalization` (Kaldi's
    normalization.fst, labels pdf + 1; or the denominator graph it is made from: `read_denominator_graph`,
    `phone_lm_denominator`) and determinized in the tropical semiring, as `nnet3-chain-get-egs` makes an eg's
    supervision (see the module docstring)."""
    frame, alive = _utterance_states(utterance)
    length = int(frame.max()) if utterance.num_states else 0
    if not (0 <= begin and 0 < frames and begin + frames <= length):
        raise ChainError(f"chunk [{begin}, {begin + frames}) is not inside the utterance's {length} output frames")
    end = begin + frames
    final_state = -1  # the chunk's one final state: every arc out of its last frame enters it
    out: dict[int, list[tuple[int, int]]] = defaultdict(list)
    inside = (frame[utterance.src] >= begin) & (frame[utterance.src] < end)
    for a in np.flatnonzero(alive[utterance.src] & alive[utterance.dst] & inside).tolist():
        s, d = int(utterance.src[a]), int(utterance.dst[a])
        out[s].append((int(utterance.pdf[a]), d if frame[d] < end else final_state))
    norm, norm_start, norm_final = _normalization(normalization)
    start = tuple((s, norm_start, 0.0) for s in np.flatnonzero(alive & (frame == begin)).tolist())
    subsets: list[tuple[tuple[int, int, float], ...]] = [start]
    src: list[int] = []
    dst: list[int] = []
    pdf: list[int] = []
    cost: list[float] = []
    frontier = [0]
    frame_arcs = [0]  # the arcs out of frame t are src[frame_arcs[t]:frame_arcs[t + 1]]
    for _ in range(frames):
        index: dict[tuple[tuple[int, int, float], ...], int] = {}
        for here in frontier:
            moves: dict[int, dict[tuple[int, int], float]] = defaultdict(dict)
            for r, n, residual in subsets[here]:
                for p, r_next in out[r]:
                    into = moves[p]
                    for n_next, w in norm.get((n, p), ()):
                        key, c = (r_next, n_next), residual + w
                        if c < into.get(key, np.inf):
                            into[key] = c
            for p, into in moves.items():
                if not into:
                    continue
                least = min(into.values())
                subset = tuple(sorted((r, n, round(c - least, 9)) for (r, n), c in into.items()))
                if subset not in index:
                    index[subset] = len(subsets)
                    subsets.append(subset)
                src.append(here)
                dst.append(index[subset])
                pdf.append(p)
                cost.append(least)
        frontier = list(index.values())
        frame_arcs.append(len(src))
    log_final = np.full(len(subsets), -np.inf)
    for s in frontier:
        log_final[s] = -min(c + norm_final[n] for _, n, c in subsets[s])
    log_initial = np.full(len(subsets), -np.inf)
    log_initial[0] = 0.0
    # Every subset is reached from the start; those with a path to a final one are found frame by frame from the
    # end (a subset's arcs all enter subsets of the next frame).
    src_a, dst_a = np.asarray(src, np.int32), np.asarray(dst, np.int32)
    useful = log_final > -np.inf
    for t in range(frames - 1, -1, -1):
        out_src, out_dst = src_a[frame_arcs[t] : frame_arcs[t + 1]], dst_a[frame_arcs[t] : frame_arcs[t + 1]]
        useful[out_src[useful[out_dst]]] = True
    graph = ChainGraph(
        num_pdfs=utterance.num_pdfs,
        src=src_a,
        dst=dst_a,
        pdf=np.asarray(pdf, np.int32),
        log_prob=-np.asarray(cost, np.float64),
        log_initial=log_initial,
        log_final=log_final,
    )
    return _keep(graph, useful)


Arcs = dict[tuple[int, int], list[tuple[int, float]]]


#: Each normalization's arcs by (state, pdf), made once and kept while the normalization lives: every chunk of a
#: corpus is normalized with the same one.
_ARCS: weakref.WeakKeyDictionary[Fst | ChainGraph, tuple[Arcs, int, np.ndarray]] = weakref.WeakKeyDictionary()
_ARCS_LOCK = threading.Lock()
#: Each utterance graph's `_utterance_states`, kept while the graph lives (its chunks are cut one by one; read
#: only). `_ARCS_LOCK` guards both caches.
_FRAMES: weakref.WeakKeyDictionary[ChainGraph, tuple[np.ndarray, np.ndarray]] = weakref.WeakKeyDictionary()


def _normalization(normalization: Fst | ChainGraph) -> tuple[Arcs, int, np.ndarray]:
    """`_normalization_arcs` of `normalization`, made once per normalization (see `_ARCS`)."""
    with _ARCS_LOCK:
        found = _ARCS.get(normalization)
    if found is None:
        found = _normalization_arcs(normalization)
        with _ARCS_LOCK:
            _ARCS[normalization] = found
    return found


def _normalization_arcs(normalization: Fst | ChainGraph) -> tuple[Arcs, int, np.ndarray]:
    """(arcs by (state, pdf): [(next state, -log weight)], start state, -log final weight per state) of Kaldi's
    normalization FST, or of one made from a denominator graph as DenominatorGraph::GetNormalizationFst makes it
    (a start state, here -1, whose arcs are every arc weighted by its source's initial probability; parallel
    arcs of one pdf into one state merged to the best, as its RmEpsilon does; every state final with weight 1)."""
    arcs: Arcs = defaultdict(list)
    if isinstance(normalization, Fst):
        if (normalization.ilabel == 0).any():
            raise ChainError("the normalization FST has epsilon arcs (chain-make-den-fst's has none)")
        for s, d, label, w in zip(
            normalization.src.tolist(),
            normalization.dst.tolist(),
            normalization.ilabel.tolist(),
            normalization.weight.tolist(),
        ):
            arcs[(s, label - 1)].append((d, w))
        return arcs, normalization.start, np.asarray(normalization.final, np.float64)
    den = normalization
    if not np.isfinite(den.log_initial).any():
        raise ChainError("the denominator graph has no initial probabilities to normalize with")
    cost = -np.asarray(den.log_prob, np.float64)
    entry: dict[tuple[int, int], float] = {}
    for s, d, p, c in zip(den.src.tolist(), den.dst.tolist(), den.pdf.tolist(), cost.tolist()):
        arcs[(s, p)].append((d, c))
        c0 = c - float(den.log_initial[s])
        if c0 < entry.get((p, d), np.inf):
            entry[(p, d)] = c0
    for (p, d), c in entry.items():
        arcs[(-1, p)].append((d, c))
    final = np.zeros(den.num_states + 1)  # index -1: the start, which no path ends in
    final[-1] = np.inf
    return arcs, -1, final


def _keep(graph: ChainGraph, keep: np.ndarray) -> ChainGraph:
    """`graph` with only the states in `keep`; with none, one initial state that is not final (no path)."""
    if not keep.any():
        none = np.zeros(0, np.int32)
        return ChainGraph(graph.num_pdfs, none, none, none, np.zeros(0), np.zeros(1), np.full(1, -np.inf))
    new_id = np.cumsum(keep) - 1
    arcs = keep[graph.src] & keep[graph.dst]
    return ChainGraph(
        num_pdfs=graph.num_pdfs,
        src=new_id[graph.src[arcs]].astype(np.int32),
        dst=new_id[graph.dst[arcs]].astype(np.int32),
        pdf=graph.pdf[arcs],
        log_prob=graph.log_prob[arcs],
        log_initial=graph.log_initial[keep],
        log_final=graph.log_final[keep],
    )
