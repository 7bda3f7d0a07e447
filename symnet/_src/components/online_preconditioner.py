"""Kaldi's OnlineNaturalGradient, one preconditioner: its state, `precondition`, and the same update split in two.

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
arrays so that every leaf of a state is a float.

An update reads the minibatch's matrix `X` only through a few products
(`Statistics`: `J = H^T X` and `L = H^T H` with `H = X W^T`, `tr(X X^T)`, the
number of rows), so it can run apart from the step that made `X`:
`project(state, X)` is the preconditioned matrix and the statistics (products
with `X`, cheap to compile, one program per shape of `X`), and
`advance(state, statistics)` the update from them (the small algebra: an
eigendecomposition, the re-orthogonalisation; its shapes are the
preconditioner's, whatever `X`'s). `symnet.train`'s Trainer compiles
`advance` once for every chunk width this way, instead of once inside each
width's step (`precondition`, which runs both in one program). Kaldi's `Init`
needs fresh products with `X` for each of its updates: `advance` takes an
`init_round`, and the Trainer runs the first minibatch's projection once per
round (`symnet._src.train.trainer`).
"""

from __future__ import annotations

import math
from typing import TYPE_CHECKING, Any, NamedTuple

import numpy as np

from ..base.errors import ShapeError, SymnetError

if TYPE_CHECKING:
    import jax
    import jax.numpy as jnp
else:
    from ..core.lazyjax import jax, jnp

