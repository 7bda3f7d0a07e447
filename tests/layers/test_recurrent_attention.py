"""Typed LSTM, GRU, Bidirectional and MultiHeadAttention against hand-written references (lax.scan, softmax)."""

from __future__ import annotations

import jax
import jax.numpy as jnp
import numpy as np
import pytest

from symnet import Input, Network
from symnet._src.core.index import IndexSet
from symnet._src.core.rng import randomness
from symnet._src.kaldi.text.xconfig.layers import fast_gru, fast_lstm, fast_lstmp, fast_pgru
from symnet.components import set_test_mode
from symnet.engine import ComputationRequest, compile
from symnet.errors import ConfigWriteError, LayerOptionError, SymnetError
from symnet.kaldi import parse_network, read_model, write_model, write_network
from symnet.layers import GRU, LSTM, Bidirectional, MultiHeadAttention

RNG = np.random.default_rng(3)
D = 5


def randomised(net: Network, scale: float = 0.5) -> Network:
    return net.replace(
        params={n: scale * RNG.standard_normal(v.shape).astype(np.float32) for n, v in net.params.items()}
    )


def features(n: int = 2, t: int = 9) -> np.ndarray:
    return RNG.standard_normal((n, t, D)).astype(np.float32)


# ----- references ---------------------------------------------------------------------------------


def scan_over_time(step, init, x: jax.Array, delay: int) -> jax.Array:
    """Run `step(carry, x_t) -> (carry, y_t)` over the frames of `x` [N, T, D], backward when delay > 0."""
    xs = jnp.swapaxes(x, 0, 1)
    _, ys = jax.lax.scan(step, init, xs, reverse=delay > 0)
    return jnp.swapaxes(ys, 0, 1)


def lstm_reference(
    p: dict, name: str, x: jax.Array, cell: int, rec: int | None, delay: int = -1, scale: float = 1.0
) -> jax.Array:
    """Kaldi's LSTM with peepholes; `scale` multiplies the gates i, f, o (dropout in test mode: 1 - p)."""
    w, b, peep = p[f"{name}.W_all.linear_params"], p[f"{name}.W_all.bias_params"], p[f"{name}.lstm_nonlin.params"]
    r_dim = cell if rec is None else rec

    def step(carry, x_t):
        c_prev, r_prev = carry
        gates = jnp.concatenate([x_t, r_prev], -1) @ w.T + b
        gi, gf, gc, go = (gates[:, k * cell : (k + 1) * cell] for k in range(4))
        i = jax.nn.sigmoid(gi + peep[0] * c_prev)
        f = jax.nn.sigmoid(gf + peep[1] * c_prev)
        c = scale * f * c_prev + scale * i * jnp.tanh(gc)
        o = jax.nn.sigmoid(go + peep[2] * c)
        m = scale * o * jnp.tanh(c)
        if rec is None:
            return (c, m), m
        rp = m @ p[f"{name}.W_rp.linear_params"].T + p[f"{name}.W_rp.bias_params"]
        return (c, rp[:, :rec]), rp

    n = x.shape[0]
    return scan_over_time(step, (jnp.zeros((n, cell)), jnp.zeros((n, r_dim))), x, delay)


def gru_reference(p: dict, name: str, x: jax.Array, cell: int, delay: int = -1, rec: int | None = None) -> jax.Array:
    """Kaldi's GRU; with `rec`, the projected one (the state s is the first `rec` columns of y = W_y c + b)."""

    def affine(key: str, v: jax.Array) -> jax.Array:
        return v @ p[f"{name}.{key}.linear_params"].T + p[f"{name}.{key}.bias_params"]

    kind = "xh" if rec is None else "xs"

    def step(carry, x_t):
        c_prev, s_prev = carry
        xs = jnp.concatenate([x_t, s_prev], -1)
        z, r = jax.nn.sigmoid(affine(f"W_z.{kind}", xs)), jax.nn.sigmoid(affine(f"W_r.{kind}", xs))
        h = jnp.tanh(affine("W_hpart.x", x_t) + (r * s_prev) @ p[f"{name}.gru_nonlin.w_h"].T)
        c = (1.0 - z) * h + z * c_prev
        if rec is None:
            return (c, c), c
        y = affine("W_y.c", c)
        return (c, y[:, :rec]), y

    n = x.shape[0]
    init = (jnp.zeros((n, cell)), jnp.zeros((n, cell if rec is None else rec)))
    return scan_over_time(step, init, x, delay)


