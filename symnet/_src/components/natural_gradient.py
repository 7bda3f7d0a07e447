"""Kaldi's online natural gradient (NG-SGD) for the components Kaldi trains with it, in pure JAX.

Kaldi trains `NaturalGradientAffineComponent` (and the repeated variant),
`LinearComponent` and `TdnnComponent` (unless its use-natural-gradient is
false; over its spliced input) with the online natural gradient of Povey, Zhang and Khudanpur (ICLR 2015 workshop,
"Parallel training of DNNs with Natural Gradient and Parameter Averaging";
`OnlineNaturalGradient` in Kaldi's `nnet3/natural-gradient-online.h`). Each
minibatch, before the weight gradient is formed, the rows of the input values
(with a column of ones appended, for the bias) and the rows of the output
derivatives are multiplied by the inverse of a smoothed low-rank-plus-identity
estimate of their own scatter matrix, `F_t = R_t^T D_t R_t + rho_t I`, which is
updated online from each minibatch. The preconditioned matrices are rescaled so
that their Frobenius norm is the one of the input (Kaldi returns that scale
separately, and so do we). The input derivative is the plain one.

Pure functions
--------------
One preconditioner is `symnet._src.components.online_preconditioner` (re-exported here):
`init(dim, rank, ...)` is Kaldi's `InitDefault`, marked "not yet initialised from data" (`t = -1`), and
`precondition(state, matrix, ...) -> (preconditioned, scale, new_state)` is Kaldi's
`PreconditionDirections` (its first call runs Kaldi's `Init`). The same update also runs in two
parts, `project` (the preconditioned matrix and the few products with it an update reads) and
`advance` (the update from those), so that a training step compiles only the products; see that
module.

How the state is carried (the design)
-------------------------------------
Parameters live in `network.params`; the preconditioner states are not
parameters (no optimiser may touch them) but training state, kept in a plain
pytree: `init_states(network)` gives `{component name: {"in": State, "out":
State}}` (only `"in"` for NaturalGradientRepeatedAffineComponent, which, like
Kaldi, preconditions its gradient matrix with one preconditioner).

A component takes part by declaring its preconditioners: a
`natural_gradient_settings()` method giving `{key: (dim, rank, options)}`
(NaturalGradientAffineComponent, NaturalGradientRepeatedAffineComponent,
LinearComponent and TdnnComponent have one). This module knows no component class: data flows one way, from
the components (which import it) to the functions here.

A training step is a pure function of the states too. The component's
backward (the layer's `vjp`, which the Tape calls) asks `active()` for the
enabled `Preconditioning` context, reads its state from it (`state`), and
writes the new one back (`update`):

    @jax.jit
    def step(network, opt_state, ng_states, x, targets):
        with natural_gradient.Preconditioning(ng_states) as ng:   # on
            tape = computation.forward(network, {"input": x})["output"]
            loss, _, delta = objective("linear", tape.value, targets, weights)
            grads = tape.backward(delta)            # preconditioned weight gradients
        ...optax update...
        return network, opt_state, ng.states        # the updated states leave the step

The context lives only while the step is traced: the states come in as
arguments of the jitted function and go out as its results, so nothing is kept
in Python between calls and the step stays a pure function (like Flax's
"mutable collections"). Outside any context, or in
`Preconditioning(states, enabled=False)`, the components' backward is the
exact gradient (identical to `jax.grad`); that is the off switch. Each
component is preconditioned once per step: a component that several
component-nodes use (which Kaldi updates on each Backprop call) is refused by
`components`.

`symnet.train` carries the states in the optimiser state: wrap an optax
optimiser with `optimizer(optax.sgd(lr), network)` and its state becomes a
`NaturalGradientState(inner, preconditioners)`; `Trainer`'s jitted step
enters the context for it, so `fit` trains with natural gradient and its
checkpoints save and resume the preconditioners with the optimiser state.
The Trainer's context is `Preconditioning(states, deferred=True)`: the
components' backward then only projects (`project`) and records the
statistics an update needs (`Preconditioning.statistics`); the step returns
them, and the Trainer updates the states with `advance_states` in a second
jitted program, which has the same shapes for every chunk width. So the
update's small algebra (eigendecompositions, re-orthogonalisation: most of
what natural gradient adds to a step's compilation) is compiled once per run,
not once per chunk width, and the results are the in-step update's to roundoff.

For code that differentiates with `jax.grad` instead of the Tape, `affine(x,
w, b, states)` is an affine map with a `jax.custom_vjp` whose backward
preconditions as above and returns the *new states as the cotangent of the
states argument*: `jax.grad(loss, argnums=(params, states))` gives the
preconditioned gradients and the updated states at once.

Scale: Kaldi's objectives are sums over frames, symnet's are means, so the
output derivatives here are about `1/frames` of Kaldi's. The absolute floor
`epsilon = 1e-10` on the preconditioner's variances would then be reached far
earlier than in Kaldi. So the output derivatives (and, for the repeated
component, the gradient matrix) are preconditioned multiplied by the number
of rows, and the result divided back: the preconditioner is scale-equivariant
apart from its floors, so this only keeps it in Kaldi's working range.

Natural gradient applies where the Tape calls the component's `vjp`; inside a
recurrence (lowered to `lax.scan` and differentiated by JAX) the gradient is
the plain one.
"""

