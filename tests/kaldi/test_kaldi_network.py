"""Networks from Kaldi nnet3 configs and back: building, dims, shared components, recurrences,
TdnnComponent, writing, merging, and config errors with file, line and column."""

from __future__ import annotations

import warnings

import numpy as np
import pytest

from helpers import EXAMPLES
from helpers.component_samples import NONSIMPLE_SAMPLES, SAMPLES
from symnet import Input, Network, Node
from symnet._src.core.descriptor import Append, DimRange, IfDefined, Offset, Ref
from symnet._src.core.layer import Identity
from symnet.components import ComponentConfigError, TdnnComponent, set_test_mode
from symnet.errors import ConfigError, GraphError
from symnet.kaldi import (
    COMPONENTS,
    ConfigWriteError,
    KaldiNetwork,
    component_options,
    network_config_lines,
    parse_config,
    parse_network,
    read_network,
    write_network,
)

DOC = EXAMPLES / "kaldi-doc-example.config"
TDNNF = EXAMPLES / "tdnnf.config"
LSTM = EXAMPLES / "lstm.config"


def _np(x):
    return np.asarray(x, dtype=np.float64)


def _logsoftmax(z):
    z = z - z.max(axis=-1, keepdims=True)
    return z - np.log(np.exp(z).sum(axis=-1, keepdims=True))


def _sigmoid(z):
    return 1.0 / (1.0 + np.exp(-z))


def _frames(rng, n, t, d):
    return rng.standard_normal((n, t, d)).astype(np.float32)


@pytest.fixture(scope="module")
def doc():
    return read_network(DOC, seed=3)


@pytest.fixture(scope="module")
def tdnnf():
    return read_network(TDNNF, seed=4)


@pytest.fixture(scope="module")
def lstm():
    return read_network(LSTM, seed=5)


# ----- the Kaldi documentation example --------------------------------------------------------


def test_doc_example_structure(doc):
    net = doc
    assert isinstance(doc, Network)
    assert dict(doc.objectives) == {"output": "linear"}
    with pytest.raises(TypeError):
        doc.objectives["output"] = "quadratic"  # read-only
    assert sorted(net.params) == [
        "affine1.bias_params",
        "affine1.linear_params",
        "affine2.bias_params",
        "affine2.linear_params",
    ]
    assert net.values["affine1.linear_params"].shape == (65, 48)
    assert net.values["affine2.linear_params"].shape == (115, 65)
    out = net.outputs["output"]
    assert isinstance(out, Node) and out.name == "output_nonlin"
    assert net.context() == (1, 2)
    # Kaldi's initialisation: NaturalGradientAffine's param-stddev is 1/sqrt(input-dim), bias-stddev 1.
    assert net.weights["affine1.linear_params"].init.stddev == pytest.approx(1 / np.sqrt(48))
    assert net.weights["affine1.bias_params"].init.stddev == 1.0
    # the seed is the initialisation's
    again = read_network(DOC, seed=3)
    other = read_network(DOC, seed=4)
    assert np.array_equal(again.values["affine1.linear_params"], net.values["affine1.linear_params"])
    assert not np.array_equal(other.values["affine1.linear_params"], net.values["affine1.linear_params"])


def test_doc_example_output_equals_numpy(doc):
    net = doc
    x = _frames(np.random.default_rng(0), 2, 7, 12)
    y = _np(net.compute(x))
    p = {k: _np(v) for k, v in net.params.items()}
    T = x.shape[1]
    expected = np.zeros((2, T, 115))
    for n in range(2):
        for t in range(T):
            frames = [x[n, min(max(t + o, 0), T - 1)] for o in (-1, 0, 1, 2)]  # nnet3-compute repeats edge frames
            h = np.concatenate(frames) @ p["affine1.linear_params"].T + p["affine1.bias_params"]
            h = np.maximum(h, 0.0)
            z = h @ p["affine2.linear_params"].T + p["affine2.bias_params"]
            expected[n, t] = _logsoftmax(z)
    assert y.shape == (2, T, 115)
    np.testing.assert_allclose(y, expected, rtol=1e-4, atol=1e-4)


