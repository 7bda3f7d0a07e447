"""Natural gradient: Kaldi's OnlineNaturalGradient against a numpy version of Kaldi's
formulas, its invariants, the NaturalGradient* components' preconditioned backward with its state
carried through a jitted step, the off switch, and plain optax on every component with parameters."""

from __future__ import annotations

import math

import jax
import jax.numpy as jnp
import numpy as np
import optax
import pytest

import symnet
from symnet import natural_gradient as ng
from symnet._src.core.index import IndexSet
from symnet._src.core.tape import Tape
from symnet.components import FixedWeight
from symnet.engine import ComputationRequest, compile
from symnet.kaldi import COMPONENTS, build_component

RNG = np.random.default_rng(7)


# ----- a numpy OnlineNaturalGradient, written from Kaldi's natural-gradient-online.{h,cc} -----------------


class KaldiNG:
    """Kaldi's OnlineNaturalGradient in float64 numpy, step by step as the C++ does it."""

    def __init__(self, rank, update_period=1, num_samples_history=2000.0, alpha=4.0):
        self.rank, self.update_period, self.nsh, self.alpha = rank, update_period, num_samples_history, alpha
        self.epsilon, self.delta = 1e-10, 5e-4
        self.t = -1
        self.skipped = 0

    def init_default(self, D):
        if self.rank >= D:
            self.rank = D - 1
        R = self.rank
        self.rho = self.epsilon
        self.d = np.full(R, self.epsilon)
        W = np.zeros((R, D))
        for r in range(R):
            cols = list(range(r, D, R))
            for c in cols:
                W[r, c] = 1.0 / math.sqrt(len(cols))
        e = 1.0 / (2.0 + (D + R) * self.alpha / D)
        self.W = W * math.sqrt(e)
        self.t = 0

    def eta(self, N):
        return min(1.0 - math.exp(-N / self.nsh), 0.9)  # Kaldi keeps eta from approaching 1

    def e_t(self, d, beta):
        e = 1.0 / (beta / d + 1.0)
        return e, np.sqrt(e), 1.0 / np.sqrt(e)

    def precondition(self, X):
        X = np.array(X, dtype=np.float64)
        if self.t == -1:
            copy = KaldiNG(self.rank, self.update_period, self.nsh, self.alpha)
            copy.init_default(X.shape[1])
            for _ in range(1 if len(X) <= copy.rank else 3):  # one iteration where the rows cannot fill the rank
                copy.precondition(X.copy())
            self.rank, self.W, self.d, self.rho, self.t = copy.rank, copy.W, copy.d, copy.rho, 0
        return self.internal(X)

    def internal(self, X):
        N, D = X.shape
        R = self.rank
        W, rho, d = self.W, self.rho, self.d
        eta = self.eta(N)
        H = X @ W.T
        if self.skipped < self.update_period - 1 and self.t >= 10:
            self.skipped += 1
            tr_X = np.trace(X @ X.T)
            X_hat = X - H @ W
            tr_hat = np.sum(X_hat**2)
            return X_hat, (1.0 if tr_hat == 0 else math.sqrt(tr_X / tr_hat))
        J = H.T @ X
        K = J @ J.T
        L = H.T @ H
        beta = rho * (1 + self.alpha) + self.alpha * d.sum() / D
        e, sqrt_e, inv_sqrt_e = self.e_t(d, beta)
        # ComputeZt, element by element
        dr = d + rho
        etaN, eta1 = eta / N, 1.0 - eta
        Z = np.zeros((R, R))
        for i in range(R):
            for j in range(R):
                Z[i, j] = (
                    etaN**2 * inv_sqrt_e[i] * K[i, j] * inv_sqrt_e[j]
                    + etaN * eta1 * inv_sqrt_e[i] * L[i, j] * inv_sqrt_e[j] * dr[j]
                    + etaN * eta1 * dr[i] * inv_sqrt_e[i] * L[i, j] * inv_sqrt_e[j]
                    + (eta1**2 * dr[i] ** 2 if i == j else 0.0)
                )
        c, U = np.linalg.eigh(Z)
        order = np.argsort(-c)
        c, U = c[order], U[:, order]
        must_reorth = c[0] > 1e6 * c[R - 1]
        floor = (rho * (1 - eta)) ** 2
        if np.any(c < floor):
            must_reorth = True
        c = np.maximum(c, floor)
        X_hat = X - H @ W
        tr_hat = np.sum(X_hat**2)
        tr_X = np.sum(X**2)  # Kaldi's initial_product, taken before X is preconditioned
        gamma = 1.0 if tr_hat == 0 else math.sqrt(tr_X / tr_hat)
        sqrt_c = np.sqrt(c)
        rho1 = 1.0 / (D - R) * (eta / N * tr_X + (1 - eta) * (D * rho + d.sum()) - sqrt_c.sum())
        d1 = sqrt_c - rho1
        floor_val = max(self.epsilon, self.delta * sqrt_c.max())  # rho_{t+1} and d_{t+1} alike
        rho1 = max(rho1, floor_val)
        d1 = np.maximum(d1, floor_val)
        # ComputeWt1
        beta1 = rho1 * (1 + self.alpha) + self.alpha * d1.sum() / D
        e1, sqrt_e1, inv_sqrt_e1 = self.e_t(d1, beta1)
        B = J + ((1 - eta) / (eta / N) * (d + rho))[:, None] * W
        A = U.T.copy()
        for i in range(R):
            for j in range(R):
                A[i, j] *= (eta / N) * sqrt_e1[i] / sqrt_c[i] * inv_sqrt_e[j]
        W1 = A @ B
        if must_reorth:  # ReorthogonalizeXt1
            O = (W1 @ W1.T) * inv_sqrt_e1[:, None] * inv_sqrt_e1[None, :]  # noqa: E741  (Kaldi's name)
            if np.max(np.abs(O - np.eye(R))) > 1e-3:
                C_inv = np.linalg.inv(np.linalg.cholesky(O))
                W1 = (C_inv * sqrt_e1[:, None] * inv_sqrt_e1[None, :]) @ W1
        self.W, self.d, self.rho = W1, d1, rho1
        self.t += 1
        self.skipped = 0
        return X_hat, gamma


