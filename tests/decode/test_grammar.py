"""Grammars: the word loop's strings, ARPA text round trips, and G's weights against the ARPA's probabilities by
hand-written backoff lookup and against Kaldi's `arpa2fst` (tests/data/kaldi-graph/, made by its make.py)."""

from __future__ import annotations

import itertools
import math
from pathlib import Path

import numpy as np
import pytest

from symnet._src.decode.graphs.wfst import Wfst
from symnet.chain import Fst, parse_fst_text
from symnet.decode import ArpaLm, GraphBuildError, arpa_to_fst, estimate_arpa, parse_arpa, word_loop

from .fst_brute import relation, same_relation

DATA = Path(__file__).resolve().parent.parent / "data" / "kaldi-graph"
WORDS = {w: int(i) for w, i in (line.split() for line in (DATA / "words.txt").read_text().splitlines())}
VOCAB = ["four", "oh", "one", "three", "two", "zero"]


def lm_cost(lm: ArpaLm, sentence: tuple[str, ...]) -> float:
    """-ln P(sentence) by the ARPA backoff rule: the longest listed n-gram, backoff weights of the histories
    left behind."""
    words, total = ["<s>", *sentence, "</s>"], 0.0
    for k in range(1, len(words)):
        history, word = tuple(words[max(0, k - lm.order + 1) : k]), words[k]
        while history + (word,) not in lm.ngrams[len(history)]:
            total += lm.ngrams[len(history) - 1].get(history, (0.0, 0.0))[1]
            history = history[1:]
        total += lm.ngrams[len(history)][history + (word,)][0]
    return -total * math.log(10)


def backoff_path_cost(g: Fst, sentence: tuple[str, ...]) -> float:
    """The weight of G's path that takes a word's arc where there is one and the backoff arc otherwise."""
    state, cost = g.start, 0.0
    for label in [WORDS[w] for w in sentence] + [None]:
        while True:
            arcs = np.flatnonzero(g.src == state)
            if label is None and np.isfinite(g.final[state]):
                return cost + float(g.final[state])
            match = arcs[g.ilabel[arcs] == label] if label is not None else arcs[:0]
            if len(match):
                state, cost = int(g.dst[match[0]]), cost + float(g.weight[match[0]])
                break
            back = arcs[g.ilabel[arcs] == WORDS["#0"]]
            state, cost = int(g.dst[back[0]]), cost + float(g.weight[back[0]])
    raise AssertionError


def sentences(up_to: int) -> list[tuple[str, ...]]:
    return [s for n in range(up_to + 1) for s in itertools.product(VOCAB, repeat=n)]


def as_epsilon_free_of_backoff(g: Fst) -> Wfst:
    return Wfst.of(g).map_labels(ilabels={WORDS["#0"]: 0})


def test_g_weights_are_the_arpa_probabilities_and_kaldis() -> None:
    lm = parse_arpa((DATA / "lm.arpa").read_text(), "lm.arpa")
    g = arpa_to_fst(lm, WORDS)
    kaldi = parse_fst_text((DATA / "G.txt").read_text())
    for s in sentences(3):
        expected = lm_cost(lm, s)
        assert backoff_path_cost(g, s) == pytest.approx(expected, abs=1e-4)
        assert backoff_path_cost(kaldi, s) == pytest.approx(expected, abs=1e-4)
    assert (g.num_states, g.num_arcs) == (kaldi.num_states, kaldi.num_arcs)  # 24 states, 78 lines less finals
    # every path, backoff ones included: the same weighted language as Kaldi's G (best path per sentence)
    ours, theirs = (relation(as_epsilon_free_of_backoff(f), 3, 3, "tropical") for f in (g, kaldi))
    same_relation(ours, theirs, tol=1e-4)


def test_estimation_sums_to_one_and_round_trips() -> None:
    sents = [s.split() for s in ["a b c", "b b", "c a", "a", "b c a b"]]
    for order in (1, 2, 3):
        lm = estimate_arpa(sents, order=order, vocabulary=["d"])
        again = parse_arpa(lm.to_text())
        assert again.ngrams[-1].keys() == lm.ngrams[-1].keys()
        for history in [(), ("a",), ("<s>", "b"), ("b", "c")][: order + 1]:
            history = history[len(history) - min(len(history), order - 1) :]
            total = sum(math.exp(-lm_cost_next(again, history, w)) for w in ["a", "b", "c", "d", "</s>"])
            assert total == pytest.approx(1.0, abs=1e-5)


def lm_cost_next(lm: ArpaLm, history: tuple[str, ...], word: str) -> float:
    cost = 0.0
    while history + (word,) not in lm.ngrams[len(history)]:
        cost += lm.ngrams[len(history) - 1].get(history, (0.0, 0.0))[1]
        history = history[1:]
    return -(cost + lm.ngrams[len(history)][history + (word,)][0]) * math.log(10)


def test_word_loop_lengths() -> None:
    words = {"<eps>": 0, "a": 1, "b": 2}
    for low, high in [(0, None), (1, None), (2, 3), (0, 1)]:
        g = Wfst.of(word_loop(words, ["a", "b"], min_length=low, max_length=high))
        rel = relation(g, 5, 5, "tropical")
        lengths = {len(x) for x, _ in rel}
        assert lengths == set(range(low, (high if high is not None else 5) + 1))
        assert all(w == pytest.approx(len(x) * math.log(2)) for (x, _), w in rel.items())


def test_bad_input_is_named() -> None:
    with pytest.raises(GraphBuildError, match="'seven' is not in the word symbol table"):
        arpa_to_fst(estimate_arpa([["seven"]]), WORDS)
    with pytest.raises(GraphBuildError, match="lm.arpa:3: bad count line"):
        parse_arpa("\\data\\\nngram 1=2\nngram x=3\n", "lm.arpa")
    with pytest.raises(GraphBuildError, match="no \\\\end"):
        parse_arpa("\\data\\\nngram 1=1\n\\1-grams:\n-1 a\n")
    with pytest.raises(GraphBuildError, match="word_loop: no strings"):
        word_loop(WORDS, ["one"], min_length=3, max_length=2)
