"""Grammars as acceptors over word ids (G): a word loop, and an ARPA n-gram LM as Kaldi's `arpa2fst` makes it.

`word_loop`: any string of the given words, each costing ln(number of words), optionally at least
`min_length` and at most `max_length` words. `arpa_to_fst`: one state per n-gram history the LM continues
(`<s>` the start state, the empty history the unigram state); each listed n-gram (h, w) an arc from h's state
to the state of the longest suffix of (h, w) that is a history, `</s>` a final weight, and from each history
an arc to its shorter history weighted by its backoff and labelled with the disambiguation symbol `#0` on the
input side, epsilon on the output (`arpa2fst --disambig-symbol=#0`). Weights are -ln probabilities (ARPA's
log10 times -ln 10).
"""

from __future__ import annotations

import math
from collections.abc import Mapping, Sequence

from ...kaldi_io.fst import Fst
from .arpa import BOS, EOS, ArpaLm
from .wfst import GraphBuildError, Wfst

__all__ = ["arpa_to_fst", "word_id", "word_loop"]

LN10 = math.log(10.0)


def word_id(words: Mapping[str, int], word: str, where: str) -> int:
    """`word`'s id in the symbol table `words` (GraphBuildError naming `where` if it has none)."""
    if word not in words:
        raise GraphBuildError(f"{where}: word {word!r} is not in the word symbol table")
    return words[word]


def word_loop(
    words: Mapping[str, int], vocabulary: Sequence[str], *, min_length: int = 0, max_length: int | None = None
) -> Fst:
    """An acceptor of strings of `vocabulary` (ids from `words`), `min_length` to `max_length` (None: any
    number) words long, each word costing ln(len(vocabulary))."""
    ids = [word_id(words, w, "word_loop") for w in vocabulary]
    if not ids or min_length < 0 or (max_length is not None and max_length < max(min_length, 1)):
        raise GraphBuildError(f"word_loop: no strings of {len(ids)} words, {min_length} to {max_length} long")
    cost = math.log(len(ids))
    g = Wfst()
    last = max_length if max_length is not None else min_length
    for n in range(last + 1):
        g.add_state(0.0 if n >= min_length else math.inf)
    for n in range(last + 1):
        dst = n + 1 if n < last else (n if max_length is None else None)
        if dst is not None:
            for i in ids:
                g.add_arc(n, i, i, cost, dst)
    return g.to_fst()


def arpa_to_fst(lm: ArpaLm, words: Mapping[str, int], *, disambig: str = "#0") -> Fst:
    """G for `lm`, word ids from `words`, backoff arcs reading `disambig` (GraphBuildError naming an n-gram
    whose word is not in `words`, or whose history is not listed)."""
    backoff_label = word_id(words, disambig, "the backoff symbol")
    histories = {gram[:-1] for table in lm.ngrams for gram in table}  # every history something follows
    if (BOS,) not in histories:
        raise GraphBuildError("the ARPA LM has no n-gram after <s>: no start state")
    g = Wfst()
    state = {h: g.add_state() for h in sorted(histories, key=lambda h: (len(h), h))}
    g.start = state[(BOS,)]

    def bow(h: tuple[str, ...]) -> float:
        return lm.ngrams[len(h) - 1].get(h, (0.0, 0.0))[1] if h else 0.0

    def landing(h: tuple[str, ...]) -> tuple[float, int]:
        """(the backoff weights paid, the state) of the longest suffix of `h` that is a history."""
        cost = 0.0
        while h not in state:
            cost, h = cost - bow(h) * LN10, h[1:]
        return cost, state[h]

    for n, table in enumerate(lm.ngrams, 1):
        for gram, (prob, _) in sorted(table.items()):
            where = f"{n}-gram {' '.join(gram)!r}"
            history, word = gram[:-1], gram[-1]
            if BOS in gram[1:] or EOS in gram[:-1]:
                raise GraphBuildError(f"{where}: <s> only begins and </s> only ends an n-gram")
            if word == BOS:
                continue
            if history and history not in lm.ngrams[n - 2]:
                raise GraphBuildError(f"{where}: its history is not listed as an n-gram")
            if word == EOS:
                g.final[state[history]] = -prob * LN10
                continue
            label = word_id(words, word, where)
            extra, dst = landing(gram[1:] if n == lm.order else gram)
            g.add_arc(state[history], label, label, -prob * LN10 + extra, dst)
    for h, s in state.items():
        if h:
            extra, dst = landing(h[1:])
            g.add_arc(s, backoff_label, 0, -bow(h) * LN10 + extra, dst)
    return g.to_fst()