_precondition = jax.jit(ng.precondition, static_argnames=("update_period", "num_samples_history", "alpha"))


def data(N, D, scale=1.0, rng=RNG):
    """Correlated rows: a few strong directions, like real activations."""
    A = rng.standard_normal((D, D)) * np.geomspace(3.0, 0.05, D)[:, None]
    return (scale * (rng.standard_normal((N, D)) @ A + 0.3)).astype(np.float32)


@pytest.mark.parametrize("N", [40, 6])  # N > D: L and K computed together in Kaldi; N < D: separately
def test_precondition_matches_kaldi_formulas_over_steps(N):
    D, R, period, nsh = 10, 4, 3, 300.0
    ref = KaldiNG(R, update_period=period, num_samples_history=nsh)
    state = ng.init(D, R)
    step = jax.jit(lambda s, X: ng.precondition(s, X, update_period=period, num_samples_history=nsh))
    for i in range(14):  # 10 updates every step, then one in three; the first step initialises
        X = data(N, D)
        X_hat, scale, state = step(state, X)
        ref_hat, ref_scale = ref.precondition(X)
        # float32 against float64: errors relative to the largest element.
        np.testing.assert_allclose(
            np.asarray(X_hat) * float(scale),
            ref_hat * ref_scale,
            rtol=2e-3,
            atol=5e-4 * np.abs(ref_hat * ref_scale).max(),
            err_msg=f"step {i}",
        )
        assert (float(state.t), float(state.skipped)) == (ref.t, ref.skipped), i
        np.testing.assert_allclose(float(state.rho), ref.rho, rtol=2e-3)
        # d_t = sqrt(c_t) - rho_t cancels for the small ones: float32 against float64, relative to the largest.
        np.testing.assert_allclose(np.asarray(state.d), ref.d, rtol=2e-3, atol=5e-4 * ref.d.max())
        # W is defined up to the signs of its rows (eigenvectors): compare W^T W.
        W = np.asarray(state.W, np.float64)
        np.testing.assert_allclose(W.T @ W, ref.W.T @ ref.W, atol=2e-4)
    assert (ref.t, ref.skipped) == (11, 1)  # steps 10, 11 and 13 skipped the update


@pytest.mark.skipif(not hasattr(jax, "enable_x64"), reason="needs jax.enable_x64")
@pytest.mark.parametrize("N", [40, 6])
def test_precondition_in_float64_is_kaldis_to_roundoff(N):
    """In float64 (Kaldi's Z_t is double) the JAX version and the formulas agree to roundoff: what the
    float32 test above tolerates is float32 roundoff, not a difference in the algorithm."""
    D, R = 10, 4
    with jax.enable_x64(True):
        ref = KaldiNG(R, update_period=3, num_samples_history=300.0)
        state = ng.init(D, R, dtype=jnp.float64)
        for _ in range(14):
            X = data(N, D).astype(np.float64)
            X_hat, scale, state = _precondition(state, jnp.asarray(X), update_period=3, num_samples_history=300.0)
            ref_hat, ref_scale = ref.precondition(X)
            np.testing.assert_allclose(np.asarray(X_hat) * float(scale), ref_hat * ref_scale, rtol=1e-8, atol=1e-10)
            np.testing.assert_allclose(np.asarray(state.d), ref.d, rtol=1e-8, atol=1e-10)
            np.testing.assert_allclose(float(state.rho), ref.rho, rtol=1e-8)
            W = np.asarray(state.W)
            np.testing.assert_allclose(W.T @ W, ref.W.T @ ref.W, atol=1e-10)


@pytest.mark.skipif(not hasattr(jax, "enable_x64"), reason="needs jax.enable_x64")
@pytest.mark.parametrize("N", [40, 6, 3])  # 3 rows, rank 4: Kaldi's Init makes one update, not three
def test_project_then_advance_is_kaldis_to_roundoff(N):
    """The update split in two, as symnet.train's Trainer runs it: Kaldi's Init as three rounds of a projection
    and `advance` on the first minibatch, then one projection and one `advance` per minibatch. In float64 it
    is Kaldi's formulas to roundoff, step by step, skipped updates included."""
    D, R, opts = 10, 4, {"update_period": 3, "num_samples_history": 300.0}
    with jax.enable_x64(True):
        project = jax.jit(lambda s, X: ng.project(s, X, **opts))
        advance = jax.jit(lambda s, st, r, ok: ng.advance(s, st, init_round=r, apply=ok, **opts))
        ref = KaldiNG(R, **opts)
        state = ng.init(D, R, dtype=jnp.float64)
        yes = jnp.asarray(True)
        for i in range(14):
            X = jnp.asarray(data(N, D).astype(np.float64))
            if i == 0:
                for round in range(ng.NUM_INIT_ITERS):
                    state = advance(state, project(state, X)[2], round, yes)
                assert float(state.t) == 0.0
            X_hat, scale, statistics = project(state, X)
            unchanged = advance(state, statistics, -1, jnp.asarray(False))  # an overflowed step: no update
            jax.tree.map(lambda a, b: np.testing.assert_array_equal(np.asarray(a), np.asarray(b)), unchanged, state)
            state = advance(state, statistics, -1, yes)
            ref_hat, ref_scale = ref.precondition(np.asarray(X))
            # With fewer rows than the rank, Z_t is nearly singular and roundoff grows (precondition's too):
            # there, errors relative to the largest element.
            tol = 1e-8 if N > R else 1e-6
            expected = ref_hat * ref_scale
            atol = 1e-10 if N > R else tol * np.abs(expected).max()
            np.testing.assert_allclose(np.asarray(X_hat) * float(scale), expected, rtol=tol, atol=atol)
            assert (float(state.t), float(state.skipped)) == (ref.t, ref.skipped), i
            np.testing.assert_allclose(np.asarray(state.d), ref.d, rtol=tol, atol=1e-10 if N > R else tol * ref.d.max())
            np.testing.assert_allclose(float(state.rho), ref.rho, rtol=tol)
            W = np.asarray(state.W)
            np.testing.assert_allclose(W.T @ W, ref.W.T @ ref.W, atol=1e-10 if N > R else 1e-6)
        assert (ref.t, ref.skipped) == (11, 1)


