"""`jax.grad` of a Computation call runs the Tape's walk (symnet._src.engine.gradient), and equals JAX's own reverse
mode of the plain lowering (`compile(..., lowering="plain", gradient="jax")`): for parameters, inputs, carried
state, non-trainable Weights, sequence ends, dropout, both input layouts, chunks and `net.compute`."""

from __future__ import annotations

import jax
import jax.numpy as jnp
import numpy as np
import pytest

from helpers.blstm import network as blstm
from symnet import (
    ComputationRequest,
    DimRange,
    FixedWeight,
    IfDefined,
    IndexSet,
    Input,
    LogSoftmax,
    Network,
    Node,
    Normal,
    Offset,
    Ref,
    Sigmoid,
    Tanh,
    Weight,
    compile,
    rng,
)
from symnet.errors import PlanError
from symnet.kaldi import COMPONENTS

D, C, N, T = 3, 4, 3, 11


def weight(name: str, *shape: int, scale: float = 0.5) -> Weight:
    return Weight(Normal(shape, scale), name=name)


def lstm(name: str = "m", inp=None):
    """The documentation's LSTM: one input projection, one recurrent matrix, gates by DimRange."""
    inp = Input("input", D) if inp is None else inp
    gates = inp @ weight(f"{name}.wx", D, 4 * C) + weight(f"{name}.b", 4 * C, scale=0.1)
    gates = gates + IfDefined(Offset(Ref(name), -1)) @ weight(f"{name}.wh", C, 4 * C)
    i, f = Sigmoid(DimRange(gates, 0, C)), Sigmoid(DimRange(gates, C, C))
    g, o = Tanh(DimRange(gates, 2 * C, C)), Sigmoid(DimRange(gates, 3 * C, C))
    c = Node(f"{name}.c", f * IfDefined(Offset(Ref(f"{name}.c"), -1)) + i * g)
    return Node(name, o * Tanh(c))


def close(a, b, what: str, rtol: float = 2e-5, atol: float = 2e-6) -> None:
    for (path, x), y in zip(jax.tree_util.tree_leaves_with_path(a), jax.tree.leaves(b), strict=True):
        np.testing.assert_allclose(np.asarray(x), np.asarray(y), rtol=rtol, atol=atol, err_msg=f"{what} {path}")


def both(net, req, lowering: str = "auto"):
    """The Computation whose jax.grad is the Tape's walk, and JAX's own autodiff of the plain scan."""
    walk = compile(net, req, lowering)
    autodiff = compile(net, req, "plain", gradient="jax")
    assert walk.gradient == "tape" and autodiff.gradient == "jax" and walk is not autodiff
    return walk, autodiff


def test_blstm_with_sequence_ends_parameters_and_inputs() -> None:
    net = blstm(splice=True)
    req = ComputationRequest(
        inputs={"input": IndexSet.range(n=N, t=(-1, T + 1))},
        outputs={"output": IndexSet.range(n=N, t=T)},
        sequence_ends=True,
    )
    walk, autodiff = both(net, req)
    x = jnp.asarray(np.random.default_rng(0).standard_normal(((T + 2) * N, 3)), jnp.float32)
    w = jnp.asarray(np.random.default_rng(1).standard_normal((T * N, 5)), jnp.float32)
    ends = [10, 6, 3]

    def loss(c):
        masks = c.end_masks(ends)
        return jax.jit(
            jax.value_and_grad(lambda n, x: jnp.sum(jnp.sin(c(n, {"input": x}, masks)["output"]) * w), (0, 1))
        )

    (got_value, got), (want_value, want) = loss(walk)(net, x), loss(autodiff)(net, x)
    np.testing.assert_allclose(got_value, want_value, rtol=1e-5)
    close(got, want, "BLSTM with ends")
    assert float(jnp.abs(got[1]).sum()) > 0  # the inputs' cotangents are not zeros
    # The walk is the Tape's: tape.backward of the same delta gives the same parameter gradients.
    tape = walk.forward(net, {"input": x}, walk.end_masks(ends))["output"]
    by_tape = tape.backward(jnp.cos(tape.value) * w)
    close({k: got[0].params[k] for k in by_tape}, by_tape, "tape.backward")


def test_batched_layout_and_one_of_two_outputs() -> None:
    x = Input("input", D)
    h = lstm(inp=x)
    net = Network({"output": LogSoftmax(h @ weight("out", C, 3)), "aux": h @ weight("aux", C, 2)})
    req = ComputationRequest(
        inputs={"input": IndexSet.range(n=N, t=T)},
        outputs={"output": IndexSet.range(n=N, t=T), "aux": IndexSet.range(n=N, t=T)},
    )
    walk, autodiff = both(net, req)
    x3 = jnp.asarray(np.random.default_rng(2).standard_normal((T, N, D)), jnp.float32)

    def grads(c):
        return jax.grad(lambda n, x: jnp.sum(c(n, {"input": x})["output"][..., 0] ** 2), (0, 1))(net, x3)

    got, want = grads(walk), grads(autodiff)
    assert got[1].shape == (T, N, D)
    close(got, want, "batched layout")
    assert float(jnp.abs(got[0].params["aux"]).max()) == 0.0  # `aux` is not in the loss


