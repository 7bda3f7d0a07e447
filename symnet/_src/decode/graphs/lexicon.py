"""The lexicon transducer L (phones to words) with disambiguation symbols, as Kaldi's `prepare_lang.sh` makes
`L_disambig.fst`, and the phone and word symbol tables that go with it (`Lang`).

Disambiguation (`add_lex_disambig.pl`): a pronunciation that is a prefix of another, or that several words
share, ends in `#1`, `#2`, ... (numbered per pronunciation), so that L o G can be determinized; one more symbol
ends the optional silence, and `#0` (the grammar's backoff symbol) passes through as `#0:#0` self-loops on the
states that are final or begin words. Optional silence (`make_lexicon_fst.py --sil-prob`): the sentence may
begin with it and every word may be followed by it, with probability `silence_prob`.
Symbol tables, unless given: phones `<eps>`, the silence phones, the others sorted, `#0`..`#n`; words
`<eps>`, the words sorted, `#0`, `<s>`, `</s>` (as prepare_lang.sh numbers them).
"""

from __future__ import annotations

import math
from collections import Counter
from collections.abc import Mapping, Sequence

import attrs

from ...kaldi_io.fst import Fst
from .wfst import GraphBuildError, Wfst

__all__ = ["Lang", "make_lang", "parse_lexicon"]

#: (word, phones, pronunciation probability)
Entry = tuple[str, tuple[str, ...], float]


def parse_lexicon(text: str, name: str = "<lexicon>", *, probabilities: bool = False) -> list[Entry]:
    """Kaldi's `lexicon.txt` (`word phone ...`), or `lexiconp.txt` (`word prob phone ...`) with
    `probabilities` (GraphBuildError naming the line at fault)."""
    entries = []
    for line_no, line in enumerate(text.splitlines(), 1):
        fields = line.split()
        if not fields:
            continue
        prob = 1.0
        if probabilities:
            try:
                prob = float(fields[1]) if len(fields) > 1 else math.nan
            except ValueError:
                prob = math.nan
            if not 0.0 < prob <= 1.0:
                raise GraphBuildError(f"{name}:{line_no}: the pronunciation probability must be in (0, 1]")
            fields = fields[:1] + fields[2:]
        entries.append((fields[0], tuple(fields[1:]), prob))
    if not entries:
        raise GraphBuildError(f"{name}: the lexicon is empty")
    return entries


@attrs.frozen(eq=False)
class Lang:
    """A lexicon FST with disambiguation symbols (`lexicon_fst`: phone ids in, word ids out), its symbol tables,
    the phone ids of the disambiguation symbols and the words the lexicon pronounces."""

    phones: Mapping[str, int]
    words: Mapping[str, int]
    lexicon_fst: Fst
    disambig_phones: tuple[int, ...]
    pronounced: frozenset[int]


def _disambiguated(entries: Sequence[Entry]) -> tuple[list[tuple[str, tuple[str, ...], float]], int]:
    """Each pronunciation with its disambiguation symbol appended where needed, and the highest one used."""
    count = Counter(phones for _, phones, _ in entries)
    prefixes = {phones[:n] for _, phones, _ in entries for n in range(len(phones))}
    last_used: dict[tuple[str, ...], int] = {}
    reserved: set[int] = set()
    highest = 0
    out = []
    for word, phones, prob in entries:
        if phones in prefixes or count[phones] > 1:
            if not phones:
                highest += 1
                reserved.add(highest)
                symbol = highest
            else:
                symbol = last_used.get(phones, 0) + 1
                while symbol in reserved:
                    symbol += 1
                last_used[phones] = symbol
                highest = max(highest, symbol)
            phones = (*phones, f"#{symbol}")
        out.append((word, phones, prob))
    return out, highest


def make_lang(
    lexicon: Sequence[Entry],
    *,
    silence_phones: Sequence[str] = (),
    optional_silence: str | None = None,
    silence_prob: float = 0.5,
    phones: Mapping[str, int] | None = None,
    words: Mapping[str, int] | None = None,
) -> Lang:
    """L_disambig for `lexicon` (`parse_lexicon`'s entries), with `optional_silence` (a phone) allowed at the
    start and after each word with probability `silence_prob` (none if None). `phones` may leave out the
    disambiguation symbols: they are numbered after its highest id."""
    if optional_silence is not None and not 0.0 < silence_prob < 1.0:
        raise GraphBuildError(f"silence_prob must be strictly between 0 and 1, got {silence_prob}")
    entries, highest = _disambiguated(lexicon)
    sil_disambig = f"#{highest + 1}" if optional_silence is not None else None
    disambig = [f"#{k}" for k in range(highest + 1 + (optional_silence is not None))]
    if phones is None:
        used = {p for _, pron, _ in lexicon for p in pron} | ({optional_silence} if optional_silence else set())
        phones = {p: n for n, p in enumerate(["<eps>", *silence_phones, *sorted(used - set(silence_phones))])}
    missing = [d for d in disambig if d not in phones]  # numbered after the given phones
    phones = {**phones, **{d: max(phones.values()) + 1 + n for n, d in enumerate(missing)}}
    if words is None:
        ordered = ["<eps>", *sorted({w for w, _, _ in lexicon}), "#0", "<s>", "</s>"]
        words = {w: n for n, w in enumerate(ordered)}

    def phone(p: str, where: str) -> int:
        if p not in phones:
            raise GraphBuildError(f"{where}: phone {p!r} is not in the phone symbol table")
        return phones[p]

    def word(w: str) -> int:
        if w not in words:
            raise GraphBuildError(f"lexicon word {w!r} is not in the word symbol table")
        return words[w]

    fst = Wfst()
    if optional_silence is None:
        loop = start = fst.add_state(0.0)
        sil_state, no_sil, sil = None, 0.0, 0.0
    else:
        start, loop, sil_state = fst.add_state(), fst.add_state(0.0), fst.add_state()
        no_sil, sil = -math.log(1.0 - silence_prob), -math.log(silence_prob)
        fst.add_arc(start, 0, 0, no_sil, loop)
        fst.add_arc(start, 0, 0, sil, sil_state)
        after_sil = fst.add_state()
        fst.add_arc(sil_state, phone(optional_silence, "optional silence"), 0, 0.0, after_sil)
        fst.add_arc(after_sil, phone(str(sil_disambig), "silence disambiguation"), 0, 0.0, loop)
    for w, pron, prob in entries:
        where, cost, state, label = f"lexicon word {w!r}", -math.log(prob), loop, word(w)
        for p in pron[:-1]:
            nxt = fst.add_state()
            fst.add_arc(state, phone(p, where), label, cost, nxt)
            state, label, cost = nxt, 0, 0.0
        last = phone(pron[-1], where) if pron else 0
        fst.add_arc(state, last, label, cost + no_sil, loop)
        if sil_state is not None:
            fst.add_arc(state, last, label, cost + sil, sil_state)
    hash0_phone, hash0_word = phone("#0", "disambiguation"), word("#0")
    for s in range(fst.num_states):
        if fst.final[s] < math.inf or any(o for _, o, _, _ in fst.arcs[s]):
            fst.add_arc(s, hash0_phone, hash0_word, 0.0, s)
    fst.start = start
    return Lang(
        phones, words, fst.to_fst(), tuple(phone(d, "disambiguation") for d in disambig),
        frozenset(word(w) for w, _, _ in lexicon),
    )  # fmt: skip