from __future__ import annotations

import contextvars
import functools
from collections.abc import Callable, Mapping
from typing import TYPE_CHECKING, Any, NamedTuple, Protocol, TypeGuard

import numpy as np

from ..base.errors import ArgumentTypeError, SymnetError
from ..core.layer import Layer
from .online_preconditioner import (
    CONDITION_THRESHOLD,
    DELTA,
    EPSILON,
    NUM_INIT_ITERS,
    NUM_INITIAL_UPDATES,
    ORTHOGONALITY_THRESHOLD,
    State,
    Statistics,
    advance,
    effective_rank,
    eta,
    init,
    orthonormal_special,
    precondition,
    project,
    transposed_product,
)

if TYPE_CHECKING:
    import jax
    import jax.numpy as jnp
else:
    from ..core.lazyjax import jax, jnp

__all__ = [
    "active",
    "advance",
    "advance_states",
    "affine",
    "affine_gradients",
    "components",
    "CONDITION_THRESHOLD",
    "DELTA",
    "effective_rank",
    "EPSILON",
    "eta",
    "init",
    "init_states",
    "is_natural_gradient",
    "linear_gradients",
    "NaturalGradientComponent",
    "NaturalGradientState",
    "NUM_INIT_ITERS",
    "NUM_INITIAL_UPDATES",
    "optimizer",
    "ORTHOGONALITY_THRESHOLD",
    "orthonormal_special",
    "precondition",
    "Preconditioner",
    "Preconditioning",
    "project",
    "repeated_affine_gradients",
    "settings",
    "State",
    "Statistics",
    "step_context",
]

# ----- the components' settings and states ----------------------------------------------------


class NaturalGradientComponent(Protocol):
    """What a natural-gradient component has: its Kaldi name and its preconditioners' settings."""

    name: str

    def natural_gradient_settings(self) -> dict[str, tuple[int, int, dict[str, Any]]]: ...


def is_natural_gradient(layer: Any) -> TypeGuard[NaturalGradientComponent]:
    """Whether `layer` is a component Kaldi trains with natural gradient (and symnet can precondition):
    one that declares its preconditioners with a `natural_gradient_settings()` method, and has some
    (a TdnnComponent with use-natural-gradient=false declares none)."""
    declared = getattr(layer, "natural_gradient_settings", None)
    return callable(declared) and bool(declared())


