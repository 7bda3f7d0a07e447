"""Kaldi's components that need Indexes beyond row-wise work, and the remaining ones:
statistics extraction and pooling, TimeHeightConvolution, the older 2-D Convolution and
Maxpooling, RestrictedAttention, Distribute, Composite, SpecAugmentTimeMask.

Each is checked against a numpy reference written from Kaldi's formulas here, for
computability at the edges (which output frames are computable from which input frames,
by Kaldi's IsComputable rules), for gradients (tape.backward against jax.grad of the
engine, and against jax.grad of a jnp version of the reference), and built from configs.
"""

from __future__ import annotations

import math

import jax
import jax.numpy as jnp
import numpy as np
import pytest

import symnet
from helpers.component_samples import NONSIMPLE_SAMPLES
from symnet import Input, Network, Node
from symnet._src.core.descriptor import Ref
from symnet._src.core.index import IndexSet
from symnet._src.core.initializers import Normal, Zeros
from symnet._src.engine.compiling import compile
from symnet._src.engine.graph import Graph
from symnet._src.engine.plan import Planner
from symnet._src.engine.request import ComputationRequest
from symnet.components import (
    ComponentConfigError,
    ComponentModeError,
    CompositeComponent,
    set_test_mode,
)
from symnet.errors import PlanError
from symnet.kaldi import COMPONENTS, component_options, parse_network, write_network


def build(kind, options, input, name="c"):
    return COMPONENTS[kind](name, options, input)


def frames(n, t):
    return IndexSet.range(n=n, t=t)


def computable_frames(net, input_t, probe_t, input_name="input"):
    """The output frames (sequence 0) computable when the input has frames `input_t` (a (start, stop) pair)."""
    graph = Graph(dict(net.structure.outputs))
    request = ComputationRequest(inputs={input_name: frames(1, input_t)}, outputs={"output": frames(1, probe_t)})
    planner = Planner(graph, request)
    ok = planner.computable(graph.outputs["output"], planner.wanted["output"])
    return [t for t, good in zip(range(*probe_t), ok, strict=True) if good]


def run(net, inputs, outputs, values):
    comp = compile(net, ComputationRequest(inputs=inputs, outputs=outputs))
    return comp, {k: np.asarray(v) for k, v in comp(net, values).items()}


def tn(X):
    """`[T, N, D]` frames as the engine's `[T * N, D]` matrix (rows t-major, Kaldi's order)."""
    return X.reshape(-1, X.shape[-1])


def input_grads(tape, delta):
    """Deltas of the network inputs reached by `tape.backward` (name -> array)."""
    out = {}
    for node, d in tape.backward_deltas(delta).items():
        if isinstance(node.layer, symnet.Input) or isinstance(node.layer, symnet.Identity):
            out[getattr(node.layer, "name", "input")] = d
    return out


# ----- statistics: a reference from Kaldi's formulas ------------------------------------------------------


