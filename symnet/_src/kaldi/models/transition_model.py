"""Kaldi's TransitionModel (hmm/transition-model.cc, hmm/hmm-topology.cc), as acoustic models hold it.

`TransitionModel` is the parsed form: the HMM topology (`TopologyEntry`,
`HmmState`), the (phone, hmm_state, forward_pdf, self_loop_pdf) tuples and the
transition log-probabilities, with the raw bytes it was read from.
`read_transition_model` reads it (text or binary) and `write_transition_model`
writes it: the raw bytes when they are in the format being written (so a
model is reproduced byte for byte), else converted from the parsed form.
"""

from __future__ import annotations

import re
from collections.abc import Iterable
from typing import Any

import attrs
import numpy as np

from ...base.errors import ModelFormatError
from ...kaldi_io.binary import BinaryReader, TextReader
from ...kaldi_io.numbers import INT32_MAX
from ...kaldi_io.writer import Writer
from .token_kinds import VECTOR
from .token_values import ByValue, array_value, frozen_array, value_key

__all__ = ["HmmState", "TopologyEntry", "TransitionModel", "read_transition_model", "write_transition_model"]


#: The largest phone id read (a real phone set has thousands; Kaldi's binary topology holds a table this long).
MAX_PHONE = 1 << 20


def _transitions(value: Any) -> tuple[tuple[int, np.float32], ...]:
    return tuple((int(dst), np.float32(prob)) for dst, prob in value)


def _phones(value: Iterable[Any]) -> tuple[int, ...]:
    return tuple(sorted(int(p) for p in value))


def _states(value: Iterable[HmmState]) -> tuple[HmmState, ...]:
    return tuple(value)


def _topology(value: Iterable[TopologyEntry]) -> tuple[TopologyEntry, ...]:
    return tuple(value)


def _tuples(value: Iterable[Iterable[Any]]) -> tuple[tuple[int, ...], ...]:
    return tuple(tuple(int(x) for x in row) for row in value)


def _log_probs(value: Any) -> np.ndarray:
    return array_value(value, VECTOR, "TransitionModel <LogProbs>")


@attrs.frozen
class HmmState:
    """A state of a topology entry: pdf classes (-1: none) and (destination, probability) transitions."""

    forward_pdf_class: int = attrs.field(converter=int)
    self_loop_pdf_class: int = attrs.field(converter=int)
    transitions: tuple[tuple[int, np.float32], ...] = attrs.field(default=(), converter=_transitions)


@attrs.frozen
class TopologyEntry:
    """The HMM topology shared by `phones`."""

    phones: tuple[int, ...] = attrs.field(converter=_phones)
    states: tuple[HmmState, ...] = attrs.field(converter=_states)