def attention_reference(
    p: dict, name: str, x: np.ndarray, heads: int, kd: int, vd: int, left: int, right: int, mask: bool, stride: int = 1
) -> np.ndarray:
    """Softmax attention of one sequence x [T, D] over frames t + o * stride, o = -left..right (absent ones
    masked or zeros)."""
    t_len, c = x.shape[0], left + 1 + right
    qkv = x @ p[f"{name}.qkv.linear_params"].T + p[f"{name}.qkv.bias_params"]
    per = qkv.reshape(t_len, heads, 2 * kd + vd + c)
    out = np.zeros((t_len, heads, vd))
    for t in range(t_len):
        for h in range(heads):
            q, bias = per[t, h, kd + vd : 2 * kd + vd], per[t, h, 2 * kd + vd :]
            scores, values = [], []
            for o in range(-left, right + 1):
                s = t + o * stride
                inside = 0 <= s < t_len
                if mask and not inside:
                    continue
                k = per[s, h, :kd] if inside else np.zeros(kd)
                values.append(per[s, h, kd : kd + vd] if inside else np.zeros(vd))
                scores.append(q @ k / np.sqrt(kd) + bias[o + left])
            weights = np.exp(np.array(scores) - max(scores))
            out[t, h] = (weights / weights.sum()) @ np.array(values)
    return out.reshape(t_len, heads * vd) @ p[f"{name}.out.linear_params"].T + p[f"{name}.out.bias_params"]


# ----- LSTM and GRU -------------------------------------------------------------------------------


@pytest.mark.parametrize("projection, delay", [(None, -1), (3, -1), (3, 1)])
def test_lstm_is_the_hand_written_lstm(projection: int | None, delay: int) -> None:
    extra = 2 if projection else 0
    net = randomised(
        Network(
            LSTM("lstm1", Input("input", D), cell=4, projection=projection, non_recurrent_projection=extra, delay=delay)
        )
    )
    x = features()
    want = lstm_reference(net.params, "lstm1", jnp.asarray(x), 4, projection, delay)
    assert want.shape[-1] == (4 if projection is None else projection + extra)
    np.testing.assert_allclose(net.compute(x), want, rtol=1e-4, atol=1e-5)


def test_lstm_gradients_are_jax_grad_of_the_reference_and_it_lowers_to_the_fused_scan() -> None:
    net = randomised(Network(LSTM("lstm1", Input("input", D), cell=4, projection=3, non_recurrent_projection=1)))
    x, g = features(), RNG.standard_normal((2, 9, 4)).astype(np.float32)
    got = jax.grad(lambda p: jnp.sum(net.replace(params=p).compute(x) * g))(net.params)
    want = jax.grad(lambda p: jnp.sum(lstm_reference(p, "lstm1", jnp.asarray(x), 4, 3) * g))(net.params)
    for key in want:
        np.testing.assert_allclose(got[key], want[key], rtol=1e-3, atol=1e-5, err_msg=key)
    request = ComputationRequest(
        inputs={"input": IndexSet.range(n=2, t=9)}, outputs={"output": IndexSet.range(n=2, t=9)}
    )
    explained = compile(net, request).explain()
    assert "recurrence of lstm1" in explained and ": fused scan" in explained, explained


def test_a_projected_gru_is_the_hand_written_one() -> None:
    net = randomised(Network(GRU("pgru", Input("input", D), cell=4, projection=2, non_recurrent_projection=1, delay=1)))
    x, g = features(), RNG.standard_normal((2, 9, 3)).astype(np.float32)
    want = gru_reference(net.params, "pgru", jnp.asarray(x), 4, 1, rec=2)
    np.testing.assert_allclose(net.compute(x), want, rtol=1e-4, atol=1e-5)
    got = jax.grad(lambda p: jnp.sum(net.replace(params=p).compute(x) * g))(net.params)
    grads = jax.grad(lambda p: jnp.sum(gru_reference(p, "pgru", jnp.asarray(x), 4, 1, rec=2) * g))(net.params)
    for key in grads:
        np.testing.assert_allclose(got[key], grads[key], rtol=1e-3, atol=1e-5, err_msg=key)