def settings(layer: Any) -> dict[str, tuple[int, int, dict[str, Any]]]:
    """Per preconditioner of a component: `(dim, rank, options)` as Kaldi's SetNaturalGradientConfigs sets
    them, from the component's `natural_gradient_settings()`."""
    if not is_natural_gradient(layer):
        raise SymnetError(f"{type(layer).__name__} is not trained with natural gradient")
    return layer.natural_gradient_settings()


def components(target: Any) -> dict[str, Any]:
    """Component name -> component, for every natural-gradient component under `target`.

    `target` is a Network, a Layer or a mapping of name -> Layer.
    """
    if isinstance(target, Layer):
        roots = [target]
    elif isinstance(target, Mapping):
        roots = list(target.values())
    elif hasattr(target, "structure"):
        roots = [layer for _, layer in target.structure.outputs]
    else:
        raise ArgumentTypeError(
            f"natural gradient: expected a Network, a Layer or a mapping of layers, not {type(target).__name__}"
        )
    found: dict[str, Any] = {}
    seen: set[int] = set()
    stack = list(roots)
    while stack:
        layer = stack.pop()
        if id(layer) in seen:
            continue
        seen.add(id(layer))
        if is_natural_gradient(layer):
            other = found.setdefault(layer.name, layer)
            if other is not layer and other != layer:
                raise SymnetError(
                    f"natural gradient: two different layers are the component {layer.name!r} (a component used "
                    "by several component-nodes, or two components of one name); symnet preconditions a "
                    "component used once per step: train this network without natural gradient"
                )
        stack.extend(layer.children)
    return dict(sorted(found.items()))


def init_states(target: Any, dtype: Any = np.float32) -> dict[str, dict[str, State]]:
    """`{component name: {"in": State, "out": State}}` for every natural-gradient component of `target`."""
    out = {}
    for name, layer in components(target).items():
        out[name] = {
            key: init(dim, rank, alpha=opts["alpha"], dtype=dtype) for key, (dim, rank, opts) in settings(layer).items()
        }
    return out


# ----- the preconditioned gradients -----------------------------------------------------------------


#: Per preconditioner: `(dim, rank, options)` (the gradients read only the options).
_Settings = Mapping[str, tuple[int | None, int | None, dict[str, Any]]]


#: What preconditions a matrix: `precondition` (`(X_hat, scale, new state)`) or `project` (`(X_hat, scale,
#: statistics)`, for a deferred update); the gradients below return the third results by preconditioner key.
Preconditioner = Callable[..., tuple["jax.Array", "jax.Array", Any]]


def affine_gradients(
    layer_settings: _Settings,
    states: Mapping[str, State],
    x: jax.Array,
    delta: jax.Array,
    preconditioner: Preconditioner = precondition,
) -> tuple[jax.Array, jax.Array, dict[str, Any]]:
    """NaturalGradientAffineComponent::Update as gradients: `(d linear_params, d bias_params, new states)`.

    The rows of `[x 1]` and of `delta` (times the number of rows, see the module notes) are
    preconditioned; the gradient is `scale_in * scale_out * delta_p^T [x 1]_p`, its last column the bias's.
    TdnnComponent::UpdateNaturalGradient is this with its spliced input as `x`. With `preconditioner=project`
    the third result is each preconditioner's `Statistics` instead of its new state.
    """
    x2 = x.reshape(-1, x.shape[-1]).astype(states["in"].W.dtype)
    x1 = jnp.concatenate([x2, jnp.ones((x2.shape[0], 1), x2.dtype)], axis=1)
    g, new = _preconditioned_product(layer_settings, states, x1, delta, preconditioner)
    return g[:, :-1], g[:, -1], new


def linear_gradients(
    layer_settings: _Settings,
    states: Mapping[str, State],
    x: jax.Array,
    delta: jax.Array,
    preconditioner: Preconditioner = precondition,
) -> tuple[jax.Array, dict[str, Any]]:
    """LinearComponent::Backprop's update as a gradient: `(d params, new states)`, as `affine_gradients` without
    the ones column (TdnnComponent::UpdateNaturalGradient without a bias, too)."""
    return _preconditioned_product(layer_settings, states, x, delta, preconditioner)