def test_doc_example_round_trip(doc):
    text = write_network(doc)
    again = parse_network(text, seed=3)
    assert again.structure == doc.structure
    assert write_network(again) == text
    assert parse_config(text) == network_config_lines(doc)
    x = _frames(np.random.default_rng(1), 1, 5, 12)
    np.testing.assert_allclose(_np(again.compute(x)), _np(doc.compute(x)), rtol=1e-6, atol=1e-6)
    assert "component name=affine1 type=NaturalGradientAffineComponent input-dim=48 output-dim=65\n" in text
    assert "output-node name=output input=output_nonlin objective=linear\n" in text


# ----- TDNN-F ------------------------------------------------------------------------------


def test_tdnnf_example_context_and_layout(tdnnf):
    net = tdnnf
    assert net.context() == (5, 5)
    linear = net.outputs["output"]
    comps = {}
    stack = [linear]
    while stack:
        layer = stack.pop()
        if isinstance(layer, TdnnComponent):
            comps[layer.name] = layer
        stack.extend(layer.children)
    assert comps["tdnnf2.linear"].time_offsets == (-1, 0)
    assert comps["tdnnf3.affine"].time_offsets == (0, 3)
    assert not comps["tdnnf2.linear"].use_bias and comps["tdnnf2.affine"].use_bias
    assert comps["tdnnf2.linear"].option("orthonormal-constraint") == -1.0
    assert net.values["tdnnf2.linear.linear_params"].shape == (8, 64)
    assert net.values["tdnnf2.linear.bias_params"].shape == (0,)
    # Kaldi's output-layer starts at zero: every output is -log(10).
    y = _np(set_test_mode(net).compute(_frames(np.random.default_rng(2), 1, 12, 20)))
    np.testing.assert_allclose(y, -np.log(10.0), rtol=1e-6)
    assert parse_network(write_network(tdnnf), seed=4).structure == net.structure


def test_tdnnf_example_equals_numpy(tdnnf):
    rng = np.random.default_rng(5)
    net = set_test_mode(tdnnf)
    params = {}
    for name, value in net.values.items():
        shape = np.shape(value)
        if name.endswith("stats_var"):
            params[name] = rng.uniform(0.5, 2.0, shape).astype(np.float32)
        else:
            params[name] = (0.3 * rng.standard_normal(shape)).astype(np.float32)
    net = net.assign(params)
    p = {k: _np(v) for k, v in params.items()}
    x = _frames(rng, 2, 16, 20)
    y = _np(net.compute(x, mode="valid"))

    def bn(name, v):
        scale = 1.0 / np.sqrt(p[f"{name}.stats_var"] + 1e-3)
        return (v - p[f"{name}.stats_mean"]) * scale

    def tdnn(name, f, offsets, t):
        spliced = np.concatenate([f(t + o) for o in offsets])
        b = p[f"{name}.bias_params"]
        return spliced @ p[f"{name}.linear_params"].T + (b if b.size else 0.0)

    def run(seq):
        memo = {}

        def node(key, t, fn):
            if (key, t) not in memo:
                memo[key, t] = fn(t)
            return memo[key, t]

        def inp(t):
            return _np(seq[t])

        def tdnn1(t):
            return node(
                "tdnn1", t, lambda t: bn("tdnn1.batchnorm", np.maximum(tdnn("tdnn1.affine", inp, (-1, 0, 1), t), 0.0))
            )

        def layer(name, prev, stride):
            def lin(t):
                return node(name + ".linear", t, lambda t: tdnn(name + ".linear", prev, (-stride, 0), t))

            def out(t):
                def f(t):
                    a = tdnn(name + ".affine", lin, (0, stride), t)
                    return 0.66 * prev(t) + bn(name + ".batchnorm", np.maximum(a, 0.0))

                return node(name, t, f)

            return out

        f2 = layer("tdnnf2", tdnn1, 1)
        f3 = layer("tdnnf3", f2, 3)
        rows = []
        for t in range(5, len(seq) - 5):
            h = f3(t) @ p["prefinal-l.params"].T
            z = h @ p["output.affine.linear_params"].T + p["output.affine.bias_params"]
            rows.append(_logsoftmax(z))
        return np.stack(rows)

    expected = np.stack([run(x[n]) for n in range(2)])
    assert y.shape == expected.shape == (2, 6, 10)
    np.testing.assert_allclose(y, expected, rtol=2e-3, atol=2e-3)


