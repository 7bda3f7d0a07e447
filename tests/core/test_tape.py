"""The Tape: forward builds it shaped like the layer tree; backward walks it once and equals jax.grad."""

from __future__ import annotations

import inspect
import time
from typing import Any

import jax
import jax.numpy as jnp
import numpy as np
import pytest
from hypothesis import HealthCheck, assume, given, settings
from hypothesis import strategies as st

from symnet import (
    Divide,
    Dot,
    Exp,
    Glorot,
    Identity,
    Layer,
    LayerTypeError,
    Literal,
    Log,
    LogSoftmax,
    Minus,
    Negate,
    Network,
    Normal,
    ParameterError,
    Plus,
    Power,
    ReLU,
    ShapeError,
    Sigmoid,
    Softmax,
    Tanh,
    Times,
    Uniform,
    Weight,
    Zeros,
)
from symnet._src.core.elementwise import Elementwise
from symnet._src.core.layer import layer_class
from symnet._src.core.tape import Tape


def next_line() -> str:
    frame = inspect.currentframe().f_back
    return f"{frame.f_code.co_filename}:{frame.f_lineno + 1}"


def x64():
    """float64 for one block only (tests run in parallel processes; nothing leaks out of the block)."""
    if hasattr(jax, "enable_x64"):
        return jax.enable_x64(True)
    from jax.experimental import enable_x64  # older JAX

    return enable_x64()


x = Identity()


# ----- forward --------------------------------------------------------------------------------


def test_forward_builds_a_tape_shaped_like_the_layer_tree():
    w = Weight(2.0, name="w")
    net = (1.0 + x) * w
    tape = net.forward(Literal(3.0))
    assert isinstance(tape, Tape) and isinstance(tape.value, jax.Array)
    assert float(tape.value) == 8.0
    assert tape.layer == net
    plus, weight = tape.upstream
    assert plus.layer == 1.0 + x and float(plus.value) == 4.0
    assert weight.layer == w and float(weight.value) == 2.0 and weight.upstream == ()
    one, inp = plus.upstream
    assert one.layer == Literal(1.0) and float(one.value) == 1.0
    assert inp.layer == Literal(3.0) and float(inp.value) == 3.0
    # every node exposes layer, value and upstream tapes
    for node in tape.nodes():
        assert isinstance(node.layer, Layer) and isinstance(node.value, jax.Array)
        assert tuple(u.layer for u in node.upstream) == tuple(
            c if not isinstance(c, Identity) else Literal(3.0) for c in node.layer.children
        )


@pytest.mark.parametrize("inp", [3.0, 3, np.float32(3.0), np.array(3.0), jnp.array(3.0), Literal(3.0)])
def test_forward_accepts_numbers_arrays_and_literals_as_input(inp):
    tape = ((1.0 + x) * Weight(2.0)).forward(inp)
    assert float(tape.value) == 8.0


def test_identity_forward_returns_the_given_tape():
    t = (x * 2.0).forward(5.0)
    assert x.forward(t) is t
    # and layers chain on tapes: the result's upstream is the given tape itself
    t2 = (x + 1.0).forward(t)
    assert t2.upstream[0] is t and float(t2.value) == 11.0


def test_forward_uses_initial_values_unless_params_are_given():
    w = Weight(np.array([1.0, 2.0]), name="w")
    b = Weight(0.5, name="b")
    net = x * w + b
    np.testing.assert_allclose(net.forward(2.0).value, [2.5, 4.5])
    np.testing.assert_allclose(net.forward(2.0, {"w": jnp.array([3.0, -1.0]), "b": 1.0}).value, [7.0, -1.0])


def test_tape_find_and_iteration_expose_intermediate_values():
    h = ReLU(x - 1.0)
    net = h * h + Weight(1.0, name="w")
    tape = net.forward(jnp.array([0.0, 3.0]))
    np.testing.assert_allclose(tape.find(h).value, [0.0, 2.0])
    np.testing.assert_allclose(tape.find(x - 1.0).value, [-1.0, 2.0])
    assert {n.layer for n in tape} >= {h, h * h, x - 1.0}
    with pytest.raises(KeyError):
        tape.find(Tanh(x))


def test_nodes_are_in_topological_order_each_once():
    a = Tanh(x * Weight(0.5, name="w"))
    b = a * a
    net = (b + a) * b
    tape = net.forward(jnp.arange(3.0))
    order = tape.nodes()
    assert len(order) == len({id(n) for n in order})
    position = {id(n): i for i, n in enumerate(order)}
    for node in order:
        for up in node.upstream:
            assert position[id(up)] < position[id(node)]
    assert order[-1] is tape
    # one node per distinct layer object: x, w, x*w, a, a*a, b+a, (b+a)*b
    assert len(order) == 7


