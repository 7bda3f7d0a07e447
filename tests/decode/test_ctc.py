"""The CTC token graph accepts every frame sequence and writes exactly its collapsed token sequence; TLG writes
exactly the words whose spellings make that sequence (brute force over all short frame sequences); and the
decoder finds the words on it."""

from __future__ import annotations

import itertools

import numpy as np

from symnet._src.decode.graphs.wfst import Wfst
from symnet.decode import (
    DecodingGraph,
    ctc_token_graph,
    ctc_transition_pdfs,
    decode,
    make_lang,
    make_tlg,
    parse_lexicon,
    word_loop,
)  # fmt: skip

from .fst_brute import relation


def collapse(frames: tuple[int, ...]) -> tuple[int, ...]:
    """CTC's rule: merge repeats, drop blanks (output 0)."""
    return tuple(k for n, k in enumerate(frames) if k and (n == 0 or frames[n - 1] != k))


def test_token_graph_writes_the_collapsed_sequence() -> None:
    outputs = 3
    rel = relation(Wfst.of(ctc_token_graph(outputs)), 5, 5, "tropical")
    for n in range(6):
        for frames in itertools.product(range(outputs), repeat=n):
            labels = tuple(k + 1 for k in frames)
            written = {y: w for (x, y), w in rel.items() if x == labels}
            assert written == {collapse(frames): 0.0}, frames


def test_tlg_writes_the_words_that_spell_it() -> None:
    # tokens a=1, b=2 (blank 0); words: "ab" = a b, "b" = b, "ba" = b a
    phones = {"<eps>": 0, "a": 1, "b": 2, "#0": 3, "#1": 4}
    lexicon = parse_lexicon("ab a b\nb b\nba b a\n")
    lang = make_lang(lexicon, phones=phones)
    g = word_loop(lang.words, ["ab", "b", "ba"], max_length=2)
    tlg = make_tlg(lang, g, 3)
    spelled = {name: pron for name, pron, _ in lexicon}
    ids = {i: w for w, i in lang.words.items()}
    rel = relation(Wfst.of(tlg), 6, 6, "tropical")
    for n in range(7):
        for frames in itertools.product(range(3), repeat=n):
            tokens = collapse(frames)
            labels = tuple(k + 1 for k in frames)
            got = {tuple(ids[w] for w in y) for (x, y) in rel if x == labels}
            want = {
                words for m in range(3) for words in itertools.product(spelled, repeat=m)
                if tuple(phones[p] for w in words for p in spelled[w]) == tokens
            }  # fmt: skip
            assert got == want, (frames, got, want)
    posteriors = np.full((6, 3), 0.05)
    posteriors[[0, 1, 3, 5], [2, 0, 1, 0]] = 0.9  # b, blank, (mixed), a, ..., blank: "b a" -> "ba"
    posteriors[2, 1] = posteriors[4, 0] = 0.9
    best = decode(DecodingGraph.of(tlg, ctc_transition_pdfs(3)), np.log(posteriors), acoustic_scale=1.0)
    assert [ids[w] for w in best.words] == ["ba"]
