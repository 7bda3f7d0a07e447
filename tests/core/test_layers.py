"""Layers as immutable expression trees: operators, equality, match, repr, Weight identity, source lines, errors."""

from __future__ import annotations

import inspect
import os
import subprocess
import sys
import time

import attrs
import jax.numpy as jnp
import numpy as np
import pytest
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st
from numpy import array  # noqa: F401  (repr of array literals evaluates with it)

import symnet
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
    Normal,
    Plus,
    Power,
    ReLU,
    Sigmoid,
    Softmax,
    SymnetError,
    Tanh,
    Times,
    Uniform,
    Weight,
    Zeros,
)
from symnet._src.core import operators
from symnet._src.core.frozen import FrozenArray

THIS_FILE = os.path.abspath(__file__)


def here() -> str:
    """`file:line` of the caller's line (the line that built the layer under test)."""
    frame = inspect.currentframe().f_back
    return f"{frame.f_code.co_filename}:{frame.f_lineno}"


def next_line() -> str:
    """`file:line` of the line after the caller's (where a statement that raises is)."""
    frame = inspect.currentframe().f_back
    return f"{frame.f_code.co_filename}:{frame.f_lineno + 1}"


x = Identity()


# ----- operators build trees ------------------------------------------------------------


@pytest.mark.parametrize(
    "build, cls",
    [
        (lambda a, b: a + b, Plus),
        (lambda a, b: a - b, Minus),
        (lambda a, b: a * b, Times),
        (lambda a, b: a / b, Divide),
        (lambda a, b: a @ b, Dot),
    ],
)
def test_binary_operators_build_the_named_class_in_operand_order(build, cls):
    w = Weight(2.0, name="w")
    tree = build(x, w)
    assert type(tree) is cls
    assert tree.lhs is x and tree.rhs is w
    assert tree.children == (x, w)
    flipped = build(w, x)
    assert flipped.lhs is w and flipped.rhs is x
    assert flipped != tree


@pytest.mark.parametrize(
    "build, cls, literal_side",
    [
        (lambda v: v + x, Plus, "lhs"),
        (lambda v: x + v, Plus, "rhs"),
        (lambda v: v - x, Minus, "lhs"),
        (lambda v: x - v, Minus, "rhs"),
        (lambda v: v * x, Times, "lhs"),
        (lambda v: x / v, Divide, "rhs"),
        (lambda v: v / x, Divide, "lhs"),
    ],
)
@pytest.mark.parametrize("value", [2, 2.5, np.float64(2.5), np.float32(2.5), np.ones(3), jnp.ones((2, 3))])
def test_numbers_and_arrays_on_either_side_become_literals(build, cls, literal_side, value):
    tree = build(value)
    assert type(tree) is cls
    lit = getattr(tree, literal_side)
    other = tree.rhs if literal_side == "lhs" else tree.lhs
    assert isinstance(lit, Literal)
    assert other is x
    np.testing.assert_array_equal(np.asarray(lit.array), np.asarray(value, dtype=np.float32))


def test_numpy_array_on_the_left_of_matmul_defers_to_the_layer():
    m = np.arange(6.0).reshape(2, 3)
    tree = m @ x
    assert type(tree) is Dot and isinstance(tree.lhs, Literal) and tree.rhs is x
    np.testing.assert_array_equal(tree.lhs.value.array, m)


def test_unary_operators_and_power():
    assert type(-x) is Negate and (-x).arg is x
    assert +x is x
    p = x**2
    assert type(p) is Power and p.arg is x and p.exponent == 2.0 and isinstance(p.exponent, float)


def test_operators_find_their_classes_with_only_the_layer_module_imported():
    """`Layer` cannot import the arithmetic layers (a cycle): the first operator has the core package import them."""
    code = (
        "import sys\n"
        "from symnet._src.core.layer import Identity, Weight\n"
        "before = 'symnet._src.core.arithmetic' in sys.modules\n"
        "tree = (1.0 + Identity()) @ Weight(2.0)\n"
        "print(before, type(tree).__name__, type(tree.lhs).__module__)"
    )
    run = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, check=True)
    assert run.stdout.split() == ["False", "Dot", "symnet._src.core.arithmetic"]