def _preconditioned_product(
    layer_settings: _Settings,
    states: Mapping[str, State],
    x: jax.Array,
    delta: jax.Array,
    preconditioner: Preconditioner,
) -> tuple[jax.Array, dict[str, Any]]:
    """`scale_in * scale_out * delta_p^T x_p / n` over the `n` rows of `x` and `delta`, each preconditioned."""
    dtype = states["in"].W.dtype
    x2 = x.reshape(-1, x.shape[-1]).astype(dtype)
    d2 = delta.reshape(-1, delta.shape[-1]).astype(dtype)
    n = x2.shape[0]
    # The wider side's preconditioned matrix is left as its factors: `dp^T (x - H W)` from `dp^T x` and the
    # `[n, rank]` H costs `n * rank * narrow` instead of `n * rank * wide` (the same product, reassociated).
    wide_in = x2.shape[1] > d2.shape[1]
    xp, in_scale, new_in = preconditioner(states["in"], x2, factored=wide_in, **layer_settings["in"][2])
    dp, out_scale, new_out = preconditioner(states["out"], d2 * n, factored=not wide_in, **layer_settings["out"][2])
    return (in_scale * out_scale / n) * transposed_product(dp, xp), {"in": new_in, "out": new_out}


def repeated_affine_gradients(
    layer_settings: _Settings,
    states: Mapping[str, State],
    x: jax.Array,
    delta: jax.Array,
    num_repeats: int,
    preconditioner: Preconditioner = precondition,
) -> tuple[jax.Array, jax.Array, dict[str, Any]]:
    """NaturalGradientRepeatedAffineComponent::Update as gradients: the block gradient `[dW db]`
    (`[block out, block in + 1]`) preconditioned row by row with the one `in` preconditioner."""
    dtype = states["in"].W.dtype
    in_b = states["in"].dim - 1
    rows = x.reshape(-1, x.shape[-1]).shape[0]
    xs = x.reshape(-1, in_b).astype(dtype)
    ds = delta.reshape(xs.shape[0], -1).astype(dtype)
    g = jnp.concatenate([ds.T @ xs, ds.sum(axis=0)[:, None]], axis=1)
    gp, scale, new_in = preconditioner(states["in"], g * rows, **layer_settings["in"][2])
    g = (scale / rows) * gp
    return g[:, :-1], g[:, -1], {"in": new_in}


def advance_states(
    states: Mapping[str, Mapping[str, State]],
    statistics: Mapping[str, Mapping[str, Statistics]],
    network_settings: Mapping[str, _Settings],
    init_round: jax.Array,
    apply: jax.Array,
) -> dict[str, dict[str, State]]:
    """Every preconditioner of `statistics` (a deferred step's `Preconditioning.statistics`) advanced by
    `advance` with its component's options (`network_settings`: component name -> `settings(component)`); the
    states of components the step did not precondition are left as they are."""
    out = {name: dict(by_key) for name, by_key in states.items()}
    for name, by_key in statistics.items():
        for key, stats in by_key.items():
            opts = network_settings[name][key][2]
            out[name][key] = advance(states[name][key], stats, init_round=init_round, apply=apply, **opts)
    return out


# ----- the context the components' backward reads ---------------------------------------------------


_ACTIVE: contextvars.ContextVar[Preconditioning | None] = contextvars.ContextVar(
    "symnet_natural_gradient", default=None
)


