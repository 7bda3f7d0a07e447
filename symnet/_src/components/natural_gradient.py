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
`init(dim, rank, ...)` is Kaldi's `InitDefault` (a special orthonormal `R_0`,
`rho = d = epsilon`), marked "not yet initialised from data" (`t = -1`), and
`precondition(state, matrix, ...) -> (preconditioned, scale, new_state)` is
Kaldi's `PreconditionDirections` (its first call runs Kaldi's `Init`: three
updates on the first minibatch from the default start). The formulas, floors,
the 10 initial updates before `update_period` applies, the re-orthogonalisation
when `C_t` is badly conditioned and the trace identities are Kaldi's. The
numbers are in the state's dtype, float32 by default (Kaldi computes the small
`Z_t` in double; here it is in the state's dtype, scaled by its trace before
`jnp.linalg.eigh` as Kaldi does). With float64 states the results equal a
float64 transcription of Kaldi's formulas to roundoff (tested). `State.W` is
`E_t^{1/2} R_t`, as Kaldi stores it; the counters `t` and `skipped` are float
arrays so that every leaf of a state is a float (see `affine` below).
The first call, the updates and the skipped calls are one `lax.fori_loop` of
4, 1 or 0 update steps, so the update is compiled once per preconditioner.

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
exact gradient (identical to `jax.grad`); that is the off switch. If a
component is used twice in one step its second backward reads the state the
first one wrote (Kaldi updates its preconditioner on every Backprop call).

`symnet.train` carries the states in the optimiser state: wrap an optax
optimiser with `optimizer(optax.sgd(lr), network)` and its state becomes a
`NaturalGradientState(inner, preconditioners)`; `Trainer`'s jitted step
enters the context for it, so `fit` trains with natural gradient and its
checkpoints save and resume the preconditioners with the optimiser state.

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
import math
from collections.abc import Mapping
from typing import TYPE_CHECKING, Any, NamedTuple, Protocol, TypeGuard

import numpy as np

from ..base.errors import ArgumentTypeError, ShapeError, SymnetError
from ..core.layer import Layer

if TYPE_CHECKING:
    import jax
    import jax.numpy as jnp
else:
    from ..core.lazyjax import jax, jnp

__all__ = [
    "active",
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
    "Preconditioning",
    "repeated_affine_gradients",
    "settings",
    "State",
    "step_context",
]

#: Kaldi's constants (OnlineNaturalGradient's constructor and PreconditionDirectionsInternal).
EPSILON = 1.0e-10
DELTA = 5.0e-4
NUM_INIT_ITERS = 3
NUM_INITIAL_UPDATES = 10
CONDITION_THRESHOLD = 1.0e6
ORTHOGONALITY_THRESHOLD = 1.0e-3


class State(NamedTuple):
    """One online preconditioner: `F_t = R_t^T D_t R_t + rho_t I`, stored as Kaldi stores it.

    `W`: `[rank, dim]`, `E_t^{1/2} R_t`; `rho`: `rho_t`; `d`: `[rank]`, the diagonal of `D_t`;
    `t`: the number of updates so far (-1: the first minibatch will initialise it);
    `skipped`: minibatches since the last update (for `update_period`). All float arrays.
    """

    W: jax.Array
    rho: jax.Array
    d: jax.Array
    t: jax.Array
    skipped: jax.Array

    @property
    def rank(self) -> int:
        return self.W.shape[0]

    @property
    def dim(self) -> int:
        return self.W.shape[1]


def orthonormal_special(rank: int, dim: int) -> np.ndarray:
    """Kaldi's `InitOrthonormalSpecial`: orthonormal rows, no zero row or column.

    Row `r` has `1/sqrt(k)` in columns `r, r + rank, r + 2 rank, ...` (k of them).
    """
    out = np.zeros((rank, dim))
    for r in range(rank):
        cols = np.arange(r, dim, rank)
        out[r, cols] = 1.0 / math.sqrt(len(cols))
    return out


def effective_rank(dim: int, rank: int) -> int:
    """The rank Kaldi uses: at most `dim - 1` (0 for `dim == 1`, where preconditioning is the identity)."""
    if dim < 1:
        raise ShapeError(f"natural gradient: the dimension must be positive, got {dim}")
    if rank < 1:
        raise ShapeError(f"natural gradient: the rank must be positive, got {rank}")
    return min(rank, dim - 1)