def test_an_operator_whose_class_is_not_registered_is_an_error(monkeypatch):
    monkeypatch.setattr(operators, "_CLASSES", {})
    monkeypatch.setattr(operators, "_LOADERS", [])
    with pytest.raises(LayerTypeError, match="no layer class 'Plus' is registered"):
        x + 1.0


def test_functions_wrap_one_operand():
    for cls in (Exp, Log, Tanh, Sigmoid, ReLU, Softmax, LogSoftmax):
        layer = cls(x + 1.0)
        assert layer.children == (x + 1.0,)
        assert layer.arg == x + 1.0


def test_literal_stores_a_frozen_copy():
    source = np.array([1.0, 2.0, 3.0])
    lit = Literal(source)
    source[0] = 100.0
    assert isinstance(lit.value, FrozenArray)
    np.testing.assert_array_equal(lit.value.array, [1.0, 2.0, 3.0])
    with pytest.raises(ValueError):
        lit.value.array[0] = 5.0
    assert Literal(3) == Literal(3.0) and Literal(np.float64(3.0)) == Literal(3.0)
    assert isinstance(Literal(3).value, float)


# ----- immutability, equality, hashing ---------------------------------------------------


def test_layers_are_frozen_and_slotted():
    tree = (1.0 + x) * Weight(2.0, name="w")
    with pytest.raises(attrs.exceptions.FrozenInstanceError):
        tree.lhs = x
    with pytest.raises(attrs.exceptions.FrozenInstanceError):
        tree.where = "elsewhere"
    assert not hasattr(tree, "__dict__")


def test_equality_and_hash_are_structural_and_ignore_the_source_line():
    a = (1.0 + x) * Weight(2.0, name="w")
    b = (1.0 + Identity()) * Weight(2.0, name="w")  # built on another line, from new objects
    assert a is not b and a.where != b.where
    assert a == b and hash(a) == hash(b)
    assert len({a, b}) == 1
    assert {a: "first"}[b] == "first"
    assert a != (1.0 + x) * Weight(2.5, name="w")
    assert a != (1.0 + x) * Weight(2.0, name="v")
    assert a != (2.0 + x) * Weight(2.0, name="w")
    assert a != (1.0 + x) + Weight(2.0, name="w")  # Plus, not Times
    assert Literal(np.ones(3)) == Literal(np.ones(3)) and Literal(np.ones(3)) != Literal(np.ones(4))
    assert Literal(np.ones(3)) != Literal(np.ones(3) * 2)


def test_eq_is_never_a_graph_operation():
    w = Weight(1.0, name="w")
    for result in (x == x, x == w, x != w, x == 3.0, w == np.ones(3), x == "x"):
        assert isinstance(result, bool)
    assert (x == x) is True and (x == w) is False and (x != w) is True and (x == 3.0) is False
    assert x in [w, x]
    assert bool(x + 1.0 == x + 1.0) is True


def test_match_statements_destructure_trees():
    tree = (1.0 + x) * Weight(2.0, name="w")
    match tree:
        case Times(Plus(Literal(c), Identity()), Weight(init, name)):
            assert (c, init, name) == (1.0, 2.0, "w")
        case _:
            pytest.fail("pattern did not match")

    def fold(layer: Layer) -> Layer:
        """Constant folding written with `match`, recursing through children."""
        layer = layer.with_children(tuple(fold(c) for c in layer.children))
        match layer:
            case Plus(Literal(float(a)), Literal(float(b))):
                return Literal(a + b)
            case Times(Literal(1.0), rhs):
                return rhs
            case _:
                return layer

    folded = fold(Times(Plus(Literal(0.5), Literal(0.5)), x * Plus(Literal(1.0), Literal(2.0))))
    assert folded == x * 3.0
    assert Power.__match_args__ == ("arg", "exponent")
    assert Weight.__match_args__ == ("init", "name")


def test_with_children_replaces_operands_and_keeps_the_line():
    tree = ReLU(x + 1.0)
    same = tree.with_children(tree.children)
    assert same is tree
    other = tree.with_children((x * 2.0,))
    assert other == ReLU(x * 2.0) and other.where == tree.where


def _chain(depth: int, leaf: float = 1.0) -> Layer:
    h = x * Weight(leaf, name="w")
    for _ in range(depth):
        h = (h + h) * 0.5
    return h


