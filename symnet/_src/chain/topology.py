"""Kaldi's HMM topologies (`<Topology>` files) and the monophone pdf numbering of `gmm-init-mono`.

A phone's HMM is a list of states; every state but the last emits and has a forward pdf-class and a
self-loop pdf-class (equal unless the file says `<ForwardPdfClass>`/`<SelfLoopPdfClass>`), and
transitions `(destination, probability)`. The last state is the non-emitting final state. A visit to an
emitting state lasts one frame for the transition that leaves it plus one for each self-loop; Kaldi's
chain graphs put the leaving transition's frame first (`reorder=true`), so with Kaldi's chain topology
(`Topology.chain`) a phone's first frame has pdf-class 0 and its other frames pdf-class 1.
"""

from __future__ import annotations

import re
from collections.abc import Iterable, Mapping, Sequence
from dataclasses import dataclass

from ..errors import ChainError
from ..text import ascii_int, clip

__all__ = ["HmmState", "Topology"]


@dataclass(frozen=True)
class HmmState:
    """An emitting HMM state: pdf-classes of its leaving and self-loop frames, and its transitions."""

    forward_pdf_class: int
    self_loop_pdf_class: int
    transitions: tuple[tuple[int, float], ...]

    def loop_probability(self, index: int) -> float:
        """The self-loop probability of this state, whose index in its phone is `index` (0 without one)."""
        return sum(p for d, p in self.transitions if d == index)


@dataclass(frozen=True)
class Topology:
    """Each phone's HMM: `phones[p]` is the tuple of its emitting states (the final state is implicit:
    index `len(states)`)."""

    phones: Mapping[int, tuple[HmmState, ...]]

    @staticmethod
    def chain(phones: Iterable[int]) -> Topology:
        """Kaldi's chain topology (steps/nnet3/chain/gen_topo.py): one state, first frame pdf-class 0, later
        frames pdf-class 1, self-loop and exit 0.5 each."""
        state = HmmState(0, 1, ((0, 0.5), (1, 0.5)))
        return Topology({int(p): (state,) for p in phones})

    @staticmethod
    def left_to_right(phones: Iterable[int], num_states: int, self_loop: float = 0.5) -> Topology:
        """`num_states` states in a row, each with pdf-class = its index, a self-loop of probability
        `self_loop` and the rest to the next state."""
        if not 0.0 <= self_loop < 1.0:
            raise ChainError(f"self_loop probability {self_loop} must be in [0, 1)")
        states = tuple(
            HmmState(i, i, ((i, self_loop), (i + 1, 1.0 - self_loop)) if self_loop else ((i + 1, 1.0),))
            for i in range(num_states)
        )
        return Topology({int(p): states for p in phones})

    @staticmethod
    def parse(text: str, name: str = "<topology>") -> Topology:
        """A Kaldi `<Topology>` in text form (ChainError naming `name` and the entry at fault)."""
        body = re.sub(r"\s+", " ", text).strip()
        if not body.startswith("<Topology>") or not body.endswith("</Topology>"):
            raise ChainError(f"{name}: a topology is '<Topology> ... </Topology>' in text form")
        entries = re.findall(r"<TopologyEntry>(.*?)</TopologyEntry>", body)
        if not entries:
            raise ChainError(f"{name}: no <TopologyEntry>")
        phones: dict[int, tuple[HmmState, ...]] = {}
        for e, entry in enumerate(entries):
            where = f"{name}: TopologyEntry {e}"
            found = re.search(r"<ForPhones>(.*?)</ForPhones>", entry)
            if not found or not found.group(1).split():
                raise ChainError(f"{where}: no <ForPhones> list")
            ids = [ascii_int(p) for p in found.group(1).split()]
            if None in ids:
                raise ChainError(f"{where}: <ForPhones> must list integers, got {clip(found.group(1).strip())!r}")
            states = _parse_states(re.findall(r"<State>(.*?)</State>", entry), where)
            for p in ids:
                assert p is not None
                if p < 1 or p in phones:
                    raise ChainError(f"{where}: phone {p} is {'listed twice' if p in phones else 'not >= 1'}")
                phones[p] = states
        return Topology(phones)

    def monophone_pdfs(self) -> dict[int, tuple[int, ...]]:
        """gmm-init-mono's pdf-ids: phones in increasing order, each given one pdf per pdf-class in order."""
        pdfs: dict[int, tuple[int, ...]] = {}
        next_pdf = 0
        for p in sorted(self.phones):
            classes = 1 + max(max(s.forward_pdf_class, s.self_loop_pdf_class) for s in self.phones[p])
            pdfs[p] = tuple(range(next_pdf, next_pdf + classes))
            next_pdf += classes
        return pdfs


def _parse_states(states: Sequence[str], where: str) -> tuple[HmmState, ...]:
    if len(states) < 2:
        raise ChainError(f"{where}: a phone needs at least one emitting state and the final state")
    out = []
    for i, state in enumerate(states):
        tokens = state.split()
        if not tokens or tokens[0] != str(i):
            raise ChainError(f"{where}: states must be numbered 0, 1, ... in order; state {i} is {state.strip()!r}")
        fields = re.findall(r"<(\w+)> ([^<]*)", state)
        values: dict[str, int] = {}
        transitions: list[tuple[int, float]] = []
        for key, value in fields:
            try:
                if key == "Transition":
                    dest, prob = value.split()
                    transitions.append((_int(dest), float(prob)))
                elif key in ("PdfClass", "ForwardPdfClass", "SelfLoopPdfClass"):
                    values[key] = _int(value)
                else:
                    raise ChainError(f"{where}, state {i}: unknown field <{clip(key, 40)}>")
            except ValueError:
                raise ChainError(f"{where}, state {i}: bad <{key}> value {clip(value.strip(), 40)!r}") from None
        last = i == len(states) - 1
        if last:
            if values or transitions:
                raise ChainError(f"{where}: the last state {i} must be the non-emitting final state (no fields)")
            continue
        if "PdfClass" in values:
            forward = loop = values["PdfClass"]
        elif "ForwardPdfClass" in values and "SelfLoopPdfClass" in values:
            forward, loop = values["ForwardPdfClass"], values["SelfLoopPdfClass"]
        else:
            raise ChainError(f"{where}, state {i}: an emitting state needs <PdfClass> (or forward and self-loop ones)")
        if not transitions:
            raise ChainError(f"{where}, state {i}: an emitting state needs transitions")
        for dest, prob in transitions:
            if not 0 <= dest < len(states) or not 0.0 < prob <= 1.0:
                raise ChainError(f"{where}, state {i}: transition to {dest} with probability {prob} is out of range")
        out.append(HmmState(forward, loop, tuple(transitions)))
    classes = sorted({c for s in out for c in (s.forward_pdf_class, s.self_loop_pdf_class)})
    if classes != list(range(len(classes))):  # Kaldi's HmmTopology::Check; a huge class would size the pdf table
        shown = ", ".join(map(str, classes[:8])) + (", ..." if len(classes) > 8 else "")
        raise ChainError(f"{where}: the pdf-classes ({shown}) must be 0, 1, ... without a gap, as Kaldi requires")
    return tuple(out)


def _int(text: str) -> int:
    """An ASCII integer (`int()` would take '٣' or '1_0'); ValueError otherwise."""
    value = ascii_int(text)
    if value is None:
        raise ValueError(text)
    return value