# ----- LSTM (recurrence through IfDefined(Offset(..., -1))) -----------------------------------------


def test_lstm_example_structure(lstm):
    net = lstm
    assert net.context() == (0, 0)
    # Only references that close a cycle stay Refs.
    refs = []
    stack = [net.outputs["output"]]
    seen = set()
    while stack:
        layer = stack.pop()
        if id(layer) in seen:
            continue
        seen.add(id(layer))
        if isinstance(layer, Ref):
            refs.append(layer.name)
        stack.extend(layer.children)
    assert refs == ["lstm1.lstm_nonlin"]
    assert parse_network(write_network(lstm), seed=5).structure == net.structure


def test_lstm_example_equals_numpy(lstm):
    net = lstm
    rng = np.random.default_rng(6)
    x = _frames(rng, 2, 9, 10)
    y = _np(net.compute(x))
    p = {k: _np(v) for k, v in net.params.items()}
    W, b = p["lstm1.W_all.linear_params"], p["lstm1.W_all.bias_params"]
    w_ic, w_fc, w_oc = p["lstm1.lstm_nonlin.params"]
    expected = np.zeros((2, 9, 6))
    for n in range(2):
        c, m = np.zeros(8), np.zeros(8)  # IfDefined at the first frame: zeros
        for t in range(9):
            g = np.concatenate([x[n, t], m]) @ W.T + b
            i_part, f_part, c_part, o_part = np.split(g, 4)
            i = _sigmoid(i_part + w_ic * c)
            f = _sigmoid(f_part + w_fc * c)
            c = f * c + i * np.tanh(c_part)
            o = _sigmoid(o_part + w_oc * c)
            m = o * np.tanh(c)
            z = m @ p["output.affine.linear_params"].T + p["output.affine.bias_params"]
            expected[n, t] = _logsoftmax(z)
    np.testing.assert_allclose(y, expected, rtol=1e-4, atol=1e-4)


# ----- shared components, recurrences, unused nodes --------------------------------------------

SHARED = """\
input-node name=input dim=4
component name=shared type=AffineComponent input-dim=4 output-dim=4
component-node name=a component=shared input=input
component-node name=b component=shared input=Offset(a, 1)
output-node name=output input=Append(a, b) objective=quadratic
"""


def test_shared_component_is_one_parameter():
    kn = parse_network(SHARED)
    net = kn
    assert sorted(net.params) == ["shared.bias_params", "shared.linear_params"]
    assert dict(kn.objectives) == {"output": "quadratic"}
    out = net.outputs["output"]
    a, b = out.parts
    assert a.arg.linear_params == b.arg.linear_params
    W, bias = _np(net.values["shared.linear_params"]), _np(net.values["shared.bias_params"])
    x = _frames(np.random.default_rng(7), 1, 6, 4)
    y = _np(net.compute(x, mode="valid"))
    ha = x[0].astype(np.float64) @ W.T + bias
    hb = ha[1:] @ W.T + bias
    np.testing.assert_allclose(y[0], np.concatenate([ha[:-1], hb], axis=1), rtol=1e-5, atol=1e-5)
    text = write_network(kn)
    assert text.count("component name=shared ") == 1
    assert "objective=quadratic" in text
    assert parse_network(text).structure == net.structure


def test_unused_nodes_are_left_out_with_a_warning():
    text = SHARED + "component-node name=orphan component=shared input=input\n"
    with pytest.warns(UserWarning, match=r"<config>:6:\d+: component-node orphan is not used"):
        kn = parse_network(text)
    assert "orphan" not in write_network(kn)


def test_python_built_network_writes_and_reads_back():
    x = Input("input", 5)
    h = Node(
        "h",
        COMPONENTS["AffineComponent"](
            "aff", {"input-dim": 10, "output-dim": 3, "param-stddev": 0.5}, Append(Offset(x, -2), x)
        ),
    )
    rec = Node(
        "rec",
        COMPONENTS["AffineComponent"](
            "rec", {"input-dim": 6, "output-dim": 3}, Append(h, IfDefined(Offset(Ref("rec"), -1)))
        ),
    )
    top = Node("top", DimRange(rec, 1, 2))
    net = Network({"output": top}, seed=1)
    text = write_network(net)
    assert "param-stddev=0.5" in text and "dim-range-node name=top input-node=rec dim-offset=1 dim=2" in text
    assert parse_network(text, seed=1).structure == net.structure