@attrs.frozen(eq=False)
class TransitionModel(ByValue):
    """Kaldi's TransitionModel (hmm/transition-model.cc), parsed, with the raw bytes it was read from.

    `tuples` are (phone, hmm_state, forward_pdf, self_loop_pdf) rows (written as ``<Triples>`` with
    three columns when every state's forward and self-loop pdf classes agree); `log_probs` is the
    float32 vector of transition log-probabilities. `raw` (the bytes from the file, in the format
    `raw_binary` says) is what a writer in that format emits; equality ignores it.
    """

    topology: tuple[TopologyEntry, ...] = attrs.field(converter=_topology)
    tuples: tuple[tuple[int, int, int, int], ...] = attrs.field(converter=_tuples)
    log_probs: np.ndarray = attrs.field(converter=_log_probs)
    raw: bytes | None = attrs.field(default=None, repr=False)
    raw_binary: bool | None = attrs.field(default=None, repr=False)

    def __attrs_post_init__(self) -> None:
        if self.log_probs.dtype != np.float32:
            object.__setattr__(self, "log_probs", frozen_array(self.log_probs.astype(np.float32)))
        for row in self.tuples:
            if len(row) != 4:
                raise ModelFormatError(
                    f"TransitionModel: tuples are (phone, hmm_state, forward_pdf, self_loop_pdf), got {row!r}"
                )

    def key(self) -> Any:
        topology = tuple(
            (
                e.phones,
                tuple(
                    (s.forward_pdf_class, s.self_loop_pdf_class, tuple((d, value_key(p)) for d, p in s.transitions))
                    for s in e.states
                ),
            )
            for e in self.topology
        )
        return ("transition-model", topology, self.tuples, value_key(self.log_probs))

    @property
    def is_hmm(self) -> bool:
        """Kaldi's IsHmm: every state's forward and self-loop pdf classes agree (``<Triples>``)."""
        return all(s.forward_pdf_class == s.self_loop_pdf_class for e in self.topology for s in e.states)

    @property
    def num_pdfs(self) -> int:
        return 1 + max((max(r[2], r[3]) for r in self.tuples), default=-1)

    def transition_pdfs(self) -> np.ndarray:
        """Kaldi's TransitionIdToPdf as an array indexed by transition-id (index 0, epsilon: -1): each
        transition-state's transitions numbered in order from 1, a self-loop mapped to the state's self-loop
        pdf, any other transition to its forward pdf."""
        topology = {p: entry.states for entry in self.topology for p in entry.phones}
        pdfs = [-1]
        for phone, hmm_state, forward_pdf, self_loop_pdf in self.tuples:
            if phone not in topology or not 0 <= hmm_state < len(topology[phone]):
                raise ModelFormatError(f"TransitionModel: tuple ({phone}, {hmm_state}, ...) has no topology state")
            for dst, _ in topology[phone][hmm_state].transitions:
                pdfs.append(self_loop_pdf if dst == hmm_state else forward_pdf)
        return np.asarray(pdfs, dtype=np.int64)


def read_transition_model(r: BinaryReader | TextReader) -> TransitionModel:
    """Read ``<TransitionModel> ... </TransitionModel>`` (text or binary), keeping its raw bytes."""
    start = r.pos
    r.expect_token("<TransitionModel>")
    r.expect_token("<Topology>", " (the transition model's topology)")
    entries = _read_topology_binary(r) if isinstance(r, BinaryReader) else _read_topology_text(r)
    at = r.skip_ws()
    kind = r.read_token("<Triples> or <Tuples>")
    if kind not in ("<Triples>", "<Tuples>"):
        raise r.error(f"expected <Triples> or <Tuples>, got {kind!r}", at=at, expected="<Triples>")
    size = r.read_int(kind)
    width = 3 if kind == "<Triples>" else 4
    if size < 0 or size * width > _remaining(r):
        raise r.error(f"bad number of transition-model tuples {size}", expected=f"the size of {kind}")
    rows = []
    for _ in range(size):
        row = [r.read_int(f"a {kind[1:-1].lower()[:-1]} entry") for _ in range(width)]
        rows.append(tuple(row) if width == 4 else (row[0], row[1], row[2], row[2]))
    r.expect_token("</" + kind[1:], " (the end of the transition-model tuples)")
    r.expect_token("<LogProbs>")
    log_probs = r.read_vector("<LogProbs>")
    r.expect_token("</LogProbs>")
    r.expect_token("</TransitionModel>")
    end = r.skip_ws()
    raw = r.data[start:end] if isinstance(r, BinaryReader) else r.text[start:end].encode("utf-8")
    return TransitionModel(entries, rows, log_probs, raw=raw, raw_binary=r.binary)


def _remaining(r: BinaryReader | TextReader) -> int:
    return (len(r.data) if isinstance(r, BinaryReader) else len(r.text)) - r.pos


