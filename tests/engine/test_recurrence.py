"""Recurrences through descriptors, against hand-written lax.scan references and jax.grad."""

from __future__ import annotations

import re

import jax
import jax.numpy as jnp
import numpy as np
import pytest

from helpers.nets import rnn
from symnet import (
    Append,
    ComputationRequest,
    Const,
    DimRange,
    Failover,
    GraphError,
    IfDefined,
    IndexSet,
    Input,
    LogSoftmax,
    Network,
    Node,
    Normal,
    Offset,
    PlanError,
    Ref,
    ReLU,
    Sigmoid,
    Tanh,
    Weight,
    compile,
)

D, H, N, T = 3, 5, 2, 7
x = Input("input", D)
rng = np.random.default_rng(0)
X3 = rng.standard_normal((T, N, D)).astype(np.float32)  # [t, n, d]: Kaldi's row order flattened
X = X3.reshape(T * N, D)


def full_request(frames: int = T, n: int = N) -> ComputationRequest:
    return ComputationRequest(
        inputs={"input": IndexSet.range(n=n, t=frames)}, outputs={"output": IndexSet.range(n=n, t=frames)}
    )


def scan_rnn(p, xs, name="h", reverse=False, lag=1):
    """A hand-written recurrence over `xs [T, N, D]` reading the state `lag` frames away."""
    steps = xs.shape[0]
    out = [None] * steps
    order = range(steps - 1, -1, -1) if reverse else range(steps)
    for t in order:
        src = t + lag if reverse else t - lag
        prev = out[src] if 0 <= src < steps else jnp.zeros((xs.shape[1], H))
        out[t] = jnp.tanh(xs[t] @ p[f"{name}.w"] + prev @ p[f"{name}.u"])
    return jnp.stack(out)


def run(net, request=None, inputs=X):
    c = compile(net, request or full_request())
    return c, np.asarray(c(net, {"input": inputs})["output"])


def test_simple_rnn_matches_a_loop_and_jax_grad():
    net = Network(rnn(x, D, H))
    c, y = run(net)
    ref = scan_rnn(net.params, X3)
    np.testing.assert_allclose(y.reshape(T, N, H), ref, atol=1e-6)
    tape = c.forward(net, {"input": X})["output"]
    delta = rng.standard_normal(tape.value.shape).astype(np.float32)
    grads = tape.backward(delta)
    want = jax.grad(lambda p: (scan_rnn(p, X3).reshape(T * N, H) * delta).sum())(net.params)
    for k in want:
        np.testing.assert_allclose(grads[k], want[k], atol=2e-5, err_msg=k)


@pytest.mark.parametrize("offset", [-2, -3])
def test_recurrence_further_back(offset):
    net = Network(rnn(x, D, H, lag=offset))
    _, y = run(net)
    np.testing.assert_allclose(y.reshape(T, N, H), scan_rnn(net.params, X3, lag=-offset), atol=1e-6)


def test_recurrence_forward_in_time_runs_backwards():
    net = Network(rnn(x, D, H, lag=+1))
    _, y = run(net)
    np.testing.assert_allclose(y.reshape(T, N, H), scan_rnn(net.params, X3, reverse=True), atol=1e-6)


def test_bidirectional_and_stacked_layers():
    fwd, bwd = rnn(x, D, H, lag=-1, name="f"), rnn(x, D, H, lag=+1, name="b")
    both = Append(fwd, bwd)
    top = rnn(both, 2 * H, H, lag=-1, name="top")
    net = Network(top)
    _, y = run(net)
    p = net.params
    f, b = scan_rnn(p, X3, "f"), scan_rnn(p, X3, "b", reverse=True)
    want = scan_rnn(p, jnp.concatenate([f, b], -1), "top")
    np.testing.assert_allclose(y.reshape(T, N, H), want, atol=1e-5)


def test_failover_supplies_the_value_before_the_first_frame():
    u = Weight(Normal((H, H), 0.5), name="u")
    w = Weight(Normal((D, H), 0.5), name="w")
    h = Node("h", Tanh(x @ w + Failover(Offset(Ref("h"), -1), Const(0.5, H)) @ u))
    net = Network(h)
    _, y = run(net)
    p = net.params
    prev, want = jnp.full((N, H), 0.5), []
    for t in range(T):
        prev = jnp.tanh(X3[t] @ p["w"] + prev @ p["u"])
        want.append(prev)
    np.testing.assert_allclose(y.reshape(T, N, H), jnp.stack(want), atol=1e-6)


