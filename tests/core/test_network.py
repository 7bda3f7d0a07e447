"""Network: expression + parameters as a JAX pytree; naming, jit/grad/vmap, optax, training, errors."""

from __future__ import annotations

import importlib.util
import inspect
import math
import time

import jax
import jax.numpy as jnp
import numpy as np
import optax
import pytest

from helpers import REPO
from symnet import (
    Glorot,
    GraphError,
    Identity,
    Input,
    LogSoftmax,
    Network,
    Node,
    Normal,
    ParameterError,
    ReLU,
    ShapeError,
    SymnetError,
    Tanh,
    Uniform,
    Weight,
    Zeros,
)
from symnet._src.core.tape import Tape

x = Identity()


def next_line() -> str:
    frame = inspect.currentframe().f_back
    return f"{frame.f_code.co_filename}:{frame.f_lineno + 1}"


def as_input(value: jax.Array) -> Tape:
    """A traced array handed to forward as a Tape (see the xfail tests on plain traced inputs)."""
    return Tape(Identity(), value)


def seed_net() -> Network:
    return Network((1.0 + x) * Weight(2.0))


# ----- construction and running ----------------------------------------------------------------


def test_single_output_value_tape_and_params():
    net = seed_net()
    assert list(net.outputs) == ["output"]
    assert repr(net.output) == "(1.0 + x) * Weight(2.0, name='scale')"
    assert list(net.params) == ["scale"] and float(net.params["scale"]) == 2.0
    assert float(net(3.0)) == 8.0
    tape = net.forward(3.0)
    assert isinstance(tape, Tape) and float(tape.value) == 8.0 and tape.layer == net.output
    assert float(net.forward(3.0, {"scale": 5.0}).value) == 20.0
    with pytest.raises(AttributeError):
        net.params = {}


def test_several_named_outputs():
    w = Weight(1.5)
    net = Network({"out": x * w, "aux": Tanh(x + w)})
    assert list(net.outputs) == ["out", "aux"]
    values = net(2.0)
    assert set(values) == {"out", "aux"}
    np.testing.assert_allclose(values["out"], 3.0)
    np.testing.assert_allclose(values["aux"], math.tanh(3.5), rtol=1e-6)
    tapes = net.forward(2.0)
    assert set(tapes) == {"out", "aux"} and all(isinstance(t, Tape) for t in tapes.values())
    assert len(net.params) == 1  # one Weight object in both outputs: one parameter
    (name,) = net.params
    np.testing.assert_allclose(tapes["out"].backward()[name], 2.0)
    np.testing.assert_allclose(tapes["aux"].backward()[name], 1 - math.tanh(3.5) ** 2, rtol=1e-4)
    with pytest.raises(GraphError, match="out"):
        _ = net.output
    with pytest.raises(GraphError):
        Network({})


def test_missing_input_is_an_error_naming_the_line():
    line = next_line()
    net = Network(x * Weight(2.0))
    with pytest.raises(GraphError) as info:
        net()
    assert "input" in str(info.value) and line.rsplit(":", 1)[0] in str(info.value)


# ----- parameter names -----------------------------------------------------------------------------


def mlp_expr(order: str = "forward"):
    if order == "forward":
        w1, b1, w2, b2 = Weight(Normal((2, 3))), Weight(Zeros(3)), Weight(Normal((3, 1))), Weight(Zeros(1))
    else:  # the same network, its Weights built in another order
        b2, w2, b1, w1 = Weight(Zeros(1)), Weight(Normal((3, 1))), Weight(Zeros(3)), Weight(Normal((2, 3)))
    return ReLU(x @ w1 + b1) @ w2 + b2


def test_unnamed_weights_are_named_by_their_path():
    net = Network(mlp_expr())
    # named by their role (weight of a product, bias of a sum), numbered in depth-first field order
    assert list(net.params) == ["bias", "bias_2", "weight", "weight_2"]
    assert [net.params[k].shape for k in net.params] == [(3,), (1,), (2, 3), (3, 1)]
    assert list(Network(Weight(1.0)).params) == ["weight"]
    multi = Network({"a": x * Weight(1.0), "b": x + Weight(2.0)})
    assert set(multi.params) == {"a.scale", "b.bias"}
    # below a named Node, names start from the node's: a change in one node renames nothing in another
    h = Node("h", ReLU(x @ Weight(Normal((2, 3))) + Weight(Zeros(3))))
    y = Node("y", h @ Weight(Normal((3, 1))))
    assert list(Network(y).params) == ["h.bias", "h.weight", "y.weight"]
    h2 = Node("h", ReLU(x @ Weight(Normal((2, 3))) + Weight(Zeros(3)) + Weight(Zeros(3))))
    assert list(Network(Node("y", h2 @ Weight(Normal((3, 1))))).params) == [
        "h.bias",
        "h.bias_2",
        "h.weight",
        "y.weight",
    ]