def _read_topology_text(r: TextReader) -> list[TopologyEntry]:
    entries: list[TopologyEntry] = []
    while True:
        at = r.skip_ws()
        token = r.read_token("<TopologyEntry> or </Topology>")
        if token == "</Topology>":
            break
        if token != "<TopologyEntry>":
            raise r.error(f"expected <TopologyEntry> or </Topology>, got {token!r}", at=at, expected="<TopologyEntry>")
        r.expect_token("<ForPhones>")
        phones: list[int] = []
        while True:
            word, at = r.read_word("a phone or </ForPhones>")
            if word == "</ForPhones>":
                break
            if not re.fullmatch(r"[0-9]+", word) or int(word) > INT32_MAX:
                raise r.error(
                    f"expected a phone (an integer) or </ForPhones>, got {word!r}", at=at, expected="</ForPhones>"
                )
            if int(word) > MAX_PHONE:  # the binary form has a phone-to-entry table as long as the largest id
                raise r.error(
                    f"phone {word} is beyond the {MAX_PHONE} phones symnet reads", at=at, expected="</ForPhones>"
                )
            phones.append(int(word))
        states: list[HmmState] = []
        at = r.skip_ws()
        token = r.read_token("<State> or </TopologyEntry>")
        while token != "</TopologyEntry>":
            if token != "<State>":
                raise r.error(f"expected <State> or </TopologyEntry>, got {token!r}", at=at, expected="<State>")
            at = r.skip_ws()
            index = r.read_int("<State>")
            if index != len(states):
                raise r.error(f"expected state {len(states)}, got {index}", at=at, expected=f"<State> {len(states)}")
            token = r.read_token("</State>")
            forward = self_loop = -1
            if token == "<PdfClass>":
                forward = self_loop = r.read_int("<PdfClass>")
                token = r.read_token("</State>")
            elif token == "<ForwardPdfClass>":
                forward = r.read_int("<ForwardPdfClass>")
                r.expect_token("<SelfLoopPdfClass>")
                self_loop = r.read_int("<SelfLoopPdfClass>")
                token = r.read_token("</State>")
            transitions: list[tuple[int, np.float32 | np.float64]] = []
            while token == "<Transition>":
                transitions.append((r.read_int("<Transition>"), r.read_real("<Transition>")))
                token = r.read_token("</State>")
            if token != "</State>":
                raise r.error(f"expected <Transition> or </State>, got {token!r}", expected="</State>")
            states.append(HmmState(forward, self_loop, transitions))
            at = r.skip_ws()
            token = r.read_token("<State> or </TopologyEntry>")
        entries.append(TopologyEntry(phones, states))
    return entries


def _read_topology_binary(r: BinaryReader) -> list[TopologyEntry]:
    phones = r.read_int_vector("the topology's phones")
    phone2idx = r.read_int_vector("the topology's phone2idx")
    size = r.read_int("the number of topology entries")
    is_hmm = True
    if size == -1:
        is_hmm = False
        size = r.read_int("the number of topology entries")
    if size < 0 or size > _remaining(r):
        raise r.error(f"bad number of topology entries {size}", expected="the number of topology entries")
    entries: list[list[HmmState]] = []
    for _ in range(size):
        num_states = r.read_int("the number of states")
        if num_states < 0 or num_states > _remaining(r):
            raise r.error(f"bad number of states {num_states}", expected="the number of states")
        states: list[HmmState] = []
        for _ in range(num_states):
            forward = r.read_int("a forward pdf class")
            self_loop = forward if is_hmm else r.read_int("a self-loop pdf class")
            num_transitions = r.read_int("the number of transitions")
            if num_transitions < 0 or num_transitions > _remaining(r):
                raise r.error(f"bad number of transitions {num_transitions}", expected="the number of transitions")
            transitions = [
                (r.read_int("a transition"), r.read_real("a transition probability")) for _ in range(num_transitions)
            ]
            states.append(HmmState(forward, self_loop, transitions))
        entries.append(states)
    r.expect_token("</Topology>")
    owned: list[list[int]] = [[] for _ in range(size)]
    for phone, index in enumerate(phone2idx.tolist()):
        if index == -1:
            continue
        if not 0 <= index < size:
            raise r.error(
                f"topology: phone {phone} maps to entry {index}, but there are {size} entries",
                expected="a consistent topology",
            )
        owned[index].append(phone)
    if sorted(p for ps in owned for p in ps) != phones.tolist():
        raise r.error(
            "topology: the phone list does not match the phone-to-entry map", expected="a consistent topology"
        )
    return [TopologyEntry(ps, states) for ps, states in zip(owned, entries)]


