"""The text form of Kaldi's `<Topology>`, read token by token as HmmTopology::Read reads it (linear time, no
regular expression over the text), and checked as HmmTopology::Check checks it.

Bounded by what the file describes: an entry's pdf-classes are 0, 1, ... with none skipped (Kaldi's rule, so
at most two an emitting state), and the phones' HMM states in all at most `MAX_HMM_STATES`. Errors are
`ChainError`s naming the file, the line, the entry and the value at fault.
"""

from __future__ import annotations

import re

from ..base.errors import ChainError

__all__ = ["MAX_HMM_STATES", "State", "parse_topology"]

#: The most emitting HMM states of all phones together (an entry counts once per phone it is for): real
#: topologies have a few thousand; each is a pdf-class and a piece of every graph built from the topology.
MAX_HMM_STATES = 1 << 20

#: An emitting state as read: forward pdf-class, self-loop pdf-class, transitions (destination, probability).
State = tuple[int, int, tuple[tuple[int, float], ...]]

_WORD = re.compile(r"\S+")
_INT = re.compile(r"[+-]?[0-9]{1,10}", re.ASCII)
_REAL_CHARS = frozenset("0123456789+-.eE")


def _shown(word: str) -> str:
    return repr(word) if len(word) <= 40 else repr(word[:40]) + "..."


class _Tokens:
    """The words of the text, one at a time, with the place of the last one for errors."""

    def __init__(self, text: str, name: str):
        self.text, self.name = text, name
        self._words = _WORD.finditer(text)
        self.pos = 0

    def next(self, what: str) -> str:
        found = next(self._words, None)
        if found is None:
            self.pos = len(self.text)
            raise self.error(f"the text ends where {what} should be")
        self.pos = found.start()
        return found.group()

    def at_end(self) -> bool:
        return next(self._words, None) is None

    def error(self, message: str, at: int | None = None) -> ChainError:
        line = self.text.count("\n", 0, self.pos if at is None else at) + 1
        return ChainError(f"{self.name}:{line}: {message}")

    def integer(self, what: str) -> int:
        word = self.next(what)
        if not _INT.fullmatch(word) or not -(2**31) <= int(word) < 2**31:
            raise self.error(f"bad {what} value {_shown(word)} (an int32)")
        return int(word)

    def real(self, what: str) -> float:
        word = self.next(what)
        try:
            if len(word) > 40 or not set(word) <= _REAL_CHARS:
                raise ValueError
            return float(word)
        except ValueError:
            raise self.error(f"bad {what} value {_shown(word)}") from None


def parse_topology(text: str, name: str) -> list[tuple[list[int], tuple[State, ...]]]:
    """The entries of a `<Topology>` in text form: each one's phones and emitting states."""
    t = _Tokens(text, name)
    if t.next("<Topology>") != "<Topology>":
        raise ChainError(f"{name}: a topology is '<Topology> ... </Topology>' in text form")
    entries: list[tuple[list[int], tuple[State, ...]]] = []
    seen: set[int] = set()
    total = 0
    entry = 0
    while (word := t.next("<TopologyEntry> or </Topology>")) != "</Topology>":
        if word != "<TopologyEntry>":
            raise t.error(f"expected <TopologyEntry> or </Topology>, got {_shown(word)}")
        where = f"TopologyEntry {entry}"
        ids, at = _phones(t, where)
        states = _states(t, where)
        total += len(ids) * len(states)
        if total > MAX_HMM_STATES:
            raise t.error(
                f"{where}: {len(ids)} phones of {len(states)} emitting states bring the HMM states to {total}, "
                f"more than the {MAX_HMM_STATES} symnet builds",
                at,
            )
        for p in ids:
            if p in seen:
                raise t.error(f"{where}: phone {p} is listed twice", at)
            seen.add(p)
        entries.append((ids, states))
        entry += 1
    if not entries:
        raise ChainError(f"{name}: no <TopologyEntry>")
    if not t.at_end():
        raise ChainError(f"{name}: a topology is '<Topology> ... </Topology>' in text form (text after it)")
    return entries