def test_lstm_dropout_scales_the_gates_by_one_minus_p_in_test_mode_and_draws_masks_in_training() -> None:
    net = randomised(Network(LSTM("l", Input("input", D), cell=4, projection=3, dropout=0.25)))
    x = features()
    tested = set_test_mode(net).compute(x)
    want = lstm_reference(net.params, "l", jnp.asarray(x), 4, 3, scale=0.75)
    np.testing.assert_allclose(tested, want, rtol=1e-4, atol=1e-5)
    np.testing.assert_array_equal(net.compute(x), tested)  # compute's default is test mode, as nnet3-compute's
    with pytest.raises(SymnetError, match="needs random numbers in training mode"):
        net.compute(x, test_mode=False)
    with randomness(jax.random.key(0)):
        first = np.asarray(net.compute(x, test_mode=False))
    with randomness(jax.random.key(0)):
        again = np.asarray(net.compute(x, test_mode=False))
    with randomness(jax.random.key(1)):
        other = np.asarray(net.compute(x, test_mode=False))
    np.testing.assert_array_equal(first, again)
    assert np.all(np.isfinite(first)) and not np.allclose(first, other) and not np.allclose(first, tested)


def test_lstm_without_peepholes_keeps_them_zero_as_state() -> None:
    net = randomised(Network(LSTM("l", Input("input", D), cell=4, peepholes=False)))
    assert "l.lstm_nonlin.params" not in net.params and not np.any(net.state["l.lstm_nonlin.params"])
    x = features()
    params = {**net.params, "l.lstm_nonlin.params": jnp.zeros((3, 4))}
    np.testing.assert_allclose(
        net.compute(x), lstm_reference(params, "l", jnp.asarray(x), 4, None), rtol=1e-4, atol=1e-5
    )


def test_gru_and_its_gradient_are_the_hand_written_grus() -> None:
    net = randomised(Network(GRU("gru1", Input("input", D), cell=4)))
    x, g = features(), RNG.standard_normal((2, 9, 4)).astype(np.float32)
    np.testing.assert_allclose(
        net.compute(x), gru_reference(net.params, "gru1", jnp.asarray(x), 4), rtol=1e-4, atol=1e-5
    )
    got = jax.grad(lambda p: jnp.sum(net.replace(params=p).compute(x) * g))(net.params)
    want = jax.grad(lambda p: jnp.sum(gru_reference(p, "gru1", jnp.asarray(x), 4) * g))(net.params)
    for key in want:
        np.testing.assert_allclose(got[key], want[key], rtol=1e-3, atol=1e-5, err_msg=key)


def test_bidirectional_appends_a_forward_and_a_backward_layer_and_respects_sequence_ends() -> None:
    net = randomised(Network(Bidirectional(GRU, "bgru", Input("input", D), cell=3)))
    x = features(3, 8)
    fw = gru_reference(net.params, "bgru.forward", jnp.asarray(x), 3, -1)
    bw = gru_reference(net.params, "bgru.backward", jnp.asarray(x), 3, 1)
    np.testing.assert_allclose(net.compute(x), jnp.concatenate([fw, bw], -1), rtol=1e-4, atol=1e-5)
    # Sequences of different lengths in one padded call: each gets what it gets alone (its backward half
    # starts at its own last frame, not at the padding).
    pieces = net.compute([x[0, :5], x[1], x[2, :2]])
    for got, length, n in zip(pieces, (5, 8, 2), range(3)):
        np.testing.assert_allclose(got, net.compute(x[n : n + 1, :length])[0], rtol=1e-5, atol=1e-6)