def stats_reference(
    X,
    t0,
    out_ts,
    *,
    in_period=1,
    out_period=1,
    variance=True,
    pool_period=1,
    left=0,
    right=1,
    log_counts=0,
    stddevs=False,
    floor=1e-10,
    xp=np,
):
    """Pooling outputs (None where not computable) at `out_ts`; X is `[T, N, D]` at frames t0, t0+1, ..."""
    T = X.shape[0]
    available = range(t0, t0 + T)

    def extraction(t):
        start = (t // out_period) * out_period  # Python's // is floor, as Kaldi's rounding
        used = [u for u in range(start, start + out_period, in_period) if u in available]
        if not used:
            return None
        rows = xp.stack([X[u - t0] for u in used])
        parts = [xp.full(rows.shape[1:2] + (1,), float(len(used))), rows.sum(0)]
        if variance:
            parts.append((rows * rows).sum(0))
        return xp.concatenate(parts, axis=-1)

    def pooling(t):
        if t % pool_period:
            return None
        found = [e for e in (extraction(u) for u in range(t - left, t + right + 1, pool_period)) if e is not None]
        if not found:
            return None
        total = sum(found[1:], found[0])
        count = total[:, :1]
        stats = total[:, 1:] / count
        if stddevs:
            d = stats.shape[-1] // 2
            mean = stats[:, :d]
            var = stats[:, d:] - mean * mean
            stats = xp.concatenate([mean, xp.sqrt(xp.maximum(var, floor))], axis=-1)
        if log_counts:
            stats = xp.concatenate([xp.repeat(xp.log(count), log_counts, axis=-1), stats], axis=-1)
        return stats

    return [pooling(t) for t in out_ts]


STATS_CASES = [
    dict(in_period=1, out_period=1, variance=True, pool_period=1, left=2, right=3, log_counts=0, stddevs=True),
    dict(in_period=1, out_period=3, variance=True, pool_period=3, left=3, right=6, log_counts=2, stddevs=True),
    dict(in_period=2, out_period=4, variance=False, pool_period=4, left=0, right=8, log_counts=1, stddevs=False),
]


def _stats_net(dim, case):
    x = Input("input", dim)
    ext = Node(
        "ext",
        build(
            "StatisticsExtractionComponent",
            {
                "input-dim": dim,
                "input-period": case["in_period"],
                "output-period": case["out_period"],
                "include-variance": case["variance"],
            },
            x,
            "ext",
        ),
    )
    stats_dim = 1 + dim * (2 if case["variance"] else 1)
    pool = Node(
        "pool",
        build(
            "StatisticsPoolingComponent",
            {
                "input-dim": stats_dim,
                "input-period": case["pool_period"],
                "left-context": case["left"],
                "right-context": case["right"],
                "num-log-count-features": case["log_counts"],
                "output-stddevs": case["stddevs"],
            },
            ext,
            "pool",
        ),
    )
    return Network(pool)


@pytest.mark.parametrize("case", STATS_CASES)
def test_statistics_forward_equals_reference(case):
    dim, n, T = 3, 2, 11
    net = _stats_net(dim, case)
    X = np.random.default_rng(1).normal(size=(T, n, dim))
    probe = list(range(-6, T + 6))
    ref = stats_reference(X, 0, probe, **case)
    wanted = [t for t, r in zip(probe, ref, strict=True) if r is not None]
    assert computable_frames(net, (0, T), (-6, T + 6)) == wanted
    request = {"output": IndexSet.of([(i, t) for t in wanted for i in range(n)])}
    _, out = run(net, {"input": frames(n, T)}, request, {"input": tn(X)})
    expected = np.stack([r for r in ref if r is not None])
    expected = expected.reshape(-1, expected.shape[-1])
    np.testing.assert_allclose(out["output"], expected, rtol=1e-5, atol=1e-5)


def test_statistics_extraction_rounds_t_down_also_for_negative_t():
    # output-period 3, input-period 1: output t=-1 reads t=-3..-1 (floor(-1/3)*3 = -3), not -1..1.
    x = Input("input", 1)
    net = Network(Node("ext", build("StatisticsExtractionComponent", {"input-dim": 1, "output-period": 3}, x)))
    X = np.arange(-6.0, 3.0).reshape(-1, 1)  # frames -6..2 hold their own t
    _, out = run(
        net, {"input": IndexSet.range(n=1, t=(-6, 3))}, {"output": IndexSet.of([(0, -1), (0, 0), (0, 2)])}, {"input": X}
    )
    np.testing.assert_allclose(out["output"], [[3, -6, 14], [3, 3, 5], [3, 3, 5]])


def test_statistics_computability_at_the_edges():
    # Extraction: computable when any input of its block is (input-period 2, output-period 6: s, s+2, s+4).
    x = Input("input", 1)
    ext = Network(
        Node("e", build("StatisticsExtractionComponent", {"input-dim": 1, "input-period": 2, "output-period": 6}, x))
    )
    got = computable_frames(ext, (3, 11), (-12, 24))
    want = [t for t in range(-12, 24) if any(3 <= (t // 6) * 6 + k < 11 for k in (0, 2, 4))]
    assert got == want and got[0] == 0 and got[-1] == 11  # frames 3..10 reach blocks 0 and 6 only
    # Pooling: only multiples of input-period, and any of t-3 .. t+6 (step 3).
    pool = Network(
        Node(
            "p",
            build(
                "StatisticsPoolingComponent",
                {"input-dim": 3, "input-period": 3, "left-context": 3, "right-context": 6},
                Input("input", 3),  # a network of mismatched dims is refused where it is built
            ),
        )
    )
    got = computable_frames(pool, (4, 8), (-12, 24))
    assert got == [t for t in range(-12, 24) if t % 3 == 0 and any(4 <= u < 8 for u in (t - 3, t, t + 3, t + 6))]
    assert got == [0, 3, 6, 9]
    with pytest.raises(PlanError):  # frames that are not multiples of input-period are never computable
        compile(pool, ComputationRequest(inputs={"input": frames(1, 10)}, outputs={"output": IndexSet.of([(0, 4)])}))


XVECTOR = """
input-node name=input dim=3
component name=tdnn1 type=AffineComponent input-dim=9 output-dim=4
component-node name=tdnn1 component=tdnn1 input=Append(Offset(input, -1), input, Offset(input, 1))
component name=stats-extraction type=StatisticsExtractionComponent input-dim=4 input-period=1 output-period=2
component-node name=stats-extraction component=stats-extraction input=tdnn1
component name=stats-pooling type=StatisticsPoolingComponent input-dim=9 input-period=2 left-context=0 \
right-context=10 num-log-count-features=1 output-stddevs=true
component-node name=stats-pooling component=stats-pooling input=stats-extraction
component name=embedding type=AffineComponent input-dim=9 output-dim=2
component-node name=embedding component=embedding input=Round(stats-pooling, 2)
output-node name=output input=embedding
"""

XVECTOR_STATS = dict(
    in_period=1, out_period=2, variance=True, pool_period=2, left=0, right=10, log_counts=1, stddevs=True
)


def _xvector_reference(params, X, t0, out_ts, xp=np):
    """tdnn1 at frames t0+1 .. t0+T-2 of X, statistics, Round, embedding."""
    W, b = params["tdnn1.linear_params"], params["tdnn1.bias_params"]
    spliced = xp.concatenate([X[:-2], X[1:-1], X[2:]], axis=-1)
    H = spliced @ W.T + b  # frames t0+1 .. t0+T-2
    pooled = stats_reference(H, t0 + 1, [(t // 2) * 2 for t in out_ts], xp=xp, **XVECTOR_STATS)
    E, c = params["embedding.linear_params"], params["embedding.bias_params"]
    return xp.stack([p @ E.T + c for p in pooled])  # [len(out_ts), N, 2]


def test_xvector_config_request_and_dense_compute():
    kn = parse_network(XVECTOR, seed=4)
    net = kn
    assert net.structure.outputs[0][0] == "output"
    params = {k: np.asarray(v, np.float64) for k, v in net.params.items()}
    rng = np.random.default_rng(2)
    n, T = 2, 17
    X = rng.normal(size=(T, n, 3))
    # nnet3-xvector-compute style: every input frame, the output at t = 0 only.
    _, out = run(net, {"input": frames(n, T)}, {"output": frames(n, 1)}, {"input": tn(X)})
    np.testing.assert_allclose(out["output"], _xvector_reference(params, X, 0, [0])[0], rtol=1e-4, atol=1e-4)
    # Dense compute. The context is (0, 1), as Kaldi's probe over every input start modulo the modulus (2)
    # finds it: pooling needs only some computable frame in its window, but from an odd start the last
    # frame's block {T - 1, T} has no frame of tdnn1 unless one more input frame is there. nnet3-compute then
    # repeats the last frame once, so the reference sees that padded frame too.
    assert net.context() == (0, 1)
    X = X[:16]
    dense = np.asarray(net.compute(np.transpose(X, (1, 0, 2))))  # [N, T, 2]
    padded = np.concatenate([X, X[-1:]], axis=0)
    want = _xvector_reference(params, padded, 0, list(range(16)))  # [T, N, 2]
    np.testing.assert_allclose(np.transpose(dense, (1, 0, 2)), want, rtol=1e-4, atol=1e-4)
    # Written back and read again: the same network.
    again = parse_network(write_network(kn), seed=4)
    assert again.structure == net.structure


def test_xvector_gradients_tape_engine_and_reference():
    with jax.enable_x64(True):
        net = parse_network(XVECTOR, seed=5)
        net = net.replace(params={k: jnp.asarray(v, jnp.float64) for k, v in net.params.items()})
        rng = np.random.default_rng(3)
        n, T = 2, 14
        X = rng.normal(size=(T, n, 3))
        out_ts = [0, 2, 5]
        req = ComputationRequest(
            inputs={"input": frames(n, T)}, outputs={"output": IndexSet.of([(i, t) for t in out_ts for i in range(n)])}
        )
        comp = compile(net, req)
        delta = rng.normal(size=(len(out_ts) * n, 2))
        inputs = {"input": jnp.asarray(tn(X))}
        tape_grads, d_in = jax.jit(
            lambda i: (lambda tape: (tape.backward(delta), input_grads(tape, delta)["input"]))(
                comp.forward(net, i)["output"]
            )
        )(inputs)
        autodiff = compile(net, req, gradient="jax")  # JAX's reverse mode of the lowered program, not the Tape's
        engine_grads = jax.grad(lambda p: jnp.sum(autodiff(net.replace(params=p), inputs)["output"] * delta))(
            net.params
        )
        ref_grads = jax.jit(
            jax.grad(lambda p: jnp.sum(_xvector_reference(p, jnp.asarray(X), 0, out_ts, xp=jnp).reshape(-1, 2) * delta))
        )(dict(net.params))
        for name in net.params:
            np.testing.assert_allclose(tape_grads[name], engine_grads[name], rtol=1e-9, atol=1e-12, err_msg=name)
            np.testing.assert_allclose(tape_grads[name], ref_grads[name], rtol=1e-7, atol=1e-10, err_msg=name)
            assert np.abs(np.asarray(tape_grads[name])).max() > 0
        # Input deltas too (need_input_derivatives: the tape reaches the input node).
        ref_in = jax.jit(
            jax.grad(
                lambda x: jnp.sum(
                    _xvector_reference(net.params, x.reshape(T, n, 3), 0, out_ts, xp=jnp).reshape(-1, 2) * delta
                )
            )
        )(jnp.asarray(tn(X)))
        np.testing.assert_allclose(d_in, ref_in, rtol=1e-7, atol=1e-10)


def test_statistics_pooling_variance_floor_passes_the_gradient_through():
    # Kaldi's backprop ignores the floor: d stddev / d E[x^2] = 0.5 / stddev even where the variance is floored.
    with jax.enable_x64(True):
        x = Input("input", 3)
        pool = build(
            "StatisticsPoolingComponent",
            {"input-dim": 3, "left-context": 0, "right-context": 1, "output-stddevs": True, "variance-floor": 0.25},
            x,
        )
        net = Network(Node("p", pool))
        X = jnp.asarray([[1.0, 2.0, 4.0], [1.0, 2.0, 4.0]])  # count 2, mean 2, E[x^2] 4: variance 0 -> 0.25
        req = ComputationRequest(inputs={"input": frames(1, 2)}, outputs={"output": IndexSet.of([(0, 0)])})
        comp = compile(net, req)
        out = comp(net, {"input": X})["output"]
        np.testing.assert_allclose(out, [[2.0, 0.5]])
        g = jax.grad(lambda v: comp(net, {"input": v})["output"][0, 1])(X)
        # d std / d var = 0.5 / 0.5 (not 0, as a floor would give); d var / d sum x^2 = 1 / count,
        # d var / d sum x = -2 mean / count; the count column gets nothing.
        np.testing.assert_allclose(g, [[0.0, -2.0, 0.5], [0.0, -2.0, 0.5]])


# ----- TimeHeightConvolution ---------------------------------------------------------------------


def time_height_reference(
    params, X, t0, out_ts, *, nfi, height_in, height_out, subsample, time_offsets, height_offsets, required, xp=np
):
    W, b = params["conv.linear_params"], params["conv.bias_params"]
    T, N = X.shape[:2]
    nfo = W.shape[0]
    offsets = [(t, h) for t in time_offsets for h in height_offsets]
    out = []
    for t in out_ts:
        assert all(t0 <= t + o < t0 + T for o in required)
        rows = []
        for j in range(height_out):
            acc = xp.zeros((N, nfo)) + b
            for i, (to, ho) in enumerate(offsets):
                h = j * subsample + ho
                if not (0 <= h < height_in and t0 <= t + to < t0 + T):
                    continue  # height padding, or a missing optional time offset: zeros
                pixel = X[t + to - t0][:, h * nfi : (h + 1) * nfi]
                acc = acc + pixel @ W[:, i * nfi : (i + 1) * nfi].T
            rows.append(acc)
        out.append(xp.concatenate(rows, axis=-1))
    return xp.stack(out)


THC = dict(
    nfi=2, height_in=5, height_out=3, subsample=2, time_offsets=(-1, 0, 2), height_offsets=(-1, 0, 1), required=(0,)
)
THC_CONFIG = (
    "num-filters-in=2 num-filters-out=3 height-in=5 height-out=3 height-subsample-out=2 "
    "height-offsets=-1,0,1 time-offsets=-1,0,2 required-time-offsets=0 bias-stddev=0.5"
)


def _thc_net(config=THC_CONFIG, seed=6):
    text = (
        f"input-node name=input dim=10\ncomponent name=conv type=TimeHeightConvolutionComponent {config}\n"
        "component-node name=conv component=conv input=input\noutput-node name=output input=conv\n"
    )
    return parse_network(text, seed=seed)


def test_time_height_convolution_equals_reference_with_time_and_height_padding():
    kn = _thc_net()
    net = kn
    conv = net.structure.outputs[0][1].arg
    assert (conv.input_dim, conv.output_dim, conv.offsets[:2]) == (10, 9, ((-1, -1), (-1, 0)))
    assert conv.linear_params.init == Normal((3, 18), 1 / math.sqrt(18), 0.0)
    assert conv.bias_params.init == Normal((3,), 0.5, 0.0)
    assert conv.option("rank-in") == 10 and conv.option("rank-out") == 2 and conv.option("max-memory-mb") == 200.0
    params = {k: np.asarray(v, np.float64) for k, v in net.params.items()}
    n, T = 2, 8
    X = np.random.default_rng(7).normal(size=(T, n, 10))
    # Only time offset 0 is required: every frame with input is computable; -1 and 2 read zeros at the edges.
    assert computable_frames(net, (0, T), (-4, T + 4)) == list(range(T))
    comp, out = run(net, {"input": frames(n, T)}, {"output": frames(n, T)}, {"input": tn(X)})
    want = time_height_reference(params, X, 0, list(range(T)), **THC)
    # A regular request moves rows by slices and zero blocks only (the expansion: Offsets and IfDefined).
    kinds = {m.kind for step in comp.steps for m in getattr(step, "maps", ()) if m is not None}
    assert kinds and "gather" not in kinds
    np.testing.assert_allclose(out["output"], want.reshape(-1, 9), rtol=1e-5, atol=1e-5)
    again = parse_network(write_network(kn), seed=6)
    assert again.structure == net.structure


def test_time_height_convolution_required_offsets_set_the_context():
    net = _thc_net(THC_CONFIG.replace("required-time-offsets=0", "required-time-offsets=-1,0"))
    assert computable_frames(net, (0, 8), (-4, 12)) == list(range(1, 8))
    full = _thc_net(THC_CONFIG.replace(" required-time-offsets=0", ""))
    assert full.context() == (1, 2)
    params = {k: np.asarray(v, np.float64) for k, v in full.params.items()}
    X = np.random.default_rng(8).normal(size=(2, 9, 10))
    y = np.asarray(full.compute(X, mode="valid"))  # [N, 6, 9]
    want = time_height_reference(
        params, np.transpose(X, (1, 0, 2)), 0, list(range(1, 7)), **{**THC, "required": (-1, 0, 2)}
    )
    np.testing.assert_allclose(np.transpose(y, (1, 0, 2)), want, rtol=1e-5, atol=1e-5)


def test_time_height_convolution_gradients():
    with jax.enable_x64(True):
        net = _thc_net()
        net = net.replace(params={k: jnp.asarray(v, jnp.float64) for k, v in net.params.items()})
        n, T = 2, 6
        rng = np.random.default_rng(9)
        X = rng.normal(size=(T, n, 10))
        req = ComputationRequest(inputs={"input": frames(n, T)}, outputs={"output": frames(n, T)})
        comp, autodiff = compile(net, req), compile(net, req, gradient="jax")
        inputs = {"input": jnp.asarray(tn(X))}
        delta = rng.normal(size=(T * n, 9))
        tape_grads = comp.forward(net, inputs)["output"].backward(delta)
        engine = jax.grad(lambda p: jnp.sum(autodiff(net.replace(params=p), inputs)["output"] * delta))(net.params)
        ref = jax.jit(
            jax.grad(
                lambda p: jnp.sum(
                    time_height_reference(p, jnp.asarray(X), 0, list(range(T)), xp=jnp, **THC).reshape(-1, 9) * delta
                )
            )
        )(dict(net.params))
        for name in net.params:
            np.testing.assert_allclose(tape_grads[name], engine[name], rtol=1e-9, atol=1e-12)
            np.testing.assert_allclose(tape_grads[name], ref[name], rtol=1e-9, atol=1e-12)


def test_time_height_convolution_init_unit_and_bad_options():
    x = Input("input", 6)
    base = {
        "num-filters-in": 2,
        "num-filters-out": 2,
        "height-in": 3,
        "height-out": 3,
        "height-offsets": "-1,0,1",
        "time-offsets": "0,1",
    }
    unit = build("TimeHeightConvolutionComponent", {**base, "init-unit": "true"}, x)
    W = np.asarray(unit.linear_params.init.array)
    assert W.shape == (2, 12) and np.array_equal(W[:, 2:4], np.eye(2)) and W.sum() == 2.0  # (0, 0) is offset 1
    assert unit.bias_params.init == Zeros((2,))
    assert unit.required_time_offsets == (0, 1)
    for options, option in [
        ({**base, "time-offsets": "1,0"}, "time-offsets"),
        ({**base, "height-offsets": ""}, "height-offsets"),
        ({**base, "required-time-offsets": "2"}, "required-time-offsets"),
        ({**base, "height-offsets": "-4,0"}, "height-offsets"),  # -4 reads outside at every output height
        ({**base, "height-out": 4, "height-offsets": "0"}, "height-out"),  # output height 3 reads nothing
        ({**base, "num-filters-out": 3, "init-unit": "true"}, "init-unit"),
        ({**base, "time-offsets": "1,2", "init-unit": "true"}, "init-unit"),
        ({k: v for k, v in base.items() if k != "height-in"}, "height-in"),
        ({**base, "rank": 3}, "rank"),
    ]:
        with pytest.raises(ComponentConfigError) as info:
            build("TimeHeightConvolutionComponent", options, x)
        assert info.value.option == option, (options, info.value)


# ----- the 2-D ConvolutionComponent and MaxpoolingComponent ----------------------------------------------


def convolution_reference(X, W, b, *, xd, yd, zd, fx, fy, sx, sy, order):
    def col(x, y, z):
        return (x * yd + y) * zd + z if order == "zyx" else (x * zd + z) * yd + y

    out = []
    for xs in range(0, xd - fx + 1, sx):
        for ys in range(0, yd - fy + 1, sy):
            patch = np.stack(
                [X[:, col(xs + i, ys + j, k)] for i in range(fx) for j in range(fy) for k in range(zd)], axis=-1
            )
            out.append(patch @ W.T + b)
    return np.concatenate(out, axis=-1)


@pytest.mark.parametrize("order", ["zyx", "yzx"])
def test_convolution_component_equals_reference(order):
    x = symnet.Identity()
    options = {
        "input-x-dim": 4,
        "input-y-dim": 5,
        "input-z-dim": 2,
        "filt-x-dim": 2,
        "filt-y-dim": 3,
        "filt-x-step": 2,
        "filt-y-step": 1,
        "num-filters": 3,
        "input-vectorization-order": order,
    }
    conv = build("ConvolutionComponent", options, x, "conv")
    assert (conv.input_dim, conv.output_dim) == (40, 2 * 3 * 3)
    assert conv.filter_params.init == Normal((3, 12), 1 / math.sqrt(12), 0.0)
    assert conv.bias_params.init == Normal((3,), 1.0, 0.0)
    assert conv.filter_params.name == "conv.filter_params"
    net = Network(Node("conv", conv), seed=1)
    X = np.random.default_rng(10).normal(size=(7, 40)).astype(np.float32)
    got = np.asarray(net(X))
    W, b = np.asarray(net.params["conv.filter_params"]), np.asarray(net.params["conv.bias_params"])
    want = convolution_reference(X, W, b, xd=4, yd=5, zd=2, fx=2, fy=3, sx=2, sy=1, order=order)
    np.testing.assert_allclose(got, want, rtol=1e-5, atol=1e-5)
    assert dict(component_options(conv)) == {
        k: str(v) for k, v in options.items() if k != "input-vectorization-order" or v != "zyx"
    }


def test_convolution_component_matrix_and_bad_options(tmp_path):
    x = Input("input", 8)
    base = {
        "input-x-dim": 2,
        "input-y-dim": 2,
        "input-z-dim": 2,
        "filt-x-dim": 1,
        "filt-y-dim": 2,
        "filt-x-step": 1,
        "filt-y-step": 1,
    }
    mat = np.arange(10.0).reshape(2, 5)
    path = tmp_path / "m.npy"
    np.save(path, mat)
    conv = build("ConvolutionComponent", {**base, "matrix": str(path)}, x)
    np.testing.assert_array_equal(conv.filter_params.init.array, mat[:, :4])
    np.testing.assert_array_equal(conv.bias_params.init.array, mat[:, 4])
    for options, option in [
        ({**base, "num-filters": 2, "filt-y-step": 3, "filt-y-dim": 1}, "filt-y-dim"),  # (2 - 1) % 3 != 0
        ({**base, "num-filters": 2, "input-vectorization-order": "xyz"}, "input-vectorization-order"),
        (base, "num-filters"),
        ({**base, "num-filters": 2, "param-stddev": -1}, "param-stddev"),
        ({**base, "matrix": str(path), "num-filters": 2}, "num-filters"),  # unused with matrix=
        ({k: v for k, v in base.items() if k != "filt-x-step"}, "filt-x-step"),
    ]:
        with pytest.raises(ComponentConfigError) as info:
            build("ConvolutionComponent", options, x)
        assert info.value.option == option, (options, info.value)


def maxpool_reference(X, *, dims, sizes, steps):
    (xd, yd, zd), (px, py, pz), (sx, sy, sz) = dims, sizes, steps
    out = []
    for xp_ in range(0, xd - px + 1, sx):
        for yp in range(0, yd - py + 1, sy):
            for zp in range(0, zd - pz + 1, sz):
                cols = [
                    ((xp_ + i) * yd + yp + j) * zd + zp + k for i in range(px) for j in range(py) for k in range(pz)
                ]
                out.append(X[:, cols].max(axis=-1))
    return np.stack(out, axis=-1)


def test_maxpooling_component_equals_reference_and_passes_ties_like_kaldi():
    x = symnet.Identity()
    options = {
        "input-x-dim": 4,
        "input-y-dim": 3,
        "input-z-dim": 4,
        "pool-x-size": 2,
        "pool-y-size": 1,
        "pool-z-size": 2,
        "pool-x-step": 2,
        "pool-y-step": 1,
        "pool-z-step": 1,
    }
    pool = build("MaxpoolingComponent", options, x)
    assert (pool.input_dim, pool.output_dim) == (48, 2 * 3 * 3)
    net = Network(Node("p", pool))
    X = np.random.default_rng(11).normal(size=(5, 48))
    np.testing.assert_allclose(
        np.asarray(net(X)), maxpool_reference(X, dims=(4, 3, 4), sizes=(2, 1, 2), steps=(2, 1, 1)), rtol=1e-6
    )
    # Ties: Kaldi gives the delta to every input equal to the maximum (overlapping pools add up).
    small = Network(
        Node(
            "p",
            build(
                "MaxpoolingComponent",
                {
                    "input-x-dim": 1,
                    "input-y-dim": 1,
                    "input-z-dim": 3,
                    "pool-x-size": 1,
                    "pool-y-size": 1,
                    "pool-z-size": 2,
                    "pool-x-step": 1,
                    "pool-y-step": 1,
                    "pool-z-step": 1,
                },
                symnet.Identity(),
            ),
        )
    )
    g = jax.grad(lambda v: jnp.sum(small(v) * jnp.asarray([[1.0, 10.0]])))(jnp.asarray([[2.0, 2.0, 2.0]]))
    np.testing.assert_allclose(g, [[1.0, 11.0, 10.0]])
    tape = small.forward(jnp.asarray([[2.0, 2.0, 1.0]]))
    d = input_grads(tape, jnp.asarray([[1.0, 10.0]]))["input"]
    np.testing.assert_allclose(d, [[1.0, 11.0, 0.0]])
    for bad, option in [
        ({**options, "pool-x-step": 3}, "pool-x-step"),
        ({**options, "pool-z-size": 5}, "pool-z-size"),
        ({**options, "pool-y-step": 0}, "pool-y-step"),
    ]:
        with pytest.raises(ComponentConfigError) as info:
            build("MaxpoolingComponent", bad, x)
        assert info.value.option == option


# ----- RestrictedAttention --------------------------------------------------------------------------


def attention_reference(X, t0, out_ts, *, heads, kd, vd, left, right, stride, output_context, key_scale, xp=np):
    C = left + 1 + right
    hd = 2 * kd + vd + C
    T, N = X.shape[:2]
    out_ts = np.asarray(out_ts)
    pad = (left + right) * stride
    padded = xp.concatenate([xp.zeros((pad, N, X.shape[2])), X, xp.zeros((pad, N, X.shape[2]))])  # zero padding
    ctx = padded[out_ts[:, None] - t0 + pad + stride * np.arange(-left, right + 1)[None, :]]  # [t, C, N, D]
    ctx = ctx.reshape(ctx.shape[:3] + (heads, hd))
    keys, values = ctx[..., :kd], ctx[..., kd : kd + vd]  # [t, C, N, H, .]
    q = X[out_ts - t0].reshape(len(out_ts), N, heads, hd)[..., kd + vd :]  # [t, N, H, kd + C]
    b = key_scale * (q[:, None, ..., :kd] * keys).sum(-1)  # [t, C, N, H]
    b = xp.moveaxis(b, 1, -1) + q[..., kd:]  # [t, N, H, C]
    c = xp.exp(b - b.max(-1, keepdims=True))
    c = c / c.sum(-1, keepdims=True)
    v = (xp.moveaxis(c, -1, 1)[..., None] * values).sum(1)  # [t, N, H, vd]
    per_head = xp.concatenate([v, c], axis=-1) if output_context else v
    return per_head.reshape(len(out_ts), N, -1)


def test_restricted_attention_equals_reference_and_computability():
    options = {
        "num-heads": 2,
        "key-dim": 2,
        "value-dim": 3,
        "num-left-inputs": 2,
        "num-right-inputs": 1,
        "time-stride": 2,
        "num-left-inputs-required": 1,
        "num-right-inputs-required": 0,
    }
    x = Input("input", 22)
    att = build("RestrictedAttentionComponent", options, x, "att")
    assert (att.input_dim, att.output_dim, att.key_scale, att.output_context) == (22, 14, 1 / math.sqrt(2), True)
    net = Network(Node("att", att))
    T, n = 12, 2
    # Required: t - 2 and t; optional: t - 4 and t + 2 (zeros where missing).
    assert computable_frames(net, (0, T), (-6, T + 6)) == list(range(2, T))
    X = np.random.default_rng(12).normal(size=(T, n, 22))
    _, out = run(net, {"input": frames(n, T)}, {"output": frames(n, (2, T))}, {"input": tn(X)})
    want = attention_reference(
        X,
        0,
        list(range(2, T)),
        heads=2,
        kd=2,
        vd=3,
        left=2,
        right=1,
        stride=2,
        output_context=True,
        key_scale=1 / math.sqrt(2),
    )
    np.testing.assert_allclose(out["output"], want.reshape(-1, 14), rtol=1e-5, atol=1e-5)
    with jax.enable_x64(True):
        comp = compile(net, ComputationRequest(inputs={"input": frames(n, T)}, outputs={"output": frames(n, (2, T))}))
        delta = np.random.default_rng(13).normal(size=((T - 2) * n, 14))
        Xj = jnp.asarray(tn(X))
        g = jax.grad(lambda v: jnp.sum(comp(net, {"input": v})["output"] * delta))(Xj)
        d = jax.jit(lambda v: input_grads(comp.forward(net, {"input": v})["output"], delta)["input"])(Xj)
        r = jax.jit(
            jax.grad(
                lambda v: jnp.sum(
                    attention_reference(
                        v.reshape(T, n, 22),
                        0,
                        list(range(2, T)),
                        heads=2,
                        kd=2,
                        vd=3,
                        left=2,
                        right=1,
                        stride=2,
                        output_context=True,
                        key_scale=1 / math.sqrt(2),
                        xp=jnp,
                    ).reshape(-1, 14)
                    * delta
                )
            )
        )(Xj)
        np.testing.assert_allclose(d, g, rtol=1e-9, atol=1e-12)
        np.testing.assert_allclose(d, r, rtol=1e-9, atol=1e-12)


def test_restricted_attention_defaults_and_bad_options():
    x = Input("input", 8)
    att = build(
        "RestrictedAttentionComponent",
        {
            "key-dim": 1,
            "value-dim": 2,
            "num-left-inputs": 1,
            "num-right-inputs": 2,
            "output-context": "false",
            "key-scale": 0.5,
        },
        x,
    )
    assert (att.num_left_inputs_required, att.num_right_inputs_required, att.time_stride, att.num_heads) == (1, 2, 1, 1)
    assert (att.input_dim, att.output_dim) == (1 * (2 + 2 + 4), 2)
    net = Network(Node("a", att))
    assert computable_frames(net, (0, 10), (-3, 13)) == list(range(1, 8))
    base = {"key-dim": 2, "value-dim": 2, "num-left-inputs": 1, "num-right-inputs": 1}
    for options, option in [
        ({**base, "key-scale": 2.0}, "key-scale"),
        ({**base, "num-left-inputs-required": 2}, "num-left-inputs-required"),
        ({**base, "num-left-inputs": 0, "num-right-inputs": 0}, "num-right-inputs"),
        ({**base, "time-stride": 0}, "time-stride"),
        ({k: v for k, v in base.items() if k != "value-dim"}, "value-dim"),
    ]:
        with pytest.raises(ComponentConfigError) as info:
            build("RestrictedAttentionComponent", options, x)
        assert info.value.option == option


# ----- Distribute, Composite, SpecAugmentTimeMask ---------------------------------------------------------


def test_distribute_maps_x_with_floor_division():
    x = Input("input", 6)
    net = Network(Node("d", build("DistributeComponent", {"input-dim": 6, "output-dim": 2}, x)))
    ins = [(n, t, xx) for t in range(3) for n in range(2) for xx in (-1, 0)]
    outs = [(n, t, xx) for t in range(3) for n in range(2) for xx in range(-3, 3)]
    X = np.random.default_rng(14).normal(size=(len(ins), 6))
    comp, out = run(net, {"input": IndexSet.of(ins)}, {"output": IndexSet.of(outs)}, {"input": X})
    row = {i: X[k] for k, i in enumerate(ins)}
    want = [row[(n, t, xx // 3)][(xx % 3) * 2 : (xx % 3) * 2 + 2] for n, t, xx in outs]
    np.testing.assert_allclose(out["output"], want, rtol=1e-6)
    # Its backprop puts each output's delta back into its block (every block is read once here).
    delta = np.random.default_rng(15).normal(size=out["output"].shape)
    d = input_grads(comp.forward(net, {"input": jnp.asarray(X)})["output"], delta)["input"]
    back = np.zeros_like(X)
    for k, (n, t, xx) in enumerate(outs):
        back[ins.index((n, t, xx // 3)), (xx % 3) * 2 : (xx % 3) * 2 + 2] += delta[k]
    np.testing.assert_allclose(d, back, rtol=1e-6)
    # x = 3 would read x' = 1, which the input does not have.
    with pytest.raises(PlanError):
        compile(
            net, ComputationRequest(inputs={"input": IndexSet.of(ins)}, outputs={"output": IndexSet.of([(0, 0, 3)])})
        )
    with pytest.raises(ComponentConfigError) as info:
        build("DistributeComponent", {"input-dim": 6, "output-dim": 4}, x)
    assert info.value.option == "output-dim"


COMPOSITE = (
    "input-node name=input dim=3\n"
    "component name=comp type=CompositeComponent max-rows-process=64 num-components=3 "
    "component1='type=AffineComponent input-dim=3 output-dim=4' component2='type=RectifiedLinearComponent dim=4' "
    "component3='type=NaturalGradientAffineComponent input-dim=4 output-dim=2 bias-stddev=0'\n"
    """
component-node name=comp component=comp input=Append(Offset(input, -1), input)
"""
)


def test_composite_component_from_config():
    text = COMPOSITE.replace("input=Append(Offset(input, -1), input)", "input=Offset(input, -1)")
    kn = parse_network(text + "output-node name=output input=comp\n", seed=2)
    net = kn
    comp = net.structure.outputs[0][1].arg
    assert isinstance(comp, CompositeComponent) and comp.max_rows_process == 64
    assert (comp.input_dim, comp.output_dim) == (3, 2)
    assert sorted(net.params) == [
        "comp.component1.bias_params",
        "comp.component1.linear_params",
        "comp.component3.bias_params",
        "comp.component3.linear_params",
    ]
    assert comp.parts[2].bias_params.init == Zeros((2,))
    p = {k: np.asarray(v, np.float64) for k, v in net.params.items()}
    X = np.random.default_rng(16).normal(size=(2, 6, 3))
    y = np.asarray(net.compute(X, mode="valid"))  # [2, 5, 2]: frame t reads t - 1
    h = np.maximum(X[:, :-1] @ p["comp.component1.linear_params"].T + p["comp.component1.bias_params"], 0.0)
    want = h @ p["comp.component3.linear_params"].T + p["comp.component3.bias_params"]
    np.testing.assert_allclose(y, want, rtol=1e-5, atol=1e-5)
    options = dict(component_options(comp))
    assert options == {
        "max-rows-process": "64",
        "num-components": "3",
        "component1": "type=AffineComponent input-dim=3 output-dim=4",
        "component2": "type=RectifiedLinearComponent dim=4",
        "component3": "type=NaturalGradientAffineComponent input-dim=4 output-dim=2 bias-stddev=0",
    }
    with pytest.raises(Exception, match="has input-dim 3"):  # the component-node's input has dim 6
        parse_network(COMPOSITE + "output-node name=output input=comp\n")


def test_composite_network_writes_and_reads_back():
    text = COMPOSITE.replace("input=Append(Offset(input, -1), input)", "input=input")
    kn = parse_network(text + "output-node name=output input=comp\n", seed=2)
    assert parse_network(write_network(kn), seed=2).structure == kn.structure


@pytest.mark.parametrize(
    "options, option",
    [
        ({"num-components": 1}, "component1"),
        ({"num-components": 0, "component1": "type=RectifiedLinearComponent dim=2"}, "num-components"),
        (
            {
                "num-components": 2,
                "component1": "type=RectifiedLinearComponent dim=2",
                "component2": "type=SigmoidComponent dim=3",
            },
            "component2",
        ),
        ({"num-components": 1, "component1": "type=CompositeComponent num-components=1"}, "component1"),
        (
            {"num-components": 1, "component1": "type=TdnnComponent input-dim=2 output-dim=2 time-offsets=0,1"},
            "component1",
        ),
        ({"num-components": 1, "component1": "type=RectifiedLinearComponent dim=2 bogus=1"}, "component1"),
        ({"num-components": 1, "component1": "dim=2"}, "component1"),
        (
            {"num-components": 1, "component1": "type=RectifiedLinearComponent dim=2", "component2": "type=x"},
            "component2",
        ),
        (
            {"num-components": 1, "component1": "type=RectifiedLinearComponent dim=2", "learning-rate": 0.1},
            "learning-rate",
        ),
    ],
)
def test_composite_component_bad_options(options, option):
    with pytest.raises(ComponentConfigError) as info:
        build("CompositeComponent", options, Input("input", 2))
    assert info.value.option == option, info.value


def test_spec_augment_time_mask_is_identity_in_test_mode():
    x = Input("input", 4)
    sa = build("SpecAugmentTimeMaskComponent", {"dim": 4, "zeroed-proportion": 0.2, "time-mask-max-frames": 5}, x)
    assert (sa.input_dim, sa.output_dim, sa.zeroed_proportion, sa.time_mask_max_frames, sa.test_mode) == (
        4,
        4,
        0.2,
        5,
        False,
    )
    assert build("SpecAugmentTimeMaskComponent", {"dim": 4}, x).time_mask_max_frames == 10
    net = Network(Node("sa", sa))
    X = np.random.default_rng(17).normal(size=(2, 5, 4))
    with pytest.raises(ComponentModeError):
        net.compute(X, test_mode=False)
    np.testing.assert_allclose(np.asarray(set_test_mode(net).compute(X)), X, rtol=1e-6)
    np.testing.assert_allclose(np.asarray(net.compute(X)), X, rtol=1e-6)  # compute's default: test mode
    off = Network(Node("sa", build("SpecAugmentTimeMaskComponent", {"dim": 4, "zeroed-proportion": 0}, x)))
    np.testing.assert_allclose(np.asarray(off.compute(X)), X, rtol=1e-6)
    for options, option in [
        ({"dim": 4, "time-mask-max-frames": 1}, "time-mask-max-frames"),
        ({"dim": 4, "test-mode": "true"}, "test-mode"),
        ({}, "dim"),
    ]:
        with pytest.raises(ComponentConfigError) as info:
            build("SpecAugmentTimeMaskComponent", options, x)
        assert info.value.option == option


# ----- configs: every type builds, checks its options and writes back -----------------------------------
# (one config per type in helpers/component_samples.py)


@pytest.mark.parametrize("kind", sorted(NONSIMPLE_SAMPLES))
def test_component_config_round_trip(kind):
    options, in_dim, out_dim = NONSIMPLE_SAMPLES[kind]
    placeholder = Ref("x")
    component = COMPONENTS[kind]("c1", options, placeholder)
    assert (component.input_dim, component.output_dim, component.kaldi_type) == (in_dim, out_dim, kind)
    written = component_options(component)
    assert COMPONENTS[kind]("c1", dict(written), placeholder) == component
    assert len(written) <= len(options) + 2
    # Through parse_network: the component-node's input must have the component's input-dim.
    line = " ".join(f"{k}='{v}'" if " " in str(v) else f"{k}={v}" for k, v in options.items())
    text = (
        f"input-node name=input dim={in_dim}\ncomponent name=c1 type={kind} {line}\n"
        "component-node name=c1 component=c1 input=input\noutput-node name=output input=c1\n"
    )
    kn = parse_network(text)
    assert kn.structure.outputs[0][1].arg == COMPONENTS[kind]("c1", options, Input("input", in_dim))
    if kind != "CompositeComponent":  # see test_composite_network_writes_and_reads_back
        assert parse_network(write_network(kn)).structure == kn.structure
    with pytest.raises(Exception, match=f"input-dim {in_dim}"):
        parse_network(text.replace(f"dim={in_dim}\n", f"dim={in_dim + 1}\n", 1))


@pytest.mark.parametrize(
    "kind, options, option",
    [
        ("StatisticsExtractionComponent", {"input-dim": 2, "input-period": 2, "output-period": 3}, "output-period"),
        ("StatisticsExtractionComponent", {"input-dim": 0}, "input-dim"),
        ("StatisticsExtractionComponent", {"input-dim": 2, "bogus": 1}, "bogus"),
        ("StatisticsPoolingComponent", {"input-dim": 5, "right-context": 2}, "left-context"),
        ("StatisticsPoolingComponent", {"input-dim": 5, "left-context": 0, "right-context": 0}, "right-context"),
        (
            "StatisticsPoolingComponent",
            {"input-dim": 5, "input-period": 2, "left-context": 1, "right-context": 2},
            "left-context",
        ),
        (
            "StatisticsPoolingComponent",
            {"input-dim": 4, "left-context": 1, "right-context": 1, "output-stddevs": "true"},
            "input-dim",
        ),
        (
            "StatisticsPoolingComponent",
            {"input-dim": 5, "left-context": 1, "right-context": 1, "variance-floor": 1.0},
            "variance-floor",
        ),
        (
            "StatisticsPoolingComponent",
            {"input-dim": 5, "left-context": 1, "right-context": 1, "num-log-count-features": -1},
            "num-log-count-features",
        ),
        ("DistributeComponent", {"input-dim": 6}, "output-dim"),
    ],
)
def test_bad_options_name_the_option(kind, options, option):
    with pytest.raises(ComponentConfigError) as info:
        build(kind, options, Input("input", 2))
    assert info.value.option == option, info.value