__all__ = [
    "advance",
    "CONDITION_THRESHOLD",
    "DELTA",
    "effective_rank",
    "EPSILON",
    "eta",
    "init",
    "LowRank",
    "NUM_INIT_ITERS",
    "NUM_INITIAL_UPDATES",
    "ORTHOGONALITY_THRESHOLD",
    "orthonormal_special",
    "precondition",
    "project",
    "State",
    "Statistics",
    "transposed_product",
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


class Statistics(NamedTuple):
    """What an update reads of a minibatch's matrix `X` (`[N, dim]`), with `H = X W^T`: `J = H^T X`
    (`[rank, dim]`), `L = H^T H` (`[rank, rank]`), `tr_x = tr(X X^T)` and `rows = N` (float arrays).
    Zeros where the state was not due for an update (`project`)."""

    J: jax.Array
    L: jax.Array
    tr_x: jax.Array
    rows: jax.Array


class LowRank(NamedTuple):
    """A preconditioned matrix `X - H W` left as its factors (`X` `[N, dim]`, `H = X W^T` `[N, rank]`, `W`
    `[rank, dim]`): a weight gradient needs only its product with the other side's matrix, which is cheaper
    from the factors when `dim` is the wider side (`transposed_product`)."""

    X: jax.Array
    H: jax.Array
    W: jax.Array


def transposed_product(a: jax.Array | LowRank, b: jax.Array | LowRank) -> jax.Array:
    """`a^T b`, either of them a `LowRank` (neither materialised: `N x rank` products instead of `N x dim`)."""
    if isinstance(b, LowRank):
        assert not isinstance(a, LowRank)
        return a.T @ b.X - (a.T @ b.H) @ b.W
    if isinstance(a, LowRank):
        return a.X.T @ b - a.W.T @ (a.H.T @ b)
    return a.T @ b


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


def _check(state: State, matrix: jax.Array, update_period: int, num_samples_history: float, alpha: float) -> None:
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


def _due(state: State, update_period: int) -> jax.Array:
    """Whether this minibatch updates the state (Kaldi: the first 10 updates, then one every `update_period`)."""
    return (state.t < NUM_INITIAL_UPDATES) | (state.skipped >= update_period - 1)


def precondition(
    state: State,
    matrix: jax.Array,
    *,
    update_period: int = 1,
    num_samples_history: float = 2000.0,
    alpha: float = 4.0,
    epsilon: float = EPSILON,
    delta: float = DELTA,
    factored: bool = False,
) -> tuple[Any, jax.Array, State]:
    """Kaldi's `PreconditionDirections`: `(X_hat, scale, new_state)` for the rows of `matrix` `[N, dim]`.

    `X_hat = X - X W^T W` is `beta_t X G_t^{-1}`, and `scale * X_hat` has the Frobenius norm of `X`
    (`scale` is 1 when `X_hat` is zero); with `factored` it is returned as its factors (a `LowRank`). The
    state is updated after the first minibatch (which also initialises it), on every call for the first 10
    updates, then once every `update_period` calls.
    The defaults are those of Kaldi's OnlineNaturalGradient; the components pass theirs.
    """
    _check(state, matrix, update_period, num_samples_history, alpha)
    X = matrix.astype(state.W.dtype)
    if state.rank == 0:  # dim 1: the preconditioner is the identity (Kaldi's special case)
        return X, jnp.ones((), X.dtype), state
    opts = (float(num_samples_history), float(alpha), float(epsilon), float(delta))

    # Kaldi's Init (on the first minibatch: three updates from the default start, one if it has no more rows
    # than the rank, then t = 0) and the update proper are the same step, run 4, 1 or 0 times: one copy of it
    # in the compiled program. Each round's X_hat is the one of the state it starts from.
    initialising = state.t < 0
    init_iters = 1 if X.shape[0] <= state.rank else NUM_INIT_ITERS  # Kaldi's Init: 1 where rows <= rank
    num_updates = jnp.where(initialising, init_iters + 1, jnp.where(_due(state, update_period), 1, 0))

    def round(i: jax.Array, carry: tuple[Any, jax.Array, jax.Array, State]) -> Any:
        s = carry[3]
        H, X_hat, tr_hat, tr_x = _products(s.W, X, factored)
        return X_hat, tr_hat, tr_x, _update(s, _statistics(s.W, X, H, tr_x), *opts)

    _, X_hat, tr_hat, tr_x = _products(state.W, X, factored)  # what a call without update returns
    start = (X_hat, tr_hat, tr_x, state._replace(skipped=state.skipped + 1))
    X_hat, tr_hat, tr_x, new_state = jax.lax.fori_loop(0, num_updates, round, start)
    new_state = new_state._replace(t=jnp.where(initialising, jnp.ones_like(new_state.t), new_state.t))
    return X_hat, _scale(tr_hat, tr_x).astype(X.dtype), new_state


def project(
    state: State,
    matrix: jax.Array,
    *,
    update_period: int = 1,
    num_samples_history: float = 2000.0,
    alpha: float = 4.0,
    epsilon: float = EPSILON,
    delta: float = DELTA,
    factored: bool = False,
) -> tuple[Any, jax.Array, Statistics]:
    """`precondition` without the update: `(X_hat, scale, statistics)`, the statistics for `advance`
    (computed only where the state is due for an update, zeros otherwise; `X_hat` a `LowRank` with
    `factored`). The state must be initialised (`t >= 0`), or be in `advance`'s initialisation rounds."""
    _check(state, matrix, update_period, num_samples_history, alpha)
    X = matrix.astype(state.W.dtype)
    if state.rank == 0:
        zero = jnp.zeros((), X.dtype)
        return (
            X,
            jnp.ones((), X.dtype),
            Statistics(jnp.zeros((0, X.shape[1]), X.dtype), jnp.zeros((0, 0), X.dtype), zero, zero),
        )
    H, X_hat, tr_hat, tr_x = _products(state.W, X, factored)
    due = _due(state, update_period)
    R, D = state.W.shape
    zero = jnp.zeros((), X.dtype)
    skip = Statistics(J=jnp.zeros((R, D), X.dtype), L=jnp.zeros((R, R), X.dtype), tr_x=zero, rows=zero)
    statistics = jax.lax.cond(due, lambda: _statistics(state.W, X, H, tr_x), lambda: skip)
    return X_hat, _scale(tr_hat, tr_x).astype(X.dtype), statistics


def advance(
    state: State,
    statistics: Statistics,
    *,
    init_round: jax.Array,
    apply: jax.Array,
    update_period: int = 1,
    num_samples_history: float = 2000.0,
    alpha: float = 4.0,
    epsilon: float = EPSILON,
    delta: float = DELTA,
) -> State:
    """The state after a minibatch that `project` read: what `precondition` would return as its new state.

    `init_round` (an int32 scalar) is -1 for a training step. Kaldi's `Init`, on an uninitialised state's
    first minibatch, is rounds 0, 1 and 2 (`NUM_INIT_ITERS`), each with the statistics of a projection by the
    state the round before left; the state updates in round 0 only, or in every round (1 only where the
    minibatch has no more rows than the rank), and is initialised (`t = 0`) after round 2. Then the
    minibatch's step (round -1) updates it as usual. `apply` false (a loss-scaled step that overflowed)
    leaves the state as it was.
    """
    if state.rank == 0:
        return state
    opts = (float(num_samples_history), float(alpha), float(epsilon), float(delta))
    initialising = init_round >= 0
    uninitialised = state.t < 0
    init_iters = jnp.where(statistics.rows <= state.rank, 1, NUM_INIT_ITERS)
    update = jnp.where(initialising, uninitialised & (init_round < init_iters), _due(state, update_period)) & apply
    new = jax.lax.cond(update, lambda: _update(state, statistics, *opts), lambda: state)
    # The counters: in Init's rounds only the last one sets t = 0; a training step counts an update or a skip.
    last_round = uninitialised & (init_round == NUM_INIT_ITERS - 1)
    t = jnp.where(initialising, jnp.where(last_round, jnp.zeros_like(state.t), state.t), new.t)
    skipped = jnp.where(initialising, state.skipped, jnp.where(update, new.skipped, state.skipped + 1))
    new = new._replace(t=t, skipped=skipped)
    return jax.tree.map(lambda a, b: jnp.where(apply, a, b), new, state)


def _products(W: jax.Array, X: jax.Array, factored: bool = False) -> tuple[jax.Array, Any, jax.Array, jax.Array]:
    """`(H, X_hat, tr(X_hat X_hat^T), tr(X X^T))` with `H = X W^T` and `X_hat = X - H W` (with `factored`, a
    `LowRank`, and its trace from `H^T H` and `W W^T`: `tr(X X^T) - 2 tr(H^T H) + <H^T H, W W^T>`)."""
    H = X @ W.T  # [N, R]
    # tr(X X^T) is Kaldi's initial_product (not tr(X_hat X_hat^T) + tr(L (2 - E)): R_t drifts).
    tr_x = jnp.sum(X * X)
    if factored:
        G = H.T @ H
        # X_hat keeps at least (1 - max E)^2 of each direction's energy (E_ii = 1 / (beta / d_ii + 1) < 1), so
        # the difference does not cancel to noise; a rounding below zero is a zero X_hat (`_scale`).
        tr_hat = jnp.maximum(tr_x - 2.0 * jnp.trace(G) + jnp.sum(G * (W @ W.T)), 0.0)
        return H, LowRank(X, H, W), tr_hat, tr_x
    X_hat = X - H @ W
    return H, X_hat, jnp.sum(X_hat * X_hat), tr_x


def _statistics(W: jax.Array, X: jax.Array, H: jax.Array, tr_x: jax.Array) -> Statistics:
    N, D = X.shape
    J = H.T @ X  # [R, D]
    L = W @ J.T if N > D else H.T @ H  # Kaldi computes L and K together when that is cheaper
    return Statistics(J=J, L=0.5 * (L + L.T), tr_x=tr_x, rows=jnp.asarray(N, X.dtype))


def _scale(tr_hat: jax.Array, tr_x: jax.Array) -> jax.Array:
    """`sqrt(tr(X X^T) / tr(X_hat X_hat^T))`, 1 where `X_hat` is zero."""
    safe = jnp.where(tr_hat == 0, 1.0, tr_hat)
    return jnp.where(tr_hat == 0, 1.0, jnp.sqrt(jnp.maximum(tr_x, 0.0) / safe))


def _e(d: jax.Array, beta: jax.Array) -> jax.Array:
    """Kaldi's ComputeEt: `e_ii = 1 / (beta / d_ii + 1)`."""
    return 1.0 / (beta / d + 1.0)


def _update(
    s: State, statistics: Statistics, num_samples_history: float, alpha: float, epsilon: float, delta: float
) -> State:
    """One PreconditionDirectionsInternal's update, from the minibatch's statistics: the new state."""
    J, L, tr_x, N = statistics
    R, D = s.W.shape
    W, rho, d = s.W, s.rho, s.d
    et = jnp.minimum(1.0 - jnp.exp(-N / num_samples_history), 0.9)  # Kaldi's Eta(N) (`eta`)
    etaN, eta1 = et / N, 1.0 - et
    K = J @ J.T
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

    sqrt_c = jnp.sqrt(c)
    rho1 = (etaN * tr_x + eta1 * (D * rho + jnp.sum(d)) - jnp.sum(sqrt_c)) / (D - R)
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
    return State(W=W1, rho=rho1, d=d1, t=s.t + 1, skipped=jnp.zeros_like(s.skipped))
