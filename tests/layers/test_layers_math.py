"""Each typed layer against an independent formula: the forward value and `jax.grad` of a weighted sum.

The references are written here from the layers' documented math (loops and
plain jnp, no lax.conv or reduce_window), so they do not share code with the
layers; the gradients compare the layers' own backward passes (hand-written
for LayerNorm and BatchNorm) with JAX's derivative of the reference.
"""

from __future__ import annotations

from collections.abc import Callable
from typing import Any

import jax
import jax.numpy as jnp
import numpy as np
import pytest

from symnet import Identity, Input, Layer, Network, Node, ReLU, rng
from symnet.layers import Affine, AvgPool2d, BatchNorm, Conv2d, Dropout, Flatten, LayerNorm, MaxPool2d, Reshape

jax.config.update("jax_enable_x64", False)
RNG = np.random.default_rng(0)


def randn(*shape: int) -> np.ndarray:
    return RNG.standard_normal(shape).astype(np.float32)


def value_and_grads(net: Network, x: np.ndarray, g: np.ndarray) -> tuple[np.ndarray, dict[str, Any], np.ndarray]:
    """The output, the gradient of `sum(output * g)` for every parameter and for the input."""

    def loss(params: dict[str, jax.Array], x: jax.Array) -> jax.Array:
        return jnp.sum(net.replace(params=params)(x) * g)

    dp, dx = jax.grad(loss, argnums=(0, 1))(net.params, jnp.asarray(x))
    return np.asarray(net(x)), dp, np.asarray(dx)


def check(
    net: Network, x: np.ndarray, reference: Callable[..., jax.Array], names: list[str], tol: float = 2e-4
) -> None:
    """`net(x)` equals `reference(x, *params)` and so do their gradients (params in the order `names`)."""
    y = np.asarray(reference(jnp.asarray(x), *[net.params[n] for n in names]))
    g = randn(*y.shape)
    out, dp, dx = value_and_grads(net, x, g)
    np.testing.assert_allclose(out, y, rtol=tol, atol=tol)
    ref_grads = jax.grad(lambda x, *p: jnp.sum(reference(x, *p) * g), argnums=tuple(range(len(names) + 1)))(
        jnp.asarray(x), *[net.params[n] for n in names]
    )
    np.testing.assert_allclose(dx, ref_grads[0], rtol=tol, atol=tol)
    for name, ref in zip(names, ref_grads[1:], strict=True):
        np.testing.assert_allclose(dp[name], ref, rtol=tol, atol=tol, err_msg=name)


def randomised(net: Network) -> Network:
    """The network with every parameter random (zero biases would hide bias bugs)."""
    return net.replace(params={n: randn(*v.shape) for n, v in net.params.items()})


# ----- row-wise layers -------------------------------------------------------------------------


def test_affine_is_w_x_plus_b() -> None:
    net = randomised(Network(Node("fc", Affine(Input("input", 6), 4))))
    assert sorted(net.params) == ["fc.bias_params", "fc.linear_params"]
    check(net, randn(5, 6), lambda x, b, w: x @ w.T + b, ["fc.bias_params", "fc.linear_params"])


def layer_norm(x: jax.Array, scale: jax.Array, offset: jax.Array, eps: float) -> jax.Array:
    mean = x.sum(-1, keepdims=True) / x.shape[-1]
    var = ((x - mean) ** 2).sum(-1, keepdims=True) / x.shape[-1]
    return (x - mean) / jnp.sqrt(var + eps) * scale + offset


def test_layer_norm_normalises_each_row_then_scales_and_offsets() -> None:
    net = randomised(Network(Node("ln", LayerNorm(Input("input", 7), epsilon=1e-3))))
    assert sorted(net.params) == ["ln.offset", "ln.scale"] and net.state == {}
    check(net, 3 * randn(6, 7) + 1, lambda x, s, o: layer_norm(x, s, o, 1e-3), ["ln.scale", "ln.offset"])


def test_layer_norm_without_affine_has_no_parameters() -> None:
    net = Network(LayerNorm(Input("input", 5), affine=False))
    assert net.params == {}
    x = randn(4, 5)
    np.testing.assert_allclose(net(x), layer_norm(x, 1.0, 0.0, 1e-5), rtol=1e-4, atol=1e-5)


def batch_norm(x: jax.Array, block: int, eps: float, rms: float) -> jax.Array:
    """Per column block: mean and biased variance over every row and every block of the row."""
    rows = x.reshape(-1, block)
    mean = rows.mean(0)
    var = ((rows - mean) ** 2).mean(0)
    return ((rows - mean) * rms / jnp.sqrt(var + eps)).reshape(x.shape)