def test_names_and_initial_values_do_not_depend_on_construction_order_or_history():
    a = Network(mlp_expr("forward"))
    for _ in range(3):
        Weight(Normal((2, 3)))  # unrelated construction in between must not shift anything
    b = Network(mlp_expr("backward"))
    assert list(a.params) == list(b.params)
    for k in a.params:
        np.testing.assert_array_equal(a.params[k], b.params[k])
    assert jax.tree_util.tree_structure(a) == jax.tree_util.tree_structure(b)
    c = Network(mlp_expr(), seed=1)
    assert not np.array_equal(c.params["weight"], a.params["weight"])
    # distinct parameters with equal initialisers get distinct random values (keys from their names)
    d = Network(x @ Weight(Normal((2, 2))) + x @ Weight(Normal((2, 2))))
    v1, v2 = d.params.values()
    assert not np.array_equal(v1, v2)


def test_weight_identity_decides_sharing():
    w = Weight(2.0)
    assert len(Network(x * w + w).params) == 1  # one object, two places: one parameter
    assert len(Network(x * Weight(2.0) + Weight(2.0)).params) == 2  # two calls: two parameters
    shared = Network(x * Weight(2.0, name="k") + Weight(2.0, name="k"))
    assert list(shared.params) == ["k"]
    np.testing.assert_allclose(shared.forward(3.0).backward()["k"], 4.0)  # 3 + 1, both uses summed


def test_explicit_name_takes_precedence_over_a_path_name():
    net = Network(x * Weight(1.0, name="bias") + Weight(2.0))
    assert set(net.params) == {"bias", "bias_2"}
    assert float(net.params["bias"]) == 1.0 and float(net.params["bias_2"]) == 2.0


def test_one_name_with_different_initialisers_names_both_places():
    first = next_line()
    a = Weight(1.0, name="w")
    second = next_line()
    b = Weight(Normal((3,)), name="w")
    with pytest.raises(ParameterError) as info:
        Network(x * a + b)
    message = str(info.value)
    assert isinstance(info.value, ValueError) and isinstance(info.value, SymnetError)
    assert "'w'" in message and first in message and second in message
    assert "1.0" in message and "Normal" in message


def test_initialisers():
    net = Network(
        {
            "n": Weight(Normal((200, 100), 0.5, 1.0), name="n"),
            "u": Weight(Uniform((200, 100), -2.0, 3.0), name="u"),
            "g": Weight(Glorot((200, 100)), name="g"),
            "z": Weight(Zeros((7,)), name="z"),
            "a": Weight(np.arange(6.0).reshape(2, 3), name="a"),
        }
    )
    n, u, g = (np.asarray(net.params[k]) for k in "nug")
    assert n.shape == u.shape == g.shape == (200, 100)
    assert abs(n.mean() - 1.0) < 0.02 and abs(n.std() - 0.5) < 0.02
    assert u.min() >= -2.0 and u.max() < 3.0 and abs(u.mean() - 0.5) < 0.05
    limit = math.sqrt(6.0 / 300)
    assert g.min() >= -limit and g.max() <= limit and g.max() > 0.9 * limit
    np.testing.assert_array_equal(net.params["z"], np.zeros(7))
    np.testing.assert_array_equal(net.params["a"], np.arange(6.0).reshape(2, 3))


# ----- pytree: jit, grad, vmap -----------------------------------------------------------------------