# ----- backward -----------------------------------------------------------------------------


def test_seed_example_gradient():
    net = (1.0 + x) * Weight(2.0, name="w")
    tape = net.forward(Literal(3.0))
    grads = tape.backward(1.0)
    assert set(grads) == {"w"} and float(grads["w"]) == 4.0
    assert float(tape.backward(0.5)["w"]) == 2.0


def test_backward_broadcasts_a_scalar_delta_and_accepts_a_full_one():
    w = Weight(np.ones(3), name="w")
    net = x * w
    tape = net.forward(jnp.ones((2, 3)) * jnp.array([[1.0], [2.0]]))
    np.testing.assert_allclose(tape.backward()["w"], [3.0, 3.0, 3.0])
    np.testing.assert_allclose(tape.backward(2.0)["w"], [6.0, 6.0, 6.0])
    delta = jnp.array([[1.0, 0.0, 2.0], [1.0, 1.0, 0.0]])
    np.testing.assert_allclose(tape.backward(delta)["w"], [3.0, 2.0, 2.0])
    np.testing.assert_allclose(tape.backward(np.asarray(delta).tolist())["w"], [3.0, 2.0, 2.0])


def test_shared_weight_and_shared_subtree_deltas_are_summed():
    w = Weight(3.0)
    net = w * w + w  # one parameter, three uses: d/dw = 2w + 1
    (name,) = Network(net).params
    assert float(net.forward().backward()[name]) == 7.0
    h = Tanh(x * Weight(0.7, name="v"))
    net2 = h * h + h
    tape = net2.forward(0.3)
    deltas = tape.backward_deltas(1.0)
    hv = float(tape.find(h).value)
    np.testing.assert_allclose(float(deltas[tape.find(h)]), 2 * hv + 1, rtol=1e-6)
    ref = jax.grad(lambda v: jnp.tanh(0.3 * v) ** 2 + jnp.tanh(0.3 * v))(0.7)
    np.testing.assert_allclose(tape.backward()["v"], ref, rtol=1e-5)


def test_gradients_cover_every_parameter_shaped_like_it():
    net = Network({"out": x * Weight(np.ones((2, 2)), name="a"), "aux": Weight(Zeros((4,)), name="b") + 1.0})
    tapes = net.forward(jnp.ones((2, 2)))
    grads = tapes["out"].backward(1.0)
    assert set(grads) == set(net.params) == {"a", "b"}
    for name in net.params:
        assert grads[name].shape == net.params[name].shape
    np.testing.assert_array_equal(grads["b"], np.zeros(4))  # not reached from this output
    np.testing.assert_array_equal(tapes["aux"].backward(1.0)["b"], np.ones(4))


def test_chained_tapes_pass_gradients_into_the_first_run_and_sum_shared_names():
    first = x * Weight(2.0, name="w")
    second = Tanh(x) * Weight(2.0, name="w") + Weight(0.5, name="u")
    t1 = first.forward(1.5)
    t2 = second.forward(t1)
    grads = t2.backward(1.0)

    def f(w, u):
        h = 1.5 * w
        return jnp.tanh(h) * w + u

    gw, gu = jax.grad(f, argnums=(0, 1))(2.0, 0.5)
    np.testing.assert_allclose(grads["w"], gw, rtol=1e-5)  # both uses of the name 'w' summed
    np.testing.assert_allclose(grads["u"], gu, rtol=1e-6)


@layer_class
class _CountedTanh(Elementwise):
    """tanh whose backward counts its calls (to prove each tape node is visited once)."""

    calls = [0]

    def apply(self, a):
        return jnp.tanh(a)

    def vjp(self, d, value, a):
        _CountedTanh.calls[0] += 1
        return (d * (1.0 - value * value),)


def test_sixty_levels_of_double_use_backward_is_linear_and_right():
    # level k+1 uses level k twice: 2**60 paths from the output to the input.
    w = Weight(0.9, name="w")
    h = x * w
    for _ in range(60):
        h = _CountedTanh(h * w) + h * 0.5
    tape = h.forward(0.8)
    _CountedTanh.calls[0] = 0
    t0 = time.perf_counter()
    grads = tape.backward(1.0)
    jax.block_until_ready(grads)
    elapsed = time.perf_counter() - t0
    assert _CountedTanh.calls[0] == 60  # each tape node pulled back once
    assert elapsed < 1.0, elapsed

    def f(w):
        h = 0.8 * w
        for _ in range(60):
            h = jnp.tanh(h * w) + h * 0.5
        return h

    np.testing.assert_allclose(tape.value, f(0.9), rtol=1e-5)
    np.testing.assert_allclose(grads["w"], jax.grad(f)(0.9), rtol=1e-4)


