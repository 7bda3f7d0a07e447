"""The batch axis explicit: a regular Computation takes and returns `[T, N, D]` arrays, and jits.

References: the flat-matrix call (rows in (t, n) order, tested elsewhere against
the per-Index evaluator), the per-Index evaluator itself, and `jax.grad` of the
flat call.
"""

from __future__ import annotations

import jax
import jax.numpy as jnp
import numpy as np
import pytest

from helpers import nets
from helpers.reference import Reference
from symnet import (
    Append,
    ComputationRequest,
    IndexSet,
    Input,
    Network,
    Node,
    Normal,
    Offset,
    ReLU,
    Tanh,
    Weight,
    compile,
    rng,
)
from symnet._src.core.index import Index
from symnet.errors import ShapeError
from symnet.layers import Affine, BatchNorm, Dropout

D, H, N, T = 3, 5, 4, 7
x = Input("input", D)


def tdnn() -> Network:
    return nets.tdnn(x, hidden=H, out=H, second=(-2, 0), names=("w1", "w2"), node="h")


def rnn() -> Network:
    return Network({"output": nets.rnn(x, D, H, names=("w", None))})


def dropout_net() -> Network:
    h = Dropout(ReLU(Append(Offset(x, -1), x) @ Weight(Normal((2 * D, H), 0.5), name="w")), 0.3)
    return Network({"output": h @ Weight(Normal((H, 2), 0.5), name="v")})


def request(left: int, right: int) -> ComputationRequest:
    return ComputationRequest(
        inputs={"input": IndexSet.range(n=N, t=(-left, T + right))}, outputs={"output": IndexSet.range(n=N, t=T)}
    )


def batch(frames: int, seed: int = 0) -> np.ndarray:
    return np.random.default_rng(seed).standard_normal((frames, N, D)).astype(np.float32)


NETS = {"tdnn": (tdnn, (3, 1)), "rnn": (rnn, (0, 0))}


@pytest.mark.parametrize("kind", sorted(NETS))
def test_tnd_call_equals_flat_call(kind: str) -> None:
    make, (left, right) = NETS[kind]
    net = make()
    computation = compile(net, request(left, right))
    xs = batch(T + left + right)
    out3 = computation(net, {"input": xs})["output"]
    flat = computation(net, {"input": xs.reshape(-1, D)})["output"]
    assert out3.shape == (T, N, H)
    np.testing.assert_allclose(np.asarray(out3), np.asarray(flat).reshape(T, N, H), rtol=1e-6, atol=1e-6)


def test_tnd_output_row_is_index_n_t() -> None:
    """`out[t, n]` is the per-Index evaluator's value at Index (n, t)."""
    net = tdnn()
    xs = batch(T + 4)
    out = np.asarray(compile(net, request(3, 1))(net, {"input": xs})["output"])
    rows = {(n, t): xs[t + 3, n] for t in range(-3, T + 1) for n in range(N)}
    ref = Reference(net.outputs["output"], {"input": rows}, net.params)
    for n in range(N):
        for t in range(T):
            np.testing.assert_allclose(out[t, n], ref.value(Index(n, t)), rtol=1e-4, atol=1e-5)


@pytest.mark.parametrize("kind", sorted(NETS))
def test_tnd_forward_backward_equals_grad_of_flat_call(kind: str) -> None:
    make, (left, right) = NETS[kind]
    net = make()
    computation = compile(net, request(left, right))
    xs = batch(T + left + right)
    weights = jnp.asarray(np.random.default_rng(1).standard_normal((T, N, H)), jnp.float32)
    (tape,) = computation.forward(net, {"input": xs}).values()
    assert tape.value.shape == (T, N, H)
    grads = tape.backward(weights)

    autodiff = compile(net, request(left, right), gradient="jax")  # JAX's own reverse mode, against the Tape's

    def loss(params: dict[str, jax.Array]) -> jax.Array:
        out = autodiff(net.replace(params=params), {"input": xs.reshape(-1, D)})["output"]
        return jnp.sum(out * weights.reshape(-1, H))

    expected = jax.grad(loss)(net.params)
    assert set(grads) == set(expected)
    for name in expected:
        np.testing.assert_allclose(np.asarray(grads[name]), np.asarray(expected[name]), rtol=1e-5, atol=1e-5)


def test_tnd_backward_rejects_a_flat_delta() -> None:
    net = tdnn()
    (tape,) = compile(net, request(3, 1)).forward(net, {"input": batch(T + 4)}).values()
    with pytest.raises(ShapeError, match=r"delta of shape \(28, 5\)"):
        tape.backward(jnp.ones((T * N, H)))


def test_tnd_wrong_shape_names_the_input_and_the_expected_shape() -> None:
    net = tdnn()
    computation = compile(net, request(3, 1))
    with pytest.raises(ShapeError, match=r"input 'input'.*\(11, 3, 3\).*\[T, N, D\] array \(11, 4, 3\)"):
        computation(net, {"input": np.zeros((T + 4, N - 1, D), np.float32)})
    with pytest.raises(ShapeError, match=r"input 'input'.*\(11, 4, 2\).*\(11, 4, 3\)"):
        computation(net, {"input": np.zeros((T + 4, N, D - 1), np.float32)})
    with pytest.raises(ShapeError, match=r"input 'input'.*\(11, 4, 3, 1\)"):
        computation(net, {"input": np.zeros((T + 4, N, D, 1), np.float32)})