def test_a_component_outside_a_node_gets_a_node_of_its_name():
    x = Input("input", 3)
    affine = COMPONENTS["AffineComponent"]("aff", {"input-dim": 3, "output-dim": 2}, x)
    text = write_network(Network(affine))
    assert "component-node name=aff component=aff input=input\noutput-node name=output input=aff" in text


def test_unwritable_networks():
    x = Input("input", 3)
    with pytest.raises(ConfigWriteError, match="Identity"):
        write_network(
            Network(Node("n", COMPONENTS["AffineComponent"]("a", {"input-dim": 1, "output-dim": 1}, Identity())))
        )
    with pytest.raises(ConfigWriteError, match="component or a DimRange"):
        write_network(Network(Node("n", x * 2.0)))


# ----- merging a further config ---------------------------------------------------------------------


def test_config_adds_to_and_overrides_a_network(doc):
    more = """\
component name=affine2 type=NaturalGradientAffineComponent input-dim=65 output-dim=20
component name=logsoftmax type=LogSoftmaxComponent dim=20
output-node name=aux input=nonlin1 objective=quadratic
"""
    merged = parse_network(more, base=doc, seed=9)
    net = merged
    assert net.values["affine2.linear_params"].shape == (20, 65)
    # affine1 was not redefined: it keeps its values; affine2 was, and starts afresh.
    assert np.array_equal(_np(net.values["affine1.linear_params"]), _np(doc.values["affine1.linear_params"]))
    assert dict(merged.objectives) == {"output": "linear", "aux": "quadratic"}
    assert [name for name, _ in net.structure.outputs] == ["output", "aux"]


# ----- TdnnComponent ------------------------------------------------------------------------------


def test_tdnn_component_defaults_and_metadata():
    c = COMPONENTS["TdnnComponent"](
        "t", {"input-dim": "6", "output-dim": "5", "time-offsets": "-2,0,3"}, Input("input", 6)
    )
    assert (c.input_dim, c.output_dim, c.time_offsets, c.use_bias) == (6, 5, (-2, 0, 3), True)
    assert c.linear_params.shape == (5, 18) and c.bias_params.shape == (5,)
    assert c.linear_params.init.stddev == pytest.approx(1 / np.sqrt(18))
    assert c.bias_params.init.stddev == 1.0
    assert c.option("rank-in") == 9 and c.option("rank-out") == 3
    assert c.option("orthonormal-constraint") == 0.0 and c.option("use-natural-gradient") is True
    expanded = c.expand()
    assert expanded.input == Append(Offset(Input("input", 6), -2), Input("input", 6), Offset(Input("input", 6), 3))


@pytest.mark.parametrize(
    "options, option, message",
    [
        ({"input-dim": "6", "output-dim": "5"}, "time-offsets", "required"),
        ({"input-dim": "6", "output-dim": "5", "time-offsets": "-1,0,-1"}, "time-offsets", "repeated"),
        ({"input-dim": "6", "output-dim": "5", "time-offsets": "-1,,1"}, "time-offsets", "integers"),
        ({"input-dim": "0", "output-dim": "5", "time-offsets": "0"}, "input-dim", "positive"),
        ({"input-dim": "6", "output-dim": "5", "time-offsets": "0", "bias": "1"}, "bias", "unknown option"),
    ],
)
def test_tdnn_component_bad_options(options, option, message):
    with pytest.raises(ComponentConfigError, match=message) as info:
        COMPONENTS["TdnnComponent"]("t", options, Input("input", 6))
    assert info.value.option == option


@pytest.mark.parametrize("use_bias", [True, False])
def test_tdnn_component_equals_numpy(use_bias):
    x = Input("input", 3)
    options = {"input-dim": 3, "output-dim": 4, "time-offsets": "-1,0,2", "use-bias": use_bias}
    net = Network(Node("t", COMPONENTS["TdnnComponent"]("t", options, x)), seed=2)
    X = _frames(np.random.default_rng(8), 2, 7, 3)
    y = _np(net.compute(X, mode="valid"))
    W, b = _np(net.values["t.linear_params"]), _np(net.values["t.bias_params"])
    assert b.shape == ((4,) if use_bias else (0,))
    expected = np.stack(
        [np.concatenate([X[:, t - 1], X[:, t], X[:, t + 2]], -1) @ W.T + (b if use_bias else 0.0) for t in range(1, 5)],
        axis=1,
    )
    assert net.context() == (1, 2)
    np.testing.assert_allclose(y, expected, rtol=1e-5, atol=1e-5)