def test_a_forward_lstm_computed_in_chunks_equals_one_pass() -> None:
    net = randomised(Network(LSTM("l", Input("input", D), cell=4, projection=2)))
    x = features(1, 23)
    np.testing.assert_allclose(net.compute(x, frames_per_chunk=8), net.compute(x), rtol=1e-5, atol=1e-6)


def test_recurrent_layers_write_to_kaldi_configs_and_models_and_read_back_equal(tmp_path) -> None:
    x = Input("input", D)
    net = randomised(
        set_test_mode(
            Network(
                {
                    "lstmp": LSTM(
                        "lstm1",
                        x,
                        cell=4,
                        projection=2,
                        non_recurrent_projection=1,
                        truncate=True,
                        decay_time=20,
                        dropout=0.1,
                    ),
                    "lstm": LSTM("lstm2", x, cell=3, truncate=True, clipping_threshold=5.0, zeroing_interval=10),
                    "blstm": Bidirectional(LSTM, "blstm", x, cell=3),
                    "gru": GRU("gru1", x, cell=3, truncate=True),
                    "pgru": GRU("pgru1", x, cell=4, projection=2, non_recurrent_projection=2, truncate=True),
                }
            )
        )
    )
    text = write_network(net)
    for kind in (
        "LstmNonlinearityComponent",
        "DropoutMaskComponent",
        "GruNonlinearityComponent",
        "BackpropTruncationComponent",
    ):
        assert f"type={kind}" in text
    assert "scale=0.95" in text  # 1 - |delay| / decay_time
    assert "component name=lstm2.cm_trunc type=BackpropTruncationComponent dim=6 clipping-threshold=5" in text
    assert "zeroing-interval=10" in text
    x_in = features(2, 7)
    back = parse_network(text)
    back = set_test_mode(back.replace(params={n: net.params[n] for n in back.params}))
    write_model(tmp_path / "rnn.raw", net)
    model = set_test_mode(read_model(tmp_path / "rnn.raw").network)
    for key in ("lstmp", "lstm", "blstm", "gru", "pgru"):
        want = net.compute(x_in, output=key)
        np.testing.assert_allclose(back.compute(x_in, output=key), want, rtol=1e-5, atol=1e-6, err_msg=key)
        np.testing.assert_allclose(model.compute(x_in, output=key), want, rtol=1e-5, atol=1e-6, err_msg=key)


# ----- attention ----------------------------------------------------------------------------------


@pytest.mark.parametrize(
    "options, left, right, mask",
    [
        ({"window": (2, 1)}, 2, 1, True),
        ({"window": None, "max_frames": 7}, 6, 6, True),
        ({"window": None, "max_frames": 7, "time_stride": 2}, 3, 3, True),
        ({"window": (1, 2), "padding": "zeros"}, 1, 2, False),
        ({"window": (1, 1), "padding": "zeros", "time_stride": 3}, 1, 1, False),
    ],
)
def test_attention_is_softmax_attention_over_its_window(options: dict, left: int, right: int, mask: bool) -> None:
    net = randomised(Network(MultiHeadAttention("att", Input("input", D), heads=2, key_dim=3, value_dim=2, **options)))
    x = features(2, 7)
    got = np.asarray(net.compute(x))
    params = {k: np.asarray(v, np.float64) for k, v in net.params.items()}
    for n in range(2):
        stride = options.get("time_stride", 1)
        want = attention_reference(params, "att", x[n].astype(np.float64), 2, 3, 2, left, right, mask, stride)
        np.testing.assert_allclose(got[n], want, rtol=1e-4, atol=1e-5)