def test_tnd_mixing_layouts_is_a_shape_error_naming_the_input() -> None:
    a, b = Input("a", D), Input("b", D)
    net = Network({"output": ReLU((Offset(a, -1) + b) @ Weight(Normal((D, H), 0.5), name="w"))})
    req = ComputationRequest(
        inputs={"a": IndexSet.range(n=N, t=(-1, T)), "b": IndexSet.range(n=N, t=T)},
        outputs={"output": IndexSet.range(n=N, t=T)},
    )
    computation = compile(net, req)
    va, vb = batch(T + 1), batch(T, seed=1)
    out = computation(net, {"a": va, "b": vb})["output"]
    flat = computation(net, {"a": va.reshape(-1, D), "b": vb.reshape(-1, D)})["output"]
    np.testing.assert_allclose(np.asarray(out), np.asarray(flat).reshape(T, N, H), rtol=1e-6)
    with pytest.raises(ShapeError, match=r"input 'b': a flat matrix of shape \(28, 3\), but input 'a' is a \[T, N"):
        computation(net, {"a": va, "b": vb.reshape(-1, D)})


def test_tnd_irregular_request_rejects_batched_input() -> None:
    net = Network({"output": x @ Weight(Normal((D, H), 0.5), name="w")})
    rows = IndexSet.of([Index(0, 0), Index(0, 1), Index(1, 0)])  # sequences of different lengths: irregular
    computation = compile(net, ComputationRequest(inputs={"input": rows}, outputs={"output": rows}))
    assert not computation.regular
    with pytest.raises(ShapeError, match=r"input 'input'.*flat matrix \(3, 3\).*irregular"):
        computation(net, {"input": np.zeros((3, 1, D), np.float32)})
    assert computation(net, {"input": np.zeros((3, D), np.float32)})["output"].shape == (3, H)


# ----- jax.jit of functions calling a Computation -------------------------------------


@pytest.mark.parametrize("layout", ["flat", "tnd"])
def test_jit_of_a_call_equals_the_call(layout: str) -> None:
    net = tdnn()
    computation = compile(net, request(3, 1))
    xs = batch(T + 4) if layout == "tnd" else batch(T + 4).reshape(-1, D)
    run = lambda net, v: computation(net, {"input": v})["output"]  # noqa: E731
    jitted = jax.jit(run)(net, jnp.asarray(xs))
    np.testing.assert_allclose(np.asarray(jitted), np.asarray(run(net, xs)), rtol=1e-6, atol=1e-6)


@pytest.mark.parametrize("layout", ["flat", "tnd"])
def test_jit_of_forward_backward_with_dropout_equals_unjitted(layout: str) -> None:
    """A training step (forward, backward) with a dropout key, jitted and not: the same numbers."""
    net = dropout_net()
    computation = compile(net, request(1, 0))
    xs = batch(T + 1) if layout == "tnd" else batch(T + 1).reshape(-1, D)

    def step(net: Network, v: jax.Array, key: jax.Array) -> tuple[jax.Array, dict[str, jax.Array]]:
        with rng.randomness(key):
            (tape,) = computation.forward(net, {"input": v}).values()
            return tape.value, tape.backward(jnp.ones_like(tape.value))

    key = jax.random.PRNGKey(3)
    value, grads = step(net, jnp.asarray(xs), key)
    jvalue, jgrads = jax.jit(step)(net, jnp.asarray(xs), key)
    np.testing.assert_allclose(np.asarray(jvalue), np.asarray(value), rtol=1e-6, atol=1e-6)
    for name in grads:
        np.testing.assert_allclose(np.asarray(jgrads[name]), np.asarray(grads[name]), rtol=1e-5, atol=1e-6)
    # the key is an argument, not a constant: another key gives another mask
    other, _ = jax.jit(step)(net, jnp.asarray(xs), jax.random.PRNGKey(4))
    assert not np.allclose(np.asarray(other), np.asarray(jvalue))


def test_tnd_typed_layers_see_flat_rows_and_give_the_flat_numbers() -> None:
    """Layers the engine does not run on [T, N, D] (typed layers, Kaldi components) get (t, n) rows."""
    h = Node("h", BatchNorm(ReLU(Affine(Append(Offset(x, -1), x, Offset(x, 1)), H))))
    net = Network({"output": Tanh(Affine(Append(Offset(h, -2), h), H)) + 1.0})
    computation = compile(net, request(3, 1))
    xs = batch(T + 4)
    (tape,) = computation.forward(net, {"input": xs}).values()
    (flat,) = computation.forward(net, {"input": xs.reshape(-1, D)}).values()
    np.testing.assert_allclose(np.asarray(tape.value), np.asarray(flat.value).reshape(T, N, H), rtol=1e-5, atol=1e-6)
    delta = np.random.default_rng(5).standard_normal((T, N, H)).astype(np.float32)
    got, want = tape.backward(delta), flat.backward(delta.reshape(-1, H))
    for name in want:
        np.testing.assert_allclose(np.asarray(got[name]), np.asarray(want[name]), rtol=1e-4, atol=1e-5, err_msg=name)
