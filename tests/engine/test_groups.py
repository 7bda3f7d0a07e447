"""A call in groups of sequences (symnet._src.engine.groups, `compile(..., sequence_groups=k)`).

Values and parameter gradients of `jax.grad` of a call are checked against the per-Index reference evaluator
and `jax.grad` of it, the inputs' gradients against JAX's own autodiff of the plain lowering in one group, for
a TDNN (spliced products lowered as convolutions) and a bidirectional recurrence, in both call layouts; the
automatic choice and every refusal are checked too.
"""

from __future__ import annotations

import jax
import jax.numpy as jnp
import numpy as np
import pytest

from helpers.nets import rnn
from helpers.reference import reference_outputs
from symnet import (
    Append,
    ComputationRequest,
    IndexSet,
    Input,
    Network,
    Offset,
    PlanError,
    ReLU,
    Weight,
    clear_caches,
    rng,
)
from symnet._src.engine import groups, splice
from symnet.engine import compile
from symnet.layers import BatchNorm, Dropout

N, D, H = 4, 3, 5


@pytest.fixture(autouse=True)
def small(monkeypatch):
    """Small requests lower as large ones would (convolutions, automatic groups); no plan outlives a test."""
    monkeypatch.setattr(splice, "MIN_ROWS", 1)
    monkeypatch.setattr(groups, "MIN_WORK", 1)
    clear_caches()
    yield
    clear_caches()


def tdnn(seed: int = 0) -> Network:
    r = np.random.default_rng(seed)
    x = Input("input", D)
    h = ReLU(Append(Offset(x, -1), x, Offset(x, 1)) @ Weight(r.normal(0, 0.5, (3 * D, H)), name="w1"))
    h = ReLU(Append(Offset(h, -2), h, Offset(h, 2)) @ Weight(r.normal(0, 0.5, (3 * H, H)), name="w2"))
    return Network(h @ Weight(r.normal(size=(H, 2)), name="out"))


def birnn() -> Network:
    x = Input("input", D)
    both = Append(rnn(x, D, H, lag=-1, name="fw"), rnn(x, D, H, lag=+1, name="bw"))
    return Network(both @ Weight(np.random.default_rng(3).normal(size=(2 * H, 2)), name="out"), seed=1)


def request(left: int, right: int, frames: int = 7, n: int = N) -> ComputationRequest:
    return ComputationRequest(
        inputs={"input": IndexSet.range(n=n, t=(-left, frames + right))},
        outputs={"output": IndexSet.range(n=n, t=frames)},
    )


CASES = {"tdnn": (tdnn, (3, 3)), "birnn": (birnn, (0, 0))}


def reference(net, req, x, params=None, xp=np):
    rows = {tuple(i): x[r] for r, i in enumerate(req.inputs["input"])}
    wanted = {"output": [tuple(i) for i in req.outputs["output"]]}
    return reference_outputs(dict(net.outputs), {"input": rows}, params or net.params, wanted, xp=xp)["output"]


@pytest.mark.parametrize("case", sorted(CASES))
@pytest.mark.parametrize("k", [2, 4])
@pytest.mark.parametrize("batched", [False, True])
def test_values_and_gradients_in_groups_equal_the_reference(case, k, batched) -> None:
    make, (left, right) = CASES[case]
    net, req = make(), request(left, right)
    computation = compile(net, req, sequence_groups=k)
    assert f"sequences in {k} groups of {N // k}" in computation.explain()
    x = np.random.default_rng(1).standard_normal((len(req.inputs["input"]), D)).astype(np.float32)
    frames_in = len(req.inputs["input"]) // N
    want_value = reference(net, req, x)

    def flat(out):
        return out.reshape(-1, out.shape[-1])

    def call(params, inputs):
        shaped = inputs.reshape(frames_in, N, D) if batched else inputs
        out = computation(net.replace(params=params), {"input": shaped})["output"]
        assert out.ndim == (3 if batched else 2)
        return flat(out)

    np.testing.assert_allclose(call(net.params, jnp.asarray(x)), want_value, rtol=1e-4, atol=1e-5)
    value, pullback = jax.vjp(call, net.params, jnp.asarray(x))  # the differentiated call: in groups
    np.testing.assert_allclose(value, want_value, rtol=1e-4, atol=1e-5)
    delta = np.random.default_rng(2).standard_normal(value.shape).astype(np.float32)
    got_params, got_input = pullback(jnp.asarray(delta))

    def theirs(params):
        return jnp.sum(reference(net, req, x, params, xp=jnp) * delta)

    for name, want in jax.grad(theirs)(dict(net.params)).items():
        np.testing.assert_allclose(got_params[name], want, rtol=1e-4, atol=1e-5, err_msg=name)
    plain = compile(net, req, lowering="plain", gradient="jax")  # JAX's autodiff of slices, one group
    want_input = jax.grad(lambda v: jnp.sum(plain(net, {"input": v})["output"] * delta))(jnp.asarray(x))
    np.testing.assert_allclose(got_input, want_input, rtol=1e-4, atol=1e-5, err_msg="input")