def init(dim: int, rank: int = 40, *, alpha: float = 4.0, epsilon: float = EPSILON, dtype: Any = np.float32) -> State:
    """Kaldi's `InitDefault(dim)` for a preconditioner of `rank` (clamped to `dim - 1`, as Kaldi does).

    The state is marked uninitialised (`t = -1`): the first `precondition` call initialises it from its
    minibatch, as Kaldi's `Init` does.
    """
    rank = effective_rank(dim, rank)
    e = 1.0 / (2.0 + (dim + rank) * alpha / dim) if rank else 1.0
    W = orthonormal_special(rank, dim) * math.sqrt(e)
    return State(
        W=jnp.asarray(W, dtype),
        rho=jnp.asarray(epsilon, dtype),
        d=jnp.full((rank,), epsilon, dtype),
        t=jnp.asarray(-1.0, dtype),
        skipped=jnp.asarray(0.0, dtype),
    )


def eta(num_rows: int, num_samples_history: float) -> float:
    """Kaldi's `Eta(N)`: how fast the scatter estimate follows the data (at most 0.9, as Kaldi keeps it)."""
    return min(1.0 - math.exp(-num_rows / num_samples_history), 0.9)


def precondition(
    state: State,
    matrix: jax.Array,
    *,
    update_period: int = 1,
    num_samples_history: float = 2000.0,
    alpha: float = 4.0,
    epsilon: float = EPSILON,
    delta: float = DELTA,
) -> tuple[jax.Array, jax.Array, State]:
    """Kaldi's `PreconditionDirections`: `(X_hat, scale, new_state)` for the rows of `matrix` `[N, dim]`.

    `X_hat = X - X W^T W` is `beta_t X G_t^{-1}`, and `scale * X_hat` has the Frobenius norm of `X`
    (`scale` is 1 when `X_hat` is zero). The state is updated after the first minibatch (which also
    initialises it), on every call for the first 10 updates, then once every `update_period` calls.
    The defaults are those of Kaldi's OnlineNaturalGradient; the components pass theirs.
    """
    if matrix.ndim != 2 or matrix.shape[1] != state.dim:
        raise ShapeError(
            f"natural gradient: a matrix of shape {tuple(matrix.shape)} for a preconditioner of "
            f"dimension {state.dim} (expected [rows, {state.dim}])"
        )
    if update_period < 1:
        raise SymnetError(f"natural gradient: update_period must be >= 1, got {update_period}")
    if not 0.0 < num_samples_history <= 1.0e6:
        raise SymnetError(f"natural gradient: num_samples_history must be in (0, 1e6], got {num_samples_history}")
    if alpha < 0.0:
        raise SymnetError(f"natural gradient: alpha must not be negative, got {alpha}")
    X = matrix.astype(state.W.dtype)
    if state.rank == 0:  # dim 1: the preconditioner is the identity (Kaldi's special case)
        return X, jnp.ones((), X.dtype), state
    opts = (float(num_samples_history), float(alpha), float(epsilon), float(delta))

    # Kaldi's Init (on the first minibatch: three updates from the default start, one if it has no more rows
    # than the rank, then t = 0) and the
    # update proper are the same step, run 4, 1 or 0 times: one copy of it in the compiled program.
    initialising = state.t < 0
    do_update = initialising | (state.t < NUM_INITIAL_UPDATES) | (state.skipped >= update_period - 1)
    init_iters = 1 if X.shape[0] <= state.rank else NUM_INIT_ITERS  # Kaldi's Init: 1 where rows <= rank
    num_updates = jnp.where(initialising, init_iters + 1, jnp.where(do_update, 1, 0))
    X_hat = X - (X @ state.W.T) @ state.W  # what a call without update returns
    skipped = (X_hat, jnp.sum(X_hat * X_hat), jnp.sum(X * X), state._replace(skipped=state.skipped + 1))
    X_hat, tr_hat, tr_x, new_state = jax.lax.fori_loop(0, num_updates, lambda i, c: _update(c[3], X, *opts), skipped)
    new_state = new_state._replace(t=jnp.where(initialising, jnp.ones_like(new_state.t), new_state.t))
    safe = jnp.where(tr_hat == 0, 1.0, tr_hat)
    scale = jnp.where(tr_hat == 0, 1.0, jnp.sqrt(jnp.maximum(tr_x, 0.0) / safe)).astype(X.dtype)
    return X_hat, scale, new_state


def _e(d: jax.Array, beta: jax.Array) -> jax.Array:
    """Kaldi's ComputeEt: `e_ii = 1 / (beta / d_ii + 1)`."""
    return 1.0 / (beta / d + 1.0)


