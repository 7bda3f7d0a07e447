"""The Tape: the record of one forward run, shaped like the layer tree.

Each tape node holds its layer, its value and its upstream tapes (the tapes of
the layer's operands). `backward` walks the tape once, in reverse topological
order, summing deltas where a sub-expression or Weight is shared, and returns
the gradient of every Weight by name. Inside `jax.jit` the walk is traced, so
forward and backward become one XLA program.
"""

from __future__ import annotations

from collections.abc import Callable, Iterator, Mapping, Sequence
from typing import TYPE_CHECKING, Any

from ..base.errors import LayerTypeError, ShapeError, at
from . import html
from .walk import topological

if TYPE_CHECKING:
    import jax
    import jax.numpy as jnp

    from .layer import Layer
else:
    from .lazyjax import jax, jnp

__all__ = ["backward", "backward_deltas", "Pullback", "Tape"]

Pullback = Callable[["jax.Array"], tuple["jax.Array | None", ...]]


class Tape:
    """One node of a forward run: `layer`, `value`, `upstream` tapes.

    `rows` is the node's row labels (an `IndexSet`) when the value came from the
    Index engine, else None. `pullback`, when given, replaces the layer's own
    `vjp` (the engine uses it for row movements). `parameter` is the name of
    the parameter whose value this is (the tape of a Weight), else None;
    `parameters` all the run's parameters (so `backward` returns a gradient
    for each, zeros for those not reached).
    """

    __slots__ = ("layer", "value", "upstream", "rows", "pullback", "parameter", "parameters")

    def __init__(
        self,
        layer: Layer,
        value: jax.Array,
        upstream: tuple[Tape, ...] = (),
        *,
        pullback: Pullback | None = None,
        rows: Any = None,
        parameter: str | None = None,
        parameters: Mapping[str, jax.Array] | None = None,
    ):
        self.layer = layer
        self.value = value
        self.upstream = upstream
        self.pullback = pullback
        self.rows = rows
        self.parameter = parameter
        self.parameters = parameters

    @property
    def shape(self) -> tuple[int, ...]:
        return tuple(self.value.shape)

    def __repr__(self) -> str:
        return f"Tape({self.layer!r}, shape={self.shape})"

    def _repr_html_(self) -> str:
        """Every node with its value summary, for notebooks (see `symnet.display`)."""
        return html.render_html(self)

    def nodes(self) -> list[Tape]:
        """Every tape node reachable from this one, operands before their users."""
        return topological((self,), _upstream)

    def __iter__(self) -> Iterator[Tape]:
        return iter(self.nodes())

    def find(self, layer: Layer) -> Tape:
        """The tape node of `layer` (compared structurally) in this run."""
        for node in self.nodes():
            if node.layer == layer:
                return node
        raise KeyError(f"no tape node for {layer!r}")

    def backward(self, delta: Any = 1.0) -> dict[str, jax.Array]:
        """Gradients of every Weight (name -> array), given the delta of this tape's value.

        `delta` has the value's shape, or is a scalar meaning that scalar everywhere.
        The result is shaped like the network's parameters: weights this tape does
        not reach get zeros.
        """
        return backward(((self, delta),))

    def backward_deltas(self, delta: Any = 1.0) -> dict[Tape, jax.Array]:
        """The delta of every tape node this one reaches (the objects are the keys)."""
        return backward_deltas(((self, delta),))

    def _delta(self, delta: Any) -> jax.Array:
        """`delta` as an array of this tape's value's shape (a scalar is broadcast)."""
        try:
            array: jax.Array = jnp.asarray(delta, dtype=self.value.dtype)
        except (TypeError, ValueError) as e:
            raise LayerTypeError(
                f"backward: the delta must be a number or a numeric array of shape {self.shape}, "
                f"got {delta!r} ({e}){at(self.layer.where)}"
            ) from None
        if array.shape != self.value.shape:
            if array.ndim != 0:
                raise ShapeError(
                    f"backward: delta of shape {tuple(array.shape)} for a value of shape "
                    f"{self.shape}{at(self.layer.where)}"
                )
            array = jnp.broadcast_to(array, self.value.shape)
        return array


def backward(seeds: Sequence[tuple[Tape, Any]]) -> dict[str, jax.Array]:
    """Gradients of every Weight (name -> array) given deltas of several tapes of one run (e.g. two outputs
    that share layers): one walk, the shared layers' deltas summed, as one `Tape.backward` of their sum would.
    Weights of the run that no seed reaches get zeros. Each gradient has its parameter's dtype (a mixed-precision
    policy casts a Weight's value for the call: symnet._src.core.precision)."""
    deltas = backward_deltas(seeds)
    reached: dict[str, jax.Array] = {}
    for node, d in deltas.items():
        name = node.parameter
        if name is not None:
            # One name is one parameter: a tape chained from another run can
            # hold a second node of the same Weight; its delta adds up.
            reached[name] = reached[name] + d if name in reached else d
    grads: dict[str, jax.Array] = {}
    for tape, _ in seeds:
        if tape.parameters is not None:
            grads.update({name: jnp.zeros_like(value) for name, value in tape.parameters.items() if name not in grads})
    # A Weight's value may be its parameter cast to a compute dtype (symnet._src.core.precision): the cast's
    # transpose gives the gradient in the parameter's own dtype.
    grads.update({name: d.astype(grads[name].dtype) if name in grads else d for name, d in reached.items()})
    return grads


def backward_deltas(seeds: Sequence[tuple[Tape, Any]]) -> dict[Tape, jax.Array]:
    """The delta of every tape node the seeds `(tape, delta of its value)` reach (the objects are the keys)."""
    pending: dict[int, jax.Array] = {}
    for tape, delta in seeds:
        d = tape._delta(delta)
        pending[id(tape)] = pending[id(tape)] + d if id(tape) in pending else d
    result: dict[Tape, jax.Array] = {}
    for node in reversed(topological([tape for tape, _ in seeds], _upstream)):
        if id(node) not in pending:
            continue
        d = pending.pop(id(node))
        result[node] = d
        if not node.upstream:
            continue
        if node.pullback is not None:
            upstream_deltas = node.pullback(d)
        else:
            upstream_deltas = node.layer.vjp(d, node.value, *(u.value for u in node.upstream))
        for up, ud in zip(node.upstream, upstream_deltas):
            if ud is None:
                continue
            key = id(up)
            pending[key] = pending[key] + ud if key in pending else ud
    return result


def _upstream(tape: Tape) -> tuple[Tape, ...]:
    return tape.upstream