def test_carried_state_gets_its_cotangent_chunk_by_chunk() -> None:
    net = Network(LogSoftmax(lstm() @ weight("out", C, 3)))
    size = 5
    state = {k: IndexSet.range(n=N, t=(-1, 0)) for k in ("m", "m.c")}
    req = ComputationRequest(
        inputs={"input": IndexSet.range(n=N, t=size), **state},
        outputs={"output": IndexSet.range(n=N, t=size), **{k: IndexSet.range(n=N, t=(size - 1, size)) for k in state}},
    )
    walk, autodiff = both(net, req, "fused")
    xs = jnp.asarray(np.random.default_rng(3).standard_normal((3 * size, N, D)), jnp.float32)
    start = {k: jnp.asarray(np.random.default_rng(4).standard_normal((1, N, C)), jnp.float32) for k in state}

    def loss(c):
        def run(n, start):  # three chunks, each starting from the state the one before ended with
            carried, total = start, 0.0
            for k in range(3):
                out = c(n, {"input": xs[k * size : (k + 1) * size], **carried})
                carried = {name: out[name] for name in state}
                total = total + jnp.sum(out["output"] * jnp.arange(3.0))
            return total

        return jax.jit(jax.grad(run, (0, 1)))(net, start)

    got, want = loss(walk), loss(autodiff)
    close(got, want, "chunks with carried state")
    assert all(float(jnp.abs(v).sum()) > 0 for v in got[1].values())


def test_non_trainable_weights_and_dropout() -> None:
    x = Input("input", D)
    frozen = FixedWeight(jnp.full((D,), 0.5), name="frozen")
    dropped = COMPONENTS["DropoutComponent"]("drop", {"dim": D, "dropout-proportion": 0.4}, x * frozen)
    net = Network(dropped @ weight("w", D, 2))
    req = ComputationRequest(inputs={"input": IndexSet.range(n=2, t=4)}, outputs={"output": IndexSet.range(n=2, t=4)})
    walk, autodiff = both(net, req)
    xs = jnp.asarray(np.random.default_rng(5).standard_normal((8, D)), jnp.float32)
    with rng.randomness(jax.random.PRNGKey(7)):
        got = jax.grad(lambda n: jnp.sum(walk(n, {"input": xs})["output"] ** 2))(net)
        want = jax.grad(lambda n: jnp.sum(autodiff(n, {"input": xs})["output"] ** 2))(net)
    close(got, want, "dropout, frozen weight")
    assert float(jnp.abs(got.state["frozen"]).sum()) > 0  # the state's cotangent is the true one, not zeros


def test_compute_and_vjp_and_the_forward_mode_choice() -> None:
    net = blstm()
    feats = [np.random.default_rng(6).standard_normal((n, 3)).astype(np.float32) for n in (4, 9)]

    def loss(n):
        return sum(jnp.sum(o**2) for o in n.compute(feats))

    value, got = jax.value_and_grad(loss)(net)
    assert np.isfinite(float(value))
    req = ComputationRequest(inputs={"input": IndexSet.range(n=1, t=4)}, outputs={"output": IndexSet.range(n=1, t=4)})
    walk, autodiff = both(net, req)
    x = jnp.ones((4, 3), jnp.float32)
    _, pull = jax.vjp(lambda x: walk(net, {"input": x})["output"], x)
    _, pull_jax = jax.vjp(lambda x: autodiff(net, {"input": x})["output"], x)
    d = jnp.ones((4, 5), jnp.float32)
    close(pull(d), pull_jax(d), "jax.vjp")
    # Forward mode runs JAX's own autodiff of the plain lowering, under either gradient; the walk's Computation
    # sees the tangent at its call, but not inside a jit of the caller's own (the custom_vjp is refused there).
    tangent = jax.jvp(lambda x: autodiff(net, {"input": x})["output"], (x,), (jnp.ones_like(x),))[1]
    close(jax.jvp(lambda x: walk(net, {"input": x})["output"], (x,), (jnp.ones_like(x),))[1], tangent, "jvp")
    close(jnp.sum(jax.jacrev(lambda x: walk(net, {"input": x})["output"])(x), axis=(2, 3)), tangent, "J 1")
    with pytest.raises(TypeError, match="custom_vjp"):
        jax.jvp(jax.jit(lambda x: walk(net, {"input": x})["output"]), (x,), (jnp.ones_like(x),))
    with pytest.raises(PlanError, match="gradient='fast': use one of 'tape', 'jax'"):
        compile(net, req, gradient="fast")


@pytest.mark.parametrize("gradient", ["tape", "jax"])
def test_an_input_no_computed_row_reads_gets_a_zero_cotangent(gradient):
    """A Failover that falls back on its constant reads none of the given input: zeros, as JAX's own gives."""
    from symnet import Const, Failover, Index

    net = Network(Failover(Const(0.5, 1), Input("input", 2) @ Weight(Normal((2, 1), 0.1))), seed=0)
    inputs = {"input": IndexSet.of([Index(0, 0, 0)])}
    request = ComputationRequest(inputs=inputs, outputs={"output": IndexSet.of([Index(0, -3, 0)])})
    comp = compile(net, request, gradient=gradient)
    x = {"input": np.ones((1, 2), np.float32)}
    loss = lambda p, x: comp(net.replace(params=p), x)["output"].sum()  # noqa: E731
    d_params, d_x = jax.grad(loss, argnums=(0, 1))(net.params, x)
    assert not np.asarray(d_params["weight"]).any() and not np.asarray(d_x["input"]).any()
