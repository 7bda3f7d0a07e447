"""`compute` on traced input (under jax.jit, jax.grad): one regular request, the same numbers as the concrete call.

References: the concrete `compute` (bucketed, tested elsewhere against Kaldi's
edge convention) and `jax.grad` of the flat-matrix Computation call with the
edge frames repeated by numpy indexing.
"""

from __future__ import annotations

import jax
import jax.numpy as jnp
import numpy as np
import pytest

from helpers import nets
from symnet import (
    Append,
    ComputationRequest,
    IndexSet,
    Input,
    Network,
    Normal,
    Offset,
    ReLU,
    Weight,
    compile,
)
from symnet.errors import PlanError, ShapeError

D, H = 3, 4
x = Input("input", D)


def tdnn() -> Network:
    return nets.tdnn(x, hidden=H, out=H, first=(-2, 0, 1), second=(-1, 0, 2), names=("w1", "w2"), node="h")


def rnn() -> Network:
    return Network({"output": nets.rnn(nets.splice(x, (-1, 0, 2)), 3 * D, H, names=("w", "u"))})


def two_inputs() -> Network:
    iv = Input("ivector", 2)
    return Network({"output": ReLU(Append(Offset(x, -1), x, iv) @ Weight(Normal((2 * D + 2, H), 0.5), name="w"))})


NETS = {"tdnn": tdnn, "rnn": rnn}
features = np.random.default_rng(0).standard_normal((3, 13, D)).astype(np.float32)


@pytest.mark.parametrize("mode", ["same", "valid"])
@pytest.mark.parametrize("kind", sorted(NETS))
def test_jit_compute_equals_concrete_compute(kind: str, mode: str) -> None:
    net = NETS[kind]()
    concrete = np.asarray(net.compute(features, mode=mode))
    traced = jax.jit(lambda net, v: net.compute(v, mode=mode))(net, jnp.asarray(features))
    assert traced.shape == concrete.shape
    np.testing.assert_allclose(np.asarray(traced), concrete, rtol=1e-5, atol=1e-6)


def test_jit_compute_of_a_list_gives_a_list_equal_to_the_concrete_call() -> None:
    net = rnn()
    seqs = [features[0], features[1, :9], features[2, :5], features[2, 2:11]]
    concrete = net.compute(seqs)
    traced = jax.jit(lambda v: net.compute(v))([jnp.asarray(s) for s in seqs])
    assert isinstance(traced, list) and len(traced) == len(seqs)
    for t, c in zip(traced, concrete, strict=True):
        np.testing.assert_allclose(np.asarray(t), np.asarray(c), rtol=1e-5, atol=1e-6)


def test_jit_compute_with_two_inputs_equals_concrete_compute() -> None:
    net = two_inputs()
    inputs = {"input": features, "ivector": np.random.default_rng(1).standard_normal((3, 13, 2)).astype(np.float32)}
    concrete = np.asarray(net.compute(inputs))
    traced = jax.jit(lambda v: net.compute(v))({k: jnp.asarray(v) for k, v in inputs.items()})
    np.testing.assert_allclose(np.asarray(traced), concrete, rtol=1e-5, atol=1e-6)


@pytest.mark.parametrize("kind", sorted(NETS))
def test_grad_through_compute_equals_grad_of_the_flat_computation(kind: str) -> None:
    """Gradients with respect to the input and the parameters, under jax.jit(jax.grad)."""
    net = NETS[kind]()
    left, right = net.context()
    n, frames = features.shape[:2]
    weights = jnp.asarray(np.random.default_rng(2).standard_normal((n, frames, H)), jnp.float32)

    def loss(params: dict[str, jax.Array], v: jax.Array) -> jax.Array:
        return jnp.sum(net.replace(params=params).compute(v) * weights)

    request = ComputationRequest(
        inputs={"input": IndexSet.range(n=n, t=(-left, frames + right))},
        outputs={"output": IndexSet.range(n=n, t=frames)},
    )
    # The reference is differentiated by JAX itself; `compute`'s gradient is the Tape's walk (engine/gradient.py).
    computation = compile(net, request, gradient="jax")
    clip = np.clip(np.arange(-left, frames + right), 0, frames - 1)

    def reference(params: dict[str, jax.Array], v: jax.Array) -> jax.Array:
        flat = v[:, clip].transpose(1, 0, 2).reshape(-1, D)  # rows in (t, n) order
        out = computation(net.replace(params=params), {"input": flat})["output"].reshape(frames, n, H)
        return jnp.sum(out.transpose(1, 0, 2) * weights)

    v = jnp.asarray(features)
    got = jax.jit(jax.grad(loss, argnums=(0, 1)))(net.params, v)
    want = jax.grad(reference, argnums=(0, 1))(net.params, v)
    np.testing.assert_allclose(np.asarray(got[1]), np.asarray(want[1]), rtol=1e-5, atol=1e-6)
    for name in want[0]:
        np.testing.assert_allclose(np.asarray(got[0][name]), np.asarray(want[0][name]), rtol=1e-5, atol=1e-6)


def test_traced_compute_is_one_program_without_gathers() -> None:
    net = tdnn()
    text = jax.jit(lambda v: net.compute(v)).lower(jnp.asarray(features)).as_text()
    assert "gather" not in text and "scatter" not in text


def test_traced_frames_per_chunk_is_a_plan_error() -> None:
    net = rnn()
    with pytest.raises(PlanError, match="frames_per_chunk cannot run on traced input"):
        jax.jit(lambda v: net.compute(v, frames_per_chunk=4))(jnp.asarray(features))


def test_traced_bad_shapes_are_shape_errors() -> None:
    net = tdnn()
    with pytest.raises(ShapeError, match=r"input 'input': expected a batch of shape \[N, T, 3\].*\(13, 3\)"):
        jax.jit(lambda v: net.compute(v))(jnp.asarray(features[0]))
    with pytest.raises(ShapeError, match=r"too short for context \(3, 3\)"):
        jax.jit(lambda v: net.compute(v, mode="valid"))(jnp.asarray(features[:, :6]))
