"""Kaldi components: forward against numpy versions of Kaldi's formulas, backward against jax.vjp."""

from __future__ import annotations

import itertools

import jax
import jax.numpy as jnp
import numpy as np
import pytest

import symnet
from symnet._src.core.tape import Tape
from symnet.components import (
    FixedWeight,
    batchnorm_stats_updates,
    set_test_mode,
)
from symnet.kaldi import COMPONENTS, build_component

RNG = np.random.default_rng(1234)


def rand(*shape, scale=1.0):
    return (scale * RNG.standard_normal(shape)).astype(np.float32)


def build(kaldi_type, options, name="c"):
    return build_component(kaldi_type, name, options, symnet.Identity())


def random_params(layer):
    """Random values for every parameter of a component (positive count and variance for batch-norm)."""
    out = {}
    for w in layer.parameters.values():
        if w.name.endswith(".count"):
            out[w.name] = np.float32(7.0)
        elif w.name.endswith(".stats_var"):
            out[w.name] = np.abs(rand(*w.shape)) + 0.5
        else:
            out[w.name] = rand(*w.shape)
    return out


class Run:
    """One component run on `x`, forward and backward in one jitted program.

    `value`, `grads` (Tape.backward), `dx` (the input delta from the Tape), and the
    references `ref_grads`, `ref_dx` from jax.vjp of the network's forward function.
    """

    def __init__(self, layer, x, params=None, delta=None):
        self.net = symnet.Network(layer).assign(random_params(layer) if params is None else params)
        self.p = {k: np.asarray(v, dtype=np.float64) for k, v in self.net.values.items()}
        x = jnp.asarray(x)

        def forward(net, x):
            return net.forward(Tape(symnet.Identity(), x)).value

        out = jax.eval_shape(forward, self.net, x)
        self.delta = rand(*out.shape) if delta is None else np.asarray(delta, np.float32)
        (self.value, self.grads, self.dx, self.ref_grads, self.ref_dx) = _evaluate(self.net, x, self.delta)

    def check_backward(self, rtol=2e-4, atol=2e-5, input_delta=True):
        assert set(self.grads) == set(self.net.params)  # state (FixedWeights) gets no gradient
        for name, ref in self.ref_grads.items():
            np.testing.assert_allclose(
                np.asarray(self.grads[name]), np.asarray(ref), rtol=rtol, atol=atol, err_msg=name
            )
        if input_delta:
            np.testing.assert_allclose(
                np.asarray(self.dx), np.asarray(self.ref_dx), rtol=rtol, atol=atol, err_msg="input delta"
            )
        return self


@jax.jit
def _evaluate(net, x, delta):
    inp = Tape(symnet.Identity(), x)
    tape = net.forward(inp)
    grads = tape.backward(delta)
    dx = tape.backward_deltas(delta).get(inp)
    dx = jnp.zeros_like(x) if dx is None else dx

    def f(params, x):
        return net.forward(Tape(symnet.Identity(), x), params).value

    _, pullback = jax.vjp(f, dict(net.params), x)
    ref_grads, ref_dx = pullback(delta)
    return tape.value, grads, dx, ref_grads, ref_dx


def close(a, b, rtol=1e-5, atol=1e-5):
    np.testing.assert_allclose(np.asarray(a, dtype=np.float64), np.asarray(b, dtype=np.float64), rtol=rtol, atol=atol)


# ----- affine family ---------------------------------------------------------------------


@pytest.mark.parametrize("kaldi_type", ["AffineComponent", "NaturalGradientAffineComponent"])
@pytest.mark.parametrize("shape", [(5,), (3, 2)])
def test_affine(kaldi_type, shape):
    layer = build(kaldi_type, {"input-dim": 4, "output-dim": 3})
    assert (layer.input_dim, layer.output_dim) == (4, 3)
    x = rand(*shape, 4)
    r = Run(layer, x)
    close(r.value, x @ r.p["c.linear_params"].T + r.p["c.bias_params"])
    r.check_backward()