def lstm(cells: int):
    h_prev, c_prev = IfDefined(Offset(Ref("m"), -1)), IfDefined(Offset(Ref("c"), -1))
    wx = Weight(Normal((D, 4 * cells), 0.4), name="wx")
    wh = Weight(Normal((cells, 4 * cells), 0.4), name="wh")
    b = Weight(Normal((4 * cells,), 0.1), name="b")
    gates = x @ wx + b + h_prev @ wh
    i, f = Sigmoid(DimRange(gates, 0, cells)), Sigmoid(DimRange(gates, cells, cells))
    g, o = Tanh(DimRange(gates, 2 * cells, cells)), Sigmoid(DimRange(gates, 3 * cells, cells))
    c = Node("c", f * c_prev + i * g)
    return Node("m", o * Tanh(c))


def lstm_reference(p, xs, cells):
    def step(carry, x_t):
        h, c = carry
        z = x_t @ p["wx"] + p["b"] + h @ p["wh"]
        i, f = jax.nn.sigmoid(z[:, :cells]), jax.nn.sigmoid(z[:, cells : 2 * cells])
        g, o = jnp.tanh(z[:, 2 * cells : 3 * cells]), jax.nn.sigmoid(z[:, 3 * cells :])
        c = f * c + i * g
        h = o * jnp.tanh(c)
        return (h, c), h

    zeros = jnp.zeros((xs.shape[1], cells), xs.dtype)
    return jax.lax.scan(step, (zeros, zeros), xs)[1]


def test_lstm_from_expressions_matches_a_hand_written_scan():
    cells = 4
    net = Network(lstm(cells))
    c, y = run(net)
    np.testing.assert_allclose(y.reshape(T, N, cells), lstm_reference(net.params, X3, cells), atol=1e-5)
    tape = c.forward(net, {"input": X})["output"]
    delta = rng.standard_normal(tape.value.shape).astype(np.float32)
    grads = tape.backward(delta)
    want = jax.grad(lambda p: (lstm_reference(p, X3, cells).reshape(-1, cells) * delta).sum())(net.params)
    for k in want:
        np.testing.assert_allclose(grads[k], want[k], atol=1e-5, err_msg=k)


def test_a_recurrence_is_one_scan_whose_program_does_not_grow_with_frames():
    net = Network(LogSoftmax(lstm(4) @ Weight(Normal((4, 3), 0.5))))

    def ops(frames):
        c = compile(net, full_request(frames))
        text = jax.jit(lambda n, v: c(n, {"input": v})["output"]).lower(net, np.zeros((frames * N, D))).as_text()
        return len(re.findall(r"stablehlo\.dot_general", text)), text.count("stablehlo.while")

    short, long_ = ops(10), ops(400)
    assert short == long_
    assert short[1] == 1  # one scan


def test_input_projection_is_hoisted_out_of_the_scan():
    net = Network(lstm(4))
    c = compile(net, full_request())
    text = str(jax.make_jaxpr(lambda n, v: c(n, {"input": v}))(net, X))
    body = text[text.index("scan[") :]
    outside = text[: text.index("scan[")]
    # x @ wx (an [T*N, D] x [D, 16] product) happens once, before the scan.
    assert "f32[14,16] = dot_general" in text.replace(" ", " ") or re.search(r"f32\[14,16\]\s*=\s*dot_general", outside)
    assert not re.search(r"f32\[2,3\].*dot_general", body)


def test_chain_of_recurrences_keeps_state_zero_where_inputs_start_late():
    # Inputs start at t=2: the state starts (zero) at t=2, as in Kaldi.
    net = Network(rnn(x, D, H))
    request = ComputationRequest(
        inputs={"input": IndexSet.range(n=N, t=(2, 2 + T))}, outputs={"output": IndexSet.range(n=N, t=(2, 2 + T))}
    )
    _, y = run(net, request)
    np.testing.assert_allclose(y.reshape(T, N, H), scan_rnn(net.params, X3), atol=1e-6)


def test_undefined_reference_is_named():
    h = Node("h", Tanh(x @ Weight(Normal((D, H), 0.5)) + IfDefined(Offset(Ref("hh"), -1))))
    with pytest.raises(GraphError, match=r"Ref\('hh'\) names no node \(nodes: h\).*test_recurrence.py"):
        Network(h).context()


