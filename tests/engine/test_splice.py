"""Spliced products lowered as dilated convolutions (symnet._src.engine.splice).

Values are checked against the per-Index reference evaluator (`helpers.reference`; Kaldi's formulas for the
affine components), gradients against `jax.grad` of that evaluator and against JAX's own autodiff of the plain
lowering (`lowering="plain"`, which keeps every splice as slices, a concatenation and one product); requests
the convolution must not touch (irregular, with sequence ends, unevenly spaced or partly absent parts) are
checked to keep the plain lowering.
"""

from __future__ import annotations

import jax
import jax.numpy as jnp
import numpy as np
import pytest

from helpers.reference import reference_outputs
from symnet import (
    Append,
    ComputationRequest,
    IfDefined,
    Index,
    IndexSet,
    Input,
    Network,
    Offset,
    ReLU,
    ShapeError,
    Weight,
    clear_caches,
)
from symnet import natural_gradient as ng
from symnet._src.engine import splice
from symnet.components import AffineComponent
from symnet.engine import compile
from symnet.kaldi import build_component

N, D, H = 3, 4, 5
MIN_ROWS = splice.MIN_ROWS  # the rule's threshold; the tests' small requests lower with any


@pytest.fixture(autouse=True)
def any_size(monkeypatch):
    """Spliced products of any number of rows are convolutions, under `auto` on whatever backend the suite runs
    (the cache keeps no plan made otherwise)."""
    monkeypatch.setattr(splice, "MIN_ROWS", 1)
    monkeypatch.setattr(splice, "AUTO_BACKENDS", (jax.default_backend(),))
    clear_caches()
    yield
    clear_caches()


PATTERNS = [
    ((-2, -1, 0, 1, 2), (-3, 0, 3)),
    ((-1, 1), (0, 2, 4), (-6, -3, 0)),
    ((0, 1), (-4, -2, 0, 2), (-1, 0, 1)),
]


def spliced(h, offsets):
    return Append(*(h if o == 0 else Offset(h, o) for o in offsets))


def tdnn(splices, seed: int = 0, output_splice: bool = False) -> Network:
    """Layers `ReLU(Append(Offset(h, o)...) @ W + b)`, then `@ W_out` (itself spliced if `output_splice`)."""
    rng = np.random.default_rng(seed)
    h, dim = Input("input", D), D
    for i, offsets in enumerate(splices):
        w = Weight(rng.normal(0, (dim * len(offsets)) ** -0.5, (dim * len(offsets), H)), name=f"w{i}")
        h = ReLU(spliced(h, offsets) @ w + Weight(rng.normal(0, 0.1, H), name=f"b{i}"))
        dim = H
    if output_splice:
        return Network(spliced(h, (-1, 0, 1)) @ Weight(rng.normal(size=(3 * H, 2)), name="out"))
    return Network(h @ Weight(rng.normal(size=(H, 2)), name="out"))


def context(splices, output_splice: bool = False) -> tuple[int, int]:
    left = sum(-min(o) for o in splices) + output_splice
    right = sum(max(o) for o in splices) + output_splice
    return max(left, 0), max(right, 0)


def request(splices, frames: int = 9, output_splice: bool = False) -> ComputationRequest:
    left, right = context(splices, output_splice)
    return ComputationRequest(
        inputs={"input": IndexSet.range(n=N, t=(-left, frames + right))},
        outputs={"output": IndexSet.range(n=N, t=frames)},
    )


def spliced_lines(computation) -> list[str]:
    return [line for line in computation.explain().splitlines() if line.startswith("spliced product")]


def reference(net, req, x, params=None, xp=np):
    rows = {tuple(i): x[r] for r, i in enumerate(req.inputs["input"])}
    wanted = {"output": [tuple(i) for i in req.outputs["output"]]}
    return reference_outputs(dict(net.outputs), {"input": rows}, params or net.params, wanted, xp=xp)["output"]