def test_batch_norm_training_mode_uses_the_minibatch_statistics() -> None:
    net = Network(Node("bn", BatchNorm(Input("input", 6), target_rms=2.0)))
    assert net.params == {} and sorted(net.state) == ["bn.count", "bn.stats_mean", "bn.stats_var"]
    check(net, 2 * randn(9, 6) - 1, lambda x: batch_norm(x, 6, 1e-3, 2.0), [])


def test_batch_norm_on_images_normalises_each_channel_over_every_pixel() -> None:
    image = Reshape(Input("input", 4 * 3 * 2), (4, 3, 2))
    layer = BatchNorm(image)
    assert (layer.dim, layer.block_dim) == (24, 2)
    check(Network(layer), randn(5, 24) + 3, lambda x: batch_norm(x, 2, 1e-3, 1.0), [])


def test_batch_norm_statistics_are_state_and_test_mode_uses_them() -> None:
    net = Network(Node("bn", BatchNorm(Input("input", 3), test_mode=True)))
    mean, var = np.array([1.0, -2.0, 0.5], np.float32), np.array([4.0, 1.0, 0.25], np.float32)
    net = net.assign({"bn.stats_mean": mean, "bn.stats_var": var, "bn.count": np.float32(10)})
    x = randn(4, 3)
    np.testing.assert_allclose(net(x), (x - mean) / np.sqrt(var + 1e-3), rtol=1e-5, atol=1e-5)


def test_dropout_zeroes_a_proportion_and_rescales_the_rest_the_same_in_the_gradient() -> None:
    net = Network(Node("drop", Dropout(Input("input", 2000), 0.25)))
    x = randn(20, 2000) + 5
    g = randn(20, 2000)
    with rng.randomness(jax.random.PRNGKey(3)):
        y, _, dx = value_and_grads(net, x, g)
    kept = y != 0
    assert abs(1 - kept.mean() - 0.25) < 0.01
    np.testing.assert_allclose(y[kept], x[kept] / 0.75, rtol=1e-5)
    np.testing.assert_allclose(dx, np.where(kept, g / 0.75, 0), rtol=1e-5, atol=1e-6)


def test_dropout_per_frame_drops_whole_rows_and_test_mode_is_the_identity() -> None:
    net = Network(Node("drop", Dropout(Input("input", 8), 0.5, per_frame=True)))
    with rng.randomness(jax.random.PRNGKey(0)):
        y = np.asarray(net(np.ones((400, 8), np.float32)))
    assert set(np.unique(y)) == {0.0, 2.0} and (y == y[:, :1]).all()
    x = randn(3, 8)
    np.testing.assert_array_equal(Network(Dropout(Input("input", 8), 0.5, test_mode=True))(x), x)


# ----- images ------------------------------------------------------------------------------------


def images(x: jax.Array, shape: tuple[int, int, int]) -> jax.Array:
    return x.reshape((x.shape[0],) + shape)


def conv_reference(
    x: jax.Array,
    w: jax.Array,
    b: jax.Array,
    shape: tuple[int, int, int],
    kernel: tuple[int, int],
    stride: tuple[int, int],
    pads: tuple[tuple[int, int], tuple[int, int]],
    dilation: tuple[int, int],
) -> jax.Array:
    """y[n, i, j, o] = b[o] + sum_{a,b,c} xpad[n, i*sh + a*dh, j*sw + b*dw, c] * w[o, (a*kw + b)*C + c]."""
    (kh, kw), (sh, sw), (dh, dw) = kernel, stride, dilation
    c = shape[2]
    xp = jnp.pad(images(x, shape), ((0, 0), pads[0], pads[1], (0, 0)))
    oh = (xp.shape[1] - dh * (kh - 1) - 1) // sh + 1
    ow = (xp.shape[2] - dw * (kw - 1) - 1) // sw + 1
    out = jnp.zeros((x.shape[0], oh, ow, w.shape[0])) + b
    for a in range(kh):
        for bb in range(kw):
            patch = xp[:, a * dh : a * dh + sh * (oh - 1) + 1 : sh, bb * dw : bb * dw + sw * (ow - 1) + 1 : sw, :]
            filt = w[:, (a * kw + bb) * c : (a * kw + bb + 1) * c]  # [O, C]
            out = out + jnp.einsum("nijc,oc->nijo", patch, filt)
    return out.reshape(x.shape[0], -1)