class Preconditioning:
    """Natural gradient for the backward passes run inside `with Preconditioning(states):`.

    `states` is `init_states(network)` (or the states a previous step returned); `self.states` holds the
    updated ones after the backward pass. With `enabled=False` the components' backward is the exact
    gradient and the states are left as they are. Meant to be entered inside the jitted step (see the
    module notes): the states go in and out as arguments and results of that step.

    With `deferred=True` the backward passes `project` instead: `self.states` stay as they came, and
    `self.statistics` (`{component name: {key: Statistics}}`) is what `advance_states` updates them with,
    after the step. The states must be initialised then (`t >= 0`, or `advance`'s initialisation rounds).
    """

    def __init__(
        self, states: Mapping[str, Mapping[str, State]] | None, *, enabled: bool = True, deferred: bool = False
    ):
        self.states: dict[str, dict[str, State]] = {k: dict(v) for k, v in (states or {}).items()}
        self.statistics: dict[str, dict[str, Statistics]] = {}
        self.enabled = bool(enabled)
        self.deferred = bool(deferred)
        self._tokens: list[contextvars.Token] = []

    def __enter__(self) -> Preconditioning:
        self._tokens.append(_ACTIVE.set(self))
        return self

    def __exit__(self, *exc: Any) -> None:
        _ACTIVE.reset(self._tokens.pop())

    @property
    def preconditioner(self) -> Preconditioner:
        """What the components' gradients precondition with: `project` if deferred, else `precondition`."""
        return project if self.deferred else precondition

    def carry(self, opt_state: Any) -> Any:
        """`opt_state` with the updated states (for a `NaturalGradientState`; others are returned as they are)."""
        if isinstance(opt_state, NaturalGradientState):
            return opt_state._replace(preconditioners=self.states)
        return opt_state

    def state(self, layer: Any) -> dict[str, State]:
        """The preconditioner states of the component `layer` (by its name); SymnetError if there are none."""
        state = self.states.get(layer.name)
        if state is None:
            raise SymnetError(
                f"natural gradient is on, but there is no preconditioner state for {type(layer).__name__} "
                f"{layer.name!r} (states for {sorted(self.states)}); make them with "
                f"symnet.natural_gradient.init_states(network){_at(layer)}"
            )
        if layer.name in self.statistics:
            raise SymnetError(
                f"natural gradient: {type(layer).__name__} {layer.name!r} is differentiated twice in one step, "
                f"and a deferred update reads each preconditioner once{_at(layer)}"
            )
        return state

    def update(self, layer: Any, new: Mapping[str, Any]) -> None:
        """Record what the component `layer`'s backward pass gave its preconditioners: their new states, or
        (deferred) their statistics."""
        if self.deferred:
            self.statistics[layer.name] = dict(new)
        else:
            self.states[layer.name] = dict(new)


def _at(layer: Any) -> str:
    where = getattr(layer, "where", None)
    return f" (built at {where})" if where else ""


def active() -> Preconditioning | None:
    """The enabled `Preconditioning` context of the backward pass being run, if any."""
    ctx = _ACTIVE.get()
    return ctx if ctx is not None and ctx.enabled else None


class _Off:
    """The context of a training step without natural gradient: nothing to carry, no statistics."""

    @property
    def statistics(self) -> dict[str, dict[str, Statistics]]:
        return {}

    def __enter__(self) -> _Off:
        return self

    def __exit__(self, *exc: Any) -> None:
        pass

    def carry(self, opt_state: Any) -> Any:
        return opt_state


def step_context(opt_state: Any, *, deferred: bool = False) -> Preconditioning | _Off:
    """For a training step: a `Preconditioning` (`deferred` or not) over the states in `opt_state` if it is a
    `NaturalGradientState`, else a context that does nothing. Use `.carry(opt_state)` after backward."""
    if isinstance(opt_state, NaturalGradientState):
        return Preconditioning(opt_state.preconditioners, deferred=deferred)
    return _Off()


# ----- optax: the states as part of the optimiser state ------------------------------------------


class NaturalGradientState(NamedTuple):
    """The state of `optimizer(inner, network)`: the wrapped optimiser's state and the preconditioners."""

    inner: Any
    preconditioners: dict


