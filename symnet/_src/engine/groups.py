"""A differentiated call of a regular request as independent groups of sequences, on CPU.

In a regular request no row of sequence n reads another sequence's rows (the
plan is made for one sequence, symbolically in n: engine/plan.py), so the
sequences `0..N-1` can run as `k` groups of `N / k`, each the same program
planned for `N / k` sequences, the parameters' gradients summed over the
groups. The groups are independent chains of work in one XLA program, and
XLA's CPU runtime runs independent work side by side. That pays in a
training step: W2's `jax.value_and_grad` step in two groups took 0.95-1.00
of the time of one in five rounds and 0.92-1.02 in five more, on the
project's 2-core CPU (`benchmarks/sequence_groups.py`, docs/performance.md).
It does not pay in inference, where W2's loss alone took 1.07-1.11 of one: so
only the forward of a call that `jax.grad` (`jax.vjp`, ...) differentiates
runs in groups (the `jax.custom_vjp`'s forward rule, engine/gradient.py), a
call that is not differentiated runs as one. On a GPU one stream runs the
kernels in order and halving them only makes them slower: groups are a CPU
lowering.

`Computation.forward` keeps one Tape node per node, the whole batch's rows,
for inspection. A call never runs in groups where a node's row depends on
other rows of its minibatch (`matrixwise`: batch-norm in training mode),
where a component is trained with natural gradient (its preconditioner is
estimated from the whole minibatch), with sequence ends or given states,
under `lowering="plain"` (the reference) or `gradient="jax"`, or inside
`symnet.rng.randomness` (a random layer draws one mask over the whole
batch). Automatically, only for a network without recurrences whose groups'
largest product is at least `MIN_WORK` multiply-adds.
"""

from __future__ import annotations

from collections.abc import Callable, Mapping
from typing import TYPE_CHECKING

import jax
import jax.numpy as jnp
import numpy as np

from ..base.errors import PlanError
from ..core import rng
from ..core.index import IndexSet, decode, encode
from ..core.layer import Weight
from ..core.tape import Tape
from .graph import Graph
from .layout import as_flat_rows, as_frames
from .plan import Planner
from .request import ComputationRequest

if TYPE_CHECKING:
    from .computation import Computation
    from .recurrence import Lowering

__all__ = ["MIN_WORK", "SequenceGroups", "group_count", "part_request"]

#: The fewest multiply-adds of one group's largest product for automatic groups. W2's (64 sequences, 150
#: output frames) is 4.9e9 in its 512 x 2000 output product per group of 32 sequences; W1's (256 sequences of
#: 17 frames, 65 x 115) 1.6e7 per group of 128: a step of milliseconds, where no gain was measured.
MIN_WORK = 2**26

#: The groups a call runs in on CPU when `compile(..., sequence_groups=None)` chooses.
AUTOMATIC = 2


def refusal(
    graph: Graph, planner: Planner, request: ComputationRequest, lowering: Lowering, gradient: str
) -> str | None:
    """Why a call of this request cannot run in groups of sequences, or None where it can."""
    if not planner.regular:
        return "the request is irregular (groups need every sequence with the same frames)"
    if request.sequence_ends:
        return "the request has sequence_ends"
    if any(not graph.is_input[nid] for nid in planner.given):
        return "the request gives node states"
    if lowering == "plain":
        return "lowering='plain' is the reference lowering, run as one group"
    if gradient != "tape":
        return "groups run where the Tape's walk differentiates a call (gradient='tape')"
    needed = planner.requirements()
    for nid, layer in enumerate(graph.layers):
        if not len(needed[nid]) and graph.indexed[nid]:
            continue
        if getattr(layer, "matrixwise", False):
            return f"{graph.describe(nid)} computes each row from other rows of its minibatch"
        if hasattr(layer, "natural_gradient_settings"):
            return f"{graph.describe(nid)} is trained with natural gradient, estimated from the whole minibatch"
    return None


def group_count(
    graph: Graph, planner: Planner, request: ComputationRequest, lowering: Lowering, gradient: str, asked: int | None
) -> int:
    """How many groups a call runs in: `asked` (checked: a PlanError where the request cannot run in that many),
    or with `asked=None` `AUTOMATIC` on CPU for a network without recurrences where the request can and one
    group's largest product is large enough, else 1. (W3's and a BLSTM's `jax.value_and_grad` steps in two
    groups took 0.92-1.09 of one: a recurrence is a chain of small products either way.)"""
    if asked is not None:
        if not isinstance(asked, int) or isinstance(asked, bool) or asked < 1:
            raise PlanError(f"sequence_groups={asked!r}: give a positive number of groups, or None to choose")
        if asked == 1:
            return 1
        why = refusal(graph, planner, request, lowering, gradient)
        if why is None and planner.batch % asked:
            why = f"its {planner.batch} sequences do not split into {asked} equal groups"
        if why is not None:
            raise PlanError(f"sequence_groups={asked}: the request cannot run in groups: {why}")
        return asked
    k = AUTOMATIC
    if jax.default_backend() != "cpu" or planner.batch % k or planner.cyclic:
        return 1
    if refusal(graph, planner, request, lowering, gradient) is not None:
        return 1
    return k if largest_product(graph, planner) * planner.batch // k >= MIN_WORK else 1


