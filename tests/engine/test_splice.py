"""Spliced products lowered as dilated convolutions (symnet._src.engine.splice).

Values are checked against the per-Index reference evaluator (`helpers.reference`), gradients against
`jax.grad` of that evaluator and against JAX's own autodiff of the plain lowering (`lowering="plain"`, which
keeps every splice as slices, a concatenation and one product); requests the convolution must not touch
(irregular, with sequence ends, unevenly spaced or partly absent parts) are checked to keep the plain lowering.
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
from symnet._src.engine import splice
from symnet.engine import compile

N, D, H = 3, 4, 5
MIN_ROWS = splice.MIN_ROWS  # the rule's threshold; the tests' small requests lower with any


@pytest.fixture(autouse=True)
def any_size(monkeypatch):
    """Spliced products of any number of rows are convolutions (the cache keeps no plan made otherwise)."""
    monkeypatch.setattr(splice, "MIN_ROWS", 1)
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


def test_the_lowering_knob() -> None:
    net, req = tdnn(PATTERNS[0]), request(PATTERNS[0])
    assert len(spliced_lines(compile(net, req, "fused"))) == 2
    assert not spliced_lines(compile(net, req, "plain"))
    assert compile(net, req, "plain") is not compile(net, req)


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
    net = Network(spliced(x, (-1, 0, 1)) @ Weight(np.ones((3 * D + 1, 2)), name="w"))
    req = ComputationRequest(
        inputs={"input": IndexSet.range(n=N, t=(-1, 7))}, outputs={"output": IndexSet.range(n=N, t=6)}
    )
    c = compile(net, req)
    assert len(spliced_lines(c)) == 1
    with pytest.raises(ShapeError, match=r"Dot: shapes .*test_splice.py"):
        c(net, {"input": jnp.ones((len(req.inputs["input"]), D))})