def _update(
    s: State, X: jax.Array, num_samples_history: float, alpha: float, epsilon: float, delta: float
) -> tuple[jax.Array, jax.Array, jax.Array, State]:
    """One PreconditionDirectionsInternal with an update: `(X_hat, tr(X_hat X_hat^T), tr(X X^T), new_state)`."""
    N, D = X.shape
    R = s.W.shape[0]
    W, rho, d = s.W, s.rho, s.d
    et = eta(N, num_samples_history)
    etaN, eta1 = et / N, 1.0 - et

    H = X @ W.T  # [N, R]
    J = H.T @ X  # [R, D]
    if N > D:  # Kaldi computes L and K together when that is cheaper
        L = W @ J.T
    else:
        L = H.T @ H
    K = J @ J.T
    L = 0.5 * (L + L.T)
    K = 0.5 * (K + K.T)

    beta = rho * (1.0 + alpha) + alpha * jnp.sum(d) / D
    e = _e(d, beta)
    inv_sqrt_e = 1.0 / jnp.sqrt(e)

    # Z_t (eqn:Zt), then Z_t = U C U^T with C sorted from the largest.
    d_rho = d + rho
    L_e = inv_sqrt_e[:, None] * L * inv_sqrt_e[None, :]
    K_e = inv_sqrt_e[:, None] * K * inv_sqrt_e[None, :]
    Z = (
        etaN * etaN * K_e
        + etaN * eta1 * (L_e * d_rho[None, :] + d_rho[:, None] * L_e)
        + jnp.diag(eta1 * eta1 * d_rho * d_rho)
    )
    z_scale = jnp.maximum(1.0, jnp.trace(Z))
    c, U = jnp.linalg.eigh(Z / z_scale)
    c, U = c[::-1] * z_scale, U[:, ::-1]

    must_reorthogonalize = c[0] > CONDITION_THRESHOLD * c[R - 1]
    c_floor = (rho * (1.0 - et)) ** 2
    must_reorthogonalize = must_reorthogonalize | jnp.any(c < c_floor)
    c = jnp.maximum(c, c_floor)

    X_hat = X - H @ W
    tr_hat = jnp.sum(X_hat * X_hat)
    tr_x = jnp.sum(X * X)  # Kaldi's initial_product (not tr(X_hat X_hat^T) + tr(L (2 - E)): R_t drifts)

    sqrt_c = jnp.sqrt(c)
    rho1 = (et / N * tr_x + eta1 * (D * rho + jnp.sum(d)) - jnp.sum(sqrt_c)) / (D - R)
    d1 = sqrt_c - rho1
    floor_val = jnp.maximum(epsilon, delta * jnp.max(sqrt_c))  # Kaldi floors rho_{t+1} and d_{t+1} alike
    rho1 = jnp.maximum(rho1, floor_val)
    d1 = jnp.maximum(d1, floor_val)

    # W_{t+1} = A_t B_t (ComputeWt1).
    beta1 = rho1 * (1.0 + alpha) + alpha * jnp.sum(d1) / D
    e1 = _e(d1, beta1)
    sqrt_e1 = jnp.sqrt(e1)
    B = J + ((1.0 - et) / etaN * d_rho)[:, None] * W
    A = (etaN * sqrt_e1 / sqrt_c)[:, None] * U.T * inv_sqrt_e[None, :]
    W1 = A @ B

    def reorthogonalize(W1: jax.Array) -> jax.Array:
        # ReorthogonalizeXt1: make R_{t+1} = E^{-1/2} W_{t+1} orthonormal again (Cholesky of R R^T).
        inv_sqrt_e1 = 1.0 / sqrt_e1
        ortho = (W1 @ W1.T) * inv_sqrt_e1[:, None] * inv_sqrt_e1[None, :]
        unit = jnp.max(jnp.abs(ortho - jnp.eye(R, dtype=ortho.dtype))) <= ORTHOGONALITY_THRESHOLD
        C = jnp.linalg.cholesky(ortho)
        C_inv = jax.scipy.linalg.solve_triangular(C, jnp.eye(R, dtype=ortho.dtype), lower=True)
        fixed = (C_inv * sqrt_e1[:, None] * inv_sqrt_e1[None, :]) @ W1
        # Kaldi: where the Cholesky fails or its inverse has an entry of 100 or more, Gram-Schmidt on the rows
        # of W_{t+1} (OrthogonalizeRows; QR's Q with R's diagonal made positive), times E_{t+1}^{1/2}.
        q, r = jnp.linalg.qr(W1.T)
        gram_schmidt = (q * jnp.where(jnp.diag(r) < 0, -1.0, 1.0)[None, :]).T * sqrt_e1[:, None]
        cholesky_ok = jnp.all(jnp.isfinite(C_inv)) & (jnp.max(C_inv) < 100.0)
        fixed = jnp.where(cholesky_ok, fixed, gram_schmidt.astype(W1.dtype))
        return jnp.where(unit, W1, fixed)

    W1 = jax.lax.cond(must_reorthogonalize, reorthogonalize, lambda w: w, W1)
    new = State(W=W1, rho=rho1, d=d1, t=s.t + 1, skipped=jnp.zeros_like(s.skipped))
    return X_hat, tr_hat, tr_x, new


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
                raise SymnetError(f"two different natural-gradient components are named {layer.name!r}")
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