# ----- component options written back -------------------------------------------------------------


def test_every_component_type_has_samples():
    assert set(SAMPLES) | set(NONSIMPLE_SAMPLES) == set(COMPONENTS)


@pytest.mark.parametrize("kind", sorted(SAMPLES))
def test_component_options_build_the_same_component(kind):
    placeholder = Ref("x")
    component = COMPONENTS[kind]("c1", SAMPLES[kind], placeholder)
    options = component_options(component)
    again = COMPONENTS[kind]("c1", dict(options), placeholder)
    assert again == component
    # defaults are left out; the sample's non-default options stay
    assert len(options) <= len(SAMPLES[kind]) + 3


def test_component_options_refuse_what_a_config_cannot_say(tmp_path):
    matrix = tmp_path / "m.npy"
    np.save(matrix, np.ones((2, 4)))
    component = COMPONENTS["FixedAffineComponent"]("c", {"matrix": str(matrix)}, Ref("x"))
    with pytest.raises(ConfigWriteError, match="cannot be written"):
        component_options(component)
    assert component_options(component, exact=False) == [("input-dim", "3"), ("output-dim", "2")]


# ----- config errors: file, line and column ---------------------------------------------------------

GOOD = """\
input-node name=input dim=12
component name=affine1 type=NaturalGradientAffineComponent input-dim=48 output-dim=65
component-node name=affine1_node component=affine1 input=Append(Offset(input, -1), input, Offset(input, 1), Offset(input, 2))
output-node name=output input=affine1_node
"""


def _error(text):
    with pytest.raises(ConfigError) as info:
        parse_network(text, file="bad.config")
    error = info.value
    assert error.file == "bad.config"
    assert str(error).startswith(f"bad.config:{error.line}:{error.column}: ")
    assert "^" in str(error)
    return error


def _column(text, line, needle, nth=0):
    row = text.splitlines()[line - 1]
    index = -1
    for _ in range(nth + 1):
        index = row.index(needle, index + 1)
    return index + 1


def test_error_unknown_component_type():
    text = GOOD.replace("NaturalGradientAffineComponent", "NaturalGradientAfineComponent")
    e = _error(text)
    assert (e.line, e.column) == (2, _column(text, 2, "NaturalGradientAfine"))
    assert "unknown component type NaturalGradientAfineComponent" in e.message
    assert "did you mean NaturalGradientAffineComponent" in e.message


def test_error_missing_option():
    text = GOOD.replace(" input-dim=48", "")
    e = _error(text)
    assert (e.line, e.column) == (2, len(text.splitlines()[1]) + 1)  # the end of the line
    assert "input-dim is required" in e.message


def test_error_malformed_option():
    text = GOOD.replace("input-dim=48", "input-dim=4x8")
    e = _error(text)
    assert (e.line, e.column) == (2, _column(text, 2, "4x8"))
    assert "is not an integer" in e.message


def test_error_unknown_option():
    text = GOOD.replace("output-dim=65", "output-dim=65 bias-std=0.1")
    e = _error(text)
    assert (e.line, e.column) == (2, _column(text, 2, "bias-std"))


def test_error_dims_of_component_and_node_disagree():
    text = GOOD.replace("Offset(input, 2))", "Offset(input, 2), input)")
    e = _error(text)
    assert (e.line, e.column) == (3, _column(text, 3, "Append"))
    assert "input has dim 60" in e.message and "input-dim 48" in e.message


def test_error_unknown_node():
    text = GOOD.replace("Offset(input, 1)", "Offset(inptu, 1)")
    e = _error(text)
    assert (e.line, e.column) == (3, _column(text, 3, "inptu"))
    assert "inptu" in e.message


def test_error_sum_of_different_dims():
    text = GOOD.replace("input=affine1_node", "input=Sum(affine1_node, input)")
    e = _error(text)
    assert (e.line, e.column) == (4, _column(text, 4, "Sum"))


