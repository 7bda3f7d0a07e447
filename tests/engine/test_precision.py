"""Mixed precision (symnet._src.core.precision): bfloat16 and float16 policies against float32.

The tolerances are those docs/precision.md states: outputs (log-probabilities)
within `OUT_TOL[policy]` of float32's (largest absolute difference), each
parameter's gradient within `GRAD_TOL[policy]` of float32's (2-norm of the
difference over 2-norm of float32's). Gradients are the looser: a ReLU whose
input rounds across 0 switches a whole row's derivative, and training-mode
batch-norm scales its input's rounding by 1 / its standard deviation.
"""

from __future__ import annotations

import io
import math

import jax
import jax.numpy as jnp
import numpy as np
import pytest

from symnet import (
    IfDefined,
    Input,
    LogSoftmax,
    Network,
    Node,
    Normal,
    Offset,
    PlanError,
    Precision,
    Ref,
    ShapeError,
    Sigmoid,
    Softmax,
    Tanh,
    Weight,
    compile,
)
from symnet._src.core.descriptor import DimRange
from symnet._src.core.index import IndexSet
from symnet._src.kaldi.text.xconfig import read_xconfig_network
from symnet.components import BatchNormComponent, NormalizeComponent
from symnet.engine import ComputationRequest

OUT_TOL = {"bfloat16": 0.15, "float16": 0.03}
GRAD_TOL = {"bfloat16": 0.25, "float16": 0.05}


def relative(a, b):
    """The 2-norm of `a - b` over that of `b`."""
    return float(jnp.linalg.norm(a - b) / jnp.linalg.norm(b))


POLICIES = ("bfloat16", "float16")

XCONFIG = """
input dim=6 name=input
relu-batchnorm-layer name=tdnn1 input=Append(-1,0,1) dim=16
relu-batchnorm-layer name=tdnn2 input=Append(-2,0,2) dim=16
output-layer name=output dim=5
"""


def affine(x, fan_in, fan_out, name):
    w = Weight(Normal((fan_in, fan_out), 1.0 / math.sqrt(fan_in)), name=f"{name}.w")
    return x @ w + Weight(Normal((fan_out,), 0.1), name=f"{name}.b")


def tdnn():
    from symnet import Append, ReLU

    x = Input("input", 6)
    h = ReLU(affine(Append(Offset(x, -1), x, Offset(x, 1)), 18, 16, "l1"))
    h = NormalizeComponent("l1.norm", h, 16, 16)
    return Network(LogSoftmax(affine(Append(Offset(h, -2), h, Offset(h, 2)), 48, 5, "out")), seed=1)


def lstm(cells=8):
    x = Input("input", 6)
    h_prev, c_prev = IfDefined(Offset(Ref("h"), -1)), IfDefined(Offset(Ref("c"), -1))
    gates = affine(x, 6, 4 * cells, "wx") + h_prev @ Weight(Normal((cells, 4 * cells), 0.3), name="wh")
    i, f = Sigmoid(DimRange(gates, 0, cells)), Sigmoid(DimRange(gates, cells, cells))
    g, o = Tanh(DimRange(gates, 2 * cells, cells)), Sigmoid(DimRange(gates, 3 * cells, cells))
    c = Node("c", f * c_prev + i * g)
    h = Node("h", o * Tanh(c))
    return Network(LogSoftmax(affine(h, cells, 5, "out")), seed=2)


def kaldi():
    """relu-batchnorm layers (training-mode batch-norm) and an output layer, its zero-initialised affine drawn."""
    net = read_xconfig_network(io.StringIO(XCONFIG), seed=3)
    rng = np.random.default_rng(3)
    return net.replace(
        params={
            k: jnp.asarray(rng.standard_normal(v.shape) * 0.3, v.dtype) if k.startswith("output") else v
            for k, v in net.params.items()
        }
    )


NETS = {"tdnn": tdnn, "lstm": lstm, "kaldi": kaldi}


@pytest.fixture(scope="module")
def x():
    return np.random.default_rng(0).standard_normal((3, 15, 6)).astype(np.float32)


@pytest.mark.parametrize("policy", POLICIES)
@pytest.mark.parametrize("name", sorted(NETS))
def test_outputs_are_within_the_stated_tolerance_of_float32(name, policy, x):
    net = NETS[name]()
    reference = np.asarray(net.compute(x, test_mode=False))  # the kaldi net's batch-norm in training mode
    out = net.compute(x, precision=policy, test_mode=False)
    assert out.dtype == jnp.float32  # the presets' output dtype
    assert np.abs(np.asarray(out) - reference).max() <= OUT_TOL[policy]
    assert np.abs(np.asarray(out) - reference).max() > 0  # it did compute in 16 bits


@pytest.mark.parametrize("policy", POLICIES)
@pytest.mark.parametrize("name", sorted(NETS))
def test_jax_grad_gives_parameter_dtype_gradients_near_float32(name, policy, x):
    net = NETS[name]()

    weights = jnp.asarray(np.random.default_rng(4).standard_normal((3, 15, 5)), jnp.float32)

    def loss(params, precision):
        return jnp.sum(weights * net.replace(params=params).compute(jnp.asarray(x), precision=precision))

    reference = jax.grad(loss)(net.params, None)
    grads = jax.grad(loss)(net.params, policy)
    for key, g in grads.items():
        assert g.dtype == net.params[key].dtype == jnp.float32, key
        assert relative(g, reference[key]) <= GRAD_TOL[policy], key