def affine_gradients(
    layer_settings: _Settings, states: Mapping[str, State], x: jax.Array, delta: jax.Array
) -> tuple[jax.Array, jax.Array, dict[str, State]]:
    """NaturalGradientAffineComponent::Update as gradients: `(d linear_params, d bias_params, new states)`.

    The rows of `[x 1]` and of `delta` (times the number of rows, see the module notes) are
    preconditioned; the gradient is `scale_in * scale_out * delta_p^T [x 1]_p`, its last column the bias's.
    TdnnComponent::UpdateNaturalGradient is this with its spliced input as `x`.
    """
    x2 = x.reshape(-1, x.shape[-1]).astype(states["in"].W.dtype)
    x1 = jnp.concatenate([x2, jnp.ones((x2.shape[0], 1), x2.dtype)], axis=1)
    g, new = _preconditioned_product(layer_settings, states, x1, delta)
    return g[:, :-1], g[:, -1], new


def linear_gradients(
    layer_settings: _Settings, states: Mapping[str, State], x: jax.Array, delta: jax.Array
) -> tuple[jax.Array, dict[str, State]]:
    """LinearComponent::Backprop's update as a gradient: `(d params, new states)`, as `affine_gradients` without
    the ones column (TdnnComponent::UpdateNaturalGradient without a bias, too)."""
    return _preconditioned_product(layer_settings, states, x, delta)


def _preconditioned_product(
    layer_settings: _Settings, states: Mapping[str, State], x: jax.Array, delta: jax.Array
) -> tuple[jax.Array, dict[str, State]]:
    """`scale_in * scale_out * delta_p^T x_p / n` over the `n` rows of `x` and `delta`, each preconditioned."""
    dtype = states["in"].W.dtype
    x2 = x.reshape(-1, x.shape[-1]).astype(dtype)
    d2 = delta.reshape(-1, delta.shape[-1]).astype(dtype)
    n = x2.shape[0]
    xp, in_scale, new_in = precondition(states["in"], x2, **layer_settings["in"][2])
    dp, out_scale, new_out = precondition(states["out"], d2 * n, **layer_settings["out"][2])
    return (in_scale * out_scale / n) * (dp.T @ xp), {"in": new_in, "out": new_out}


def repeated_affine_gradients(
    layer_settings: _Settings, states: Mapping[str, State], x: jax.Array, delta: jax.Array, num_repeats: int
) -> tuple[jax.Array, jax.Array, dict[str, State]]:
    """NaturalGradientRepeatedAffineComponent::Update as gradients: the block gradient `[dW db]`
    (`[block out, block in + 1]`) preconditioned row by row with the one `in` preconditioner."""
    dtype = states["in"].W.dtype
    in_b = states["in"].dim - 1
    rows = x.reshape(-1, x.shape[-1]).shape[0]
    xs = x.reshape(-1, in_b).astype(dtype)
    ds = delta.reshape(xs.shape[0], -1).astype(dtype)
    g = jnp.concatenate([ds.T @ xs, ds.sum(axis=0)[:, None]], axis=1)
    gp, scale, new_in = precondition(states["in"], g * rows, **layer_settings["in"][2])
    g = (scale / rows) * gp
    return g[:, :-1], g[:, -1], {"in": new_in}


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
    """

    def __init__(self, states: Mapping[str, Mapping[str, State]] | None, *, enabled: bool = True):
        self.states: dict[str, dict[str, State]] = {k: dict(v) for k, v in (states or {}).items()}
        self.enabled = bool(enabled)
        self._tokens: list[contextvars.Token] = []

    def __enter__(self) -> Preconditioning:
        self._tokens.append(_ACTIVE.set(self))
        return self

    def __exit__(self, *exc: Any) -> None:
        _ACTIVE.reset(self._tokens.pop())

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
        return state

    def update(self, layer: Any, states: Mapping[str, State]) -> None:
        """Record the new preconditioner states of the component `layer`, after its backward pass."""
        self.states[layer.name] = dict(states)


def _at(layer: Any) -> str:
    where = getattr(layer, "where", None)
    return f" (built at {where})" if where else ""


def active() -> Preconditioning | None:
    """The enabled `Preconditioning` context of the backward pass being run, if any."""
    ctx = _ACTIVE.get()
    return ctx if ctx is not None and ctx.enabled else None


class _Off:
    """The context of a training step without natural gradient: nothing to carry."""

    def __enter__(self) -> _Off:
        return self

    def __exit__(self, *exc: Any) -> None:
        pass

    def carry(self, opt_state: Any) -> Any:
        return opt_state


def step_context(opt_state: Any) -> Preconditioning | _Off:
    """For a training step: a `Preconditioning` over the states in `opt_state` if it is a
    `NaturalGradientState`, else a context that does nothing. Use `.carry(opt_state)` after backward."""
    if isinstance(opt_state, NaturalGradientState):
        return Preconditioning(opt_state.preconditioners)
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