def largest_product(graph: Graph, planner: Planner) -> int:
    """The most multiply-adds of one product node (rows of one sequence times its matrix's size)."""
    needed, most = planner.requirements(), 0
    for nid, layer in enumerate(graph.layers):
        product = layer.product()
        if product is None or not len(needed[nid]):
            continue
        matrix = graph.layers[graph.operands[nid][product.weight]]
        if isinstance(matrix, Weight) and len(matrix.shape) == 2:
            most = max(most, len(needed[nid]) * int(np.prod(matrix.shape)))
    return most


def part_request(request: ComputationRequest, k: int) -> ComputationRequest:
    """The regular `request` for its first `N / k` sequences (each input and output the same frames)."""

    def part(indexes: IndexSet) -> IndexSet:
        grid = indexes.grid()
        assert grid is not None  # a regular request's index sets are grids
        count, keys = grid
        _, t, x = decode(keys)
        m = count // k
        return IndexSet(encode(np.tile(np.arange(m), len(t)), np.repeat(t, m), np.repeat(x, m)))

    return ComputationRequest(
        {name: part(s) for name, s in request.inputs.items()},
        {name: part(s) for name, s in request.outputs.items()},
        request.need_input_derivatives,
    )


class SequenceGroups:
    """A call's program as `k` groups of `part`'s sequences (`part`: the Computation of `part_request`)."""

    def __init__(self, part: Computation, k: int, request: ComputationRequest):
        self.part, self.k, self.request = part, k, request
        self.size = part.batch  # sequences per group

    def explain(self) -> str:
        return f"sequences in {self.k} groups of {self.size}, run side by side where jax.grad differentiates it"

    def tapes(
        self,
        whole: Callable[..., dict[str, Tape]],
        params: Mapping[str, jax.Array],
        state: Mapping[str, jax.Array],
        inputs: Mapping[str, jax.Array],
        reads: tuple[jax.Array, ...] = (),
        record: dict[str, tuple[Tape, Callable[[jax.Array], jax.Array]]] | None = None,
    ) -> dict[str, Tape]:
        """The output Tapes of the call (as `Computation._tapes`): each a concatenation of the groups' output
        Tapes over sequences, whose pullback hands each group its sequences' delta. With `record`, each input's
        Tape is the input array, the groups' input Tapes its upstream. Inside a randomness block the call runs
        `whole` (the ungrouped program) instead."""
        if rng.active_key() is not None:
            return whole(params, state, inputs, reads, record)
        m, total = self.size, self.size * self.k
        graph, part = self.part.graph, self.part
        groups: list[dict[str, Tape]] = []
        recorded: set[str] = set()
        sources = {
            name: Tape(graph.layers[nid], inputs[name], parameters=params) for name, (nid, _) in part.input_maps.items()
        }
        for g in range(self.k):
            own = {name: _sequences(v, g, m, total) for name, v in inputs.items()}
            written: dict[str, tuple[Tape, Callable[[jax.Array], jax.Array]]] | None = (
                {} if record is not None else None
            )
            groups.append(part._tapes(params, state, own, (), written))
            for name, (tape, transpose) in (written or {}).items():
                # The group's input Tape reads its sequences of the whole input: its delta goes back there.
                tape.upstream = (sources[name],)
                tape.pullback = _embedding(transpose, g, m, total, inputs[name].ndim)
                recorded.add(name)
        if record is not None:
            record.update((name, (sources[name], _same)) for name in recorded)
        out = {}
        for name in self.request.outputs:
            parts = [tapes[name] for tapes in groups]
            value = _joined([p.value for p in parts], m)
            out[name] = Tape(
                graph.layers[part.output_ids[name]],
                value,
                tuple(parts),
                pullback=_splitting(self.k, m, total),
                rows=self.request.outputs[name],
                parameters=params,
            )
        return out


def _same(d: jax.Array) -> jax.Array:
    return d


def _sequences(value: jax.Array, g: int, m: int, total: int) -> jax.Array:
    """Group `g`'s sequences (`m` of `total`) of a flat or `[T, N, D]` value, in the same layout."""
    part = as_frames(value, total)[:, g * m : (g + 1) * m]
    return part if value.ndim == 3 else as_flat_rows(part)


def _joined(parts: list[jax.Array], m: int) -> jax.Array:
    """The groups' values (each flat or `[T, m, D]`) side by side over sequences, in their layout."""
    joined = jnp.concatenate([as_frames(p, m) for p in parts], axis=1)
    return joined if parts[0].ndim == 3 else as_flat_rows(joined)


def _splitting(k: int, m: int, total: int) -> Callable[[jax.Array], tuple[jax.Array, ...]]:
    def pullback(d: jax.Array) -> tuple[jax.Array, ...]:
        return tuple(_sequences(d, g, m, total) for g in range(k))

    return pullback


def _embedding(
    transpose: Callable[[jax.Array], jax.Array], g: int, m: int, total: int, ndim: int
) -> Callable[[jax.Array], tuple[jax.Array]]:
    """The pullback from group `g`'s input Tape to the whole input array: its sequences' delta, zeros elsewhere."""

    def pullback(d: jax.Array) -> tuple[jax.Array]:
        own = as_frames(transpose(d), m)
        whole = jnp.pad(own, ((0, 0), (g * m, total - (g + 1) * m), (0, 0)))
        return (whole if ndim == 3 else as_flat_rows(whole),)

    return pullback