def test_tape_backward_gives_gradients_in_the_parameters_dtype(x):
    net = lstm()
    request = ComputationRequest(
        inputs={"input": IndexSet.range(n=3, t=15)}, outputs={"output": IndexSet.range(n=3, t=15)}
    )
    computation = compile(net, request, precision="bfloat16")
    tape = computation.forward(net, {"input": jnp.asarray(x).transpose(1, 0, 2)})["output"]
    assert tape.value.dtype == jnp.float32
    grads = tape.backward(jnp.ones(tape.shape))
    plain = compile(net, request).forward(net, {"input": jnp.asarray(x).transpose(1, 0, 2)})["output"]
    reference = plain.backward(jnp.ones(plain.shape))
    for key, g in grads.items():
        assert g.dtype == jnp.float32
        assert relative(g, reference[key]) <= GRAD_TOL["bfloat16"], key


def test_input_gradients_come_back_in_the_inputs_dtype(x):
    net = tdnn()
    grad = jax.grad(lambda v: jnp.sum(net.compute(v, precision="bfloat16")))(jnp.asarray(x))
    assert grad.dtype == jnp.float32 and np.isfinite(np.asarray(grad)).all()


def test_the_policy_is_part_of_the_cache_key_and_of_explain():
    net = lstm()
    request = ComputationRequest(
        inputs={"input": IndexSet.range(n=2, t=5)}, outputs={"output": IndexSet.range(n=2, t=5)}
    )
    plain, bf16 = compile(net, request), compile(net, request, precision="bfloat16")
    assert plain is not bf16 and bf16 is compile(net, request, precision=Precision(compute="bfloat16"))
    assert "precision=None" in plain.explain()
    assert "compute=bfloat16" in bf16.explain()


def test_a_custom_policy_gives_its_output_dtype(x):
    out = tdnn().compute(x, precision=Precision(compute="bfloat16", output="bfloat16"))
    assert out.dtype == jnp.bfloat16


def test_without_a_policy_16_bit_inputs_are_accepted_and_promoted_as_jax_does(x):
    net = tdnn()
    out = net.compute(x.astype(jnp.bfloat16))  # float32 parameters: float32, as JAX promotes
    assert out.dtype == jnp.float32
    assert np.abs(np.asarray(out) - np.asarray(net.compute(x))).max() <= OUT_TOL["bfloat16"]
    half = net.replace(params={k: v.astype(jnp.bfloat16) for k, v in net.params.items()})
    assert half.compute(x.astype(jnp.bfloat16)).dtype == jnp.bfloat16  # no silent upcast
    assert half.compute(list(x.astype(jnp.float16))).__getitem__(0).dtype == jnp.float32  # f16 x bf16 -> f32


def test_reductions_run_in_float32_and_return_the_compute_dtype():
    a = jnp.asarray(np.random.default_rng(1).standard_normal((4, 7)) * 30, jnp.bfloat16)
    for layer, reference in ((LogSoftmax(Input("x", 7)), jax.nn.log_softmax), (Softmax(Input("x", 7)), jax.nn.softmax)):
        out = layer.apply(a)
        assert out.dtype == jnp.bfloat16
        np.testing.assert_array_equal(
            np.asarray(out), np.asarray(reference(a.astype(jnp.float32)).astype(jnp.bfloat16))
        )
    stat = [Weight(Normal((7,), 1.0), name=f"bn.{n}") for n in ("m", "v")]
    bn = BatchNormComponent("bn", Input("x", 7), *stat, Weight(Normal((), 1.0), name="bn.c"), dim=7, block_dim=7)
    stats = [jnp.zeros(7, jnp.bfloat16), jnp.ones(7, jnp.bfloat16), jnp.zeros((), jnp.bfloat16)]
    out = bn.apply(a, *stats)
    wide = bn.apply(a.astype(jnp.float32), *(s.astype(jnp.float32) for s in stats))
    assert out.dtype == jnp.bfloat16
    np.testing.assert_array_equal(np.asarray(out), np.asarray(wide.astype(jnp.bfloat16)))


def test_bad_inputs_and_policies_are_symnet_errors(x):
    net = tdnn()
    with pytest.raises(ShapeError, match="expected numbers"):
        net.compute(np.full((1, 5, 6), "a"))
    with pytest.raises(ShapeError, match="precision must be"):
        net.compute(x, precision="int8")
    with pytest.raises(ShapeError, match="precision dtype"):
        Precision(compute="int8")
    with pytest.raises(ShapeError, match="loss_scale"):
        Precision(loss_scale=0)
    with pytest.raises(PlanError):
        compile(net, ComputationRequest(inputs={}, outputs={}), precision="bfloat16")


def test_chunks_and_streams_compute_under_the_policy(x):
    from symnet import Stream

    net = lstm()
    whole = np.asarray(net.compute(x, precision="bfloat16"))
    chunked = net.compute(x, precision="bfloat16", frames_per_chunk=4)
    assert chunked.dtype == jnp.float32
    # The carried state crosses chunks as float32 outputs of bfloat16 values; other programs may round a
    # bfloat16 value the other way (1/128 at these magnitudes).
    np.testing.assert_allclose(np.asarray(chunked), whole, atol=0.02)
    stream = Stream(net, frames_per_chunk=5, precision="bfloat16")
    online = np.concatenate([stream.feed(x[0][t : t + 3]) for t in range(0, 15, 3)] + [stream.finish()])
    np.testing.assert_allclose(online, whole[0], atol=0.02)
    assert np.abs(online - np.asarray(net.compute(x))[0]).max() > 0  # not float32's
