"""Attention computed from its source's frames (symnet/_src/engine/attention.py) against references written here:
softmax attention over each frame's window in plain jnp (values and jax.grad), the expansion
(`lowering="plain"`: the Append of the window and the row-wise core), sequences alone against a padded batch
with ends, chunks against one pass, and XLA's planned memory at utterance length."""

from __future__ import annotations

import jax
import jax.numpy as jnp
import numpy as np
import pytest

from symnet import Input, Network, Node
from symnet.components import RestrictedAttentionComponent
from symnet.engine import record
from symnet.layers import Affine, MultiHeadAttention

RNG = np.random.default_rng(47)
D = 6


def randomised(net: Network) -> Network:
    return net.replace(params={n: 0.5 * RNG.standard_normal(v.shape).astype(np.float32) for n, v in net.params.items()})


def window_attention(
    qkv: jax.Array, heads: int, kd: int, vd: int, left: int, right: int, stride: int, masked: bool, context: bool
) -> jax.Array:
    """Restricted attention of one sequence's rows `qkv [T, H * (2 kd + vd + C)]`, frame by frame: frame t reads
    frames t + o * stride, o = -left .. right; one outside the sequence takes no weight (`masked`) or has zero
    key and value (Kaldi's)."""
    t, c = qkv.shape[0], left + 1 + right
    per = qkv.reshape(t, heads, 2 * kd + vd + c)
    k, v, q, bias = per[..., :kd], per[..., kd : kd + vd], per[..., kd + vd : 2 * kd + vd], per[..., 2 * kd + vd :]
    frame = np.arange(t)[:, None] + stride * (np.arange(c)[None, :] - left)  # [T, C]
    inside = (frame >= 0) & (frame < t)
    at = np.clip(frame, 0, t - 1)
    keys = jnp.where(inside[..., None, None], k[at], 0.0)  # [T, C, H, kd]
    values = jnp.where(inside[..., None, None], v[at], 0.0)
    logits = jnp.einsum("thk,tchk->thc", q, keys) / np.sqrt(kd) + bias
    if masked:
        logits = jnp.where(inside[:, None, :], logits, -jnp.inf)
    weights = jax.nn.softmax(logits, axis=-1)
    out = jnp.einsum("thc,tchv->thv", weights, values)
    if context:
        out = jnp.concatenate([out, weights], axis=-1)
    return out.reshape(t, -1)


def layer_reference(p: dict, x: jax.Array, heads: int, kd: int, left: int, right: int, stride: int, masked: bool):
    qkv = x @ p["att.qkv.linear_params"].T + p["att.qkv.bias_params"]
    y = window_attention(qkv, heads, kd, kd, left, right, stride, masked, False)
    return y @ p["att.out.linear_params"].T + p["att.out.bias_params"]


def fused_lines(ran) -> list[str]:
    return [line for line in ran.explain().splitlines() if line.startswith("attention ")]


CASES = [  # options, left, right, frames (a window narrower than the sequence is computed in blocks)
    ({"window": (2, 1)}, 2, 1, 9),
    ({"window": (3, 3)}, 3, 3, 90),
    ({"window": (4, 2), "time_stride": 2}, 4, 2, 90),
    ({"window": (2, 2), "padding": "zeros"}, 2, 2, 90),
    ({"window": (1, 3), "padding": "zeros", "time_stride": 3}, 1, 3, 90),
    ({"window": None, "max_frames": 40}, 39, 39, 40),
    ({"window": None, "max_frames": 40, "time_stride": 2}, 20, 20, 40),
    ({"window": None, "max_frames": 70, "padding": "zeros"}, 69, 69, 50),
]


@pytest.mark.parametrize("options, left, right, frames", CASES)
def test_attention_from_its_source_frames_is_softmax_attention_and_its_gradient(options, left, right, frames):
    heads, kd = 2, 3
    net = randomised(Network(MultiHeadAttention("att", Input("input", D), heads=heads, key_dim=kd, **options)))
    stride, masked = options.get("time_stride", 1), options.get("padding", "mask") == "mask"
    x = RNG.standard_normal((2, frames, D)).astype(np.float32)
    g = RNG.standard_normal((2, frames, D)).astype(np.float32)
    with record() as ran:
        got = np.asarray(net.compute(x))
    assert len(fused_lines(ran)) == 1, ran.explain()
    for n in range(2):
        want = layer_reference(net.params, jnp.asarray(x[n]), heads, kd, left, right, stride, masked)
        np.testing.assert_allclose(got[n], want, rtol=1e-4, atol=1e-5)

    def ours(p):
        return jnp.sum(net.replace(params=p).compute(jnp.asarray(x)) * g)

    def theirs(p):
        ys = [layer_reference(p, jnp.asarray(x[n]), heads, kd, left, right, stride, masked) for n in range(2)]
        return jnp.sum(jnp.stack(ys) * g)

    got_grad, want_grad = jax.grad(ours)(net.params), jax.grad(theirs)(net.params)
    for key in want_grad:
        scale = float(np.abs(want_grad[key]).max())
        np.testing.assert_allclose(got_grad[key], want_grad[key], rtol=1e-4, atol=1e-5 * scale, err_msg=key)


