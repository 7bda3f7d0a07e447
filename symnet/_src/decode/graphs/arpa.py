"""Backoff n-gram language models: estimated from sentences (Witten-Bell), written and read as ARPA text.

Estimation is interpolated Witten-Bell, stored in backoff form (as SRILM's `-wbdiscount -interpolate`): for a
history h seen c(h) times followed by T(h) distinct words, a word seen after h has
p(w|h) = (c(h,w) + T(h) p(w|h')) / (c(h) + T(h)), with h' the history less its oldest word, and any other word
bow(h) p(w|h'), bow(h) = T(h) / (c(h) + T(h)). Unigrams interpolate with the uniform distribution over the
vocabulary (given, or the training words) and `</s>`. Sentences are padded with `<s>` and `</s>`.
"""

from __future__ import annotations

import math
from collections import Counter
from collections.abc import Iterable, Sequence

import attrs

from .wfst import GraphBuildError

__all__ = ["ArpaLm", "estimate_arpa", "parse_arpa"]

BOS, EOS = "<s>", "</s>"
#: ARPA's log10 probability of `<s>`, which is never predicted.
NEVER = -99.0


@attrs.frozen
class ArpaLm:
    """An ARPA backoff LM: `ngrams[n - 1]` maps each listed n-gram (a tuple of words) to its log10 probability
    and log10 backoff weight (0.0 where the file gives none)."""

    ngrams: tuple[dict[tuple[str, ...], tuple[float, float]], ...]

    @property
    def order(self) -> int:
        return len(self.ngrams)

    def to_text(self) -> str:
        """The model as ARPA text (probabilities to 7 significant digits)."""
        lines = ["", "\\data\\"]
        lines += [f"ngram {n + 1}={len(table)}" for n, table in enumerate(self.ngrams)]
        for n, table in enumerate(self.ngrams):
            lines += ["", f"\\{n + 1}-grams:"]
            for words, (prob, bow) in sorted(table.items()):
                fields = [f"{prob:.7g}", " ".join(words)] + ([f"{bow:.7g}"] if n + 1 < self.order else [])
                lines.append("\t".join(fields))
        return "\n".join(lines + ["", "\\end\\", ""])


def estimate_arpa(
    sentences: Iterable[Sequence[str]], *, order: int = 2, vocabulary: Iterable[str] | None = None
) -> ArpaLm:
    """A Witten-Bell backoff LM of `order` (1 to 5) from tokenised `sentences`."""
    if not 1 <= order <= 5:
        raise GraphBuildError(f"n-gram order {order} is not 1 to 5")
    counts: list[Counter[tuple[str, ...]]] = [Counter() for _ in range(order)]
    for sentence in sentences:
        for word in sentence:
            if word in (BOS, EOS):
                raise GraphBuildError(f"a training sentence has {word!r} in it: sentences are padded here")
        padded = (BOS, *sentence, EOS)
        for n in range(1, order + 1):
            for end in range(max(1, n - 1), len(padded)):  # every n-gram ending in a predicted word
                counts[n - 1][padded[end - n + 1 : end + 1]] += 1
    vocab = {w for (w,) in counts[0]} | set(vocabulary or ()) | {EOS}
    if vocab == {EOS}:
        raise GraphBuildError("no training sentences: nothing to estimate an LM from")
    followers: list[Counter[tuple[str, ...]]] = [Counter() for _ in range(order)]
    totals: list[Counter[tuple[str, ...]]] = [Counter() for _ in range(order)]
    for n, table in enumerate(counts):
        for gram, c in table.items():
            followers[n][gram[:-1]] += 1
            totals[n][gram[:-1]] += c

    def prob(history: tuple[str, ...], word: str) -> float:
        n = len(history)
        lower = prob(history[1:], word) if n else 1.0 / len(vocab)
        c, t = totals[n][history], followers[n][history]
        return (counts[n][(*history, word)] + t * lower) / (c + t) if c else lower

    def bow(history: tuple[str, ...]) -> float:
        n = len(history)
        if n >= order or not totals[n][history]:
            return 0.0
        c, t = totals[n][history], followers[n][history]
        return math.log10(t / (c + t))

    tables: list[dict[tuple[str, ...], tuple[float, float]]] = []
    for n in range(order):
        grams = set(counts[n]) | ({(w,) for w in vocab} if n == 0 else set())
        tables.append({g: (math.log10(prob(g[:-1], g[-1])), bow(g)) for g in grams})
    tables[0][(BOS,)] = (NEVER, bow((BOS,)))
    return ArpaLm(tuple(tables))


def parse_arpa(text: str, name: str = "<arpa>") -> ArpaLm:
    """Read ARPA text (`GraphBuildError` naming the line at fault)."""
    sizes: list[int] = []
    tables: list[dict[tuple[str, ...], tuple[float, float]]] = []
    section = "start"
    for line_no, line in enumerate(text.splitlines(), 1):
        line = line.strip()
        where = f"{name}:{line_no}"
        if not line:
            continue
        if line == "\\data\\":
            section = "data"
        elif line == "\\end\\":
            section = "end"
            break
        elif line.startswith("\\") and line.endswith("-grams:"):
            which = line[1:-7]
            if not which.isdigit() or int(which) != len(tables) + 1 or int(which) > len(sizes):
                raise GraphBuildError(f"{where}: unexpected section {line!r}")
            tables.append({})
            section = "grams"
        elif section == "data" and line.startswith("ngram "):
            which, _, count = line[6:].partition("=")
            if not (which.strip().isdigit() and count.strip().isdigit() and int(which) == len(sizes) + 1):
                raise GraphBuildError(f"{where}: bad count line {line!r}")
            sizes.append(int(count))
        elif section == "grams":
            n = len(tables)
            fields = line.split()
            if len(fields) not in (n + 1, n + 2):
                raise GraphBuildError(f"{where}: a {n}-gram line needs {n + 1} or {n + 2} fields: {line!r}")
            try:
                values = [float(fields[0])] + ([float(fields[-1])] if len(fields) == n + 2 else [0.0])
            except ValueError:
                raise GraphBuildError(f"{where}: not a number in {line!r}") from None
            tables[-1][tuple(fields[1 : n + 1])] = (values[0], values[1])
        elif section != "start":
            raise GraphBuildError(f"{where}: unexpected line {line!r}")
    if section != "end":
        raise GraphBuildError(f"{name}: no \\end\\ line: truncated ARPA file?")
    if len(tables) != len(sizes) or not tables:
        raise GraphBuildError(f"{name}: the header counts {len(sizes)} orders, the file has {len(tables)}")
    for order, (size, table) in enumerate(zip(sizes, tables), 1):
        if size != len(table):
            raise GraphBuildError(f"{name}: the header says {size} {order}-grams, the file has {len(table)}")
    return ArpaLm(tuple(tables))