@pytest.mark.parametrize("splices", PATTERNS)
@pytest.mark.parametrize("output_splice", [False, True])
def test_values_and_tape_gradients_equal_the_reference(splices, output_splice) -> None:
    net = tdnn(splices, output_splice=output_splice)
    req = request(splices, output_splice=output_splice)
    conv = compile(net, req)
    assert len(spliced_lines(conv)) == len(splices) + output_splice
    x = np.random.default_rng(1).standard_normal((len(req.inputs["input"]), D)).astype(np.float32)
    out = conv(net, {"input": jnp.asarray(x)})["output"]
    np.testing.assert_allclose(out, reference(net, req, x), rtol=1e-4, atol=1e-5)

    delta = jnp.asarray(np.random.default_rng(2).standard_normal(out.shape), jnp.float32)
    tape = conv.forward(net, {"input": jnp.asarray(x)})["output"]
    got = tape.backward(delta)

    def ref_loss(params):
        return jnp.sum(reference(net, req, x, params, xp=jnp) * delta)

    want = jax.grad(ref_loss)(dict(net.params))
    for name in want:
        np.testing.assert_allclose(got[name], want[name], rtol=1e-4, atol=1e-5, err_msg=name)


@pytest.mark.parametrize("splices", PATTERNS[:2])
@pytest.mark.parametrize("batched", [False, True])
def test_jax_grad_equals_the_plain_lowering(splices, batched) -> None:
    net = tdnn(splices, seed=3, output_splice=True)
    req = request(splices, frames=7, output_splice=True)
    plain = compile(net, req, "plain", gradient="jax")
    assert not spliced_lines(plain)
    rows = len(req.inputs["input"])
    x = jnp.asarray(np.random.default_rng(4).standard_normal((rows, D)), jnp.float32)
    if batched:
        x = x.reshape(rows // N, N, D)

    def grads(c):
        return jax.grad(lambda n, x: jnp.sum(jnp.sin(c(n, {"input": x})["output"])), (0, 1))(net, x)

    want = grads(plain)
    for gradient in ("tape", "jax"):
        conv = compile(net, req, gradient=gradient)
        assert len(spliced_lines(conv)) == len(splices) + 1
        got = grads(conv)
        np.testing.assert_allclose(
            conv(net, {"input": x})["output"], plain(net, {"input": x})["output"], rtol=1e-5, atol=1e-6
        )
        assert got[1].shape == x.shape and float(jnp.abs(got[1]).sum()) > 0
        for a, b in zip(jax.tree.leaves(got), jax.tree.leaves(want), strict=True):
            np.testing.assert_allclose(a, b, rtol=1e-4, atol=1e-5, err_msg=gradient)


#: (splices, subsampling factor): the first layer reads every frame and computes every `factor`-th (each output's
#: taps in its own group of `factor` frames: a reshape; or overlapping groups, as -2,0,2 at 3: a strided
#: convolution; or taps short of the group, whose last group runs past the input), the later layers every
#: `factor`-th frame of the one below (plain convolutions).
SUBSAMPLED = [
    (((-1, 0, 1), (-3, 0, 3)), 3),
    (((-2, 0, 2), (-3, 0, 3)), 3),
    (((-1, 0), (0, 3)), 3),
    (((0, 1), (-2, 0, 2)), 2),
    (((-1, 0, 1, 2),), 4),
]


@pytest.mark.parametrize(("splices", "factor"), SUBSAMPLED)
@pytest.mark.parametrize("batched", [False, True])
def test_subsampled_splices_equal_the_reference_and_jax_grad(splices, factor, batched) -> None:
    """With frame subsampling (outputs every `factor`-th frame) the layer that moves to the lower rate reads
    strided slices of its input: one product (a reshape or a strided convolution), values equal to the per-Index
    reference evaluator, tape and JAX gradients to `jax.grad` of it."""
    net = tdnn(splices, seed=5)
    left, right = context(splices)
    frames = 8 * factor  # the input no wider than the outputs need: some last groups of `factor` run past it
    req = ComputationRequest(
        inputs={"input": IndexSet.range(n=N, t=range(-left, frames - factor + 1 + right))},
        outputs={"output": IndexSet.range(n=N, t=range(0, frames, factor))},
    )
    x = np.random.default_rng(6).standard_normal((len(req.inputs["input"]), D)).astype(np.float32)
    delta = np.random.default_rng(7).standard_normal((len(req.outputs["output"]), 2)).astype(np.float32)
    want = reference(net, req, x)
    want_grads = jax.grad(lambda p: jnp.sum(reference(net, req, x, p, xp=jnp) * delta))(dict(net.params))
    conv = compile(net, req)
    lines = spliced_lines(conv)
    assert sum(f"one output every {factor} rows" in line for line in lines) == 1, lines
    xs, ds = jnp.asarray(x), jnp.asarray(delta)
    if batched:
        xs, ds = xs.reshape(-1, N, D), ds.reshape(-1, N, 2)
    out = conv(net, {"input": xs})["output"]
    np.testing.assert_allclose(np.asarray(out).reshape(-1, 2), want, rtol=1e-4, atol=1e-5)
    tape_grads = conv.forward(net, {"input": xs})["output"].backward(ds)
    jax_grads = jax.grad(lambda n: jnp.sum(compile(net, req, gradient="jax")(n, {"input": xs})["output"] * ds))(net)
    for name in want_grads:
        np.testing.assert_allclose(tape_grads[name], want_grads[name], rtol=1e-4, atol=1e-5, err_msg=name)
        np.testing.assert_allclose(jax_grads.params[name], want_grads[name], rtol=1e-4, atol=1e-5, err_msg=name)


def test_the_lowering_knob() -> None:
    net, req = tdnn(PATTERNS[0]), request(PATTERNS[0])
    assert len(spliced_lines(compile(net, req, "fused"))) == 2
    assert not spliced_lines(compile(net, req, "plain"))
    assert compile(net, req, "plain") is not compile(net, req)


def test_auto_makes_convolutions_on_cpu_only(monkeypatch) -> None:
    """`auto` follows the default backend at compile time (`splice.AUTO_BACKENDS`): on a GPU its splices stay
    slices and a concatenation, with the same values; `fused` makes convolutions everywhere."""
    monkeypatch.setattr(splice, "AUTO_BACKENDS", ("cpu",))
    net, req = tdnn(PATTERNS[0]), request(PATTERNS[0])
    x = np.random.default_rng(1).normal(size=(len(req.inputs["input"]), D))
    monkeypatch.setattr(splice.jax, "default_backend", lambda: "cpu")
    assert len(spliced_lines(compile(net, req))) == 2
    clear_caches()
    monkeypatch.setattr(splice.jax, "default_backend", lambda: "gpu")
    _not_lowered(net, req, x)
    assert len(spliced_lines(compile(net, req, "fused"))) == 2


def test_products_of_few_rows_stay_plain(monkeypatch) -> None:
    monkeypatch.setattr(splice, "MIN_ROWS", MIN_ROWS)
    net = tdnn(PATTERNS[0])
    frames = -(-MIN_ROWS // N)  # the fewest output frames with MIN_ROWS rows (or more) in the last product
    context = 3  # the first product has 3 frames more on each side than the last (its splice (-3, 0, 3))
    assert not spliced_lines(compile(net, request(PATTERNS[0], frames=frames - 2 * context - 1)))
    assert len(spliced_lines(compile(net, request(PATTERNS[0], frames=frames - 2 * context)))) == 1
    assert len(spliced_lines(compile(net, request(PATTERNS[0], frames=frames)))) == 2


def _not_lowered(net, req, x) -> None:
    c = compile(net, req)
    assert not spliced_lines(c)
    np.testing.assert_allclose(
        c(net, {"input": jnp.asarray(x)})["output"], reference(net, req, x), rtol=1e-4, atol=1e-5
    )


def test_unevenly_spaced_offsets_stay_plain() -> None:
    splices = ((-1, 0, 2),)
    net, req = tdnn(splices), request(splices)
    _not_lowered(net, req, np.random.default_rng(5).standard_normal((len(req.inputs["input"]), D)))


def test_irregular_requests_stay_plain() -> None:
    splices = ((-1, 0, 1),)
    net = tdnn(splices)
    inputs = [Index(n, t) for n in range(2) for t in range(-1, 8 + n)]  # sequences of different lengths
    req = ComputationRequest(
        inputs={"input": IndexSet.of(inputs)},
        outputs={"output": IndexSet.of([Index(n, t) for n in range(2) for t in range(7 + n)])},
    )
    _not_lowered(net, req, np.random.default_rng(6).standard_normal((len(inputs), D)))


def test_requests_with_sequence_ends_stay_plain() -> None:
    splices = ((-1, 0, 1),)
    net = tdnn(splices)
    left, right = context(splices)
    req = ComputationRequest(
        inputs={"input": IndexSet.range(n=N, t=(-left, 9 + right))},
        outputs={"output": IndexSet.range(n=N, t=9)},
        sequence_ends=True,
    )
    assert not spliced_lines(compile(net, req))


@pytest.mark.parametrize("far", [1, 50])  # 50: no row of IfDefined(Offset(x, 50)) exists, so nothing computes it
def test_parts_with_absent_rows_stay_plain(far) -> None:
    x = Input("input", D)
    w = Weight(np.random.default_rng(7).normal(size=(3 * D, 2)), name="w")
    net = Network(Append(IfDefined(Offset(x, -far)), x, IfDefined(Offset(x, far))) @ w)
    req = ComputationRequest(inputs={"input": IndexSet.range(n=N, t=6)}, outputs={"output": IndexSet.range(n=N, t=6)})
    _not_lowered(net, req, np.random.default_rng(8).standard_normal((len(req.inputs["input"]), D)))


def test_a_splice_another_node_reads_is_kept() -> None:
    x = Input("input", D)
    rng = np.random.default_rng(9)
    parts = spliced(x, (-1, 0, 1))
    y = parts @ Weight(rng.normal(size=(3 * D, 2)), name="w")
    net = Network({"output": y, "aux": parts})
    req = ComputationRequest(
        inputs={"input": IndexSet.range(n=N, t=(-1, 7))},
        outputs={"output": IndexSet.range(n=N, t=6), "aux": IndexSet.range(n=N, t=6)},
    )
    c = compile(net, req)
    assert not spliced_lines(c)  # the Append is an output: computed anyway, so it stays the product's operand
    xs = rng.standard_normal((len(req.inputs["input"]), D))
    np.testing.assert_allclose(c(net, {"input": jnp.asarray(xs)})["output"], reference(net, req, xs), rtol=1e-4)


def test_a_weight_of_the_wrong_shape_is_a_shape_error_naming_the_product() -> None:
    x = Input("input", D)
    good = Network(spliced(x, (-1, 0, 1)) @ Weight(np.ones((3 * D, 2)), name="w"))
    req = ComputationRequest(
        inputs={"input": IndexSet.range(n=N, t=(-1, 7))}, outputs={"output": IndexSet.range(n=N, t=6)}
    )
    c = compile(good, req)
    assert len(spliced_lines(c)) == 1
    with pytest.raises(ShapeError, match=r"Dot: shapes .*test_splice.py"):  # where the network is built
        Network(spliced(x, (-1, 0, 1)) @ Weight(np.ones((3 * D + 1, 2)), name="w"))


# ----- Kaldi's products: layers whose `product()` names their input, matrix and bias -----------------------

KINDS = ["AffineComponent", "NaturalGradientAffineComponent", "FixedAffineComponent", "LinearComponent"]
KALDI_OFFSETS = (-1, 0, 1)


def kaldi_net(kind: str, offsets=KALDI_OFFSETS) -> Network:
    """`kind` over the splices of ReLU(input) (as in Kaldi's relu-batchnorm layers), then a plain product."""
    h = ReLU(Input("input", D))
    c = build_component(kind, "c", {"input-dim": len(offsets) * D, "output-dim": H}, spliced(h, offsets))
    return Network(c @ Weight(np.random.default_rng(10).normal(size=(H, 2)), name="out"), seed=11)


def values(net) -> dict:
    return {**net.params, **net.state}


@pytest.mark.parametrize("kind", KINDS)
def test_kaldi_products_are_convolutions_equal_to_kaldis_formula(kind) -> None:
    net = kaldi_net(kind)
    req = request((KALDI_OFFSETS,))
    conv = compile(net, req)
    assert spliced_lines(conv) == [
        line for line in spliced_lines(conv) if f"{kind}" in line and "3 taps 1 row(s) apart" in line
    ]
    assert len(spliced_lines(conv)) == 1
    x = np.random.default_rng(12).standard_normal((len(req.inputs["input"]), D)).astype(np.float32)
    out = conv(net, {"input": jnp.asarray(x)})["output"]
    np.testing.assert_allclose(out, reference(net, req, x, values(net)), rtol=1e-4, atol=1e-5)

    delta = jnp.asarray(np.random.default_rng(13).standard_normal(out.shape), jnp.float32)

    def ref_loss(params):
        return jnp.sum(reference(net, req, x, {**values(net), **params}, xp=jnp) * delta)

    def grads(c):
        return jax.grad(lambda n, x: jnp.sum(c(n, {"input": x})["output"] * delta), (0, 1))(net, jnp.asarray(x))

    want = jax.grad(ref_loss)(dict(net.params))
    plain, plain_x = grads(compile(net, req, "plain", gradient="jax"))  # JAX's autodiff of slices and a product
    for gradient in ("tape", "jax"):
        got, got_x = grads(compile(net, req, gradient=gradient))
        np.testing.assert_allclose(got_x, plain_x, rtol=1e-4, atol=1e-5, err_msg=gradient)
        for name in want:
            np.testing.assert_allclose(got.params[name], want[name], rtol=1e-4, atol=1e-5, err_msg=name)
        if gradient == "tape":  # the component's own vjp: no deltas for a FixedAffineComponent's weights
            assert set(got.state) == ({"c.linear_params", "c.bias_params"} if kind.startswith("Fixed") else set())
            assert not any(np.any(np.asarray(v)) for v in got.state.values())


@pytest.mark.parametrize("batched", [False, True])
def test_natural_gradient_runs_the_components_own_backward(batched) -> None:
    """Inside a Preconditioning the convolution's backward is the component's natural gradient, as the plain
    lowering's (slices, a concatenation and the component's vjp): same weight gradients and preconditioner states,
    and they are not the exact gradient."""
    net = kaldi_net("NaturalGradientAffineComponent")
    req = request((KALDI_OFFSETS,), frames=40)
    x = jnp.asarray(np.random.default_rng(15).standard_normal((len(req.inputs["input"]), D)), jnp.float32)
    delta = jnp.asarray(np.random.default_rng(16).standard_normal((len(req.outputs["output"]), 2)), jnp.float32)
    if batched:  # [T, N, D] in and out
        x, delta = x.reshape(-1, N, D), delta.reshape(-1, N, 2)
    states = ng.init_states(net)

    def step(lowering, enabled=True):
        c = compile(net, req, lowering)
        with ng.Preconditioning(states, enabled=enabled) as ctx:
            grads = c.forward(net, {"input": x})["output"].backward(delta)
        return c, grads, ctx.states

    conv, got, got_states = step("auto")
    plain, want, want_states = step("plain")
    _, exact, _ = step("plain", enabled=False)
    assert len(spliced_lines(conv)) == 1 and not spliced_lines(plain)
    for name in ("c.linear_params", "c.bias_params"):
        np.testing.assert_allclose(got[name], want[name], rtol=1e-4, atol=1e-6, err_msg=name)
        assert not np.allclose(got[name], exact[name], rtol=1e-3), name
    for a, b in zip(jax.tree.leaves(got_states), jax.tree.leaves(want_states), strict=True):
        np.testing.assert_allclose(a, b, rtol=1e-4, atol=1e-6)


def test_a_tdnn_component_is_a_convolution_equal_to_its_splices_and_affine() -> None:
    """TdnnComponent expands to an AffineComponent of Offsets: against Kaldi's formula over a hand-built Append."""
    offsets = (-2, 0, 2)
    h = ReLU(Input("input", D))
    tdnn_layer = build_component("TdnnComponent", "t", {"input-dim": D, "output-dim": H, "time-offsets": "-2,0,2"}, h)
    net = Network(tdnn_layer, seed=17)
    by_hand = AffineComponent(
        "t", spliced(h, offsets), Weight(0.0, name="t.linear_params"), Weight(0.0, name="t.bias_params")
    )
    req = request((offsets,))
    conv = compile(net, req)
    assert len(spliced_lines(conv)) == 1 and "2 row(s) apart" in spliced_lines(conv)[0]
    x = np.random.default_rng(18).standard_normal((len(req.inputs["input"]), D)).astype(np.float32)
    rows = {tuple(i): x[r] for r, i in enumerate(req.inputs["input"])}
    wanted = {"output": [tuple(i) for i in req.outputs["output"]]}
    want = reference_outputs({"output": by_hand}, {"input": rows}, net.params, wanted)["output"]
    np.testing.assert_allclose(conv(net, {"input": jnp.asarray(x)})["output"], want, rtol=1e-4, atol=1e-5)