def test_backward_inside_jit_equals_eager():
    net = Network(Softmax(ReLU(x @ Weight(Normal((3, 4)), name="m")) * Weight(Uniform((4,)), name="s")))
    inp = jnp.arange(6.0).reshape(2, 3) / 6.0
    delta = jnp.array([[1.0, -2.0, 0.5, 0.0], [0.3, 0.2, 0.1, -1.0]])

    @jax.jit
    def grads(params):
        return net.forward(inp, params).backward(delta)

    eager = net.forward(inp).backward(delta)
    jitted = grads(net.params)
    for k in eager:
        np.testing.assert_allclose(jitted[k], eager[k], rtol=1e-6, atol=1e-7)


# ----- errors -----------------------------------------------------------------------------------


def test_delta_of_the_wrong_shape_is_a_shape_error_naming_both_shapes_and_the_line():
    line = next_line()
    net = x * Weight(np.ones(3), name="w")
    tape = net.forward(jnp.ones((2, 3)))
    for bad in (np.ones(3), np.ones((3, 2)), np.ones((1, 2, 3)), [1.0, 2.0]):
        with pytest.raises(ShapeError) as info:
            tape.backward(bad)
        message = str(info.value)
        assert str(np.shape(bad)) in message and "(2, 3)" in message and line in message


@pytest.mark.parametrize("bad", ["abc", None, {"a": 1}])
def test_non_numeric_delta_is_a_symnet_type_error(bad):
    tape = (x * Weight(1.0, name="w")).forward(1.0)
    with pytest.raises(LayerTypeError, match="delta"):
        tape.backward(bad)


def test_shapes_that_do_not_broadcast_name_both_shapes_and_the_users_line():
    line = next_line()
    net = x + Weight(np.ones(3), name="w")
    with pytest.raises(ShapeError) as info:
        net.forward(np.ones(4))
    message = str(info.value)
    assert "(4,)" in message and "(3,)" in message and "Plus" in message and line in message
    line = next_line()
    net = x @ Weight(np.ones((3, 2)), name="m")
    with pytest.raises(ShapeError) as info:
        net.forward(np.ones((5, 4)))
    message = str(info.value)
    assert "(5, 4)" in message and "(3, 2)" in message and line in message
    with pytest.raises(ShapeError, match="scalar"):
        Softmax(x).forward(1.0)


def test_parameters_missing_or_misshapen_for_forward():
    line = next_line()
    net = x * Weight(np.ones(3), name="w") + Weight(1.0, name="b")
    with pytest.raises(ParameterError) as info:
        net.forward(1.0, {"b": 1.0})
    assert "'w'" in str(info.value) and line in str(info.value)
    with pytest.raises(ParameterError) as info:
        net.forward(1.0, {"w": np.ones(4), "b": 1.0})
    assert "'w'" in str(info.value) and "(4,)" in str(info.value) and "(3,)" in str(info.value)
    assert line in str(info.value)
    with pytest.raises(ParameterError, match="zz"):
        net.forward(1.0, {"w": np.ones(3), "b": 1.0, "zz": 2.0})


# ----- property: tape.backward == jax.grad of an independent interpreter -------------------------


def reference(root: Layer, inp: jax.Array, values: dict[int, jax.Array]) -> jax.Array:
    """Evaluate a layer tree with plain jnp, written independently of symnet's apply/vjp.

    `values` maps id(Weight object) -> array. Shared sub-trees are evaluated once per call.
    """
    memo: dict[int, jax.Array] = {}

    def ev(layer: Layer) -> jax.Array:
        key = id(layer)
        if key in memo:
            return memo[key]
        match layer:
            case Identity():
                out = inp
            case Weight():
                out = values[id(layer)]
            case Literal(value=v):
                out = jnp.asarray(v.array if hasattr(v, "array") else v, dtype=jnp.float64)
            case Plus(a, b):
                out = ev(a) + ev(b)
            case Minus(a, b):
                out = ev(a) - ev(b)
            case Times(a, b):
                out = ev(a) * ev(b)
            case Divide(a, b):
                out = ev(a) / ev(b)
            case Dot(a, b):
                out = jnp.matmul(ev(a), ev(b))
            case Negate(a):
                out = -ev(a)
            case Power(a, p):
                out = jnp.power(ev(a), p)
            case Exp(a):
                out = jnp.exp(ev(a))
            case Log(a):
                out = jnp.log(ev(a))
            case Tanh(a):
                out = jnp.tanh(ev(a))
            case Sigmoid(a):
                out = 1.0 / (1.0 + jnp.exp(-ev(a)))
            case ReLU(a):
                out = jax.nn.relu(ev(a))
            case Softmax(a):
                out = jax.nn.softmax(ev(a), axis=-1)
            case LogSoftmax(a):
                out = jax.nn.log_softmax(ev(a), axis=-1)
            case _:
                raise AssertionError(f"no reference for {type(layer).__name__}")
        memo[key] = out
        return out

    return ev(root)