def test_only_a_differentiated_call_runs_in_groups() -> None:
    net, req = tdnn(), request(3, 3)
    computation = compile(net, req, lowering="fused", sequence_groups=2)  # convolutions on any backend
    x = jnp.asarray(np.random.default_rng(4).standard_normal((len(req.inputs["input"]), D)), jnp.float32)

    def call(params):
        return computation(net.replace(params=params), {"input": x})["output"]

    def convolutions(fn):
        return str(jax.make_jaxpr(fn)(net.params)).count("conv_general_dilated")

    assert convolutions(call) == 2  # two spliced products, once each
    assert convolutions(lambda p: jax.vjp(call, p)[0]) == 2 * 2  # in each of two groups
    assert convolutions(jax.grad(lambda p: jnp.sum(call(p)))) > 2 * 2  # and their transposes


def test_forward_tape_is_one_group_over_every_row() -> None:
    net, req = tdnn(), request(3, 3)
    computation = compile(net, req, sequence_groups=2)
    x = jnp.asarray(np.random.default_rng(5).standard_normal((len(req.inputs["input"]), D)), jnp.float32)
    tape = computation.forward(net, {"input": x})["output"]
    nodes = tape.nodes()
    assert len({id(n.layer) for n in nodes}) == len(nodes)  # one tape node per network node
    assert tape.value.shape == (len(req.outputs["output"]), 2)
    np.testing.assert_allclose(tape.value, computation(net, {"input": x})["output"], rtol=1e-6, atol=1e-6)


def test_automatic_groups_on_cpu_for_large_feedforward_requests_only(monkeypatch) -> None:
    if jax.default_backend() != "cpu":
        pytest.skip("groups are a CPU lowering: elsewhere none is chosen (checked below)")
    assert compile(tdnn(), request(3, 3)).groups.k == groups.AUTOMATIC
    assert compile(tdnn(), request(3, 3, n=3)).groups is None  # 3 sequences do not halve
    assert compile(birnn(), request(0, 0)).groups is None  # a recurrence's scans gain nothing
    assert compile(tdnn(), request(3, 3), lowering="plain").groups is None
    monkeypatch.setattr(groups, "MIN_WORK", 10**9)
    clear_caches()
    assert compile(tdnn(), request(3, 3)).groups is None


def test_no_automatic_groups_off_cpu(monkeypatch) -> None:
    monkeypatch.setattr(jax, "default_backend", lambda: "gpu")
    assert compile(tdnn(), request(3, 3)).groups is None


def test_inside_randomness_a_call_runs_as_one_group() -> None:
    x0 = Input("input", D)
    net = Network(Dropout(Append(Offset(x0, -1), x0) @ Weight(np.ones((2 * D, H)), name="w"), 0.5, name="drop"))
    req = request(1, 0, frames=6)
    x = jnp.asarray(np.random.default_rng(6).standard_normal((len(req.inputs["input"]), D)), jnp.float32)
    key = jax.random.key(0)
    outs = []
    for k in (1, 2):
        computation = compile(net, req, sequence_groups=k)
        with rng.randomness(key):  # the value of a differentiated call: the one groups would run
            outs.append(
                jax.vjp(lambda p, c=computation: c(net.replace(params=p), {"input": x})["output"], net.params)[0]
            )
    # One mask over the whole batch either way: in groups each group would draw the same mask again.
    np.testing.assert_array_equal(outs[0], outs[1])
    zeros = np.asarray(outs[0]) == 0
    assert 0 < zeros.mean() < 1
    rows = zeros.reshape(-1, N, H)
    assert not np.array_equal(rows[:, : N // 2], rows[:, N // 2 :])


def batchnorm_case():
    return Network(BatchNorm(Input("input", D), name="bn")), request(0, 0)


def ends_case():
    req = request(3, 3)
    return tdnn(), ComputationRequest(req.inputs, req.outputs, sequence_ends=True)


@pytest.mark.parametrize(
    "why, make, k, gradient",
    [
        ("computes each row from other rows of its minibatch", batchnorm_case, 2, "tape"),
        ("sequence_ends", ends_case, 2, "tape"),
        ("lowering='plain'", lambda: (tdnn(), request(3, 3)), 2, "tape"),
        ("gradient='tape'", lambda: (tdnn(), request(3, 3)), 2, "jax"),
        ("4 sequences do not split into 3 equal groups", lambda: (tdnn(), request(3, 3)), 3, "tape"),
    ],
)
def test_groups_the_request_cannot_have_are_a_plan_error(why, make, k, gradient) -> None:
    net, req = make()
    lowering = "plain" if "plain" in why else "auto"
    with pytest.raises(PlanError, match=why):
        compile(net, req, lowering, gradient, sequence_groups=k)
    if k == 2:
        assert compile(net, req, lowering, gradient).groups is None  # and never chosen


@pytest.mark.parametrize("bad", [0, -1, 1.5, True, "2"])
def test_a_bad_group_count_is_a_plan_error(bad) -> None:
    with pytest.raises(PlanError, match="sequence_groups"):
        compile(tdnn(), request(3, 3), sequence_groups=bad)
