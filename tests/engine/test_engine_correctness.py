"""Regression tests for wrong numbers and crashes found by users: each case failed before its fix.

Values are checked against the per-Index reference evaluator (`helpers.reference`)
or against formulas written out here; contexts against Kaldi's rule worked out by
hand (the maximum over every input start modulo the modulus).
"""

from __future__ import annotations

import sys

import jax
import jax.numpy as jnp
import numpy as np
import pytest

import symnet
from helpers.reference import Reference
from symnet import (
    Append,
    ComputationRequest,
    Failover,
    GraphError,
    Identity,
    IfDefined,
    Index,
    IndexSet,
    Input,
    Literal,
    Network,
    Node,
    Normal,
    Offset,
    PlanError,
    Ref,
    ReLU,
    Round,
    ShapeError,
    Switch,
    SymnetError,
    Tanh,
    Weight,
    Zeros,
)
from symnet._src.core import source
from symnet.kaldi import parse_network

RNG = np.random.default_rng(7)


def run(net, request, inputs):
    return symnet.compile(net, request)(net, inputs)


def frames(n, t):
    return IndexSet.range(n=n, t=t)


# ----- 1. parts of Failover and Switch that no requested row uses ---------------------------------------------


def test_failover_whose_first_part_no_row_uses():
    x = Input("input", 3)
    a = Weight(RNG.normal(size=(3, 2)), name="a")
    b = Weight(RNG.normal(size=(3, 2)), name="b")
    net = Network({"output": Failover(Offset(x, -50) @ a, x @ b)})
    features = RNG.normal(size=(12, 3))
    out = run(
        net,
        ComputationRequest(inputs={"input": frames(1, 12)}, outputs={"output": frames(1, (0, 12))}),
        {"input": jnp.asarray(features)},
    )["output"]
    np.testing.assert_allclose(out, features @ np.asarray(net.params["b"]), rtol=1e-5)


def test_switch_whose_second_part_no_row_uses():
    x = Input("input", 3)
    a = Weight(RNG.normal(size=(3, 2)), name="A")
    b = Weight(RNG.normal(size=(3, 2)), name="B")
    net = Network(Switch(x @ a, Offset(x, 1) @ b))
    features = RNG.normal(size=(12, 3))
    out = run(
        net,
        ComputationRequest(inputs={"input": frames(1, 12)}, outputs={"output": frames(1, 1)}),
        {"input": jnp.asarray(features)},
    )["output"]
    np.testing.assert_allclose(out, features[:1] @ np.asarray(net.params["A"]), rtol=1e-5)


def test_dead_parts_against_the_reference_evaluator():
    x = Input("input", 2)
    w = Weight(RNG.normal(size=(2, 3)), name="w")
    u = Weight(RNG.normal(size=(2, 3)), name="u")
    net = Network(Append(Failover(Offset(x, -40) @ w, x @ u), IfDefined(Offset(Append(x, x), 30))))
    features = RNG.normal(size=(6, 2))
    request = ComputationRequest(inputs={"input": frames(1, 6)}, outputs={"output": frames(1, 6)})
    out = np.asarray(run(net, request, {"input": jnp.asarray(features)})["output"])
    ref = Reference(net.output, {"input": {Index(0, t): features[t] for t in range(6)}}, net.params)
    want = np.stack([ref.value(Index(0, t)) for t in range(6)])
    np.testing.assert_allclose(out, want, rtol=1e-5, atol=1e-6)


# ----- 2. the context of networks that depend on t modulo a period --------------------------------------------


