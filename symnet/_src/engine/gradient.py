"""One fast gradient: `jax.grad` of a Computation call runs the Tape's backward walk.

JAX's own reverse mode differentiates the lowered forward program: through a
recurrence that is a transposed `lax.scan` that saves every step's operands
and recomputes the gates' elementwise work, 3 to 4 times the time of the
Tape's fused backward for a BLSTM. A Computation call is therefore a
`jax.custom_vjp` function: its forward rule runs the forward Tape and keeps
the backward walk (`symnet._src.core.tape.backward_deltas`, seeded with the
outputs' cotangents) as a traced program whose inputs are the values it
reads (the residuals); its backward rule runs that program.
So `jax.grad`, `jax.value_and_grad` and `jax.vjp` of any function of a call,
of `net.compute` or of `fit`'s evaluation get the gradients `tape.backward`
gives, through the same program.

The walk gives the cotangents of the trainable parameters, of the network's
state (non-trainable Weights) and of the inputs. A PRNG key and the sequence-end
masks have none (float0); dropout proportions get zeros: the walk does not
differentiate with respect to them. Forward-mode differentiation (`jax.jvp`,
`jax.jacfwd`, `jax.hessian`) of a custom_vjp function is not defined in JAX:
a call whose arguments carry a forward-mode tangent, or are differentiated
twice in reverse mode (`needs_autodiff`), runs JAX's own autodiff of the same
lowering with its recurrences as plain scans instead (engine/computation.py's
`_autodiff_twin`). That can be seen only outside a `jax.jit`: inside a jit of
your own, such transforms need `compile(..., lowering="plain", gradient="jax")`.
"""

from __future__ import annotations

from collections.abc import Callable, Mapping
from typing import Any, Protocol

import jax
import jax.numpy as jnp
import numpy as np
from jax._src.interpreters import ad as _ad  # JVPTracer: no public name tells forward mode from reverse

from ..core.layer import Weight
from ..core.tape import Tape, backward_deltas
from .values_only import values_only

__all__ = [
    "Arrays",
    "Forward",
    "GRADIENTS",
    "needs_autodiff",
    "input_cotangents",
    "tape_differentiated",
    "weight_cotangents",
]

#: How a Computation's call is differentiated: by the Tape's walk, or by JAX's autodiff of the lowered program.
GRADIENTS = ("tape", "jax")

Arrays = Mapping[str, jax.Array]


class Forward(Protocol):
    """What the gradient needs of a Computation: its forward Tapes, with the inputs' Tapes and transposes."""

    def __call__(
        self,
        params: Arrays,
        state: Arrays,
        inputs: Arrays,
        reads: tuple[jax.Array, ...],
        record: dict[str, tuple[Tape, Callable[[jax.Array], jax.Array]]] | None,
    ) -> dict[str, Tape]: ...


def tape_differentiated(
    forward: Forward,
    contexts: Callable[[jax.Array | None, Arrays | None], Any],
    differentiated: Forward | None = None,
) -> Callable[..., dict[str, jax.Array]]:
    """`run(params, state, inputs, key, reads, proportions) -> outputs`, whose vjp is the Tape's backward walk.

    `forward` builds the output Tapes (and, given `record`, records each input's Tape and the transpose of
    the row movement from the input array to it); `differentiated` (default `forward`) builds them where the
    call is differentiated (a lowering that pays in a training step only: engine/groups.py);
    `contexts(key, proportions)` is the context the forward and its backward run in (the dropout key and
    proportions)."""
    differentiated = differentiated or forward

    def values(tapes: Mapping[str, Tape]) -> dict[str, jax.Array]:
        return {name: tape.value for name, tape in tapes.items()}

    @jax.custom_vjp
    def computation(
        params: Arrays,
        state: Arrays,
        inputs: Arrays,
        key: jax.Array | None,
        reads: tuple[jax.Array, ...],
        proportions: Arrays | None,
    ) -> dict[str, jax.Array]:
        with contexts(key, proportions), values_only():  # not differentiated: no pullback is walked
            return values(forward(params, state, inputs, reads, None))

    def run_forward(
        params: Arrays,
        state: Arrays,
        inputs: Arrays,
        key: jax.Array | None,
        reads: tuple[jax.Array, ...],
        proportions: Arrays | None,
    ) -> tuple[dict[str, jax.Array], tuple[Any, ...]]:
        record: dict[str, tuple[Tape, Callable[[jax.Array], jax.Array]]] = {}
        with contexts(key, proportions):
            tapes = differentiated(params, state, inputs, reads, record)
            outputs = values(tapes)

            def pull(cotangents: Arrays) -> tuple[dict[str, jax.Array], dict[str, jax.Array], dict[str, jax.Array]]:
                deltas = backward_deltas([(tapes[name], cotangents[name]) for name in tapes])
                return weight_cotangents(deltas, params, state) + (input_cotangents(deltas, record, inputs),)

            # The walk as a jaxpr, traced in the forward's context; every value it reads (of any dtype:
            # `jax.closure_convert` would leave integer ones inside as constants) becomes a residual.
            walk, shapes = jax.make_jaxpr(pull, return_shape=True)(outputs)
        program = jax.tree_util.Partial(_Program(walk.jaxpr, jax.tree.structure(shapes)))
        # The arguments the walk does not differentiate get zero cotangents (float0 for keys and masks).
        return outputs, (program, walk.consts, _zero_cotangents((key, reads, proportions)))

    def run_backward(saved: tuple[Any, ...], cotangents: Arrays) -> tuple[Any, ...]:
        program, residuals, (d_key, d_reads, d_proportions) = saved
        d_params, d_state, d_inputs = program(residuals, cotangents)
        return d_params, d_state, d_inputs, d_key, d_reads, d_proportions

    computation.defvjp(run_forward, run_backward)
    return computation