def test_linear():
    layer = build("LinearComponent", {"input-dim": 5, "output-dim": 2})
    x = rand(6, 5)
    r = Run(layer, x)
    assert r.net.values["c.params"].shape == (2, 5)
    close(r.value, x @ r.p["c.params"].T)
    r.check_backward()


def test_fixed_affine_is_not_trained():
    layer = build("FixedAffineComponent", {"input-dim": 4, "output-dim": 3})
    x = rand(5, 4)
    r = Run(layer, x)
    close(r.value, x @ r.p["c.linear_params"].T + r.p["c.bias_params"])
    r.check_backward()
    assert all(isinstance(w, FixedWeight) for w in r.net.weights.values())
    assert r.net.params == {} and set(r.net.state) == {"c.bias_params", "c.linear_params"}


def test_block_affine():
    layer = build("BlockAffineComponent", {"input-dim": 6, "output-dim": 4, "num-blocks": 2})
    assert (layer.input_dim, layer.output_dim) == (6, 4)
    x = rand(2, 3, 6)
    r = Run(layer, x)
    w, b = r.p["c.linear_params"], r.p["c.bias_params"]
    assert w.shape == (4, 3)
    ref = np.concatenate([x[..., 0:3] @ w[0:2].T, x[..., 3:6] @ w[2:4].T], axis=-1) + b
    close(r.value, ref)
    r.check_backward()


@pytest.mark.parametrize("kaldi_type", ["RepeatedAffineComponent", "NaturalGradientRepeatedAffineComponent"])
def test_repeated_affine(kaldi_type):
    layer = build(kaldi_type, {"input-dim": 6, "output-dim": 9, "num-repeats": 3})
    assert (layer.input_dim, layer.output_dim) == (6, 9)
    x = rand(4, 6)
    r = Run(layer, x)
    w, b = r.p["c.linear_params"], r.p["c.bias_params"]
    assert w.shape == (3, 2) and b.shape == (3,)
    ref = np.concatenate([x[:, 2 * k : 2 * k + 2] @ w.T + b for k in range(3)], axis=-1)
    close(r.value, ref)
    r.check_backward()


# ----- nonlinearities ------------------------------------------------------------------


def _softmax(x):
    e = np.exp(x - x.max(axis=-1, keepdims=True))
    return e / e.sum(axis=-1, keepdims=True)


NONLINEAR = {
    "RectifiedLinearComponent": lambda x: np.maximum(x, 0.0),
    "SigmoidComponent": lambda x: 1.0 / (1.0 + np.exp(-x)),
    "TanhComponent": np.tanh,
    "SoftmaxComponent": lambda x: np.maximum(_softmax(x), 1e-20),
    "LogSoftmaxComponent": lambda x: np.log(_softmax(x)),
}


@pytest.mark.parametrize("kaldi_type", sorted(NONLINEAR))
def test_nonlinearities(kaldi_type):
    layer = build(kaldi_type, {"dim": 6})
    x = rand(2, 4, 6, scale=2.0).astype(np.float64)
    r = Run(layer, x.astype(np.float32))
    close(r.value, NONLINEAR[kaldi_type](x.astype(np.float32).astype(np.float64)))
    r.check_backward()


def test_softmax_floor():
    layer = build("SoftmaxComponent", {"dim": 3})
    r = Run(layer, np.array([[0.0, 100.0, -100.0]], np.float32))
    assert float(r.value[0, 2]) == pytest.approx(1e-20, rel=1e-3)


def test_pnorm():
    layer = build("PnormComponent", {"input-dim": 6, "output-dim": 2})
    x = rand(5, 6)
    x[0, 3:6] = 0.0  # an all-zero group: output 0, derivative 0
    r = Run(layer, x)
    close(r.value, np.sqrt((x.reshape(5, 2, 3).astype(np.float64) ** 2).sum(-1)))
    value = np.asarray(r.value)
    ref = np.repeat(r.delta / np.where(value == 0, 1, value), 3, axis=-1) * x
    ref[0, 3:6] = 0.0
    close(r.dx, ref)
    x[0, 3:6] = 1.0
    Run(layer, x).check_backward()


# ----- normalisation ---------------------------------------------------------------------