@pytest.mark.parametrize("size", [1, 4, 255, 257, 3000, 65536, 65537])
def test_initial_values_are_those_of_whole_blocks_of_65536(size: int) -> None:
    """Values are drawn in blocks of 65,536 keyed `fold_in(key, block)`; a short last block gives the same
    values as the whole one would (an independent computation with jax.random)."""
    key = jax.random.PRNGKey(11)
    blocks = -(-size // 65536)

    def whole(draw):
        return np.concatenate([np.asarray(draw(jax.random.fold_in(key, i), (65536,))) for i in range(blocks)])[:size]

    np.testing.assert_array_equal(np.asarray(Normal((size,), 1.0).init(key, jnp.float32)), whole(jax.random.normal))
    np.testing.assert_array_equal(
        np.asarray(Uniform((size,), 0.0, 1.0).init(key, jnp.float32)), whole(jax.random.uniform)
    )


def test_network_is_a_pytree_of_its_parameters():
    net = Network(mlp_expr())
    leaves, treedef = jax.tree_util.tree_flatten(net)
    assert len(leaves) == 4
    for leaf, name in zip(leaves, net.params, strict=True):
        assert leaf is net.params[name]
    paths = [jax.tree_util.keystr(p) for p, _ in jax.tree_util.tree_flatten_with_path(net)[0]]
    assert paths == [f".params[{name!r}]" for name in net.params]
    doubled = jax.tree_util.tree_map(lambda a: 2 * a, net)
    assert isinstance(doubled, Network) and doubled.structure is net.structure
    np.testing.assert_allclose(doubled.params["weight_2"], 2 * net.params["weight_2"])
    rebuilt = jax.tree_util.tree_unflatten(treedef, leaves)
    np.testing.assert_allclose(rebuilt(jnp.ones((4, 2))), net(jnp.ones((4, 2))))


def test_state_is_apart_from_the_parameters():
    from symnet._src.core.layer import FixedWeight

    x = Identity()
    net = Network((x @ Weight(np.ones((2, 3)), name="w")) * FixedWeight(np.full(3, 2.0), name="scale"))
    assert list(net.params) == ["w"] and list(net.state) == ["scale"]
    paths = [jax.tree_util.keystr(p) for p, _ in jax.tree_util.tree_flatten_with_path(net)[0]]
    assert paths == [".params['scale']", ".params['w']"][1:] + [".state['scale']"]
    grads = net.forward(jnp.ones((4, 2))).backward(1.0)
    assert list(grads) == ["w"]  # an optimiser over net.params never sees the state
    np.testing.assert_allclose(grads["w"], 4 * 2.0 * np.ones((2, 3)))
    moved = net.assign({"scale": jnp.full(3, 5.0)})
    np.testing.assert_allclose(moved(jnp.ones((1, 2))), [[10.0, 10.0, 10.0]])
    with pytest.raises(ParameterError):
        net.replace(state={"w": jnp.ones((2, 3))})
    with pytest.raises(ParameterError):
        net.assign({"nope": jnp.ones(3)})


def test_jit_takes_a_network_and_rebuilt_networks_share_the_compiled_code():
    traces = []

    @jax.jit
    def apply(net):
        traces.append(1)
        return net(3.0)

    assert float(apply(seed_net())) == 8.0
    assert float(apply(seed_net().replace(params={"scale": 4.0}))) == 16.0
    assert float(apply(seed_net())) == 8.0
    assert len(traces) == 1


def test_jit_cache_hit_on_a_rebuilt_deep_shared_network_is_fast():
    def chain():
        h = x * Weight(1.0, name="w")
        for _ in range(60):
            h = Tanh(h) + h * 0.5
        return Network(h)

    traces = []

    @jax.jit
    def apply(net):
        traces.append(1)
        return net(0.3)

    first = apply(chain())
    t0 = time.perf_counter()
    second = apply(chain())  # equal structure, separately built: compared, not retraced
    assert time.perf_counter() - t0 < 1.0
    assert len(traces) == 1 and float(first) == float(second)


def test_grad_takes_a_network_and_agrees_with_tape_backward():
    net = Network(mlp_expr())
    inp = jnp.array([[0.5, -1.0], [1.0, 2.0], [-0.3, 0.1]])

    def loss(n):
        return jnp.sum(n(inp) ** 2)

    grads = jax.grad(loss)(net)
    assert isinstance(grads, Network) and grads.structure == net.structure
    tape = net.forward(inp)
    tape_grads = tape.backward(2 * tape.value)
    for k in net.params:
        np.testing.assert_allclose(grads.params[k], tape_grads[k], rtol=1e-5, atol=1e-6)
    # and both equal a hand-written jnp function of the parameters
    names = ["weight", "bias", "weight_2", "bias_2"]  # w1, b1, w2, b2

    def by_hand(w1, b1, w2, b2):
        return jnp.sum((jax.nn.relu(inp @ w1 + b1) @ w2 + b2) ** 2)

    ref = jax.grad(by_hand, argnums=(0, 1, 2, 3))(*(net.params[k] for k in names))
    for k, r in zip(names, ref, strict=True):
        np.testing.assert_allclose(grads.params[k], r, rtol=1e-5, atol=1e-6)


def test_vmap_over_a_batch_of_networks():
    net = seed_net()
    stacked = jax.tree_util.tree_map(lambda a: jnp.stack([a, 2 * a, 3 * a]), net)
    np.testing.assert_allclose(jax.vmap(lambda n: n(3.0))(stacked), [8.0, 16.0, 24.0])
    np.testing.assert_allclose(jax.vmap(lambda p: net.forward(3.0, p).value)({"scale": jnp.arange(3.0)}), [0, 4, 8])


def test_vmap_and_jit_over_inputs_given_as_tapes():
    net = Network(Tanh(x * Weight(0.5, name="w")) + 1.0)
    xs = jnp.linspace(-2.0, 2.0, 5)
    out = jax.jit(jax.vmap(lambda n, v: n.forward(as_input(v)).value, in_axes=(None, 0)))(net, xs)
    np.testing.assert_allclose(out, np.tanh(0.5 * np.asarray(xs)) + 1.0, rtol=1e-6)


def test_jit_with_the_input_as_an_argument():
    net = seed_net()
    np.testing.assert_allclose(jax.jit(lambda n, v: n(v))(net, jnp.arange(3.0)), [2.0, 4.0, 6.0])


def test_vmap_over_plain_inputs():
    net = seed_net()
    np.testing.assert_allclose(jax.vmap(net)(jnp.arange(3.0)), [2.0, 4.0, 6.0])


def test_grad_with_respect_to_the_input():
    net = seed_net()
    assert float(jax.grad(lambda v: net(v))(3.0)) == 2.0


# ----- optax -----------------------------------------------------------------------------------------


def test_optax_update_with_grads_from_jax_grad_on_the_network():
    net = seed_net()
    opt = optax.sgd(0.1)
    state = opt.init(net)
    grads = jax.grad(lambda n: n(3.0))(net)  # d/dw (1+3)w = 4
    updates, state = opt.update(grads, state, net)
    new = optax.apply_updates(net, updates)
    assert isinstance(new, Network)
    np.testing.assert_allclose(new.params["scale"], 2.0 - 0.1 * 4.0, rtol=1e-6)


def test_optax_update_with_grads_from_tape_backward_on_params():
    net = seed_net()
    opt = optax.sgd(0.1)
    state = opt.init(net.params)
    grads = net.forward(3.0).backward(1.0)
    updates, state = opt.update(grads, state, net.params)
    new = net.replace(params=optax.apply_updates(net.params, updates))
    np.testing.assert_allclose(new.params["scale"], 1.6, rtol=1e-6)
    np.testing.assert_allclose(new(3.0), 6.4, rtol=1e-6)


def test_replace_checks_its_parameters():
    net = seed_net()
    assert float(net.replace(params={"scale": 1.0})(3.0)) == 4.0
    with pytest.raises(ParameterError, match="missing"):
        net.replace(params={})
    with pytest.raises(ParameterError, match=r"\(2,\)"):
        net.replace(params={"scale": jnp.ones(2)})
    with pytest.raises(ParameterError, match="other"):
        net.replace(params={"scale": 1.0, "other": 2.0})


def test_non_numeric_parameter_is_a_symnet_error():
    with pytest.raises(ParameterError, match="scale"):
        seed_net().forward(1.0, {"scale": "abc"})


def test_bad_initialiser_shape_is_a_symnet_error():
    with pytest.raises(SymnetError):
        Network(Weight(Glorot((3,))))


def test_shape_error_from_forward_names_shapes_and_line():
    line = next_line()
    net = Network(x @ Weight(np.ones((3, 2))) + 1.0)
    with pytest.raises(ShapeError) as info:
        net(np.ones((4, 5)))
    assert "(4, 5)" in str(info.value) and "(3, 2)" in str(info.value) and line in str(info.value)


def test_dims_that_do_not_fit_are_an_error_where_the_network_is_built():
    """Before: found at the first compute, quoting the minibatch's rows ("(128, 16)")."""
    features = Input("input", 16)
    line = next_line()
    hidden = ReLU(features @ Weight(Normal((20, 128), 0.1)))
    with pytest.raises(ShapeError, match=r"Dot: shapes \(1, 16\) @ \(20, 128\).*dim 16.*20 rows") as info:
        Network(hidden @ Weight(Normal((128, 5), 0.1)))
    assert line in str(info.value)


# ----- training ----------------------------------------------------------------------------------------


def test_seed_example_recovers_the_true_weight_with_jax_grad():
    rng = np.random.default_rng(0)
    xs = jnp.asarray(rng.uniform(-2.0, 2.0, size=64), jnp.float32)
    ys = (1.0 + xs) * 3.5
    net = seed_net()
    opt = optax.adam(0.1)
    state = opt.init(net)

    @jax.jit
    def step(net, state):
        loss, grads = jax.value_and_grad(lambda n: jnp.mean((n(xs) - ys) ** 2))(net)
        updates, state = opt.update(grads, state, net)
        return optax.apply_updates(net, updates), state, loss

    for _ in range(300):
        net, state, loss = step(net, state)
    assert abs(float(net.params["scale"]) - 3.5) < 1e-3 and float(loss) < 1e-5


def test_seed_example_recovers_the_true_weight_with_tape_backward():
    rng = np.random.default_rng(1)
    xs = jnp.asarray(rng.uniform(-2.0, 2.0, size=64), jnp.float32)
    ys = (1.0 + xs) * 3.5
    net = seed_net()
    opt = optax.adam(0.1)

    @jax.jit
    def step(params, state, xb, yb):
        tape = net.forward(as_input(xb), params)
        grads = tape.backward(2.0 * (tape.value - yb) / yb.size)
        updates, state = opt.update(grads, state, params)
        return optax.apply_updates(params, updates), state

    params, state = net.params, opt.init(net.params)
    for _ in range(300):
        params, state = step(params, state, xs, ys)
    np.testing.assert_allclose(params["scale"], 3.5, atol=1e-3)


def _regression_problem():
    rng = np.random.default_rng(0)
    inputs = rng.uniform(-1.0, 1.0, size=(128, 2))
    targets = (np.sin(2.0 * inputs[:, 0]) + inputs[:, 1] ** 2)[:, None]
    return jnp.asarray(inputs, jnp.float32), jnp.asarray(targets, jnp.float32)


def _mlp() -> Network:
    hidden = ReLU(x @ Weight(Glorot((2, 32))) + Weight(Zeros(32)))
    return Network(hidden @ Weight(Glorot((32, 1))) + Weight(Zeros(1)))


def test_two_layer_mlp_trains_to_low_loss_with_jax_grad_and_optax():
    inputs, targets = _regression_problem()
    net = _mlp()
    opt = optax.adam(0.02)
    state = opt.init(net)

    def loss(n, xb, yb):
        return jnp.mean((n.forward(as_input(xb)).value - yb) ** 2)

    @jax.jit
    def step(net, state, xb, yb):
        value, grads = jax.value_and_grad(loss)(net, xb, yb)
        updates, state = opt.update(grads, state, net)
        return optax.apply_updates(net, updates), state, value

    initial = float(loss(net, inputs, targets))
    for _ in range(600):
        net, state, _ = step(net, state, inputs, targets)
    final = float(loss(net, inputs, targets))
    assert final < 0.005 and final < initial / 50, (initial, final)


def _tape_step(net: Network, opt: optax.GradientTransformation, traces: list):
    def step(params, state, xb, yb):
        traces.append(1)
        tape = net.forward(as_input(xb), params)
        loss = jnp.mean((tape.value - yb) ** 2)
        grads = tape.backward(2.0 * (tape.value - yb) / yb.size)
        updates, state = opt.update(grads, state, params)
        return optax.apply_updates(params, updates), state, loss

    return step


def test_two_layer_mlp_trains_with_tape_backward_in_one_jitted_step():
    inputs, targets = _regression_problem()
    net = _mlp()
    opt = optax.adam(0.02)
    traces: list = []
    step = jax.jit(_tape_step(net, opt, traces), donate_argnums=(0, 1))
    params, state = net.params, opt.init(net.params)
    first = None
    for _ in range(600):
        params, state, loss = step(params, state, inputs, targets)
        first = float(loss) if first is None else first
    assert len(traces) == 1  # traced once: every later step is the compiled program alone
    final = float(jnp.mean((net.forward(inputs, params).value - targets) ** 2))
    assert final < 0.005 and final < first / 50, (first, final)


def _primitives(jaxpr) -> set[str]:
    """Every primitive in a jaxpr, including those in nested jaxprs (pjit, custom_jvp, cond, ...)."""
    names = set()
    for eqn in jaxpr.eqns:
        names.add(eqn.primitive.name)
        for value in eqn.params.values():
            for item in value if isinstance(value, (tuple, list)) else (value,):
                inner = item if hasattr(item, "eqns") else getattr(item, "jaxpr", None)
                if inner is not None and hasattr(inner, "eqns"):
                    names |= _primitives(inner)
    return names


def test_tape_train_step_is_one_xla_computation_equal_to_value_and_grad():
    inputs, targets = _regression_problem()
    net = _mlp()
    opt = optax.sgd(0.05)
    traces: list = []
    tape_step = _tape_step(net, opt, traces)

    def ref_step(params, state, xb, yb):
        def loss(p):
            return jnp.mean((net.forward(as_input(xb), p).value - yb) ** 2)

        value, grads = jax.value_and_grad(loss)(params)
        updates, state = opt.update(grads, state, params)
        return optax.apply_updates(params, updates), state, value

    args = (net.params, opt.init(net.params), inputs, targets)
    jaxpr = jax.make_jaxpr(tape_step)(*args)
    prims = _primitives(jaxpr.jaxpr)
    assert not {p for p in prims if "callback" in p}, prims  # nothing returns to Python per step
    assert "dot_general" in prims
    compiled = jax.jit(tape_step).lower(*args).compile()
    assert compiled.as_text().count("ENTRY ") == 1
    new_tape, _, loss_tape = compiled(*args)
    new_ref, _, loss_ref = jax.jit(ref_step)(*args)
    np.testing.assert_allclose(loss_tape, loss_ref, rtol=1e-6)
    for k in new_ref:
        np.testing.assert_allclose(new_tape[k], new_ref[k], rtol=1e-5, atol=1e-6)


# ----- benchmark ---------------------------------------------------------------------------------------


def test_core_step_benchmark_runs_and_reports():
    spec = importlib.util.spec_from_file_location("core_step", REPO / "benchmarks" / "core_step.py")
    module = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(module)
    result = module.main(steps=30, warmup=2, batch=16, n_in=4, hidden=8, n_out=3, verbose=False)
    assert {"tape_ms", "autodiff_ms", "ratio", "relative_grad_error"} <= set(result)
    assert result["tape_ms"] > 0 and result["autodiff_ms"] > 0
    assert math.isclose(result["ratio"], result["tape_ms"] / result["autodiff_ms"])
    assert result["relative_grad_error"] < 1e-5
    with pytest.raises(ValueError):
        module.main(steps=10, verbose=False)
    net = module.mlp(4, 8, 3)
    assert isinstance(net.output, LogSoftmax)


def test_select_keeps_the_arrays_of_the_outputs_it_keeps_and_renames():
    from symnet import FixedWeight, Input

    x = Input("input", 3)
    h = Node("h", Tanh(x @ Weight(Normal((3, 4), 1.0)) * FixedWeight(Uniform((4,), 0.5, 1.5))))
    net = Network(
        {"output": LogSoftmax(h @ Weight(Normal((4, 2), 1.0))), "output-xent": h @ Weight(Normal((4, 5), 1.0))}
    )
    trained = net.assign({name: jnp.full(np.shape(v), 0.3) for name, v in net.values.items()})
    xent = trained.select({"output": "output-xent"})
    assert list(xent.outputs) == ["output"] and set(xent.values) < set(trained.values)
    for name, value in xent.values.items():
        np.testing.assert_array_equal(np.asarray(value), np.asarray(trained.values[name]))
    features = np.random.default_rng(0).standard_normal((1, 6, 3)).astype(np.float32)
    np.testing.assert_allclose(
        np.asarray(xent.compute(features)), np.asarray(trained.compute(features, output="output-xent")), rtol=1e-6
    )
    assert list(trained.select(["output"]).outputs) == ["output"]
    with pytest.raises(GraphError, match=r"select: no output\(s\) \['nope'\]"):
        trained.select({"output": "nope"})
