"""The decoder against Kaldi's (`latgen-faster-mapped` on a digit-loop HCLG that Kaldi's own tools built,
tests/data/kaldi-decode/make.py): the same words, the same transition-ids per frame and the same log-likelihood
per frame; and against a brute-force search over every path of small random graphs with epsilon arcs."""

from __future__ import annotations

import itertools
from pathlib import Path

import numpy as np
import pytest

from symnet._src.kaldi_io.fst import Fst
from symnet._src.kaldi_io.tables import read_table
from symnet.decode import DecodeError, DecodingGraph, decode, read_decoding_graph

DATA = Path(__file__).resolve().parent.parent / "data" / "kaldi-decode"


def table(name: str) -> dict[str, list[str]]:
    return {line.split()[0]: line.split()[1:] for line in (DATA / name).read_text().splitlines()}


@pytest.mark.parametrize("scale", ["0.1", "1.0"])
def test_best_paths_are_kaldis(scale: str) -> None:
    graph = read_decoding_graph(DATA / "HCLG.fst", DATA / "trans.mdl")
    loglikes = read_table(f"ark:{DATA / 'loglikes.ark'}")
    words, alignments, likes = table(f"words-{scale}.txt"), table(f"ali-{scale}.txt"), table(f"loglike-{scale}.txt")
    assert len(loglikes) == len(words) == 5
    reached_words = False
    for key, scores in loglikes.items():
        best = decode(graph, scores, acoustic_scale=float(scale), beam=40.0)
        assert list(best.words) == [int(w) for w in words[key]], key
        assert list(best.alignment) == [int(t) for t in alignments[key]], key
        kaldi = float(likes[key][0])  # printed to 6 significant digits
        assert best.log_like_per_frame() == pytest.approx(kaldi, rel=2e-6, abs=2e-6), key
        reached_words |= bool(best.words)
    assert reached_words


def brute_force(fst: Fst, pdfs: np.ndarray, loglikes: np.ndarray, scale: float) -> float:
    """The cheapest cost of any path taking exactly one emitting arc per frame (epsilons anywhere), final weight
    included; depth-first over all paths."""
    best = np.inf
    frames = len(loglikes)

    def walk(state: int, t: int, cost: float, eps_run: int) -> None:
        nonlocal best
        if t == frames and np.isfinite(fst.final[state]):
            best = min(best, cost + fst.final[state])
        for a in np.flatnonzero(fst.src == state):
            if fst.ilabel[a] == 0 and eps_run < fst.num_states:
                walk(int(fst.dst[a]), t, cost + fst.weight[a], eps_run + 1)
            elif fst.ilabel[a] and t < frames:
                acoustic = -scale * loglikes[t, pdfs[fst.ilabel[a]]]
                walk(int(fst.dst[a]), t + 1, cost + fst.weight[a] + acoustic, 0)

    walk(fst.start, 0, 0.0, 0)
    return best


def random_graph(rng: np.random.Generator, states: int, arcs: int, tids: int) -> Fst:
    src = rng.integers(0, states, arcs)
    dst = rng.integers(0, states, arcs)
    ilabel = np.where(rng.random(arcs) < 0.25, 0, rng.integers(1, tids + 1, arcs))
    keep = ~((ilabel == 0) & (src == dst))  # no epsilon self-loops
    final = np.where(rng.random(states) < 0.5, rng.random(states), np.inf)
    final[rng.integers(states)] = 0.5
    weight = rng.random(arcs) * 2
    return Fst(
        start=0, final=final, src=src[keep], dst=dst[keep], ilabel=ilabel[keep],
        olabel=rng.integers(0, 4, arcs)[keep], weight=weight[keep],
    )  # fmt: skip


def test_the_best_path_is_the_cheapest_of_all_paths() -> None:
    rng = np.random.default_rng(0)
    checked = 0
    for trial, frames in itertools.product(range(12), (1, 2, 3)):
        fst = random_graph(rng, states=5, arcs=12, tids=4)
        pdfs = np.array([-1, 0, 1, 2, 1])
        loglikes = rng.standard_normal((frames, 3))
        expected = brute_force(fst, pdfs, loglikes, 0.5)
        if not np.isfinite(expected):
            continue
        best = decode(DecodingGraph.of(fst, pdfs), loglikes, acoustic_scale=0.5, beam=1e9)
        assert best.final
        assert best.cost == pytest.approx(expected, abs=1e-9), (trial, frames)
        assert len(best.alignment) == frames
        checked += 1
    assert checked >= 15


def test_bad_inputs_are_named() -> None:
    graph = read_decoding_graph(DATA / "HCLG.fst", DATA / "trans.mdl")
    with pytest.raises(DecodeError, match="pdfs"):
        decode(graph, np.zeros((3, 5)))
    with pytest.raises(DecodeError, match="not finite"):
        decode(graph, np.full((3, 80), np.nan))
    with pytest.raises(DecodeError, match="transition-id"):
        DecodingGraph.of(graph.fst, graph.transition_pdfs[:10])
    with pytest.raises(DecodeError, match="no transition model"):
        read_decoding_graph(DATA / "HCLG.fst", DATA / "words.txt")