def test_attention_gradient_is_jax_grad_and_padding_frames_are_not_attended() -> None:
    net = randomised(
        Network(MultiHeadAttention("att", Input("input", D), heads=2, key_dim=2, window=None, max_frames=6))
    )
    x, g = features(1, 6), RNG.standard_normal((1, 6, D)).astype(np.float32)

    def reference(p: dict) -> jax.Array:  # full attention, plain jnp
        qkv = x[0] @ p["att.qkv.linear_params"].T + p["att.qkv.bias_params"]
        per = qkv.reshape(6, 2, 2 + 2 + 2 + 11)
        k, v, q, bias = per[..., :2], per[..., 2:4], per[..., 4:6], per[..., 6:]
        rel = np.arange(6)[None, :] - np.arange(6)[:, None] + 5  # position of frame s relative to t
        scores = jnp.einsum("thk,shk->hts", q, k) / np.sqrt(2) + jnp.take_along_axis(
            jnp.moveaxis(bias, 1, 0), np.broadcast_to(rel, (2, 6, 6)), axis=-1
        )
        y = jnp.einsum("hts,shv->thv", jax.nn.softmax(scores, -1), v).reshape(6, 4)
        return jnp.sum((y @ p["att.out.linear_params"].T + p["att.out.bias_params"]) * g[0])

    got = jax.grad(lambda p: jnp.sum(net.replace(params=p).compute(x) * g))(net.params)
    want = jax.grad(reference)(net.params)
    for key in want:
        np.testing.assert_allclose(got[key], want[key], rtol=1e-3, atol=1e-5, err_msg=key)
    # A padded call with each sequence's end: garbage in the padding frames changes nothing.
    request = ComputationRequest(
        inputs={"input": IndexSet.range(n=2, t=6)}, outputs={"output": IndexSet.range(n=2, t=6)}, sequence_ends=True
    )
    computation = compile(net, request)
    padded = np.concatenate([features(1, 6), x], 0)
    padded[0, 4:] = 100.0
    out = np.asarray(computation(net, {"input": np.swapaxes(padded, 0, 1)}, ends=[4, 6])["output"])
    np.testing.assert_allclose(out[:4, 0], net.compute(padded[:1, :4])[0], rtol=1e-5, atol=1e-5)
    np.testing.assert_allclose(out[:, 1], net.compute(x)[0], rtol=1e-5, atol=1e-5)


def test_windowed_attention_in_chunks_equals_one_pass() -> None:
    net = randomised(Network(MultiHeadAttention("att", Input("input", D), heads=1, key_dim=2, window=(2, 2))))
    x = features(1, 21)
    np.testing.assert_allclose(net.compute(x, frames_per_chunk=8), net.compute(x), rtol=1e-5, atol=1e-6)


def test_kaldi_attention_writes_as_restricted_attention_and_masked_attention_refuses() -> None:
    x = Input("input", D)
    net = randomised(Network(MultiHeadAttention("att", x, heads=2, key_dim=2, window=(3, 1), padding="zeros")))
    text = write_network(net)
    assert "type=RestrictedAttentionComponent" in text
    back = parse_network(text)
    back = back.replace(params={n: net.params[n] for n in back.params})
    x_in = features(2, 8)
    np.testing.assert_allclose(back.compute(x_in), net.compute(x_in), rtol=1e-5, atol=1e-6)
    with pytest.raises(ConfigWriteError, match="padding='zeros'"):
        write_network(Network(MultiHeadAttention("att", x, heads=2, key_dim=2, window=(3, 1))))


@pytest.mark.parametrize(
    "build, message",
    [
        (lambda x: LSTM("l", x, cell=4, delay=0), "delay must be a non-zero integer"),
        (lambda x: LSTM("l", x, cell=0), "cell must be a positive integer"),
        (lambda x: LSTM("l", x, cell=4, non_recurrent_projection=2), "needs projection"),
        (lambda x: LSTM("l", x, cell=4, decay_time=10.0), "decay_time needs truncate=True"),
        (lambda x: LSTM("l", x, cell=4, dropout=1.0), "dropout must be in"),
        (lambda x: GRU("g", x, cell=4, clipping_threshold=10.0), "clipping_threshold needs truncate=True"),
        (lambda x: GRU("g", x, cell=4, truncate=True, zeroing_interval=0), "zeroing_interval must be a positive"),
        (lambda x: GRU("", x, cell=4), "name must be a non-empty string"),
        (lambda x: GRU("g", x, cell=4, non_recurrent_projection=1), "needs projection"),
        (lambda x: GRU("g", x, cell=4, projection=-1), "projection must be a positive integer"),
        (lambda x: Bidirectional(LSTM, "b", x, cell=4, delay=-1), "give no delay"),
        (lambda x: Bidirectional(MultiHeadAttention, "b", x, heads=1, key_dim=2), "takes no delay"),
        (lambda x: MultiHeadAttention("a", x, heads=1, key_dim=2), "needs max_frames"),
        (lambda x: MultiHeadAttention("a", x, heads=1, key_dim=2, window=(1,)), "window must be a pair"),
        (lambda x: MultiHeadAttention("a", x, heads=1, key_dim=2, window=(1, 1), padding="edge"), "padding must be"),
    ],
)
def test_bad_options_raise_naming_the_layer_and_the_line(build, message: str) -> None:
    with pytest.raises(LayerOptionError, match=message) as info:
        build(Input("input", D))
    assert "test_recurrent_attention.py" in str(info.value)