class _Program:
    """A traced backward walk: its jaxpr, run on its residuals and the outputs' cotangents."""

    def __init__(self, jaxpr: Any, out_tree: Any):
        self.jaxpr, self.out_tree = jaxpr, out_tree

    def __call__(self, residuals: list[Any], cotangents: Arrays) -> Any:
        flat = jax.core.eval_jaxpr(self.jaxpr, residuals, *jax.tree.leaves(cotangents))
        return jax.tree.unflatten(self.out_tree, flat)


def weight_cotangents(
    deltas: Mapping[Tape, jax.Array], params: Arrays, state: Arrays
) -> tuple[dict[str, jax.Array], dict[str, jax.Array]]:
    """The cotangents of the parameters and of the state (non-trainable Weights) from the walk's deltas."""
    d_params = {name: jnp.zeros_like(value) for name, value in params.items()}
    d_state = {name: jnp.zeros_like(value) for name, value in state.items()}
    for node, delta in deltas.items():
        if node.parameter is not None:
            d_params[node.parameter] = d_params[node.parameter] + delta
        elif isinstance(node.layer, Weight) and node.layer.name in d_state and not node.layer.trainable:
            d_state[node.layer.name] = d_state[node.layer.name] + delta
    return d_params, d_state


def input_cotangents(
    deltas: Mapping[Tape, jax.Array],
    record: Mapping[str, tuple[Tape, Callable[[jax.Array], jax.Array]]],
    inputs: Arrays,
) -> dict[str, jax.Array]:
    """The inputs' cotangents: each input Tape's delta moved back to the input array's rows (zeros if unread:
    a request may give an input that no computed row reads, as a Failover that falls back on a constant)."""
    out = {}
    for name, value in inputs.items():
        tape, transpose = record.get(name, (None, None))
        delta = None if tape is None else deltas.get(tape)
        out[name] = (
            jnp.zeros_like(value) if delta is None or transpose is None else transpose(delta).astype(value.dtype)
        )
    return out


def needs_autodiff(tree: Any) -> bool:
    """Whether a leaf of `tree` is differentiated in a way the Tape's backward walk cannot serve: in forward mode
    (`jax.jvp`, `jax.jacfwd`, `jax.hessian`'s outer pass), or twice in reverse mode (`jax.jacrev(jax.grad(f))`),
    seen through any batching tracers around it."""
    return any(_needs_autodiff(leaf) for leaf in jax.tree.leaves(tree))


def _needs_autodiff(value: Any) -> bool:
    reverse = 0
    while isinstance(value, jax.core.Tracer):
        if isinstance(value, _ad.JVPTracer):
            return True
        if isinstance(value, _ad.LinearizeTracer):
            reverse += 1
            if reverse > 1:
                return True
        # A differentiation tracer holds its primal; a batching tracer its batched value.
        value = getattr(value, "primal", getattr(value, "val", None))
    return False


def _zero_cotangents(tree: Any) -> Any:
    """Zero cotangents shaped like `tree`: float0 for integer, boolean and key leaves."""

    def zero(leaf: Any) -> Any:
        dtype = jnp.result_type(leaf) if not jnp.issubdtype(leaf.dtype, jax.dtypes.prng_key) else None
        if dtype is None or not jnp.issubdtype(dtype, jnp.inexact):
            return np.zeros(np.shape(leaf), jax.dtypes.float0)
        return jnp.zeros_like(leaf)

    return jax.tree.map(zero, tree)