def _normalize_ref(x, target_rms, add_log_stddev, block_dim):
    x = x.astype(np.float64)
    d = x.shape[-1]
    blocks = x.reshape(x.shape[:-1] + (d // block_dim, block_dim))
    p = (blocks**2).sum(-1, keepdims=True) / (block_dim * target_rms**2)
    f = np.maximum(p, 2.0**-66) ** -0.5
    y = blocks * f
    if add_log_stddev:
        y = np.concatenate([y, np.log(target_rms) - np.log(f)], axis=-1)
    return y.reshape(x.shape[:-1] + (-1,))


@pytest.mark.parametrize("target_rms,add_log_stddev,block_dim", [(1.0, False, 6), (0.5, True, 6), (2.0, True, 3)])
def test_normalize(target_rms, add_log_stddev, block_dim):
    opts = {"dim": 6, "target-rms": target_rms, "add-log-stddev": add_log_stddev, "block-dim": block_dim}
    layer = build("NormalizeComponent", opts)
    assert layer.output_dim == 6 + (6 // block_dim if add_log_stddev else 0)
    x = rand(3, 4, 6)
    r = Run(layer, x)
    assert r.value.shape == (3, 4, layer.output_dim)
    close(r.value, _normalize_ref(x, target_rms, add_log_stddev, block_dim), rtol=2e-5)
    r.check_backward()


def test_normalize_zero_row_has_finite_derivative():
    layer = build("NormalizeComponent", {"dim": 4, "add-log-stddev": "true"})
    x = np.zeros((2, 4), np.float32)
    x[1] = rand(4)
    r = Run(layer, x)
    assert np.all(np.isfinite(np.asarray(r.value)))
    assert np.all(np.isfinite(np.asarray(r.dx)))


def _bn_test_ref(x, mean, var, block_dim, eps, rms):
    blocks = x.astype(np.float64).reshape(x.shape[:-1] + (-1, block_dim))
    scale = rms / np.sqrt(np.maximum(var, 0.0) + eps)
    return (blocks * scale - mean * scale).reshape(x.shape)


def _bn_train_ref(x, block_dim, eps, rms):
    blocks = x.astype(np.float64).reshape(-1, block_dim)
    mean = blocks.mean(0)
    var = (blocks**2).mean(0) - mean**2
    y = (x.astype(np.float64).reshape(x.shape[:-1] + (-1, block_dim)) - mean) * rms / np.sqrt(var + eps)
    return y.reshape(x.shape)


@pytest.mark.parametrize("block_dim", [4, 2])
def test_batchnorm_test_mode(block_dim):
    layer = build(
        "BatchNormComponent",
        {"dim": 4, "block-dim": block_dim, "test-mode": "true", "target-rms": 0.5, "epsilon": 0.01},
    )
    x = rand(6, 4)
    r = Run(layer, x)
    close(r.value, _bn_test_ref(x, r.p["c.stats_mean"], r.p["c.stats_var"], block_dim, 0.01, 0.5))
    r.check_backward()


@pytest.mark.parametrize("block_dim", [4, 2])
def test_batchnorm_training_mode(block_dim):
    layer = build("BatchNormComponent", {"dim": 4, "block-dim": block_dim, "target-rms": 2.0})
    x = rand(3, 5, 4) + 1.5
    r = Run(layer, x)
    close(r.value, _bn_train_ref(x, block_dim, 1e-3, 2.0), rtol=1e-4, atol=1e-4)
    r.check_backward(rtol=1e-3, atol=1e-4)
    # The backward is written out (normalize._training_mode), so check it against central differences of the
    # float64 forward, which does not share it.
    x64, g = x.astype(np.float64), r.delta.astype(np.float64)
    numeric = np.zeros_like(x64)
    for i in np.ndindex(x.shape):
        e = np.zeros_like(x64)
        e[i] = 1e-5
        up, down = _bn_train_ref(x64 + e, block_dim, 1e-3, 2.0), _bn_train_ref(x64 - e, block_dim, 1e-3, 2.0)
        numeric[i] = np.sum(g * (up - down)) / 2e-5
    close(r.dx, numeric, rtol=1e-3, atol=1e-4)


def test_batchnorm_stats_accumulate_like_kaldi():
    layer = build("BatchNormComponent", {"dim": 4, "block-dim": 2})
    x1, x2 = rand(5, 4) + 1.0, rand(3, 4) - 2.0
    net = symnet.Network(layer)
    updates = batchnorm_stats_updates(net.forward(x1))
    assert set(updates) == {"c.count", "c.stats_mean", "c.stats_var"}
    net = net.assign(updates)
    net = net.assign(batchnorm_stats_updates(net.forward(x2)))
    both = np.concatenate([x1.reshape(-1, 2), x2.reshape(-1, 2)]).astype(np.float64)
    close(net.values["c.count"], 16.0)
    close(net.values["c.stats_mean"], both.mean(0))
    close(net.values["c.stats_var"], both.var(0), rtol=1e-4)
    # Test mode then normalises with these statistics.
    test_net = set_test_mode(net)
    close(test_net(x2), _bn_test_ref(x2, both.mean(0), both.var(0), 2, 1e-3, 1.0), rtol=1e-4, atol=1e-4)
    assert batchnorm_stats_updates(test_net.forward(x2)) == {}


def test_set_test_mode_rewrites_shared_trees():
    x = symnet.Identity()
    drop = build_component("DropoutComponent", "d", {"dim": 3, "dropout-proportion": 0.25}, x)
    bn = build_component("BatchNormComponent", "bn", {"dim": 3}, drop)
    out = bn + drop
    new = set_test_mode(out)
    assert new.lhs.test_mode and new.rhs.test_mode and new.lhs.input is new.rhs
    assert set_test_mode(new, False) == out
    only_bn = set_test_mode(out, dropout=False)
    assert only_bn.lhs.test_mode and not only_bn.rhs.test_mode
    assert bn.matrixwise and not new.lhs.matrixwise and not drop.matrixwise
    with pytest.raises(symnet.SymnetError, match="needs random numbers in training mode"):
        symnet.Network(drop)(rand(2, 3))  # training mode outside symnet.rng.randomness


# ----- scales and offsets ----------------------------------------------------------------


def test_scale_and_offset():
    layer = build("ScaleAndOffsetComponent", {"dim": 6, "block-dim": 3})
    x = rand(4, 6)
    net = symnet.Network(layer)
    assert np.all(np.asarray(net.values["c.scales"]) == 1.0) and np.all(np.asarray(net.values["c.offsets"]) == 0.0)
    r = Run(layer, x)
    s, o = r.p["c.scales"], r.p["c.offsets"]
    close(r.value, (x.reshape(4, 2, 3) * s + o).reshape(4, 6))
    r.check_backward()
    # Scales closer to zero than 1e-4 act as +-1e-4 in the forward pass.
    params = dict(r.net.params, **{"c.scales": np.array([0.0, -1e-6, 0.5], np.float32)})
    r = Run(layer, x, params)
    close(r.value, (x.reshape(4, 2, 3) * np.array([1e-4, -1e-4, 0.5]) + o).reshape(4, 6))


@pytest.mark.parametrize("kaldi_type", ["PerElementScaleComponent", "NaturalGradientPerElementScaleComponent"])
def test_per_element_scale(kaldi_type):
    layer = build(kaldi_type, {"dim": 5})
    assert np.all(np.asarray(symnet.Network(layer).values["c.params"]) == 1.0)
    x = rand(3, 2, 5)
    r = Run(layer, x)
    close(r.value, x * r.p["c.params"])
    r.check_backward()


def test_per_element_offset_blocks():
    layer = build("PerElementOffsetComponent", {"dim": 6, "block-dim": 2})
    x = rand(4, 6)
    r = Run(layer, x)
    assert r.p["c.offsets"].shape == (2,)
    close(r.value, x + np.tile(r.p["c.offsets"], 3))
    r.check_backward()


def test_fixed_scale_and_bias():
    scale = build("FixedScaleComponent", {"dim": 3, "scale": 2.5})
    assert np.all(np.asarray(symnet.Network(scale).values["c.scales"]) == 2.5)
    bias = build("FixedBiasComponent", {"dim": 3})
    x = rand(4, 3)
    for layer, ref in ((scale, lambda p: x * p["c.scales"]), (bias, lambda p: x + p["c.bias"])):
        r = Run(layer, x)
        close(r.value, ref(r.p))
        r.check_backward()


@pytest.mark.parametrize("updatable", [True, False])
def test_constant_function(updatable):
    layer = build(
        "ConstantFunctionComponent", {"input-dim": 3, "output-dim": 2, "is-updatable": updatable, "output-mean": 0.5}
    )
    assert np.all(np.asarray(symnet.Network(layer).values["c.output"]) == 0.5)
    x = rand(2, 4, 3)
    r = Run(layer, x)
    close(r.value, np.broadcast_to(r.p["c.output"], (2, 4, 2)))
    r.check_backward()
    if updatable:
        close(r.grads["c.output"], r.delta.sum((0, 1)))
    else:  # not updatable: a FixedWeight, part of the state, with no gradient at all
        assert "c.output" not in r.grads and "c.output" in r.net.state


# ----- rearrangements, dropout, gradient shaping ---------------------------------------------


def test_no_op_backprop_scale():
    layer = build("NoOpComponent", {"dim": 3, "backprop-scale": 0.5})
    x = rand(4, 3)
    r = Run(layer, x)
    close(r.value, x)
    close(r.dx, 0.5 * r.delta)


def test_elementwise_product():
    layer = build("ElementwiseProductComponent", {"input-dim": 6, "output-dim": 2})
    x = rand(5, 6)
    r = Run(layer, x)
    close(r.value, x[:, 0:2] * x[:, 2:4] * x[:, 4:6])
    r.check_backward()


@pytest.mark.parametrize(
    "options,sizes", [({"sizes": "2,3,1"}, (2, 3, 1)), ({"input-dim": 6, "output-dim": 3}, (2, 2, 2))]
)
def test_sum_group(options, sizes):
    layer = build("SumGroupComponent", options)
    assert layer.sizes == sizes and (layer.input_dim, layer.output_dim) == (6, 3)
    x = rand(2, 3, 6)
    r = Run(layer, x)
    bounds = np.cumsum((0,) + sizes)
    close(r.value, np.stack([x[..., a:b].sum(-1) for a, b in itertools.pairwise(bounds)], axis=-1))
    r.check_backward()


def test_sum_block():
    layer = build("SumBlockComponent", {"input-dim": 6, "output-dim": 2, "scale": 0.5})
    x = rand(4, 6)
    r = Run(layer, x)
    close(r.value, 0.5 * (x[:, 0:2] + x[:, 2:4] + x[:, 4:6]))
    r.check_backward()


def test_permute():
    layer = build("PermuteComponent", {"column-map": "2,0,3,1"})
    x = rand(3, 4)
    r = Run(layer, x)
    close(r.value, x[:, [2, 0, 3, 1]])
    r.check_backward()


def test_dropout_test_mode_scales():
    layer = build("DropoutComponent", {"dim": 3, "dropout-proportion": 0.2, "test-mode": "true"})
    x = rand(4, 3)
    r = Run(layer, x)
    close(r.value, 0.8 * x)
    r.check_backward()


def test_general_dropout_test_mode_is_identity():
    layer = set_test_mode(build("GeneralDropoutComponent", {"dim": 4, "block-dim": 2, "dropout-proportion": 0.3}))
    x = rand(3, 4)
    r = Run(layer, x)
    close(r.value, x)
    r.check_backward()
    with pytest.raises(symnet.SymnetError, match="GeneralDropoutComponent 'c' needs random numbers"):
        set_test_mode(layer, False).forward(x)  # training mode outside symnet.rng.randomness


@pytest.mark.parametrize("norm_based", [False, True])
def test_clip_gradient(norm_based):
    layer = build("ClipGradientComponent", {"dim": 3, "clipping-threshold": 1.0, "norm-based-clipping": norm_based})
    x = rand(5, 3)
    delta = rand(5, 3, scale=2.0)
    r = Run(layer, x, delta=delta)
    close(r.value, x)
    got = r.dx
    if norm_based:
        norms = np.linalg.norm(delta, axis=-1, keepdims=True)
        ref = delta * np.minimum(1.0, 1.0 / norms)
    else:
        ref = np.clip(delta, -1.0, 1.0)
    close(got, ref)
    zero = build("ClipGradientComponent", {"dim": 3, "clipping-threshold": 0})
    close(Run(zero, x, delta=delta).dx, 0.0)


def test_backprop_truncation():
    layer = build(
        "BackpropTruncationComponent",
        {"dim": 2, "scale": 2.0, "clipping-threshold": 3.0, "zeroing-threshold": 1.0, "zeroing-interval": 4},
    )
    x = rand(6, 2)
    delta = np.array([[0.1, 0.1], [5.0, 0.0], [0.3, 0.4], [2.0, 2.0], [0.1, 0.0], [1.0, 1.0]], np.float32)
    r = Run(layer, x, delta=delta)
    close(r.value, 2.0 * x)
    scaled = 2.0 * delta
    norms = np.linalg.norm(scaled, axis=-1, keepdims=True)
    clipped = scaled * np.minimum(1.0, 3.0 / norms)
    close(r.dx, clipped)
    # Rows (n=0, t) at t = 0, 4, 8 cross a zeroing boundary (t-1 and t in different intervals of 4).
    t = np.array([0, 1, 4, 5, 8, 9])
    boundary = layer.zeroing_rows(np.zeros(6, int), t)
    assert boundary.tolist() == [True, False, True, False, True, False]
    kill = boundary & (norms[:, 0] > 1.0)
    close(layer.backprop(jnp.asarray(delta), boundary), np.where(kill[:, None], 0.0, clipped))
    # The boundary moves with n.
    assert layer.zeroing_rows(np.ones(3, int), np.array([0, 1, 5])).tolist() == [False, True, True]


# ----- LSTM and GRU cores ---------------------------------------------------------------------


def _sigmoid(x):
    return 1.0 / (1.0 + np.exp(-x))


def _lstm_ref(x, params, c, use_dropout):
    x = x.astype(np.float64)
    i_part, f_part, c_part, o_part, c_prev = (x[..., k * c : (k + 1) * c] for k in range(5))
    scales = [x[..., 5 * c + k : 5 * c + k + 1] for k in range(3)] if use_dropout else [1.0, 1.0, 1.0]
    w_ic, w_fc, w_oc = params
    i_t = _sigmoid(i_part + w_ic * c_prev)
    f_t = _sigmoid(f_part + w_fc * c_prev)
    c_t = f_t * scales[1] * c_prev + i_t * scales[0] * np.tanh(c_part)
    o_t = _sigmoid(o_part + w_oc * c_t)
    return np.concatenate([c_t, o_t * scales[2] * np.tanh(c_t)], axis=-1)


@pytest.mark.parametrize("use_dropout", [False, True])
def test_lstm_nonlinearity(use_dropout):
    layer = build("LstmNonlinearityComponent", {"cell-dim": 3, "use-dropout": use_dropout})
    assert (layer.input_dim, layer.output_dim) == (15 + (3 if use_dropout else 0), 6)
    x = rand(2, 4, layer.input_dim)
    r = Run(layer, x)
    close(r.value, _lstm_ref(x, r.p["c.params"], 3, use_dropout))
    r.check_backward()


@pytest.mark.parametrize("recurrent_dim", [4, 2])
def test_gru_nonlinearity(recurrent_dim):
    layer = build("GruNonlinearityComponent", {"cell-dim": 4, "recurrent-dim": recurrent_dim})
    c, rd = 4, recurrent_dim
    assert layer.input_dim == (4 * c if rd == c else 3 * c + 2 * rd) and layer.output_dim == 2 * c
    x = rand(5, layer.input_dim)
    r = Run(layer, x)
    x = x.astype(np.float64)
    z, rr, hpart = x[:, :c], x[:, c : c + rd], x[:, c + rd : 2 * c + rd]
    c_prev, s_prev = x[:, 2 * c + rd : 3 * c + rd], x[:, -rd:]
    h = np.tanh(hpart + (rr * s_prev) @ r.p["c.w_h"].T)
    close(r.value, np.concatenate([h, (1 - z) * h + z * c_prev], axis=-1))
    r.check_backward()


def test_output_gru_nonlinearity():
    layer = build("OutputGruNonlinearityComponent", {"cell-dim": 3})
    x = rand(4, 9)
    r = Run(layer, x)
    xd = x.astype(np.float64)
    z, hpart, c_prev = xd[:, :3], xd[:, 3:6], xd[:, 6:9]
    h = np.tanh(hpart + r.p["c.w_h"] * c_prev)
    close(r.value, np.concatenate([h, (1 - z) * h + z * c_prev], axis=-1))
    r.check_backward()


# ----- all components together -----------------------------------------------------------------


def test_every_registered_type_is_tested_and_dims_checked():
    tested = {
        "AffineComponent",
        "NaturalGradientAffineComponent",
        "LinearComponent",
        "FixedAffineComponent",
        "TdnnComponent",  # tested in tests/kaldi/test_kaldi_network.py
        # tested in tests/components/test_components_nonsimple.py:
        "StatisticsExtractionComponent",
        "StatisticsPoolingComponent",
        "TimeHeightConvolutionComponent",
        "ConvolutionComponent",
        "MaxpoolingComponent",
        "RestrictedAttentionComponent",
        "DistributeComponent",
        "CompositeComponent",
        "SpecAugmentTimeMaskComponent",
        # tested in tests/components/test_components_inputless.py:
        "ConstantComponent",
        "DropoutMaskComponent",
        "BlockAffineComponent",
        "RepeatedAffineComponent",
        "NaturalGradientRepeatedAffineComponent",
        "PnormComponent",
        "NormalizeComponent",
        "BatchNormComponent",
        "ScaleAndOffsetComponent",
        "PerElementScaleComponent",
        "PerElementOffsetComponent",
        "NaturalGradientPerElementScaleComponent",
        "FixedScaleComponent",
        "FixedBiasComponent",
        "ConstantFunctionComponent",
        "NoOpComponent",
        "ElementwiseProductComponent",
        "SumGroupComponent",
        "SumBlockComponent",
        "PermuteComponent",
        "DropoutComponent",
        "GeneralDropoutComponent",
        "ClipGradientComponent",
        "BackpropTruncationComponent",
        "LstmNonlinearityComponent",
        "GruNonlinearityComponent",
        "OutputGruNonlinearityComponent",
    } | set(NONLINEAR)
    assert set(COMPONENTS) == tested
    layer = build("AffineComponent", {"input-dim": 4, "output-dim": 3})
    with pytest.raises(symnet.ShapeError, match="AffineComponent 'c': input dim is 5, expected 4"):
        layer.forward(rand(2, 5))


def test_components_in_a_jitted_network():
    x = symnet.Identity()
    h = build_component("AffineComponent", "a1", {"input-dim": 4, "output-dim": 6}, x)
    h = build_component("RectifiedLinearComponent", "r1", {"dim": 6}, h)
    h = build_component("BatchNormComponent", "bn1", {"dim": 6, "test-mode": True}, h)
    h = build_component("AffineComponent", "a2", {"input-dim": 6, "output-dim": 3}, h)
    out = build_component("LogSoftmaxComponent", "s", {"dim": 3}, h)
    net = symnet.Network(out)
    net = net.assign({"bn1.count": 1.0, "bn1.stats_var": np.ones(6, np.float32)})
    data = rand(5, 4)

    @jax.jit
    def loss_and_grads(net, data):
        tape = net.forward(Tape(symnet.Identity(), data))
        return tape.value.sum(), tape.backward(1.0)

    value, grads = loss_and_grads(net, data)
    ref_value, ref_grads = jax.jit(jax.value_and_grad(lambda n: n.forward(Tape(symnet.Identity(), data)).value.sum()))(
        net
    )
    close(value, ref_value)
    for name in ("a1.linear_params", "a1.bias_params", "a2.linear_params", "a2.bias_params"):
        close(grads[name], ref_grads.params[name], rtol=1e-4)
    assert "bn1.stats_var" not in grads and "bn1.stats_var" in net.state  # statistics are state, not trained