def test_cycle_without_time_offset_names_its_nodes():
    a = Node("a", ReLU(x @ Weight(Normal((D, H), 0.5)) + Ref("b")))
    b = Node("b", Tanh(a))
    with pytest.raises(GraphError, match=r"cycle with no time offset.*\b(a|b)\b.*\b(a|b)\b"):
        compile(Network(b), full_request())


def test_recurrence_without_a_start_is_uncomputable():
    h = Node("h", Tanh(x @ Weight(Normal((D, H), 0.5)) + Offset(Ref("h"), -1) @ Weight(Normal((H, H), 0.5))))
    with pytest.raises(PlanError, match=r"(?s)output .output.*cannot be computed.*node\(s\) h read themselves"):
        compile(Network(h), full_request())


def test_compute_runs_recurrent_networks_densely():
    net = Network(rnn(x, D, H))
    y = net.compute(X3.transpose(1, 0, 2))
    np.testing.assert_allclose(np.asarray(y).transpose(1, 0, 2), scan_rnn(net.params, X3), atol=1e-6)


def test_chunks_with_carried_state_equal_one_pass():
    """2000 frames in chunks of 50, the LSTM state carried across chunks, equal one pass."""
    net = Network(LogSoftmax(lstm(4) @ Weight(Normal((4, 3), 0.5))))
    xs = np.random.default_rng(1).standard_normal((2, 2000, D)).astype(np.float32)
    one_pass = np.asarray(net.compute(xs))
    chunked = np.asarray(net.compute(xs, frames_per_chunk=50))
    np.testing.assert_allclose(chunked, one_pass, atol=1e-5)


def test_recurrent_states_are_the_nodes_read_back_in_time():
    from symnet._src.engine.streaming import recurrent_states

    assert recurrent_states(Network(lstm(4))) == {"m": 1, "c": 1}
    assert recurrent_states(Network(rnn(x, D, H, lag=-3))) == {"h": 3}


def test_given_state_for_a_non_recurrent_node_is_refused():
    net = Network(Node("a", Tanh(x @ Weight(Normal((D, H), 0.5)))))
    request = ComputationRequest(
        inputs={"input": IndexSet.range(n=1, t=4), "a": IndexSet.range(n=1, t=(-1, 0))},
        outputs={"output": IndexSet.range(n=1, t=4)},
    )
    with pytest.raises(PlanError, match="not recurrent"):
        compile(net, request)


@pytest.mark.parametrize("lowering", ["fused", "plain"])
@pytest.mark.parametrize("first", [0, 1])
def test_a_recurrence_needed_at_every_third_frame_steps_over_those_frames_only(lowering, first):
    """Recurrences reading 3 frames back and ahead (Kaldi's delay=-3 LSTMs), outputs wanted at every third frame
    from `first`: each scan runs a third of the frames, and equals the full-frame reference there, and so do the
    gradients (jax.grad)."""
    frames, lag = 20, 3
    xs = np.random.default_rng(2).standard_normal((frames, N, D)).astype(np.float32)
    fwd, bwd = rnn(x, D, H, lag=-lag, name="f"), rnn(x, D, H, lag=lag, name="b")
    net = Network(rnn(Append(fwd, bwd), 2 * H, H, lag=-lag, name="top"))
    wanted = list(range(first, frames, lag))
    request = ComputationRequest(
        inputs={"input": IndexSet.range(n=N, t=frames)},
        outputs={"output": [(n, t, 0) for t in wanted for n in range(N)]},
    )
    c = compile(net, request, lowering=lowering)
    assert c.explain().count(f"({len(wanted)} frames, one in {lag},") == 3, c.explain()

    def reference(p):
        f, b = scan_rnn(p, xs, "f", lag=lag), scan_rnn(p, xs, "b", reverse=True, lag=lag)
        return scan_rnn(p, jnp.concatenate([f, b], -1), "top", lag=lag)[first::lag].reshape(-1, H)

    tape = c.forward(net, {"input": xs.reshape(-1, D)})["output"]
    np.testing.assert_allclose(tape.value, reference(net.params), atol=1e-5)
    delta = rng.standard_normal(tape.value.shape).astype(np.float32)
    grads = tape.backward(delta)
    want = jax.grad(lambda p: (reference(p) * delta).sum())(net.params)
    for k in want:
        np.testing.assert_allclose(grads[k], want[k], atol=2e-5, err_msg=k)