def test_init_is_kaldis_init_default():
    D, R, alpha = 7, 3, 4.0
    s = ng.init(D, R, alpha=alpha)
    special = ng.orthonormal_special(R, D)
    np.testing.assert_allclose(special @ special.T, np.eye(R), atol=1e-12)
    assert (special != 0).any(axis=0).all() and (special != 0).any(axis=1).all()
    e = 1.0 / (2.0 + (D + R) * alpha / D)
    np.testing.assert_allclose(np.asarray(s.W), special * math.sqrt(e), rtol=1e-6)
    assert float(s.rho) == pytest.approx(1e-10) and np.allclose(np.asarray(s.d), 1e-10)
    assert (float(s.t), float(s.skipped)) == (-1.0, 0.0)
    assert all(leaf.dtype == jnp.float32 for leaf in jax.tree_util.tree_leaves(s))


@pytest.mark.parametrize("scale", [1e-6, 1.0, 1e3])
def test_frobenius_norm_is_preserved(scale):
    state = ng.init(16, 6)
    for _ in range(4):
        X = jnp.asarray(data(30, 16, scale))
        X_hat, s, state = _precondition(state, X, num_samples_history=100.0)
        np.testing.assert_allclose(float(jnp.linalg.norm(s * X_hat)), float(jnp.linalg.norm(X)), rtol=1e-4)
    # And it really changes the directions: the preconditioned rows are not a multiple of the input.
    assert float(jnp.linalg.norm(s * X_hat - X)) > 1e-2 * float(jnp.linalg.norm(X))
    assert all(bool(jnp.isfinite(leaf).all()) for leaf in jax.tree_util.tree_leaves(state))


@pytest.mark.parametrize("scale", [1e-6, 1.0, 1e3])
def test_factored_output_is_the_materialised_one(scale):
    """`factored=True` returns `X - H W` as its factors, and its scale from traces of `H^T H` and `W W^T`: the same
    preconditioned matrix, scale and states as the materialised call, step after step, through `precondition`
    and `project`; `transposed_product` multiplies it from either side as the dense matrix does."""
    from symnet._src.components.online_preconditioner import LowRank, project, transposed_product

    def dense(low):
        return low.X - low.H @ low.W

    options = {"num_samples_history": 100.0, "update_period": 2}
    precondition = jax.jit(ng.precondition, static_argnames=(*options, "factored"))
    project_jit = jax.jit(project, static_argnames=("update_period", "factored"))
    plain = factored = ng.init(16, 6)
    rng = np.random.default_rng(3)
    for step in range(6):
        X = jnp.asarray(data(30, 16, scale, rng=rng))
        want, s_want, plain = precondition(plain, X, **options)
        got, s_got, factored = precondition(factored, X, **options, factored=True)
        assert isinstance(got, LowRank)
        np.testing.assert_allclose(np.asarray(dense(got)), np.asarray(want), rtol=1e-5, atol=1e-6 * scale)
        np.testing.assert_allclose(float(s_got), float(s_want), rtol=1e-4, err_msg=f"step {step}")
        for a, b in zip(jax.tree_util.tree_leaves(factored), jax.tree_util.tree_leaves(plain), strict=True):
            np.testing.assert_array_equal(np.asarray(a), np.asarray(b))
        projected, s_projected, stats = project_jit(plain, X, factored=True, update_period=2)
        _, s_dense, stats_dense = project_jit(plain, X, update_period=2)
        np.testing.assert_allclose(float(s_projected), float(s_dense), rtol=1e-4)
        assert all(np.array_equal(np.asarray(a), np.asarray(b)) for a, b in zip(stats, stats_dense, strict=True))
        other = jnp.asarray(data(30, 5, rng=rng))
        d = np.asarray(dense(projected), np.float64)
        np.testing.assert_allclose(
            transposed_product(other, projected), np.asarray(other).T @ d, rtol=1e-4, atol=1e-5 * scale
        )
        np.testing.assert_allclose(
            transposed_product(projected, other), d.T @ np.asarray(other), rtol=1e-4, atol=1e-5 * scale
        )
    zero, s_zero, _ = precondition(plain, jnp.zeros((8, 16)), **options, factored=True)
    assert float(s_zero) == 1.0 and float(jnp.abs(dense(zero)).max()) == 0.0


def test_zero_input_gives_zero_with_unit_scale():
    state = ng.init(5, 2)
    X_hat, s, state = _precondition(state, jnp.zeros((8, 5)))
    assert float(s) == 1.0 and float(jnp.abs(X_hat).max()) == 0.0
    assert all(bool(jnp.isfinite(leaf).all()) for leaf in jax.tree_util.tree_leaves(state))
    X_hat, s, state = _precondition(state, jnp.asarray(data(8, 5)))
    assert bool(jnp.isfinite(X_hat).all()) and bool(jnp.isfinite(s))