def test_round_context_is_the_maximum_over_input_starts():
    x = Input("input", 1)
    # Output t reads floor(t/3)*3 -/+ 4: from a start s the first computable output is the first t with
    # floor(t/3)*3 - 4 >= s, the last the last with floor(t/3)*3 + 4 <= s + W - 1; over s = 0, 1, 2: (6, 4).
    net = Network({"output": Round(Append(Offset(x, -4), Offset(x, 4)), 3)})
    assert net.context() == (6, 4)
    assert Network({"output": Offset(Round(x, 3), 5)}).context() == (0, 5)
    features = RNG.normal(size=(1, 31, 1))
    out = np.asarray(net.compute(features))
    padded = np.concatenate([np.repeat(features[:, :1], 6, 1), features, np.repeat(features[:, -1:], 4, 1)], 1)
    for t in range(31):
        base = (t // 3) * 3 + 6  # row of frame floor(t/3)*3 in the padded input
        np.testing.assert_allclose(out[0, t], [padded[0, base - 4, 0], padded[0, base + 4, 0]], rtol=1e-6)


# ----- 3. chunks of a backward recurrence -----------------------------------------------------------------------


def _backward_net():
    x = Input("input", 3)
    return Network(
        Node(
            "bw", Tanh(x @ Weight(Normal((3, 4), 0.5)) + IfDefined(Offset(Ref("bw"), 1)) @ Weight(Normal((4, 4), 0.5)))
        )
    )


def test_carrying_a_backward_recurrence_across_chunks_is_refused():
    net = _backward_net()
    with pytest.raises(PlanError, match=r"backward recurrence \(bw.*carry_state=False"):
        net.compute(RNG.normal(size=(2, 37, 3)), frames_per_chunk=10)


def test_independent_chunks_are_nnet3_computes_chunks():
    net = _backward_net()
    features = RNG.normal(size=(2, 37, 3))
    got = np.asarray(net.compute(features, frames_per_chunk=10, carry_state=False, extra_right_context=5))
    for start in range(0, 37, 10):
        end = min(start + 10, 37)
        window = np.clip(np.arange(start, end + 5), 0, 36)  # the chunk plus 5 frames of lookahead, edges repeated
        whole = np.asarray(net.compute(features[:, window]))
        np.testing.assert_allclose(got[:, start:end], whole[:, : end - start], rtol=1e-5, atol=1e-6)
    # one pass is a different computation: it sees the whole future
    assert not np.allclose(got, np.asarray(net.compute(features)), atol=1e-3)


def test_forward_recurrence_chunked_equals_one_pass():
    x = Input("input", 3)
    net = Network(
        Node("h", Tanh(x @ Weight(Normal((3, 4), 0.5)) + IfDefined(Offset(Ref("h"), -1)) @ Weight(Normal((4, 4), 0.5))))
    )
    features = RNG.normal(size=(2, 37, 3))
    np.testing.assert_allclose(
        np.asarray(net.compute(features, frames_per_chunk=10)), np.asarray(net.compute(features)), rtol=1e-5, atol=1e-6
    )


# ----- 4. a Network as a function for jax.jit -------------------------------------------------------------------


def test_jit_of_a_network():
    net = Network(Tanh(Identity() @ Weight(Normal((3, 4), 0.3))))
    xs = jnp.asarray(RNG.normal(size=(5, 3)))
    want = np.tanh(np.asarray(xs) @ np.asarray(net.params["weight"]))
    jitted = jax.jit(net)
    np.testing.assert_allclose(jitted(xs), want, rtol=1e-5)
    np.testing.assert_allclose(jitted(xs + 0), want, rtol=1e-5)  # the second call used to crash the interpreter
    assert jax.eval_shape(net, xs).shape == (5, 4)
    np.testing.assert_allclose(jax.jit(net.__call__)(xs), want, rtol=1e-5)


# ----- 5. random keys of a cached computation -------------------------------------------------------------------

DROPOUT = """input-node name=input dim=8
component name=drop type=DropoutComponent dim=8 dropout-proportion=0.5
component-node name=drop component=drop input=input
output-node name=output input=drop"""


def test_dropout_masks_follow_the_key_of_each_call():
    from symnet.components import set_test_mode

    net = set_test_mode(parse_network(DROPOUT), False)
    comp = symnet.compile(net, ComputationRequest(inputs={"input": frames(1, 4)}, outputs={"output": frames(1, 4)}))
    ones = {"input": jnp.ones((4, 8))}
    masks = []
    for seed in (1, 2, 1):
        with symnet.rng.randomness(jax.random.PRNGKey(seed)):
            masks.append(np.asarray(comp(net, ones)["output"]))
    assert not np.array_equal(masks[0], masks[1])
    np.testing.assert_array_equal(masks[0], masks[2])
    with pytest.raises(SymnetError, match="needs random numbers"):
        comp(net, ones)  # outside any randomness block: the documented error, not a stale key


# ----- 6. messages -------------------------------------------------------------------------------------------------


def test_offset_of_a_weight_or_literal_is_a_graph_error():
    x = Input("input", 3)
    for layer in (x + Offset(Weight(np.ones(3)), 1), x * Offset(Literal(2.0), -1)):
        with pytest.raises(GraphError, match="has no rows"):
            Network(layer).compute(np.ones((1, 4, 3)))


def test_compute_names_the_missing_batch_axis_and_the_feature_dim():
    x = Input("input", 12)
    net = Network(ReLU(x @ Weight(Normal((12, 2), 0.1))))
    with pytest.raises(ShapeError, match=r"one array of shape \(20, 12\): add the batch axis"):
        net.compute(np.ones((20, 12)))
    with pytest.raises(ShapeError, match="has 13 features, but the network's input 'input' takes 12"):
        net.compute(np.ones((1, 20, 13)))
    with pytest.raises(ShapeError, match=r"N = 0"):
        net.compute(np.ones((0, 20, 12)))
    with pytest.raises(ShapeError, match="expected numbers"):
        net.compute([np.array([["a"] * 12])])
    with pytest.raises(ShapeError, match="expected real numbers, got complex values of dtype complex64"):
        net.compute(np.ones((1, 20, 12), np.complex64))
    with pytest.raises(PlanError, match="frames_per_chunk"):
        net.compute(np.ones((1, 20, 12)), frames_per_chunk=2.5)


def test_recurrence_that_never_starts_is_explained_by_compute():
    x = Input("input", 3)
    h = Node("h", Tanh(x @ Weight(Normal((3, 4), 0.5)) + Offset(Ref("h"), -1) @ Weight(Normal((4, 4), 0.5))))
    """docs/concepts/recurrence.md: the planning error says the recurrence never starts, first and alone."""
    for run in (lambda net: net.compute(np.ones((1, 10, 3))), lambda net: net.context()):
        with pytest.raises(PlanError) as raised:
            run(Network(h))
        message = str(raised.value)
        assert message.startswith(
            "output 'output' has no context: node(s) h read themselves at other frames with no IfDefined or Failover"
        ), message
        assert "IfDefined(Offset(Ref('h'), -1))" in message
        assert "ReplaceIndex" not in message and "lack input" not in message, message


def test_a_notebook_cell_is_named_as_ipython_numbers_it(monkeypatch):
    class Compiler:
        _filename_map = {"/tmp/ipykernel_42/123.py": 7}

    class Shell:
        compile = Compiler()

    class FakeIPython:
        @staticmethod
        def get_ipython():
            return Shell()

    monkeypatch.setitem(sys.modules, "IPython", FakeIPython)
    assert source._cell_label("/tmp/ipykernel_42/123.py", 3) == "In [7], line 3"
    assert source._cell_label("/tmp/ipykernel_42/999.py", 3) == "a notebook cell, line 3"
    assert source._cell_label("/home/me/net.py", 3) is None


# ----- 7. deep networks ---------------------------------------------------------------------------------------------


def test_a_thousand_node_chain_plans_without_recursion():
    limit = sys.getrecursionlimit()
    x = Input("input", 2)
    h = x
    for i in range(1000):
        h = Node(f"n{i}", Tanh(h @ Weight(Normal((2, 2), 0.5))))
    net = Network(h)
    assert len(repr(net.output)) > 0 and net.structure == Network(h).structure
    assert "n999.weight" in net.params  # parameter paths restart at each Node's name
    assert net.context() == (0, 0)
    comp = symnet.compile(net, ComputationRequest(inputs={"input": frames(1, 3)}, outputs={"output": frames(1, 3)}))
    assert len(comp.steps) > 1000
    assert sys.getrecursionlimit() == limit  # no process-wide change


def test_deep_networks_run_and_differentiate():
    y = Identity()
    weights = []
    for _ in range(200):
        w = RNG.normal(size=(3, 3)) * 0.5
        weights.append(w)
        y = ReLU(y @ Weight(w) + Weight(Zeros((3,))))
    net = Network(y)
    xs = RNG.normal(size=(2, 3))
    want = xs
    for w in weights:
        want = np.maximum(want @ w, 0)
    np.testing.assert_allclose(net(jnp.asarray(xs)), want, rtol=1e-4, atol=1e-6)
    grads = net.forward(jnp.asarray(xs)).backward(1.0)
    reference = jax.grad(lambda p: net.forward(jnp.asarray(xs), p).value.sum())(net.params)
    for name in grads:
        np.testing.assert_allclose(grads[name], reference[name], rtol=1e-4, atol=1e-6)


def test_a_deep_kaldi_config_chain():
    lines = ["input-node name=input dim=4"]
    previous = "input"
    for i in range(300):
        lines += [
            f"component name=a{i} type=AffineComponent input-dim=4 output-dim=4 param-stddev=0.3",
            f"component-node name=a{i} component=a{i} input={previous}",
        ]
        previous = f"a{i}"
    lines.append(f"output-node name=output input={previous}")
    net = parse_network("\n".join(lines))
    assert net.context() == (0, 0)
    assert np.asarray(net.compute(np.ones((1, 3, 4)))).shape == (1, 3, 4)


# ----- 8. long contexts ----------------------------------------------------------------------------------------------


@pytest.mark.parametrize(("offsets", "context"), [((-100, 100), (100, 100)), ((250,), (0, 250)), ((-300, 0), (300, 0))])
def test_long_contexts_are_exact(offsets, context):
    x = Input("input", 1)
    net = Network(Append(*(Offset(x, o) for o in offsets)))
    assert net.context() == context
    features = RNG.normal(size=(1, 40, 1))
    out = np.asarray(net.compute(features))
    for j, o in enumerate(offsets):
        np.testing.assert_allclose(out[0, :, j], features[0, np.clip(np.arange(40) + o, 0, 39), 0])