def weight_names(original: Layer, canonical: Layer) -> dict[int, str]:
    """id(Weight object in the original tree) -> its parameter name, by walking both trees in step."""
    names: dict[int, str] = {}
    stack = [(original, canonical)]
    seen: set[int] = set()
    while stack:
        o, c = stack.pop()
        if id(o) in seen:
            continue
        seen.add(id(o))
        assert type(o) is type(c)
        if isinstance(o, Weight):
            assert c.init == o.init and (o.name is None or c.name == o.name)
            names[id(o)] = c.name
        stack.extend(zip(o.children, c.children, strict=True))
    return names


@st.composite
def expressions(draw) -> tuple[Layer, tuple[int, ...], list[Weight]]:
    """A random DAG over the core layers whose shapes all broadcast to one full shape F.

    Returns (root, input shape, weights). Sub-trees are reused (shared), Weights are
    reused as objects and by explicit name, Dot multiplies by matrices on either side.
    """
    rank = draw(st.integers(0, 3))
    # Fixed, distinct trailing sizes: an axis mix-up cannot go unnoticed, and the few
    # shapes that occur keep JAX's per-shape compilations (the test's main cost) cached.
    full = (2, 3, 4)[3 - rank :]
    rng = np.random.default_rng(draw(st.integers(0, 2**32 - 1)))

    def sub_shape() -> tuple[int, ...]:
        k = draw(st.integers(0, rank))
        return tuple(d if draw(st.booleans()) else 1 for d in full[rank - k :])

    weights: list[Weight] = []
    named: dict[str, Any] = {}

    def new_weight(shape: tuple[int, ...]) -> Weight:
        kind = draw(st.sampled_from(["number", "array", "normal", "uniform", "glorot", "zeros", "named", "reuse"]))
        if kind == "reuse":
            same = [w for w in weights if w.shape == shape]
            if same:
                return draw(st.sampled_from(same))  # the same object again: one parameter
            kind = "array"
        if kind == "named":
            # explicit name; a second Weight object with this name and init is the same parameter
            name = f"{draw(st.sampled_from(['p', 'q']))}{'_'.join(map(str, shape))}"
            init = named.setdefault(name, rng.normal(size=shape) if shape else float(rng.normal()))
            w = Weight(init, name=name)
        elif not shape:
            w = Weight(float(rng.normal()))
        elif kind in ("number", "array"):
            w = Weight(rng.normal(size=shape))
        elif kind == "normal":
            w = Weight(Normal(shape, 0.7))
        elif kind == "uniform":
            w = Weight(Uniform(shape, -1.0, 1.0))
        elif kind == "glorot" and len(shape) == 2:
            w = Weight(Glorot(shape))
        else:
            w = Weight(Zeros(shape) if draw(st.booleans()) else Normal(shape))
        weights.append(w)
        return w

    def literal(shape: tuple[int, ...]) -> Literal:
        return Literal(rng.normal(size=shape) if shape else round(float(rng.normal()), 3))

    in_shape = sub_shape()
    pool: list[tuple[Layer, tuple[int, ...]]] = [(x, in_shape), (new_weight(sub_shape()), None)]
    pool[1] = (pool[1][0], pool[1][0].shape)

    def pick() -> tuple[Layer, tuple[int, ...]]:
        # favour recent nodes so trees grow deep, but reach back for sharing
        i = draw(st.integers(0, len(pool) - 1))
        j = draw(st.integers(max(0, len(pool) - 3), len(pool) - 1))
        return pool[max(i, j) if draw(st.booleans()) else i]

    for _ in range(draw(st.integers(1, 10))):
        op = draw(st.sampled_from(["binary", "binary", "unary", "unary", "divide", "dot", "leaf", "power"]))
        if op == "leaf":
            s = sub_shape()
            pool.append((new_weight(s), s) if draw(st.booleans()) else (literal(s), s))
            continue
        a, sa = pick()
        if op == "binary":
            b, sb = pick()
            cls = draw(st.sampled_from([Plus, Minus, Times]))
            node, shape = cls(a, b), np.broadcast_shapes(sa, sb)
        elif op == "divide":
            b, sb = pick()
            node, shape = a / (2.0 + Tanh(b)), np.broadcast_shapes(sa, sb)
        elif op == "power":
            p = draw(st.sampled_from([2.0, 3.0, 1.0, 0.5, -1.0, 1.5]))
            base = a if p in (1.0, 2.0, 3.0) else Sigmoid(a) + 0.5  # positive base for fractional powers
            node, shape = base**p, sa
        elif op == "unary":
            kind = draw(st.sampled_from(["neg", "exp", "log", "tanh", "sigmoid", "relu", "softmax", "logsoftmax"]))
            if kind in ("softmax", "logsoftmax") and not sa:
                kind = "tanh"
            node = {
                "neg": lambda v: -v,
                "exp": lambda v: Exp(Tanh(v)),
                "log": lambda v: Log(Sigmoid(v)),
                "tanh": Tanh,
                "sigmoid": Sigmoid,
                "relu": ReLU,
                "softmax": Softmax,
                "logsoftmax": LogSoftmax,
            }[kind](a)
            shape = sa
        else:  # dot, keeping the result broadcastable to F
            n = full[-1] if rank >= 1 else None
            m = full[-2] if rank >= 2 else None
            choices = []
            if n is not None and sa and sa[-1] == n:
                choices += ["right_square", "right_column"]
                if len(sa) == 1:
                    choices.append("left_vector")
            if m is not None and len(sa) >= 2 and sa[-2] == m:
                choices += ["left_square", "left_row"]
            if not choices:
                node, shape = Tanh(a), sa
            else:
                how = draw(st.sampled_from(choices))
                if how == "right_square":
                    node, shape = a @ new_weight((n, n)), sa
                elif how == "right_column":
                    node, shape = a @ new_weight((n, 1)), sa[:-1] + (1,)
                elif how == "left_vector":
                    node, shape = new_weight((n, n)) @ a, sa
                elif how == "left_square":
                    node, shape = new_weight((m, m)) @ a, sa
                else:
                    node, shape = new_weight((1, m)) @ a, sa[:-2] + (1, sa[-1])
        pool.append((node, tuple(shape)))

    root, _ = pool[-1]
    if draw(st.booleans()):
        other, _ = pick()
        root = root + other  # a second use of an earlier node at the top
    if not _reaches_weight(root):
        root = root * new_weight(sub_shape())
    return root, in_shape, weights