def _phones(t: _Tokens, where: str) -> tuple[list[int], int]:
    """The phone ids of `<ForPhones> ... </ForPhones>`, and where the list starts."""
    if t.next("<ForPhones>") != "<ForPhones>":
        raise t.error(f"{where}: no <ForPhones> list")
    at = t.pos
    ids: list[int] = []
    while (word := t.next("a phone or </ForPhones>")) != "</ForPhones>":
        if not _INT.fullmatch(word) or not 1 <= int(word) < 2**31:
            raise t.error(f"{where}: <ForPhones> must list integers >= 1, got {_shown(word)}")
        ids.append(int(word))
    if not ids:
        raise t.error(f"{where}: no <ForPhones> list", at)
    return ids, at


def _states(t: _Tokens, where: str) -> tuple[State, ...]:
    """The states of an entry up to `</TopologyEntry>`, checked; the emitting ones (all but the last)."""
    read: list[tuple[int | None, int | None, list[tuple[int, float]], int]] = []
    while (word := t.next("<State> or </TopologyEntry>")) != "</TopologyEntry>":
        if word != "<State>":
            raise t.error(f"{where}: expected <State> or </TopologyEntry>, got {_shown(word)}")
        at = t.pos
        if (index := t.integer("<State>")) != len(read):
            raise t.error(f"{where}: states must be numbered 0, 1, ... in order; state {len(read)} is {index}")
        forward = loop = None
        word = t.next("</State>")
        if word == "<PdfClass>":
            forward = loop = t.integer("<PdfClass>")
            word = t.next("</State>")
        elif word == "<ForwardPdfClass>":
            forward = t.integer("<ForwardPdfClass>")
            if t.next("<SelfLoopPdfClass>") != "<SelfLoopPdfClass>":
                raise t.error(f"{where}, state {index}: <ForwardPdfClass> without <SelfLoopPdfClass>")
            loop = t.integer("<SelfLoopPdfClass>")
            word = t.next("</State>")
        transitions: list[tuple[int, float]] = []
        while word == "<Transition>":
            transitions.append((t.integer("<Transition>"), t.real("<Transition> probability")))
            word = t.next("</State>")
        if word != "</State>":
            raise t.error(f"{where}, state {index}: expected <Transition> or </State>, got {_shown(word)}")
        read.append((forward, loop, transitions, at))
    if len(read) < 2:
        raise t.error(f"{where}: a phone needs at least one emitting state and the final state")
    return _checked(t, where, read)


def _checked(
    t: _Tokens, where: str, read: list[tuple[int | None, int | None, list[tuple[int, float]], int]]
) -> tuple[State, ...]:
    *emitting, (last_forward, _, last_transitions, last_at) = read
    if last_forward is not None or last_transitions:
        raise t.error(f"{where}: the last state {len(emitting)} must be the non-emitting final state", last_at)
    out: list[State] = []
    classes: dict[int, int] = {}  # pdf-class -> where it was first given
    for i, (forward, loop, transitions, at) in enumerate(emitting):
        if forward is None or loop is None:
            raise t.error(f"{where}, state {i}: an emitting state needs <PdfClass> (or forward and self-loop ones)", at)
        if not transitions:
            raise t.error(f"{where}, state {i}: an emitting state needs transitions", at)
        for dest, prob in transitions:
            if not 0 <= dest < len(read) or not 0.0 < prob <= 1.0:
                raise t.error(f"{where}, state {i}: transition to {dest} with probability {prob} is out of range", at)
        classes.setdefault(forward, at)
        classes.setdefault(loop, at)
        out.append((forward, loop, tuple(transitions)))
    for expected, value in enumerate(sorted(classes)):
        if value != expected:  # Kaldi's HmmTopology::Check: so at most two pdf-classes an emitting state
            raise t.error(
                f"{where}: pdf-class {value}: an entry's pdf-classes are 0, 1, ... with none skipped, and "
                f"{len(emitting)} emitting states have at most {2 * len(emitting)}",
                classes[value],
            )
    return tuple(out)