def test_error_dim_range_out_of_range():
    text = GOOD + "dim-range-node name=d input-node=affine1_node dim-offset=60 dim=10\n"
    with warnings.catch_warnings():
        warnings.simplefilter("ignore")
        e = _error(text)
    assert (e.line, e.column) == (5, _column(text, 5, "60"))


def test_error_cycle_without_time_offset():
    text = """\
input-node name=input dim=4
component name=c type=AffineComponent input-dim=8 output-dim=4
component-node name=a component=c input=Append(input, b)
component-node name=b component=c input=Append(input, IfDefined(a))
output-node name=output input=b
"""
    e = _error(text)
    assert e.line == 3 and "same frame" in e.message
    net = parse_network(text.replace("IfDefined(a)", "IfDefined(Offset(a, -1))"))
    assert net.context() == (0, 0)


# ----- more properties ------------------------------------------------------------------------------


def test_tdnn_gradients_equal_jax_of_the_formula():
    import jax
    import jax.numpy as jnp

    x = Input("input", 3)
    options = {"input-dim": 3, "output-dim": 4, "time-offsets": "-1,0,2"}
    net = Network(Node("t", COMPONENTS["TdnnComponent"]("t", options, x)), seed=2)
    X = _frames(np.random.default_rng(9), 2, 7, 3)
    grads = jax.grad(lambda n: jnp.sum(n.compute(X, mode="valid") ** 2))(net)

    def formula(W, b):
        y = jnp.stack([jnp.concatenate([X[:, t - 1], X[:, t], X[:, t + 2]], -1) @ W.T + b for t in range(1, 5)], 1)
        return jnp.sum(y**2)

    gw, gb = jax.grad(formula, argnums=(0, 1))(net.values["t.linear_params"], net.values["t.bias_params"])
    np.testing.assert_allclose(grads.params["t.linear_params"], gw, rtol=1e-4, atol=1e-4)
    np.testing.assert_allclose(grads.params["t.bias_params"], gb, rtol=1e-4, atol=1e-4)


def test_kaldi_network_is_a_pytree(doc):
    import jax

    leaves, tree = jax.tree_util.tree_flatten(doc)
    assert len(leaves) == 4
    again = jax.tree_util.tree_unflatten(tree, leaves)
    assert isinstance(again, Network) and dict(again.objectives) == {"output": "linear"}
    assert again.structure == doc.structure


def test_objectives_travel_with_the_network(doc):
    import jax

    quadratic = doc.replace(objectives={"output": "quadratic"})
    assert dict(doc.objectives) == {"output": "linear"}  # replace made a new network
    stepped = jax.jit(lambda n: jax.tree_util.tree_map(lambda v: v * 2, n))(quadratic)
    assert dict(stepped.objectives) == {"output": "quadratic"}
    assert dict(quadratic.assign({}).objectives) == dict(quadratic.select(["output"]).objectives)
    assert dict(quadratic.select({"out": "output"}).objectives) == {"out": "quadratic"}
    assert "objective=quadratic" in write_network(quadratic)
    with pytest.raises(GraphError, match="'nope', which is not an output"):
        doc.replace(objectives={"nope": "linear"})
    with pytest.raises(GraphError, match="objective 'softmax' is not one of linear, quadratic"):
        doc.replace(objectives={"output": "softmax"})


def test_the_old_kaldi_network_names_warn_and_still_work(doc):
    with pytest.warns(DeprecationWarning, match="KaldiNetwork is deprecated"):
        wrapped = KaldiNetwork(doc, {"output": "quadratic"})
    assert type(wrapped) is Network and dict(wrapped.objectives) == {"output": "quadratic"}
    with pytest.warns(DeprecationWarning, match="KaldiNetwork is deprecated"):
        assert isinstance(doc, KaldiNetwork) and not isinstance(3, KaldiNetwork)
    with pytest.warns(DeprecationWarning, match="net.network is deprecated"):
        assert doc.network is doc


def test_unused_component_warns():
    with pytest.warns(UserWarning, match="component spare is not used"):
        parse_network(SHARED + "component name=spare type=NoOpComponent dim=3\n")