def test_equality_of_separately_built_shared_dags_is_not_exponential():
    # 2**60 paths: attrs' recursive == would never finish on two distinct copies.
    a, b = _chain(60), _chain(60)
    assert a is not b
    t0 = time.perf_counter()
    assert a == b
    assert not (a != b)
    assert a != _chain(60, leaf=2.0)  # differs only at the deepest leaf
    assert a != _chain(59)
    assert hash(a) == hash(b)
    assert time.perf_counter() - t0 < 0.5
    assert len(repr(a)) < 5000  # repr stays finite too


# ----- repr --------------------------------------------------------------------------------


def _has_unnamed_weight(layer: Layer) -> bool:
    return (isinstance(layer, Weight) and layer.name is None) or any(map(_has_unnamed_weight, layer.children))


@pytest.mark.parametrize(
    "tree, text",
    [
        ((1.0 + x) * Weight(2.0, name="w"), "(1.0 + x) * Weight(2.0, name='w')"),
        ((1.0 + x) * Weight(2.0), "(1.0 + x) * Weight(2.0)"),
        (x - (x - 1.0), "x - (x - 1.0)"),
        ((x - 1.0) - x, "x - 1.0 - x"),
        (x / (x * x), "x / (x * x)"),
        (x * x / x, "x * x / x"),
        (-(x + 1.0), "-(x + 1.0)"),
        (-x * 2.0, "-x * 2.0"),
        (-(x * 2.0), "-(x * 2.0)"),
        (-(x**2), "-x ** 2.0"),
        ((-x) ** 2, "(-x) ** 2.0"),
        ((x**2) ** 3, "(x ** 2.0) ** 3.0"),
        (x - -x, "x - -x"),
        (2.0 - x, "2.0 - x"),
        (Literal(1.0) + 2.0, "Literal(1.0) + 2.0"),
        (
            ReLU(x @ Weight(Normal((2, 3), 0.1), name="w") + Weight(Zeros(3), name="b")),
            "ReLU(x @ Weight(Normal(shape=(2, 3), stddev=0.1, mean=0.0), name='w') "
            "+ Weight(Zeros(shape=(3,)), name='b'))",
        ),
        (x @ Weight(Glorot((4, 4)), name="w") * 2.0, "x @ Weight(Glorot(shape=(4, 4)), name='w') * 2.0"),
        (
            x * (x @ Weight(Uniform((1, 1)), name="u")),
            "x * (x @ Weight(Uniform(shape=(1, 1), low=-1.0, high=1.0), name='u'))",
        ),
        (LogSoftmax(Exp(x) + Log(Sigmoid(Tanh(x)))), "LogSoftmax(Exp(x) + Log(Sigmoid(Tanh(x))))"),
        (x + np.array([1.0, 2.0]), "x + array([1., 2.])"),
    ],
)
def test_repr_reads_like_the_python_expression(tree, text):
    assert repr(tree) == text
    if "array" not in text and not _has_unnamed_weight(tree):
        # and evaluating it builds an equal tree (unnamed Weights are new parameters, never equal)
        names = {**{n: getattr(symnet, n) for n in symnet.__all__}, "x": x}  # the lazy names too
        assert eval(text, names) == tree


# A small random-tree strategy for the repr round trip (named weights, so trees compare equal).
_leaf = st.one_of(
    st.just(x),
    st.floats(-5, 5, allow_nan=False).map(lambda v: Literal(round(v, 3))),
    st.builds(lambda v, n: Weight(round(v, 3), name=n), st.floats(-5, 5), st.sampled_from(["a", "b", "w1"])),
    st.builds(lambda n: Weight(Normal((2, 2), 0.5), name=n), st.sampled_from(["m", "n"])),
)


def _extend(children):
    binary = st.sampled_from([Plus, Minus, Times, Divide, Dot])
    unary = st.sampled_from([Negate, Exp, Log, Tanh, Sigmoid, ReLU, Softmax, LogSoftmax])
    return st.one_of(
        st.builds(lambda op, a, b: op(a, b), binary, children, children),
        st.builds(lambda op, a: op(a), unary, children),
        st.builds(lambda a, p: Power(a, p), children, st.sampled_from([2.0, 3.0, 0.5, -1.0])),
    )