def _reaches_weight(root: Layer) -> bool:
    stack, seen = [root], set()
    while stack:
        layer = stack.pop()
        if isinstance(layer, Weight):
            return True
        if id(layer) not in seen:
            seen.add(id(layer))
            stack.extend(layer.children)
    return False


@settings(max_examples=40, deadline=None, suppress_health_check=[HealthCheck.too_slow, HealthCheck.filter_too_much])
@given(expressions(), st.integers(0, 2**32 - 1))
def test_tape_backward_equals_jax_grad_of_an_independent_interpreter(case, seed):
    root, in_shape, _ = case
    with x64():
        net = Network(root)
        assert net.params  # the generator puts a Weight in every tree
        names = weight_names(root, net.output)
        rng = np.random.default_rng(seed)
        inp = jnp.asarray(rng.normal(size=in_shape))
        tape = net.forward(inp)
        assert tape.value.dtype == jnp.float64
        delta = jnp.asarray(rng.normal(size=tape.shape))

        def f(params):
            return reference(root, inp, {i: params[name] for i, name in names.items()})

        value = f(net.params)
        assert value.shape == tape.shape
        assume(bool(jnp.all(jnp.isfinite(value))) and float(jnp.max(jnp.abs(value), initial=0.0)) < 1e6)
        ref_grads = jax.grad(lambda p: jnp.sum(f(p) * delta))(net.params)
        grads = tape.backward(delta)

        def close(got, want):
            scale = max(float(jnp.max(jnp.abs(want), initial=0.0)), 1e-8)
            return float(jnp.max(jnp.abs(got - want), initial=0.0)) <= 1e-5 * scale

        assert close(tape.value, value)
        assert set(grads) == set(ref_grads) == set(net.params)
        for name in net.params:
            assert grads[name].shape == net.params[name].shape
            assert bool(jnp.all(jnp.isfinite(ref_grads[name])))
            assert close(grads[name], ref_grads[name]), (name, grads[name], ref_grads[name], repr(net.output))
