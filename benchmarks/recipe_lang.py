"""The recipe's lexicon as a lang, shared by its three decoding graphs (digits_recipe.py, digits_chain.py,
digits_ctc.py): every pronunciation of each word (probability 1, as Kaldi's lexicon.txt), optional silence ("pau",
probability 0.5) at the start and after each word, and phone ids 1, 2, ... in the corpus's order, so that a phone's
pdfs (or CTC output) follow its id."""

from __future__ import annotations

from collections.abc import Mapping, Sequence
from typing import Any


def recipe_lang(lexicon: Mapping[str, Sequence[Sequence[str]]], words: Sequence[str], phones: Sequence[str]) -> Any:
    """`make_lang` of `words`' pronunciations over `phones` (phone k of the corpus: id k + 1)."""
    from symnet.decode import make_lang

    ids = {p: n + 1 for n, p in enumerate(phones)}
    entries = [(w, tuple(pron), 1.0) for w in words for pron in lexicon[w]]
    return make_lang(entries, optional_silence="pau", phones={"<eps>": 0, **ids})