@settings(max_examples=150, deadline=None, suppress_health_check=[HealthCheck.too_slow])
@given(st.recursive(_leaf, _extend, max_leaves=12))
def test_repr_round_trips_through_eval(tree):
    text = repr(tree)
    rebuilt = eval(text, {**{n: getattr(symnet, n) for n in symnet.__all__}, "x": x})
    assert rebuilt == tree, text
    assert repr(rebuilt) == text


def _stacked_lstm(depth: int, cells: int = 3) -> Layer:
    """`depth` LSTM layers as docs/worked-examples.md writes them: each layer's gates are read by four slices."""
    from symnet import DimRange, IfDefined, Input, Node, Offset, Ref

    h: Layer = Input("input", cells)
    for k in range(depth):
        h_prev = IfDefined(Offset(Ref(f"l{k}.h"), -1))
        c_prev = IfDefined(Offset(Ref(f"l{k}.c"), -1))
        gates = h @ Weight(Normal((cells, 4 * cells), 0.5), name=f"l{k}.w") + h_prev @ Weight(
            Normal((cells, 4 * cells), 0.5), name=f"l{k}.u"
        )
        i, f = Sigmoid(DimRange(gates, 0, cells)), Sigmoid(DimRange(gates, cells, cells))
        g, o = Tanh(DimRange(gates, 2 * cells, cells)), Sigmoid(DimRange(gates, 3 * cells, cells))
        c = Node(f"l{k}.c", f * c_prev + i * g)
        h = Node(f"l{k}.h", o * Tanh(c))
    return h


def test_repr_of_a_stacked_lstm_grows_linearly_and_evaluates_to_the_same_shared_tree():
    # Unfolded, each layer would print the one below 4 times (4**depth); folded, every layer adds the same text.
    lengths = [len(repr(_stacked_lstm(d))) for d in range(1, 7)]
    steps = {b - a for a, b in zip(lengths, lengths[1:])}
    assert len(steps) == 1 and lengths[-1] < 7 * lengths[0], lengths
    tree = _stacked_lstm(3)
    text = repr(tree)
    assert text.count("(l2_gates := ") == 1 and text.count("l2_gates") == 4  # defined once, then named
    rebuilt = eval(text, vars(symnet))
    assert rebuilt == tree and repr(rebuilt) == text
    gates = [layer for layer in symnet._src.core.walk.walk([rebuilt]) if isinstance(layer, symnet.DimRange)]
    assert len({id(g.arg) for g in gates}) == 3  # the four slices of a layer read one object, as built


def test_short_repeated_parts_are_repeated_not_named():
    assert repr(Exp(x) * Exp(x)) == "Exp(x) * Exp(x)"


@pytest.mark.parametrize(
    "value, text",
    [
        (float(np.float32(0.66)), "0.66"),  # a value read as float32 (a Kaldi model): as written in the model
        (float(np.float32(1e-5)), "1e-05"),
        (float(np.float32(0.1)), "0.1"),
        (0.1, "0.1"),  # Python floats as given
        (0.2773500981126146, "0.2773500981126146"),
        (2.0, "2.0"),
        (1 / 3, "0.3333333333333333"),
    ],
)
def test_numbers_print_as_written(value, text):
    from symnet import Input, Scale
    from symnet._src.core.formatting import number_text
    from symnet.layers import Dropout

    assert number_text(value) == text
    assert np.float32(float(text)) == np.float32(value)  # the text gives the same float32
    assert repr(x * value) == f"x * {text}"
    assert repr(Scale(value, x)) == f"Scale({text}, x)"
    assert repr(Weight(value, name="w")) == f"Weight({text}, name='w')"
    assert repr(x**value) == f"x ** {text}"
    if 0 < value < 1:
        assert repr(Dropout(Input("input", 4), value)) == f"Dropout(Input('input', 4), {text})"


# ----- Weight ----------------------------------------------------------------------------------


def test_weight_stores_the_initialiser_not_an_array():
    assert Weight(2.0).init == 2.0 and Weight(2.0).shape == ()
    w = Weight(np.ones((2, 3)))
    assert isinstance(w.init, FrozenArray) and w.shape == (2, 3)
    w = Weight(jnp.zeros(4))
    assert isinstance(w.init, FrozenArray) and w.shape == (4,)
    for init in (Normal((3, 4), 0.1), Uniform(5), Glorot((2, 2)), Zeros((1, 2, 3))):
        w = Weight(init)
        assert w.init is init and w.shape == init.shape
    import jax

    for w in (Weight(Normal((3,))), Weight(jnp.ones(3)), Weight(np.ones(3))):
        for field in attrs.fields(Weight):
            assert not isinstance(getattr(w, field.name), (jax.Array, np.ndarray)), field.name