@pytest.mark.parametrize(
    "typed, xconfig",
    [
        (
            lambda x: LSTM("lstm1", x, cell=4, projection=2, non_recurrent_projection=1, truncate=True, dropout=0.2),
            lambda x: fast_lstmp(
                x,
                name="lstm1",
                cell_dim=4,
                recurrent_projection_dim=2,
                non_recurrent_projection_dim=1,
                dropout_proportion=0.2,
            ),
        ),
        (
            lambda x: LSTM(
                "lstm1", x, cell=4, projection=2, non_recurrent_projection=2, delay=-2, truncate=True, decay_time=8
            ),
            lambda x: fast_lstmp(x, name="lstm1", cell_dim=4, recurrent_projection_dim=2, delay=-2, decay_time=8),
        ),
        (
            lambda x: LSTM("lstm1", x, cell=4, truncate=True, zeroing_threshold=3.0),
            lambda x: fast_lstm(x, name="lstm1", cell_dim=4, zeroing_threshold=3.0),
        ),
        (
            lambda x: GRU("pgru1", x, cell=4, projection=2, non_recurrent_projection=2, truncate=True),
            lambda x: fast_pgru(x, name="pgru1", cell_dim=4, recurrent_projection_dim=2),
        ),
        (
            lambda x: GRU("gru1", x, cell=3, delay=1, truncate=True),
            lambda x: fast_gru(x, name="gru1", cell_dim=3, delay=1),
        ),
    ],
)
def test_the_typed_layers_compute_what_kaldis_xconfig_layers_compute(typed, xconfig) -> None:
    """The same parameter names and, with the same values, the same outputs as the xconfig functions
    (which expand Kaldi's xconfig text: an independent construction of the same components)."""
    x = Input("input", D)
    ours = randomised(set_test_mode(Network(typed(x))))
    theirs = set_test_mode(Network(xconfig(x)))
    assert set(theirs.params) == set(ours.params)
    x_in = features(2, 8)
    np.testing.assert_allclose(
        theirs.replace(params=ours.params).compute(x_in), ours.compute(x_in), rtol=1e-5, atol=1e-6
    )


def test_the_layers_save_and_load_with_symnet_save_and_show_their_options(tmp_path) -> None:
    import symnet

    x = Input("input", D)
    net = randomised(
        Network(
            {
                "lstm": LSTM("l", x, cell=4, projection=2, truncate=True, decay_time=10, peepholes=False),
                "gru": Bidirectional(GRU, "g", x, cell=3),
                "att": MultiHeadAttention("m", x, heads=1, key_dim=2, window=(1, 2)),
            }
        )
    )
    symnet.save(tmp_path / "net.npz", net)
    loaded = symnet.load(tmp_path / "net.npz")
    assert loaded.structure == net.structure and set(loaded.state) == {"l.lstm_nonlin.params"}
    x_in = features(1, 6)
    for key in ("lstm", "gru", "att"):
        np.testing.assert_array_equal(loaded.compute(x_in, output=key), net.compute(x_in, output=key))
    text = repr(net.structure)
    assert "BackpropTruncationComponent('l.cr_trunc'" in text and "scale=0.9" in text
    assert "num_left_inputs=1, num_right_inputs=2" in text
