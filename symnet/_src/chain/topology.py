"""Kaldi's HMM topologies (`<Topology>` files) and the monophone pdf numbering of `gmm-init-mono`.

A phone's HMM is a list of states; every state but the last emits and has a forward pdf-class and a
self-loop pdf-class (equal unless the file says `<ForwardPdfClass>`/`<SelfLoopPdfClass>`), and
transitions `(destination, probability)`. The last state is the non-emitting final state. A visit to an
emitting state lasts one frame for the transition that leaves it plus one for each self-loop; Kaldi's
chain graphs put the leaving transition's frame first (`reorder=true`), so with Kaldi's chain topology
(`Topology.chain`) a phone's first frame has pdf-class 0 and its other frames pdf-class 1.
"""

from __future__ import annotations

from collections.abc import Iterable, Mapping
from dataclasses import dataclass

from ..base.errors import ChainError
from .topology_text import parse_topology

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
        """A Kaldi `<Topology>` in text form (ChainError naming `name`, the line and the entry at fault; see
        `symnet._src.chain.topology_text` for what is refused)."""
        phones: dict[int, tuple[HmmState, ...]] = {}
        for ids, states in parse_topology(text, name):
            phones.update(dict.fromkeys(ids, tuple(HmmState(*state) for state in states)))
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