@pytest.mark.parametrize(
    "kernel, stride, padding, dilation, pads",
    [
        ((3, 3), 1, 0, 1, ((0, 0), (0, 0))),
        ((3, 2), (2, 1), 1, 1, ((1, 1), (1, 1))),
        ((3, 3), 2, "same", 1, ((1, 1), (0, 1))),  # 7 x 6 -> 4 x 3 (ceil of size / 2); XLA pads the odd one after
        ((2, 2), 1, ((1, 0), (0, 2)), (2, 1), ((1, 0), (0, 2))),
    ],
)
def test_conv2d_is_the_documented_cross_correlation(
    kernel: Any, stride: Any, padding: Any, dilation: Any, pads: Any
) -> None:
    shape = (7, 6, 3)
    layer = Conv2d(
        Reshape(Input("input", 7 * 6 * 3), shape), 4, kernel, stride=stride, padding=padding, dilation=dilation
    )
    assert layer.pads == pads
    net = randomised(Network(Node("conv", layer)))
    names = ["conv.filter_params", "conv.bias_params"]
    assert sorted(net.params) == sorted(names) and net.params["conv.filter_params"].shape == (
        4,
        kernel[0] * kernel[1] * 3,
    )
    s, d = layer.stride, layer.dilation

    def ref(x: jax.Array, w: jax.Array, b: jax.Array) -> jax.Array:
        return conv_reference(x, w, b, shape, kernel, s, pads, d)

    y = ref(jnp.asarray(randn(2, 126)), net.params["conv.filter_params"], net.params["conv.bias_params"])
    assert layer.output_dim == y.shape[1] == np.prod(layer.image_shape)
    check(net, randn(2, 126), ref, names)


def pool_reference(x: jax.Array, shape: tuple[int, int, int], k: int, s: int, pad: int, op: str) -> jax.Array:
    fill = -jnp.inf if op == "max" else 0.0
    xp = jnp.pad(images(x, shape), ((0, 0), (pad, pad), (pad, pad), (0, 0)), constant_values=fill)
    oh, ow = (xp.shape[1] - k) // s + 1, (xp.shape[2] - k) // s + 1
    windows = jnp.stack(
        [xp[:, a : a + s * (oh - 1) + 1 : s, b : b + s * (ow - 1) + 1 : s, :] for a in range(k) for b in range(k)]
    )
    out = windows.max(0) if op == "max" else windows.mean(0)
    return out.reshape(x.shape[0], -1)


@pytest.mark.parametrize("cls, op", [(MaxPool2d, "max"), (AvgPool2d, "mean")])
@pytest.mark.parametrize("k, s, pad", [(2, None, 0), (3, 2, 1), (2, 1, 0)])
def test_pooling_is_the_max_or_mean_of_each_window(cls: type, op: str, k: int, s: int | None, pad: int) -> None:
    shape = (6, 5, 2)
    layer = cls(Reshape(Input("input", 60), shape), k, stride=s, padding=pad)
    check(Network(layer), randn(3, 60), lambda x: pool_reference(x, shape, k, s or k, pad, op), [])


def test_reshape_and_flatten_keep_the_numbers_and_take_plain_image_arrays() -> None:
    image = Reshape(Input("input", 12), (2, 3, 2))
    assert image.image_shape == (2, 3, 2) and Flatten(image).output_dim == 12
    x = randn(4, 12)
    np.testing.assert_array_equal(Network(Flatten(image))(x), x)
    np.testing.assert_array_equal(Network(Reshape(Identity(), (2, 3, 2)))(x.reshape(4, 2, 3, 2)), x)
    check(Network(Flatten(image) * 2.0), x, lambda x: x * 2.0, [])


def test_cnn_end_to_end_matches_the_composed_references() -> None:
    shape = (8, 8, 1)
    x = Reshape(Input("input", 64), shape)
    h = Node("conv", Conv2d(x, 3, 3, padding="same"))
    p = MaxPool2d(ReLU(h), 2)
    out: Layer = Affine(Flatten(p), 5, name="fc")
    net = randomised(Network(out))
    names = ["conv.filter_params", "conv.bias_params", "fc.linear_params", "fc.bias_params"]

    def ref(x: jax.Array, w: jax.Array, b: jax.Array, fw: jax.Array, fb: jax.Array) -> jax.Array:
        c = jnp.maximum(conv_reference(x, w, b, shape, (3, 3), (1, 1), ((1, 1), (1, 1)), (1, 1)), 0)
        return pool_reference(c, (8, 8, 3), 2, 2, 0, "max") @ fw.T + fb

    check(net, randn(4, 64), ref, names)
