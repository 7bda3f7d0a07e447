"""ComputationRequest: which Indexes each input provides and each output needs (Kaldi's terms)."""

from __future__ import annotations

from collections.abc import Iterable, Mapping
from typing import Any

from ..base.errors import PlanError
from ..core.index import IndexSet

__all__ = ["as_index_set", "ComputationRequest"]


def as_index_set(value: Any, what: str) -> IndexSet:
    """An IndexSet from an IndexSet, or a list of Index / tuples."""
    if isinstance(value, IndexSet):
        return value
    if isinstance(value, Iterable) and not isinstance(value, (str, bytes)):
        return IndexSet.of(value)
    raise PlanError(f"{what}: expected an IndexSet or a list of Indexes, got {value!r}")


class ComputationRequest:
    """Inputs `{name: indexes}` provided and outputs `{name: indexes}` wanted.

    Indexes are `IndexSet`s (compact: `IndexSet.range(n=64, t=(-10, 160))`, or
    explicit lists of `Index`). Matrices passed to and returned by the compiled
    computation have one row per Index, in these orders.
    `need_input_derivatives` asks for input deltas in backward.

    `sequence_ends=True` (regular requests only) makes each call give every
    sequence its own end: `computation(network, inputs, ends=[...])`, where
    sequence n's input frames at or beyond `ends[n]` count as not given. Every
    output the sequence could compute from its own frames is then the value it
    has in the request of those frames alone (IfDefined and Failover read per
    sequence whether a frame is available); the others are unspecified. The
    ends are values of the call, not of the request: one program serves every
    set of ends.
    """

    __slots__ = ("inputs", "outputs", "need_input_derivatives", "sequence_ends", "_hash")

    def __init__(
        self,
        inputs: Mapping[str, Any],
        outputs: Mapping[str, Any],
        need_input_derivatives: bool = False,
        sequence_ends: bool = False,
    ):
        if not outputs:
            raise PlanError("a ComputationRequest needs at least one output")
        self.inputs = {str(k): as_index_set(v, f"input {k!r}") for k, v in sorted(inputs.items())}
        self.outputs = {str(k): as_index_set(v, f"output {k!r}") for k, v in sorted(outputs.items())}
        for name, s in {**self.inputs, **self.outputs}.items():
            if len(s) == 0:
                raise PlanError(f"{name!r}: an empty index set")
        self.need_input_derivatives = bool(need_input_derivatives)
        self.sequence_ends = bool(sequence_ends)
        self._hash = hash(
            (tuple(self.inputs.items()), tuple(self.outputs.items()), self.need_input_derivatives, self.sequence_ends)
        )

    def __eq__(self, other: object) -> bool:
        return (
            isinstance(other, ComputationRequest)
            and self._hash == other._hash
            and self.inputs == other.inputs
            and self.outputs == other.outputs
            and self.need_input_derivatives == other.need_input_derivatives
            and self.sequence_ends == other.sequence_ends
        )

    def __hash__(self) -> int:
        return self._hash

    def __repr__(self) -> str:
        ins = ", ".join(f"{k!r}: {v!r}" for k, v in self.inputs.items())
        outs = ", ".join(f"{k!r}: {v!r}" for k, v in self.outputs.items())
        ends = ", sequence_ends=True" if self.sequence_ends else ""
        return f"ComputationRequest(inputs={{{ins}}}, outputs={{{outs}}}{ends})"