def _raw_matches(tm: TransitionModel, binary: bool) -> bool:
    """Whether `tm.raw` is in the `binary` format and still holds `tm` (not stale after an attrs.evolve)."""
    if tm.raw is None or tm.raw_binary != binary:
        return False
    try:
        if binary:
            reader: BinaryReader | TextReader = BinaryReader(tm.raw, 0, "<transition model>")
        else:
            reader = TextReader(tm.raw.decode("utf-8"), 0, "<transition model>")
        return read_transition_model(reader) == tm and reader.at_end()
    except (ModelFormatError, UnicodeDecodeError):
        return False


def write_transition_model(w: Writer, tm: TransitionModel) -> None:
    """Write `tm` as Kaldi's TransitionModel::Write does: its raw bytes when they are in `w`'s format
    and still hold `tm`, else converted from its parsed form."""
    if _raw_matches(tm, w.binary):
        w.raw(tm.raw)  # type: ignore[arg-type]
        return
    is_hmm = tm.is_hmm
    w.token("<TransitionModel>")
    w.newline()
    w.token("<Topology>")
    if not w.binary:
        w.raw("\n")
        for entry in tm.topology:
            w.token("<TopologyEntry>")
            w.raw("\n")
            w.token("<ForPhones>")
            w.raw("\n" + "".join(f"{p} " for p in sorted(entry.phones)) + "\n")
            w.token("</ForPhones>")
            w.raw("\n")
            for j, state in enumerate(entry.states):
                w.token("<State>")
                w.int(j)
                if state.forward_pdf_class != -1:
                    if is_hmm:
                        w.token("<PdfClass>")
                        w.int(state.forward_pdf_class)
                    else:
                        w.token("<ForwardPdfClass>")
                        w.int(state.forward_pdf_class)
                        w.token("<SelfLoopPdfClass>")
                        w.int(state.self_loop_pdf_class)
                for dst, prob in state.transitions:
                    w.token("<Transition>")
                    w.int(dst)
                    w.real(prob, double=False)
                w.token("</State>")
                w.raw("\n")
            w.token("</TopologyEntry>")
            w.raw("\n")
    else:
        phones = sorted(p for e in tm.topology for p in e.phones)
        phone2idx = [-1] * (max(phones, default=-1) + 1)
        for i, entry in enumerate(tm.topology):
            for p in entry.phones:
                phone2idx[p] = i
        w.int_vector(np.array(phones))
        w.int_vector(np.array(phone2idx))
        if not is_hmm:
            w.int(-1)
        w.int(len(tm.topology))
        for entry in tm.topology:
            w.int(len(entry.states))
            for state in entry.states:
                w.int(state.forward_pdf_class)
                if not is_hmm:
                    w.int(state.self_loop_pdf_class)
                w.int(len(state.transitions))
                for dst, prob in state.transitions:
                    w.int(dst)
                    w.real(prob, double=False)
    w.token("</Topology>")
    w.newline()
    kind = "Triples" if is_hmm else "Tuples"
    w.token(f"<{kind}>")
    w.int(len(tm.tuples))
    w.newline()
    for row in tm.tuples:
        for x in row[:3] if is_hmm else row:
            w.int(x)
        w.newline()
    w.token(f"</{kind}>")
    w.newline()
    w.token("<LogProbs>")
    w.newline()
    w.vector(tm.log_probs)
    w.token("</LogProbs>")
    w.newline()
    w.token("</TransitionModel>")
    w.newline()