def _random_config(seed: int) -> str:
    """A random valid config: affine, tdnn, nonlinear and no-op components over random descriptors,
    dim-range-nodes and recurrences."""
    import random

    rng = random.Random(seed)
    lines = [f"input-node name=input dim={rng.randint(2, 5)}"]
    dims = {"input": int(lines[0].rsplit("=", 1)[1])}
    if rng.random() < 0.3:
        lines.append("input-node name=ivector dim=2")
        dims["ivector"] = 2
    comps = {}
    for i in range(rng.randint(1, 5)):
        names = list(dims)
        a = rng.choice(names)
        others = [n for n in names if dims[n] == dims[a] and n != a]
        summand = f"Scale(0.5, {a}), {rng.choice(others)}" if others else f"{a}, Const(0.5, {dims[a]})"
        forms = [
            (a, dims[a]),
            (f"Offset({a}, {rng.randint(-3, 3)})", dims[a]),
            (f"Append({a}, Offset({rng.choice(names)}, 1))", None),
            (f"Sum({summand})", dims[a]),
            (f"Failover(Offset({a}, 2), {a})", dims[a]),
            (f"Append({a}, Const(1.5, 2))", dims[a] + 2),
            (f"Append(Round({a}, 2), IfDefined(Offset({a}, -1)))", 2 * dims[a]),
            (f"Switch({a}, Offset({a}, -1))", dims[a]),
        ]
        if "ivector" in dims:
            forms.append((f"Append({a}, ReplaceIndex(ivector, t, 0))", dims[a] + 2))
        text, dim = rng.choice(forms)
        if dim is None:
            inner = text.split("Offset(", 1)[1].split(",")[0]
            dim = dims[a] + dims[inner]
        name = f"n{i}"
        kind = rng.choice(["affine", "tdnn", "relu", "noop", "recurrent", "shared"])
        if kind == "shared" and not any(c[1] == dim for c in comps.values()):
            kind = "affine"
        if kind == "affine":
            out = rng.randint(1, 6)
            lines.append(f"component name=c{i} type=AffineComponent input-dim={dim} output-dim={out}")
            comps[f"c{i}"] = (out, dim)
        elif kind == "tdnn":
            out = rng.randint(1, 6)
            offsets = sorted(rng.sample(range(-2, 3), rng.randint(1, 3)))
            lines.append(
                f"component name=c{i} type=TdnnComponent input-dim={dim} output-dim={out} "
                f"time-offsets={','.join(map(str, offsets))} use-bias={rng.choice(['true', 'false'])}"
            )
            comps[f"c{i}"] = (out, dim)
        elif kind in ("relu", "noop"):
            out = dim
            kaldi = "RectifiedLinearComponent" if kind == "relu" else "NoOpComponent"
            lines.append(f"component name=c{i} type={kaldi} dim={dim}")
            comps[f"c{i}"] = (out, dim)
        elif kind == "recurrent":
            out = rng.randint(1, 4)
            lines.append(
                f"component name=c{i} type=NaturalGradientAffineComponent input-dim={dim + out} output-dim={out}"
            )
            comps[f"c{i}"] = (out, dim + out)
            text = f"Append({text}, IfDefined(Offset({name}, -1)))"
        if kind == "shared":
            component = rng.choice([c for c, (_, d) in comps.items() if d == dim])
            out = comps[component][0]
        else:
            component = f"c{i}"
        lines.append(f"component-node name={name} component={component} input={text}")
        dims[name] = out
        if out > 1 and rng.random() < 0.3:
            lines.append(f"dim-range-node name={name}.part input-node={name} dim-offset=1 dim={out - 1}")
            dims[f"{name}.part"] = out - 1
    last = [n for n in dims if n.startswith("n")][-1]
    lines.append(f"output-node name=output input={last} objective={rng.choice(['linear', 'quadratic'])}")
    if rng.random() < 0.3:
        lines.append(f"output-node name=aux input=Offset({rng.choice(list(dims))}, 1)")
    return "\n".join(lines) + "\n"


@pytest.mark.parametrize("seed", range(40))
def test_random_configs_round_trip(seed):
    text = _random_config(seed)
    with warnings.catch_warnings():
        warnings.simplefilter("ignore")  # nodes that no output uses
        first = parse_network(text, seed=seed)
    written = write_network(first)
    second = parse_network(written, seed=seed)
    assert second.structure == first.structure, text
    assert dict(second.objectives) == dict(first.objectives)
    assert write_network(second) == written