def test_unnamed_weights_have_identity_named_weights_compare_by_name():
    a, b = Weight(2.0), Weight(2.0)
    assert a != b and not (a == b)
    assert a == a
    assert x * a != x * b
    assert x * a == x * a
    assert Weight(2.0, name="w") == Weight(2.0, name="w")
    assert Weight(2.0, name="w") != Weight(3.0, name="w")


@pytest.mark.parametrize("name", [3, "", b"w", ("w",)])
def test_weight_name_must_be_a_nonempty_string(name):
    with pytest.raises(LayerTypeError, match="name") as info:
        line = next_line()
        Weight(1.0, name=name)
    assert line in str(info.value)


# ----- source lines -------------------------------------------------------------------------------


def test_every_layer_records_the_line_that_built_it():
    w, w_line = Weight(2.0), here()
    tree, tree_line = (1.0 + x) * w, here()
    assert w.where == w_line
    assert tree.where == tree_line
    assert tree.lhs.where == tree_line  # the Plus
    assert tree.lhs.lhs.where == tree_line  # the Literal made from 1.0
    r, r_line = ReLU(tree), here()
    assert r.where == r_line
    assert x.where is not None and x.where.startswith(THIS_FILE + ":")


def test_the_recorded_line_is_the_users_not_a_helper_inside_symnet():
    def helper(a):
        return a * 2.0  # the innermost frame outside symnet

    t = helper(x)
    assert t.where == f"{THIS_FILE}:{inspect.getsourcelines(helper)[1] + 1}"


# ----- bad operands -----------------------------------------------------------------------------


@pytest.mark.parametrize("bad", ["a", None, [1.0, 2.0], {"a": 1}, True, object(), 1 + 2j, np.array(["a"])])
@pytest.mark.parametrize("op", ["add", "radd", "mul", "matmul", "sub"])
def test_non_numeric_operands_raise_a_symnet_type_error(bad, op):
    with pytest.raises(LayerTypeError) as info:
        if op == "add":
            line = next_line()
            x + bad
        elif op == "radd":
            line = next_line()
            bad + x
        elif op == "mul":
            line = next_line()
            x * bad
        elif op == "matmul":
            line = next_line()
            x @ bad
        else:
            line = next_line()
            x - bad
    assert isinstance(info.value, TypeError) and isinstance(info.value, SymnetError)
    assert line in str(info.value), str(info.value)
    assert "Literal" in str(info.value) or type(bad).__name__ in str(info.value)


def test_bad_exponent_and_reflected_power():
    with pytest.raises(LayerTypeError, match="exponent") as info:
        line = next_line()
        x ** Weight(2.0)
    assert line in str(info.value)
    with pytest.raises(LayerTypeError, match="power") as info:
        line = next_line()
        2.0**x
    assert line in str(info.value)


def test_bad_weight_and_literal_values():
    with pytest.raises(LayerTypeError, match="'a'") as info:
        line = next_line()
        Weight("a")
    assert line in str(info.value)
    with pytest.raises(LayerTypeError, match="dtype"):
        Literal(np.array([object()]))


@pytest.mark.parametrize("cls", [symnet.Plus, symnet.Minus, symnet.Times, symnet.Divide, symnet.Dot])
def test_output_shape_is_the_shape_jax_gives(cls):
    """The shape rules `symnet info` uses without jax equal JAX's abstract evaluation of `apply`."""
    import jax

    layer = cls(Literal(1.0), Literal(1.0))
    shapes = [(3,), (1, 3), (2, 3), (4, 2, 3), (2, 1, 2, 3), (3, 3), (4, 3, 3)]
    checked = 0
    for a in shapes:
        for b in shapes:
            try:
                layer.check(a, b)
            except symnet.ShapeError:
                continue
            spec = [jax.ShapeDtypeStruct(s, jnp.float32) for s in (a, b)]
            assert layer.output_shape(a, b) == jax.eval_shape(layer.apply, *spec).shape, (a, b)
            checked += 1
    assert checked >= 10