def test_rank_at_least_dim():
    # Kaldi's InitDefault: a rank >= dim becomes dim - 1.
    s = ng.init(3, 10)
    assert s.W.shape == (2, 3)
    ref = KaldiNG(10)
    X = data(12, 3)
    X_hat, scale, s = ng.precondition(s, X)
    ref_hat, ref_scale = ref.precondition(X)
    assert ref.rank == 2
    np.testing.assert_allclose(np.asarray(X_hat) * float(scale), ref_hat * ref_scale, rtol=2e-3, atol=1e-4)
    # Dimension 1: the preconditioner is the identity (Kaldi's special case), the state never changes.
    s1 = ng.init(1, 5)
    assert s1.W.shape == (0, 1)
    X = jnp.asarray(data(6, 1))
    X_hat, scale, s2 = ng.precondition(s1, X)
    assert float(scale) == 1.0 and np.array_equal(np.asarray(X_hat), np.asarray(X)) and s2 is s1
    with pytest.raises(symnet.ShapeError):
        ng.precondition(ng.init(4, 2), jnp.ones((3, 5)))


# ----- the components -----------------------------------------------------------------------------


def ng_affine(name, in_dim, out_dim, x, **opts):
    return build_component(
        "NaturalGradientAffineComponent", name, {"input-dim": in_dim, "output-dim": out_dim, **opts}, x
    )


def mlp():
    x = symnet.Identity()
    h = ng_affine("a1", 6, 8, x, **{"rank-in": 3, "rank-out": 4, "num-samples-history": 100.0})
    h = build_component("RectifiedLinearComponent", "r1", {"dim": 8}, h)
    h = ng_affine("a2", 8, 5, h)
    return symnet.Network(build_component("LogSoftmaxComponent", "s", {"dim": 5}, h), seed=3)


def objective_delta(value, labels):
    onehot = jax.nn.one_hot(labels, value.shape[-1], dtype=value.dtype)
    return -(onehot * value).sum() / value.shape[0], -onehot / value.shape[0]


