"""Sequence ends with `[T, N, D]` calls: the batched layout gives the flat call's numbers and gradients."""

from __future__ import annotations

import jax
import jax.numpy as jnp
import numpy as np

from symnet import (
    Append,
    ComputationRequest,
    IfDefined,
    IndexSet,
    Input,
    Network,
    Node,
    Normal,
    Offset,
    Ref,
    Tanh,
    Weight,
    compile,
)

T, N, D, C = 9, 3, 4, 5


def blstm() -> Network:
    x = Input("input", D)

    def direction(name: str, lag: int) -> Node:
        own = IfDefined(Offset(Ref(name), lag)) @ Weight(Normal((C, C), 0.5), name=f"{name}.wh")
        return Node(name, Tanh(x @ Weight(Normal((D, C), 0.5), name=f"{name}.wx") + own))

    both = Append(direction("fw", -1), direction("bw", 1))
    return Network({"output": Append(both, Offset(both, 1)) @ Weight(Normal((4 * C, 2), 0.5), name="out")}, seed=0)


def test_batched_call_with_ends_equals_flat_call_with_ends() -> None:
    net = blstm()
    request = ComputationRequest(
        inputs={"input": IndexSet.range(n=N, t=(0, T + 1))},
        outputs={"output": IndexSet.range(n=N, t=T)},
        sequence_ends=True,
    )
    computation = compile(net, request)
    x3 = np.random.default_rng(0).standard_normal((T + 1, N, D)).astype(np.float32)
    ends = [T + 1, 5, 2]
    flat = computation(net, {"input": x3.reshape(-1, D)}, ends=ends)["output"]
    batched = computation(net, {"input": x3}, ends=ends)["output"]
    assert batched.shape == (T, N, 2)
    np.testing.assert_allclose(np.asarray(batched).reshape(-1, 2), np.asarray(flat), rtol=1e-5, atol=1e-6)
    # Each sequence's own end changes its outputs (the backward direction starts there).
    plain = computation(net, {"input": x3}, ends=[T + 1] * N)["output"]
    assert not np.allclose(np.asarray(plain)[:4, 1], np.asarray(batched)[:4, 1])

    def loss(params: dict, layout: str) -> jax.Array:
        value = x3 if layout == "batched" else x3.reshape(-1, D)
        out = computation(net.replace(params=params), {"input": value}, ends=ends)["output"]
        return jnp.sum(jnp.sin(out.reshape(-1, 2)))

    g_flat = jax.grad(loss)(net.params, "flat")
    g_batched = jax.grad(loss)(net.params, "batched")
    for name in g_flat:
        np.testing.assert_allclose(np.asarray(g_batched[name]), np.asarray(g_flat[name]), rtol=1e-4, atol=1e-6)