def optimizer(inner: Any, network: Any, *, dtype: Any = np.float32) -> Any:
    """`inner` (an optax GradientTransformation) training `network`'s NaturalGradient* components with
    Kaldi's natural gradient: its state also holds their preconditioners (`init_states(network)`).

    The update itself is `inner`'s: the preconditioning happens in the backward pass of a training step
    that enters `step_context(opt_state)` (symnet.train's Trainer does), which puts the new states back.
    Use it as the outermost transformation (`optimizer(optax.chain(...), net)`). Of Kaldi's rules
    (`symnet.train.kaldi_rules(...)`, which have a `with_natural_gradient` method) it gives the same rules
    with natural gradient. Extra arguments of `update` (`frames=`, `sequences=`) reach `inner`.
    """
    import optax

    with_natural_gradient = getattr(inner, "with_natural_gradient", None)
    if callable(with_natural_gradient):
        return with_natural_gradient(network, dtype=dtype)
    if not components(network):
        raise SymnetError(
            "natural gradient: the network has no component Kaldi trains with it (NaturalGradientAffineComponent, "
            "NaturalGradientRepeatedAffineComponent, LinearComponent, TdnnComponent)"
        )

    def init_fn(params: Any) -> NaturalGradientState:
        return NaturalGradientState(inner.init(params), init_states(network, dtype))

    wrapped = optax.with_extra_args_support(inner)

    def update_fn(
        updates: Any, state: NaturalGradientState, params: Any = None, **extra: Any
    ) -> tuple[Any, NaturalGradientState]:
        updates, inner_state = wrapped.update(updates, state.inner, params, **extra)
        return updates, NaturalGradientState(inner_state, state.preconditioners)

    return optax.GradientTransformationExtraArgs(init_fn, update_fn)


# ----- a functional op for jax.grad ------------------------------------------------------------------


def affine(
    x: jax.Array,
    w: jax.Array,
    b: jax.Array,
    states: Mapping[str, State],
    *,
    update_period: int = 4,
    num_samples_history: float = 2000.0,
    alpha: float = 4.0,
) -> jax.Array:
    """`x W^T + b` whose `jax.custom_vjp` backward is Kaldi's natural-gradient update.

    Under `jax.grad`/`jax.vjp` the cotangents of `w` and `b` are the preconditioned gradients and the
    cotangent of `states` (`{"in": State over input_dim + 1, "out": State over output_dim}`) is the
    updated states (so differentiate once per step, with `states` used once). The input's
    cotangent is the exact one.
    """
    opts = (
        ("update_period", int(update_period)),
        ("num_samples_history", float(num_samples_history)),
        ("alpha", float(alpha)),
    )
    return _ng_affine()(opts, x, w, b, {"in": states["in"], "out": states["out"]})


_Opts = tuple[tuple[str, float], ...]
_Residuals = tuple["jax.Array", "jax.Array", "jax.Array", Mapping[str, State]]


def _ng_affine_fwd(
    opts: _Opts, x: jax.Array, w: jax.Array, b: jax.Array, states: Mapping[str, State]
) -> tuple[jax.Array, _Residuals]:
    return jnp.matmul(x, w.T) + b, (x, w, b, states)


def _ng_affine_bwd(
    opts: _Opts, residuals: _Residuals, delta: jax.Array
) -> tuple[jax.Array, jax.Array, jax.Array, dict[str, State]]:
    x, w, b, states = residuals
    o = dict(opts)
    layer_settings = {"in": (None, None, o), "out": (None, None, o)}
    dw, db, new = affine_gradients(layer_settings, states, x, delta)
    return jnp.matmul(delta, w), dw.astype(w.dtype), db.astype(b.dtype), new


@functools.cache
def _ng_affine() -> Any:
    """`affine`'s custom_vjp function, made on first use (importing symnet imports no jax)."""
    function = jax.custom_vjp(lambda opts, x, w, b, states: jnp.matmul(x, w.T) + b, nondiff_argnums=(0,))
    function.defvjp(_ng_affine_fwd, _ng_affine_bwd)
    return function