def test_off_switch_is_the_exact_gradient():
    net = mlp()
    x = jnp.asarray(data(20, 6))
    labels = jnp.asarray(RNG.integers(0, 5, 20))
    states = ng.init_states(net)
    assert set(states) == {"a1", "a2"} and states["a1"]["in"].W.shape == (3, 7)
    assert states["a2"]["in"].W.shape == (min(20, 9 // 2), 9) and states["a2"]["out"].W.shape == (3, 5)

    def backward(inp):  # one backward pass: the weights' and the input's deltas
        tape = net.forward(inp)
        _, delta = objective_delta(tape.value, labels)
        deltas = tape.backward_deltas(delta)
        return {n.layer.name: d for n, d in deltas.items() if isinstance(n.layer, symnet.Weight)}, deltas[inp]

    def grads(net, states, mode):
        inp = Tape(symnet.Identity(), x)
        if mode == "none":
            return (*backward(inp), states)
        with ng.Preconditioning(states, enabled=(mode == "on")) as ctx:
            return (*backward(inp), ctx.states)

    run = jax.jit(grads, static_argnums=2)
    plain, dx_plain, _ = run(net, states, "none")
    off, dx_off, states_off = run(net, states, "off")
    on, dx_on, states_on = run(net, states, "on")
    exact = jax.grad(lambda p: objective_delta(net.forward(x, p).value, labels)[0])(net.params)
    for name in net.params:
        assert np.array_equal(np.asarray(off[name]), np.asarray(plain[name])), name
        np.testing.assert_allclose(np.asarray(plain[name]), np.asarray(exact[name]), rtol=1e-5, atol=1e-7)
    assert np.array_equal(np.asarray(dx_off), np.asarray(dx_plain))
    jax.tree_util.tree_map(lambda a, b: np.testing.assert_array_equal(np.asarray(a), np.asarray(b)), states_off, states)
    # On: other weight gradients, the same input delta (Kaldi preconditions only the update)
    # for the first layer (whose input delta does not depend on any preconditioned gradient).
    for name in net.params:
        assert not np.allclose(np.asarray(on[name]), np.asarray(plain[name]), rtol=1e-3), name
    np.testing.assert_allclose(np.asarray(dx_on), np.asarray(dx_plain), rtol=1e-6, atol=1e-8)
    assert float(states_on["a1"]["in"].t) == 1.0 and float(states_on["a2"]["out"].t) == 1.0


@pytest.mark.parametrize("dims", [(6, 4), (3, 7)])  # the input side wider (left factored), then the output side
def test_affine_component_update_is_kaldis(dims):
    """The component's gradient is NaturalGradientAffineComponent::Update with the reference preconditioner."""
    x = symnet.Identity()
    d_in, d_out = dims
    layer = ng_affine("a", d_in, d_out, x, **{"rank-in": 3, "rank-out": 2, "update-period": 2})
    net = symnet.Network(layer, seed=1)
    states = ng.init_states(net)
    ref_in, ref_out = KaldiNG(3, update_period=2), KaldiNG(2, update_period=2)
    step = jax.jit(lambda net, states, x, d: _grads_on(net, states, x, d))
    for i in range(12):
        X, delta = data(25, d_in), data(25, d_out, 1e-2)
        grads, states = step(net, states, X, delta)
        n = X.shape[0]
        xp, s_in = ref_in.precondition(np.concatenate([X, np.ones((n, 1), np.float32)], axis=1))
        dp, s_out = ref_out.precondition(delta.astype(np.float64) * n)
        g = s_in * s_out / n * dp.T @ xp
        np.testing.assert_allclose(
            np.asarray(grads["a.linear_params"]), g[:, :-1], rtol=3e-3, atol=1e-5, err_msg=f"step {i}"
        )
        np.testing.assert_allclose(np.asarray(grads["a.bias_params"]), g[:, -1], rtol=3e-3, atol=1e-5)
    assert float(states["a"]["in"].t) == ref_in.t == 11 and float(states["a"]["in"].skipped) == ref_in.skipped


def _grads_on(net, states, x, delta):
    with ng.Preconditioning(states) as ctx:
        grads = net.forward(Tape(symnet.Identity(), x)).backward(delta)
    return grads, ctx.states


def test_repeated_affine_component_update_is_kaldis():
    layer = build_component(
        "NaturalGradientRepeatedAffineComponent",
        "r",
        {"input-dim": 12, "output-dim": 9, "num-repeats": 3},
        symnet.Identity(),
    )
    net = symnet.Network(layer, seed=2)
    states = ng.init_states(net)
    assert set(states["r"]) == {"in"} and states["r"]["in"].W.shape == (2, 5)  # rank min(40, 4 // 2)
    ref = KaldiNG(2, update_period=4)
    plain = jax.jit(lambda net, x, d: net.forward(Tape(symnet.Identity(), x)).backward(d))
    step = jax.jit(_grads_on)
    for _ in range(3):
        X, delta = data(10, 12), data(10, 9, 1e-2)
        grads, states = step(net, states, X, delta)
        exact = plain(net, X, delta)
        g = np.concatenate([np.asarray(exact["r.linear_params"]), np.asarray(exact["r.bias_params"])[:, None]], 1)
        gp, s = ref.precondition(g.astype(np.float64) * 10)
        g = s / 10 * gp
        np.testing.assert_allclose(np.asarray(grads["r.linear_params"]), g[:, :-1], rtol=3e-3, atol=1e-6)
        np.testing.assert_allclose(np.asarray(grads["r.bias_params"]), g[:, -1], rtol=3e-3, atol=1e-6)


def test_linear_component_update_is_kaldis():
    """LinearComponent::Backprop: the input rows (no ones column) and the output derivatives preconditioned, and
    that whatever its use-natural-gradient says (Kaldi's Backprop does not read it)."""
    layer = build_component(
        "LinearComponent",
        "l",
        {"input-dim": 6, "output-dim": 4, "rank-in": 3, "rank-out": 2, "update-period": 2}
        | {"use-natural-gradient": False},
        symnet.Identity(),
    )
    net = symnet.Network(layer, seed=4)
    states = ng.init_states(net)
    assert states["l"]["in"].W.shape == (3, 6) and states["l"]["out"].W.shape == (2, 4)
    ref_in, ref_out = KaldiNG(3, update_period=2), KaldiNG(2, update_period=2)
    step = jax.jit(_grads_on)
    rng = np.random.default_rng(9)  # the test's own draws, whichever tests ran before
    for i in range(6):
        X, delta = data(25, 6, rng=rng), data(25, 4, 1e-2, rng=rng)
        grads, states = step(net, states, X, delta)
        xp, s_in = ref_in.precondition(X.astype(np.float64))
        dp, s_out = ref_out.precondition(delta.astype(np.float64) * 25)
        want = s_in * s_out / 25 * dp.T @ xp
        np.testing.assert_allclose(np.asarray(grads["l.params"]), want, rtol=3e-3, atol=1e-5, err_msg=f"step {i}")
    assert float(states["l"]["in"].t) == ref_in.t


def _tdnn_step(offsets, bias, natural=True):
    """A TdnnComponent over one sequence of 30 output frames: its network and request."""
    opts = {"input-dim": 3, "output-dim": 4, "time-offsets": ",".join(map(str, offsets)), "rank-in": 3, "rank-out": 2}
    opts.update({"use-bias": bias, "use-natural-gradient": natural})
    net = symnet.Network(build_component("TdnnComponent", "t", opts, symnet.Identity()), seed=5)
    frames = range(min(offsets), 30 + max(offsets))
    req = ComputationRequest(
        inputs={"input": IndexSet.of([(0, t) for t in frames])},
        outputs={"output": IndexSet.of([(0, t) for t in range(30)])},
    )
    return net, req


@pytest.mark.parametrize("bias", [True, False])
@pytest.mark.parametrize("lowering", ["auto", "plain"])
def test_tdnn_component_update_is_kaldis_over_its_spliced_input(bias, lowering):
    """TdnnComponent::UpdateNaturalGradient: the spliced input rows `[x(t+o_1) .. x(t+o_k) 1]` (no ones without
    a bias) and the output derivatives preconditioned, in both lowerings (a convolution and the plain slices)."""
    offsets = (-1, 0, 2)
    net, req = _tdnn_step(offsets, bias)
    states = ng.init_states(net)
    spliced_dim = 3 * len(offsets) + int(bias)
    assert states["t"]["in"].W.shape == (3, spliced_dim) and states["t"]["out"].W.shape == (2, 4)
    computation = compile(net, req, lowering)

    @jax.jit
    def step(net, states, x, delta):
        with ng.Preconditioning(states) as ctx:
            grads = computation.forward(net, {"input": x})["output"].backward(delta)
        return grads, ctx.states

    ref_in, ref_out = KaldiNG(3, update_period=4), KaldiNG(2, update_period=4)
    rng = np.random.default_rng(8)  # the test's own draws, whichever tests ran before
    for i in range(6):
        X = (rng.standard_normal((len(req.inputs["input"]), 3)) + 0.3).astype(np.float32)
        delta = (1e-2 * rng.standard_normal((30, 4))).astype(np.float32)
        grads, states = step(net, states, X, delta)
        first = min(offsets)
        spliced = np.concatenate([X[[t + o - first for t in range(30)]] for o in offsets], axis=1)
        if bias:
            spliced = np.concatenate([spliced, np.ones((30, 1), np.float32)], axis=1)
        xp, s_in = ref_in.precondition(spliced.astype(np.float64))
        dp, s_out = ref_out.precondition(delta.astype(np.float64) * 30)
        want = s_in * s_out / 30 * dp.T @ xp
        got = np.asarray(grads["t.linear_params"])
        np.testing.assert_allclose(got, want[:, : 3 * len(offsets)], rtol=3e-3, atol=1e-5, err_msg=f"step {i}")
        if bias:
            np.testing.assert_allclose(np.asarray(grads["t.bias_params"]), want[:, -1], rtol=3e-3, atol=1e-5)


def test_a_tdnn_component_without_natural_gradient_has_the_exact_gradient():
    """use-natural-gradient=false: no preconditioner, and inside a Preconditioning the exact gradient."""
    for bias in (True, False):
        net, req = _tdnn_step((-1, 1), bias, natural=False)
        assert ng.init_states(net) == {} and not ng.components(net)
        x, delta = data(len(req.inputs["input"]), 3), data(30, 4)
        with ng.Preconditioning({}):
            got = compile(net, req).forward(net, {"input": jnp.asarray(x)})["output"].backward(jnp.asarray(delta))
        spliced = np.concatenate([x[0:30], x[2:32]], axis=1)  # x(t - 1), x(t + 1) for t = 0 .. 29
        np.testing.assert_allclose(np.asarray(got["t.linear_params"]), delta.T @ spliced, rtol=1e-4, atol=1e-4)
        if bias:
            np.testing.assert_allclose(np.asarray(got["t.bias_params"]), delta.sum(0), rtol=1e-4, atol=1e-4)


def test_missing_state_is_an_error():
    net = mlp()
    with pytest.raises(symnet.SymnetError, match="no preconditioner state for NaturalGradientAffineComponent 'a2'"):
        with ng.Preconditioning({"a1": ng.init_states(net)["a1"]}):
            net.forward(jnp.ones((2, 6))).backward(1.0)


def test_custom_vjp_affine_gives_the_same_gradients_and_states():
    X, delta = data(20, 6), data(20, 3, 1e-2)
    layer = ng_affine("a", 6, 3, symnet.Identity(), **{"rank-in": 3, "rank-out": 2})
    net = symnet.Network(layer, seed=4)
    states = ng.init_states(net)
    grads, new_states = jax.jit(_grads_on)(net, states, X, delta)
    w, b = net.values["a.linear_params"], net.values["a.bias_params"]

    def f(w, b, s):
        return jnp.sum(ng.affine(jnp.asarray(X), w, b, s) * delta)

    dw, db, s1 = jax.jit(jax.grad(f, argnums=(0, 1, 2)))(w, b, states["a"])
    np.testing.assert_allclose(np.asarray(dw), np.asarray(grads["a.linear_params"]), rtol=1e-5, atol=1e-8)
    np.testing.assert_allclose(np.asarray(db), np.asarray(grads["a.bias_params"]), rtol=1e-5, atol=1e-8)
    # The states come out of two differently ordered float32 computations (an eigen-update each): equal to
    # float32 rounding of their sums, seen up to 8e-5 relative on some XLA builds.
    jax.tree_util.tree_map(
        lambda a, b: np.testing.assert_allclose(np.asarray(a), np.asarray(b), rtol=3e-4, atol=1e-7),
        s1,
        new_states["a"],
    )


# ----- training: states carried through the jitted step ---------------------------------------------


def tdnn(feat, classes, width=12, seed=0):
    x = symnet.Input("input", feat)
    h = ng_affine("tdnn1", 3 * feat, width, symnet.Append(symnet.Offset(x, -1), x, symnet.Offset(x, 1)))
    h = build_component("RectifiedLinearComponent", "relu1", {"dim": width}, h)
    h = ng_affine("tdnn2", 2 * width, width, symnet.Append(symnet.Offset(h, -2), h))
    h = build_component("RectifiedLinearComponent", "relu2", {"dim": width}, h)
    h = ng_affine("output", width, classes, h)
    return symnet.Network(build_component("LogSoftmaxComponent", "prob", {"dim": classes}, h), seed=seed)


@pytest.fixture(scope="module")
def small_task():
    from symnet.datasets import HmmTask

    task = HmmTask.create(
        seed=0, num_phones=3, successors=2, states_per_phone=2, feat_dim=4, min_length=20, max_length=40
    )
    return task.sample(12, seed=1), task.sample(4, seed=2), task.num_states


def test_trains_in_a_jitted_step_with_states_carried(small_task):
    from symnet._src.train import fit_data
    from symnet._src.train import trainer as training
    from symnet._src.train.objectives import Linear

    train, valid, classes = small_task
    net = tdnn(4, classes)
    opt = ng.optimizer(optax.sgd(0.1), net)
    chunks = fit_data.as_chunks(train, net, 8, "output")
    trainer = training.Trainer(
        net, opt, batch_size=4, chunks=chunks, objective=Linear(), input="input", output="output"
    )
    opt_state = opt.init(net.params)
    assert isinstance(opt_state, ng.NaturalGradientState)
    assert set(opt_state.preconditioners) == {"tdnn1", "tdnn2", "output"}
    epoch_losses, t = [], []
    for epoch in range(4):
        losses = []
        for b, idx in enumerate(trainer.batches(chunks, np.random.default_rng(epoch).permutation(len(chunks)))):
            x, targets, weights = trainer.arrays(trainer.minibatch(b, chunks, idx))
            net, opt_state, loss, _, finite, _, _ = trainer.step(net, opt_state, x, targets, weights)
            assert all(bool(v) for v in finite.values())
            losses.append(float(loss))
            t.append(float(opt_state.preconditioners["tdnn2"]["out"].t))
        epoch_losses.append(np.mean(losses))
    # The state went in and came out of every step: 10 updates in a row, then one in every 4 (update-period).
    expected = [min(k, 10) + max(0, k - 10) // 4 for k in range(1, len(t) + 1)]
    assert t == expected
    assert trainer.jitted_step._cache_size() == 1  # one compiled step for all of them
    assert epoch_losses[-1] < epoch_losses[0] and all(np.isfinite(epoch_losses))
    valid_loss, valid_acc = trainer.score(net, fit_data.as_chunks(valid, net, 8, "output"))
    assert math.isfinite(valid_loss) and valid_acc > 1.0 / classes


def kinds_net(feat, classes):
    """Every kind of preconditioned component: TDNN (an affine map of its spliced input), linear, repeated."""
    x = symnet.Input("input", feat)
    h = build_component("TdnnComponent", "tdnn", {"input-dim": feat, "output-dim": 12, "time-offsets": "-1,0,1"}, x)
    h = build_component("RectifiedLinearComponent", "relu1", {"dim": 12}, h)
    h = build_component("LinearComponent", "linear", {"input-dim": 12, "output-dim": 6}, h)
    opts = {"input-dim": 6, "output-dim": 9, "num-repeats": 3}
    h = build_component("NaturalGradientRepeatedAffineComponent", "repeated", opts, h)
    h = build_component("RectifiedLinearComponent", "relu2", {"dim": 9}, h)
    h = ng_affine("output", 9, classes, h)
    return symnet.Network(build_component("LogSoftmaxComponent", "prob", {"dim": classes}, h), seed=0)


def test_the_trainers_deferred_update_is_the_in_step_one(small_task, monkeypatch):
    """The Trainer's step only projects and returns the statistics; one program (compiled once for every
    chunk width) updates the preconditioners, Kaldi's Init as three rounds on the first minibatch. Step by step,
    from the same network and states, against a Trainer whose step updates them itself (`precondition`, tested
    above against Kaldi's formulas)."""
    from symnet._src.train import fit_data
    from symnet._src.train import trainer as training
    from symnet._src.train.objectives import Linear

    train, _, classes = small_task
    net = kinds_net(4, classes)
    chunks = fit_data.as_chunks(train, net, 8, "output")
    opt = ng.optimizer(optax.sgd(0.1), net)
    deferred, in_step = (
        training.Trainer(
            net, opt, batch_size=4, chunks=chunks, objective=Linear(), input="input", output="output", widths=(8, 5)
        )
        for _ in range(2)
    )
    real = ng.step_context

    def in_step_call(*args):  # traced with a context that updates the preconditioners inside the step
        with monkeypatch.context() as patch:
            patch.setattr(ng, "step_context", lambda state, deferred: real(state, deferred=False))
            return in_step.step(*args)

    def copy(tree):  # a step consumes (donates) its optimiser state
        return jax.tree.map(jnp.copy, tree)

    # W is defined up to the signs of its rows (eigenvectors): compare W^T W. Not for the output layer's `out`:
    # the log-softmax's derivatives sum to zero over classes, an eigenvalue of zero whose direction float noise
    # sets (its d, rho and the gradients it gives are compared).
    def same_w(a, b):
        a, b = np.asarray(a, np.float64), np.asarray(b, np.float64)
        np.testing.assert_allclose(a.T @ a, b.T @ b, rtol=1e-4, atol=1e-6)

    network, opt_state = net, opt.init(net.params)
    rng = np.random.default_rng(0)
    batches = [idx for _ in range(3) for idx in deferred.batches(chunks, rng.permutation(len(chunks)))]
    for b, idx in enumerate(batches[:18]):
        x, targets, weights = deferred.arrays(deferred.minibatch(b, chunks, idx))
        ours, ours_state, *_ = deferred.step(network, copy(opt_state), x, targets, weights)
        theirs, theirs_state, *_ = in_step_call(network, copy(opt_state), x, targets, weights)
        for name in net.params:
            np.testing.assert_allclose(
                np.asarray(ours.values[name]), np.asarray(theirs.values[name]), rtol=1e-4, atol=1e-6, err_msg=name
            )
        for name, by_key in ours_state.preconditioners.items():
            for key, state in by_key.items():
                other = theirs_state.preconditioners[name][key]
                assert (float(state.t), float(state.skipped)) == (float(other.t), float(other.skipped)), (b, name)
                if (name, key) != ("output", "out"):  # see below
                    same_w(state.W, other.W)
                # rho_{t+1} and the small d_{t+1} are differences of sums (float32 cancellation)
                d, other_d = np.asarray(state.d), np.asarray(other.d)
                np.testing.assert_allclose(d, other_d, rtol=1e-3, atol=1e-4 * float(other_d.max()))
                np.testing.assert_allclose(float(state.rho), float(other.rho), rtol=1e-3)
        network, opt_state = ours, ours_state
    assert deferred.jitted_step._cache_size() == 2 and deferred._jitted_advance._cache_size() == 1
    assert in_step._jitted_advance is None  # its steps returned no statistics
    t = {name: float(s["in"].t) for name, s in opt_state.preconditioners.items()}
    assert t == {name: 10.0 + (18 - 10) // 4 for name in ("linear", "output", "repeated", "tdnn")}


def small_tdnn(feat, classes, seed=0):
    x = symnet.Input("input", feat)
    h = ng_affine("affine", 3 * feat, classes, symnet.Append(symnet.Offset(x, -1), x, symnet.Offset(x, 1)))
    return symnet.Network(build_component("LogSoftmaxComponent", "prob", {"dim": classes}, h), seed=seed)


def test_fit_checkpoints_and_resumes_the_preconditioners(small_task, tmp_path):
    from symnet.train import fit

    train, _, classes = small_task
    kw = dict(epochs=2, batch_size=4, chunk=8, progress=False)
    whole = fit(small_tdnn(4, classes), train, ng.optimizer(optax.sgd(0.05), small_tdnn(4, classes)), **kw)
    assert float(whole.opt_state.preconditioners["affine"]["in"].t) > 2
    path = str(tmp_path / "ck.npz")
    fit(
        small_tdnn(4, classes),
        train,
        ng.optimizer(optax.sgd(0.05), small_tdnn(4, classes)),
        checkpoint=path,
        checkpoint_every=2,
        max_steps=3,
        **kw,
    )
    resumed = fit(
        small_tdnn(4, classes), train, ng.optimizer(optax.sgd(0.05), small_tdnn(4, classes)), checkpoint=path, **kw
    )
    for name in whole.network.params:
        np.testing.assert_array_equal(np.asarray(resumed.network.values[name]), np.asarray(whole.network.values[name]))
    jax.tree_util.tree_map(
        lambda a, b: np.testing.assert_array_equal(np.asarray(a), np.asarray(b)),
        resumed.opt_state.preconditioners,
        whole.opt_state.preconditioners,
    )


# ----- plain optax on every component with parameters ------------------------------------------------

OPTIONS = {
    "AffineComponent": {"input-dim": 4, "output-dim": 3},
    "NaturalGradientAffineComponent": {"input-dim": 4, "output-dim": 3},
    "LinearComponent": {"input-dim": 4, "output-dim": 3},
    "FixedAffineComponent": {"input-dim": 4, "output-dim": 3},
    "TdnnComponent": {"input-dim": 4, "output-dim": 3, "time-offsets": "-1,0,1"},
    "BlockAffineComponent": {"input-dim": 6, "output-dim": 4, "num-blocks": 2},
    "RepeatedAffineComponent": {"input-dim": 6, "output-dim": 9, "num-repeats": 3},
    "NaturalGradientRepeatedAffineComponent": {"input-dim": 6, "output-dim": 9, "num-repeats": 3},
    "BatchNormComponent": {"dim": 4},
    "ScaleAndOffsetComponent": {"dim": 6, "block-dim": 3},
    "PerElementScaleComponent": {"dim": 5},
    "PerElementOffsetComponent": {"dim": 6, "block-dim": 2},
    "NaturalGradientPerElementScaleComponent": {"dim": 5},
    "FixedScaleComponent": {"dim": 3, "scale": 2.5},
    "FixedBiasComponent": {"dim": 3},
    "ConstantFunctionComponent": {"input-dim": 3, "output-dim": 2, "is-updatable": True},
    "ConstantComponent": {"output-dim": 2},
    "LstmNonlinearityComponent": {"cell-dim": 3},
    "GruNonlinearityComponent": {"cell-dim": 4, "recurrent-dim": 2},
    "OutputGruNonlinearityComponent": {"cell-dim": 3},
    # Non-simple components (used only where they are registered).
    "TimeHeightConvolutionComponent": {
        "num-filters-in": 2,
        "num-filters-out": 3,
        "height-in": 4,
        "height-out": 2,
        "height-subsample-out": 2,
        "height-offsets": "0,1",
        "time-offsets": "-2,0",
        "required-time-offsets": "0",
        "param-stddev": 0.1,
    },
    "ConvolutionComponent": {
        "input-x-dim": 3,
        "input-y-dim": 2,
        "input-z-dim": 1,
        "filt-x-dim": 1,
        "filt-y-dim": 2,
        "filt-x-step": 1,
        "filt-y-step": 1,
        "num-filters": 4,
    },
    "CompositeComponent": {
        "num-components": 2,
        "component1": "type=AffineComponent input-dim=4 output-dim=3",
        "component2": "type=TanhComponent dim=3",
    },
}


def _build(kind, name="c"):
    options = OPTIONS[kind]
    x = symnet.Input("input", _input_dim(kind))
    layer = build_component(kind, name, options, x)
    return layer if layer.reads_input else symnet.Append(x, layer)  # a ConstantComponent reads no input


def _input_dim(kind):
    return build_component(kind, "c", OPTIONS[kind], symnet.Identity()).input_dim


def test_options_table_covers_every_component_with_parameters():
    """Every registered type whose class has parameters is in OPTIONS (so it is trained below)."""
    from symnet.components import Component

    classes, stack = {}, [Component]
    while stack:
        cls = stack.pop()
        stack.extend(cls.__subclasses__())
        if cls.kaldi_type:
            classes[cls.kaldi_type] = cls
    with_params = {kind for kind in COMPONENTS if kind in classes and classes[kind].param_fields}
    assert with_params - set(OPTIONS) == set(), "add these to OPTIONS"
    assert "TdnnComponent" in OPTIONS and "NaturalGradientAffineComponent" in with_params


@pytest.mark.parametrize("make_opt", [lambda: optax.sgd(0.01), lambda: optax.adam(1e-2)], ids=["sgd", "adam"])
@pytest.mark.parametrize("kind", sorted(OPTIONS))
def test_plain_optax_trains_every_component(kind, make_opt):
    if kind not in COMPONENTS:
        pytest.skip(f"{kind} is not registered")
    layer = _build(kind)
    net = symnet.Network(layer, seed=5)
    assert all(not isinstance(w, FixedWeight) for n, w in net.weights.items() if n in net.params)
    if "BatchNorm" in kind:  # its statistics are FixedWeights: give them sane values
        net = net.assign({"c.count": 1.0, "c.stats_var": np.ones(4, np.float32)})
    left, right = net.context()
    T, B = 3, 2
    request = ComputationRequest(
        inputs={"input": IndexSet.range(n=B, t=(-left, T + right))}, outputs={"output": IndexSet.range(n=B, t=T)}
    )
    computation = compile(net, request)
    x = jnp.asarray(data(B * (T + left + right), _input_dim(kind), 0.5))
    out_dim = computation(net, {"input": x})["output"].shape[-1]
    target = jnp.asarray(data(B * T, out_dim, 0.5))
    opt = make_opt()  # no mask: the optimiser sees only net.params, never the state
    state = opt.init(net.params)

    @jax.jit
    def step(net, state):
        tape = computation.forward(net, {"input": x})["output"]
        diff = tape.value - target
        loss = 0.5 * jnp.sum(diff * diff) / diff.shape[0]
        grads = tape.backward(diff / diff.shape[0])
        updates, state = opt.update(grads, state, net.params)
        return net.replace(params=optax.apply_updates(net.params, updates)), state, loss

    net1, state, loss0 = step(net, state)
    net2, state, loss1 = step(net1, state)
    for n in net.values:
        assert bool(jnp.isfinite(net2.values[n]).all()), n
    for n in net.state:  # fixed values (FixedAffine, batch-norm statistics...) stay as they are
        assert np.array_equal(np.asarray(net2.state[n]), np.asarray(net.state[n])), n
    if not net.params:
        return
    changed = [n for n in net.params if not np.array_equal(np.asarray(net1.params[n]), np.asarray(net.params[n]))]
    assert changed, f"{kind}: no trainable parameter changed"
    assert float(loss1) < float(loss0), (kind, float(loss0), float(loss1))
