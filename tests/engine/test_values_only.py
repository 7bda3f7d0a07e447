"""A Computation call that is not differentiated traces no pullback (engine/values_only.py); differentiated, it
runs the Tape's backward. Both are checked against the plain lowering that JAX differentiates itself."""

from __future__ import annotations

import jax
import jax.numpy as jnp
import numpy as np
import pytest

from helpers.nets import rnn
from symnet import Append, ComputationRequest, IndexSet, Input, Network, Normal, Offset, ReLU, Weight, compile
from symnet._src.engine.values_only import linearized, values_only

D, H, N, T = 5, 6, 8, 80  # N * T rows: enough for the splice to be a convolution (splice.MIN_ROWS)


def network() -> Network:
    """A spliced product (a convolution), a recurrence (a fused scan) and a product after them."""
    x = Input("input", D)
    h = ReLU(Append(Offset(x, -1), x, Offset(x, 1)) @ Weight(Normal((3 * D, H), 0.5), name="w1"))
    return Network(rnn(h, H, H, names=("w", "u")) @ Weight(Normal((H, 3), 0.5), name="w2"))


def test_linearized_gives_a_pullback_outside_values_only_and_none_inside():
    value, pullback = linearized(jnp.sin, jnp.float32(0.5))
    assert pullback is not None and np.isclose(pullback(jnp.float32(1.0))[0], np.cos(0.5))
    with values_only():
        inside, none = linearized(jnp.sin, jnp.float32(0.5))
    assert none is None and inside == value


def test_an_undifferentiated_call_linearises_nothing_and_a_differentiated_one_runs_the_tape(monkeypatch):
    net = network()
    request = ComputationRequest(
        inputs={"input": IndexSet.range(n=N, t=(-1, T + 1))}, outputs={"output": IndexSet.range(n=N, t=(0, T))}
    )
    fast, plain = compile(net, request, "fused"), compile(net, request, "plain", gradient="jax")
    explained = fast.explain()
    assert "convolution" in explained and "fused" in explained, explained
    inputs = {"input": jnp.asarray(np.random.default_rng(0).standard_normal(((T + 2) * N, D)), jnp.float32)}
    delta = jnp.asarray(np.random.default_rng(1).standard_normal((T * N, 3)), jnp.float32)
    calls = []
    real = jax.vjp
    monkeypatch.setattr(jax, "vjp", lambda *a, **k: calls.append(1) or real(*a, **k))
    got = fast(net, inputs)["output"]
    assert calls == []  # traced and run without linearising a layer
    np.testing.assert_allclose(got, plain(net, inputs)["output"], rtol=1e-5, atol=1e-5)

    def loss(computation):
        return lambda params: (computation(net.replace(params=params), inputs)["output"] * delta).sum()

    grads = jax.grad(loss(fast))(net.params)
    assert calls  # the Tape's forward linearises its layers for the backward walk
    for name, g in jax.grad(loss(plain))(net.params).items():
        np.testing.assert_allclose(grads[name], g, rtol=1e-4, atol=1e-4, err_msg=name)


def test_values_only_is_left_when_the_forward_fails():
    """The switch is a context: an error inside leaves linearized giving pullbacks again."""
    with pytest.raises(ValueError), values_only():
        raise ValueError("boom")
    assert linearized(jnp.sin, jnp.float32(0.0))[1] is not None