@pytest.mark.parametrize("options", [{"window": (3, 2)}, {"window": (2, 2), "padding": "zeros"}, {"window": None}])
def test_a_padded_batch_with_ends_gives_each_sequence_its_own_outputs(options):
    lengths = (70, 13, 41, 5)
    if options["window"] is None:
        options = {**options, "max_frames": max(lengths)}
    net = randomised(Network(MultiHeadAttention("att", Input("input", D), heads=2, key_dim=2, **options)))
    xs = [RNG.standard_normal((t, D)).astype(np.float32) for t in lengths]
    xs[1][:] = xs[1] * 50.0  # large values that would leak if another sequence's frames were attended to
    with record() as ran:
        together = net.compute(xs)
    assert fused_lines(ran), ran.explain()
    expanded = net.compute(xs, lowering="plain")
    for x, y, z in zip(xs, together, expanded, strict=True):
        alone = np.asarray(net.compute(x[None]))[0]
        np.testing.assert_allclose(np.asarray(y), alone, rtol=1e-5, atol=1e-5)
        np.testing.assert_allclose(np.asarray(y), np.asarray(z), rtol=1e-5, atol=1e-5)


def test_windowed_attention_in_chunks_equals_one_pass():
    net = randomised(Network(MultiHeadAttention("att", Input("input", D), heads=2, key_dim=2, window=(5, 3))))
    x = RNG.standard_normal((1, 150, D)).astype(np.float32)
    np.testing.assert_allclose(net.compute(x, frames_per_chunk=40), net.compute(x), rtol=1e-5, atol=1e-5)


@pytest.mark.parametrize(
    "left, right, left_required, right_required, stride, context, frames",
    [
        (3, 2, 0, 0, 1, True, 90),  # in blocks, with the weights per context position
        (2, 2, 1, 1, 2, True, 90),
        pytest.param(40, 40, 0, 0, 1, True, 60, marks=pytest.mark.slow),  # every frame against every frame, Kaldi's
        # absent positions as extra columns: 11 s, in make test-all
        (1, 0, 1, 0, 3, False, 90),
    ],
)
def test_kaldis_component_from_its_source_frames_equals_its_expansion(
    left, right, left_required, right_required, stride, context, frames
):
    heads, kd, vd, c = 2, 3, 2, left + 1 + right
    qkv = Node("qkv", Affine(input=Input("input", D), out_dim=heads * (2 * kd + vd + c), name="qkv"))
    component = RestrictedAttentionComponent(
        name="att",
        input=qkv,
        num_heads=heads,
        key_dim=kd,
        value_dim=vd,
        num_left_inputs=left,
        num_right_inputs=right,
        time_stride=stride,
        num_left_inputs_required=left_required,
        num_right_inputs_required=right_required,
        output_context=context,
        key_scale=1.0 / np.sqrt(kd),
    )
    net = randomised(Network(Node("att", component)))
    x = RNG.standard_normal((2, frames, D)).astype(np.float32)
    g = RNG.standard_normal((2, frames, heads * (vd + (c if context else 0)))).astype(np.float32)
    with record() as ran:
        got = np.asarray(net.compute(x))
    assert len(fused_lines(ran)) == 1, ran.explain()
    np.testing.assert_allclose(got, net.compute(x, lowering="plain"), rtol=1e-5, atol=1e-6)
    if not left_required and not right_required:  # every frame computable: the frame-by-frame reference
        for n in range(2):
            rows = x[n] @ net.params["qkv.linear_params"].T + net.params["qkv.bias_params"]
            want = window_attention(jnp.asarray(rows), heads, kd, vd, left, right, stride, False, context)
            np.testing.assert_allclose(got[n], want, rtol=1e-4, atol=1e-5)

    def loss(p, lowering):
        return jnp.sum(net.replace(params=p).compute(jnp.asarray(x), lowering=lowering) * g)

    got_grad, want_grad = jax.grad(loss)(net.params, "auto"), jax.grad(loss)(net.params, "plain")
    for key in want_grad:
        np.testing.assert_allclose(got_grad[key], want_grad[key], rtol=1e-4, atol=1e-4, err_msg=key)


def _temp_bytes(net: Network, frames: int) -> int:
    x = jnp.zeros((1, frames, D), jnp.float32)

    def loss(p, x):
        return jnp.sum(net.replace(params=p).compute(x))

    return int(jax.jit(jax.grad(loss)).lower(net.params, x).compile().memory_analysis().temp_size_in_bytes)


def test_windowed_attention_memory_is_linear_in_frames():
    net = randomised(Network(MultiHeadAttention("att", Input("input", D), heads=2, key_dim=4, window=(16, 16))))
    small, large = _temp_bytes(net, 1000), _temp_bytes(net, 4000)
    assert large < 4.5 * small, (small, large)  # quadratic would be 16 times


@pytest.mark.slow  # 9 s of planning: in make test-all
def test_full_attention_at_1000_frames_needs_about_what_its_scores_need():
    net = Network(MultiHeadAttention("att", Input("input", D), heads=2, key_dim=4, window=None, max_frames=1000))
    scores = 2 * 1000 * 1000 * 4  # one float32 score per head and pair of frames: 8 MB
    assert _temp_bytes(net, 1000) < 12 * scores  # the expansion appends [T, 1999, dim]
