"""Layers: immutable, hashable expression trees built with Python operators.

A layer is a value. `(1.0 + x) * Weight(2.0)` builds
`Times(Plus(Literal(1.0), Identity()), Weight(2.0))`; nothing is computed
until `forward`. Layers compare and hash structurally (they key caches and are
static arguments of `jax.jit`), record the file and line where the user built
them, and never overload `==` as a graph operation.

Each layer class says how to compute its value from its operands' values
(`apply`) and how to pull a delta back to its operands (`vjp`): the Tape
(`symnet._src.core.tape`) calls these. Apply and vjp work on plain arrays and on the
engine's `[rows, batch, dim]` arrays alike, so row-wise layers keep row labels.

The layers the operators build (`Plus`, `Dot`, ...) are in `symnet._src.core.arithmetic`, which this
module cannot import (they subclass `Layer`): the operators find them by name (`symnet._src.core.operators`).
A network's `Structure` is in `symnet._src.core.structure`.
"""

from __future__ import annotations

import difflib
import functools
import numbers
from collections.abc import Callable, Iterator, Mapping
from typing import TYPE_CHECKING, Any, ClassVar, NamedTuple, TypeVar, dataclass_transform

import attrs
import numpy as np

from ..base.errors import GraphError, LayerTypeError, ParameterError, ShapeError, UnknownOptionError, at
from . import html
from .formatting import Formatter
from .frozen import FrozenArray, constant_array, literal_value
from .initializers import Initializer
from .naming import default_names, unique_name
from .operators import operator_layer
from .params import checked_params, initial_values
from .registry import LAYER_CLASSES
from .source import user_line
from .tape import Tape
from .walk import structurally_equal, walk

if TYPE_CHECKING:
    import jax
    import jax.numpy as jnp
else:
    from .lazyjax import jax, jnp

__all__ = [
    "as_layer",
    "canonicalize",
    "child",
    "children_field",
    "evaluate",
    "evolve",
    "FixedWeight",
    "Identity",
    "input_tape",
    "Layer",
    "layer_class",
    "Literal",
    "Product",
    "Weight",
]

L = TypeVar("L", bound="Layer")


def child(**kwargs: Any) -> Any:
    """An attrs field holding an operand layer (numbers and arrays become `Literal`)."""
    return attrs.field(converter=as_layer, metadata={"child": True}, **kwargs)


def children_field(**kwargs: Any) -> Any:
    """An attrs field holding a tuple of operand layers."""
    return attrs.field(converter=_as_layers, metadata={"children": True}, **kwargs)


@dataclass_transform(frozen_default=True, field_specifiers=(attrs.field, child, children_field))
def layer_class(cls: type | None = None, **options: Any) -> Any:
    """The decorator of every layer class: frozen, slotted, structural eq/hash (cached).

    `==` is attrs' structural equality, except that it compares a DAG once per
    pair of nodes (`symnet._src.core.walk.structurally_equal`), not once per path.
    The class is registered under its stable name (`symnet._src.core.registry`), so
    `symnet.save` can write layers of it and `symnet.load` build them again.
    """
    options = {"slots": True, "cache_hash": True, "repr": False, **options}

    def make(c: type) -> type:
        c = attrs.frozen(c, **options)
        if options.get("eq", True) is not False:
            setattr(c, "__eq__", structurally_equal)  # noqa: B010  (mypy refuses assigning a method)
            attrs_init: Callable[..., None] = getattr(c, "__init__")  # noqa: B009
            keywords = frozenset(f.alias for f in attrs.fields(c) if f.init)
            shown = _shown_options(c)

            @functools.wraps(attrs_init)
            def __init__(self: Any, *args: Any, **kwargs: Any) -> None:
                if not keywords.issuperset(kwargs):
                    _unknown_option(type(self), keywords, shown, kwargs)
                attrs_init(self, *args, **kwargs)
                hash(self)  # cached now, while the operands' hashes are: hashing never recurses deeply

            setattr(c, "__init__", __init__)  # noqa: B010
        LAYER_CLASSES.register(c)
        return c

    if cls is None:
        return make
    return make(cls)


def _shown_options(cls: type) -> tuple[str, ...]:
    """The keywords an error about a misspelled one lists: a typed layer's options (`symnet._src.layers.base.option`),
    else every field but the source location."""
    fields = [f for f in attrs.fields(cls) if f.init and f.alias != "where"]
    options = [f.alias for f in fields if f.metadata.get("option")]
    return tuple(options or [f.alias for f in fields])


def _unknown_option(cls: type, keywords: frozenset[str], shown: tuple[str, ...], given: Mapping[str, Any]) -> None:
    """Raise UnknownOptionError for the first keyword of `given` that `cls` does not take, with the nearest one."""
    name = next(k for k in given if k not in keywords)
    near = difflib.get_close_matches(name, shown, n=1, cutoff=0.6) or difflib.get_close_matches(
        name, sorted(keywords), n=1, cutoff=0.6
    )
    hint = f"did you mean {near[0]!r}? " if near else ""
    raise UnknownOptionError(
        f"{cls.__name__} takes no option {name!r}: {hint}its options are {', '.join(shown)}{at(user_line())}"
    )


def evolve(layer: L, **changes: Any) -> L:
    """`layer` with some fields replaced (`attrs.evolve`, typed for layer classes)."""
    new: L = attrs.evolve(layer, **changes)  # type: ignore[misc]  # mypy's attrs plugin misses dataclass_transform
    return new


class Product(NamedTuple):
    """How a layer is a product of its input rows with a matrix, plus a bias (`Layer.product()`).

    `input`, `weight` and `bias` are operand positions (`bias` None: no bias); `transposed`: the matrix is
    `[out, in]` (Kaldi's layout, `y = x W^T + b`) rather than `[in, out]` (`y = x @ W`); `vjp_is_gradient`:
    the layer's `vjp` is the exact gradient of that product where `product()` is called (False where it
    differs: no deltas for fixed parameters, or natural gradient inside a `Preconditioning`, which the
    engine reads when it builds the Tape), so the engine may differentiate its own lowering instead.
    """

    input: int
    weight: int
    transposed: bool = False
    bias: int | None = None
    vjp_is_gradient: bool = True


@layer_class
class Layer:
    """Base class of every node in a symnet expression tree."""

    where: str | None = attrs.field(kw_only=True, eq=False, factory=user_line)

    if TYPE_CHECKING:  # what attrs adds, so that mypy takes layers as attrs classes (attrs.fields, attrs.evolve)
        __attrs_attrs__: ClassVar[Any]

    # ----- structure -------------------------------------------------------

    #: The name parameter paths restart from below this layer (a named `Node`), or None.
    scope: ClassVar[str | None] = None

    @property
    def children(self) -> tuple[Layer, ...]:
        """The operand layers, in field order."""
        out: list[Layer] = []
        for field in attrs.fields(type(self)):
            value = getattr(self, field.name)
            if field.metadata.get("child"):
                out.append(value)
            elif field.metadata.get("children"):
                out.extend(value)
        return tuple(out)

    def named_children(self) -> Iterator[tuple[str, Layer]]:
        """`(path_component, layer)` pairs: field names, with `[i]` for tuple fields."""
        for field in attrs.fields(type(self)):
            value = getattr(self, field.name)
            if field.metadata.get("child"):
                yield field.name, value
            elif field.metadata.get("children"):
                for i, item in enumerate(value):
                    yield f"{field.name}{i}", item

    def with_children(self, new_children: tuple[Layer, ...]) -> Layer:
        """A copy with the operands replaced (same order as `children`), keeping `where`."""
        changes: dict[str, Any] = {}
        it = iter(new_children)
        for field in attrs.fields(type(self)):
            if field.metadata.get("child"):
                changes[field.name] = next(it)
            elif field.metadata.get("children"):
                changes[field.name] = tuple(next(it) for _ in getattr(self, field.name))
        if all(a is b for a, b in zip(new_children, self.children)):
            return self
        return evolve(self, **changes)

    # ----- evaluation --------------------------------------------------------

    #: Whether the layer computes each row from the same row of its operands
    #: (so it keeps the engine's row labels). Descriptors override this.
    rowwise: ClassVar[bool] = True

    def in_test_mode(self) -> Layer:
        """The layer as inference computes it: Kaldi's test mode (batch-norm with its stored statistics, dropout
        off) for a layer with a `test_mode` field, else itself. Operands are the caller's to rewrite."""
        if getattr(self, "test_mode", True) is False:
            return evolve(self, test_mode=True)
        return self

    def missing_statistics(self, values: Mapping[str, Any]) -> bool:
        """Whether the layer would compute with statistics that were never gathered (a batch-norm whose count
        in `values`, the network's arrays by name, is 0); False for layers that keep none."""
        return False

    @property
    def kind(self) -> str:
        """The class the layer shows as in tables (`summary()`): its own, or the public one it stands for."""
        return type(self).__name__

    @property
    def output_dim(self) -> int | None:
        """The number of columns of the value when the layer knows it without running (else None)."""
        return None

    @property
    def input_name(self) -> str | None:
        """The name of the network input this layer stands for (`Identity()` is `'input'`), else None."""
        return None

    @property
    def weight_role(self) -> str:
        """What an unnamed Weight operand of this layer is called in parameter names (the layer kind)."""
        return type(self).__name__.lower()

    @property
    def role(self) -> str | None:
        """What the layer's value is called inside its Node (`symnet._src.core.roles`): the kind (`sigmoid`); None
        where its expression says more (descriptors: `Offset(h, -1)`); a column range `[a:b]` for a slice."""
        return type(self).__name__.lower()

    #: The operand fields that hold the layer's own parameters: unnamed Weights there are named
    #: `{layer name}.{field}` (Kaldi's `affine1.linear_params`) when the layer has a name.
    param_fields: ClassVar[tuple[str, ...]] = ()
    #: For a layer with a `name` of its own that may be left out (a typed layer): the stem of the
    #: default name a Network gives it (`batchnorm`: see `symnet._src.core.naming`); else None.
    name_stem: ClassVar[str | None] = None

    @property
    def own_name(self) -> str | None:
        """The layer's own name (a component's, a typed layer's) if it has one, else None."""
        return None

    def expand(self) -> Layer | None:
        """For a macro layer (a composition of others, e.g. a TDNN), the layer it stands for; else None.

        The engine plans and runs the expansion, while the tree keeps the macro
        layer (for display and file formats).
        """
        return None

    def product(self) -> Product | None:
        """If the layer's value is its input rows times a matrix operand (plus a bias operand), which operands
        those are (`Product`): the engine may then lower a product of evenly spaced splices as one
        convolution (`symnet._src.engine.splice`). None (the default): no such promise."""
        return None

    def step_apply(self, *operands: jax.Array) -> tuple[jax.Array, Any] | None:
        """A row-wise layer's value and pullback for one step of the Index engine over all its rows (the
        operands' rows in the step's layout, columns last), where training changes its backward; None (the
        default): the engine uses `apply` and `vjp`. Kaldi's self-repair uses it (symnet._src.components.self_repair);
        steps inside a recurrence's loop never call it."""
        return None

    # Subclasses take their own fixed operands; `*args: Any, **kwargs: Any` lets them (mypy treats it as `...`).
    def apply(self, *args: Any, **kwargs: Any) -> jax.Array:
        """The value from the operands' values."""
        raise NotImplementedError(type(self).__name__)

    def vjp(self, *args: Any, **kwargs: Any) -> tuple[jax.Array | None, ...]:
        """`vjp(delta, value, *operands)`: the operands' deltas from this layer's delta, value and operands."""
        raise NotImplementedError(type(self).__name__)

    def check(self, *shapes: Any, **kwargs: Any) -> None:
        """`check(*operand_shapes)`: raise ShapeError if operands of these shapes cannot be combined."""

    def output_shape(self, *shapes: tuple[int, ...]) -> tuple[int, ...] | None:
        """The value's shape for operands of these (checked) shapes where the layer knows it without running;
        None (the default): JAX's abstract evaluation of `apply` finds it (`symnet._src.engine.dims`)."""
        return None

    def forward(self, input: Any = None, params: Mapping[str, Any] | None = None) -> Tape:
        """Evaluate on `input` (a Tape, a Literal, a number or an array) and return the Tape.

        Weights take their initial values (seed 0) unless `params` (name -> array)
        is given. Equivalent to `Network(self).forward(input, params)`.
        """
        canonical, weights = canonicalize({"output": self})
        trainable = {n: w for n, w in weights.items() if w.trainable}
        fixed = {n: w for n, w in weights.items() if not w.trainable}
        values = initial_values(trainable, 0) if params is None else checked_params(trainable, params)
        given = None if input is None else input_tape(input)
        return evaluate([canonical["output"]], given, values, initial_values(fixed, 0))[0]

    # ----- operators: they build the layers of `symnet._src.core.arithmetic`, found by name ----------

    def __add__(self, other: Any) -> Layer:
        return operator_layer("Plus")(self, other, where=user_line())

    def __radd__(self, other: Any) -> Layer:
        return operator_layer("Plus")(other, self, where=user_line())

    def __sub__(self, other: Any) -> Layer:
        return operator_layer("Minus")(self, other, where=user_line())

    def __rsub__(self, other: Any) -> Layer:
        return operator_layer("Minus")(other, self, where=user_line())

    def __mul__(self, other: Any) -> Layer:
        return operator_layer("Times")(self, other, where=user_line())

    def __rmul__(self, other: Any) -> Layer:
        return operator_layer("Times")(other, self, where=user_line())

    def __truediv__(self, other: Any) -> Layer:
        return operator_layer("Divide")(self, other, where=user_line())

    def __rtruediv__(self, other: Any) -> Layer:
        return operator_layer("Divide")(other, self, where=user_line())

    def __matmul__(self, other: Any) -> Layer:
        return operator_layer("Dot")(self, other, where=user_line())

    def __rmatmul__(self, other: Any) -> Layer:
        return operator_layer("Dot")(other, self, where=user_line())

    def __neg__(self) -> Layer:
        return operator_layer("Negate")(self, where=user_line())

    def __pos__(self) -> Layer:
        return self

    def __pow__(self, exponent: Any) -> Layer:
        return operator_layer("Power")(self, exponent, where=user_line())

    def __rpow__(self, base: Any) -> Layer:
        raise LayerTypeError(
            f"cannot raise {base!r} to the power of a layer; only `layer ** constant` is supported{at(user_line())}"
        )

    __array_priority__ = 1000  # numpy arrays on the left defer to our operators

    # ----- display -----------------------------------------------------------

    def __repr__(self) -> str:
        """The Python expression that builds the layer, repeated parts folded (`symnet._src.core.formatting`)."""
        return Formatter().top(self)

    def _repr_html_(self) -> str:
        """The expression tree, foldable, for notebooks (see `symnet.display`)."""
        return html.render_html(self)

    def _format(self, fmt: Formatter) -> tuple[str, int]:
        """The expression text and its precedence; the default is a call `Name(args)`."""
        args = [fmt.arg(getattr(self, f.name), f) for f in attrs.fields(type(self)) if f.init and not f.kw_only]
        return f"{type(self).__name__}({', '.join(a for a in args if a is not None)})", Formatter.ATOM


def _as_layers(values: Any) -> tuple[Layer, ...]:
    return tuple(as_layer(v) for v in values)


def as_layer(value: Any) -> Layer:
    """A layer as it is; a number or numeric array as a `Literal`; anything else is an error."""
    if isinstance(value, Layer):
        return value
    if isinstance(value, (numbers.Number, np.ndarray, np.generic, jax.Array)) and not isinstance(value, bool):
        return Literal(value, where=user_line())  # type: ignore[arg-type]  # the field's converter takes these
    raise LayerTypeError(
        f"cannot use {value!r} (a {type(value).__name__}) as a layer operand; "
        f"expected a Layer, a number or a numeric array{at(user_line())}"
    )


# ----- leaves -------------------------------------------------------------------


@layer_class
class Identity(Layer):
    """The input placeholder: its value is whatever the network is given (the input named `input`)."""

    @property
    def input_name(self) -> str | None:
        return "input"

    def _format(self, fmt: Formatter) -> tuple[str, int]:
        return "x", Formatter.ATOM


@layer_class
class Literal(Layer):
    """A constant: a number or an array (stored frozen, so the tree stays hashable)."""

    value: float | FrozenArray = attrs.field(converter=literal_value)

    @property
    def array(self) -> jax.Array:
        return constant_array(self.value)

    @property
    def role(self) -> str | None:
        """None: a constant is shown by its value, not named."""
        return None

    def _format(self, fmt: Formatter) -> tuple[str, int]:
        return f"Literal({fmt.value(self.value)})", Formatter.ATOM


class _Token:
    """The identity of an unnamed Weight: two `Weight(2.0)` calls are two parameters."""

    __slots__ = ()

    def __repr__(self) -> str:
        return "<token>"


def _check_name(name: Any) -> None:
    if name is not None and (not isinstance(name, str) or not name):
        raise LayerTypeError(f"a Weight's name must be a non-empty string or None, got {name!r}{at(user_line())}")


def _weight_init(value: Any) -> float | FrozenArray | Initializer:
    if isinstance(value, Initializer):
        return value
    return literal_value(value)


@layer_class
class Weight(Layer):
    """A trainable parameter. The tree stores its initialiser, never its array.

    `init` is a number, an array, or an `Initializer` (`Normal((3, 4), 0.1)`).
    Unnamed weights are distinct parameters even with equal initialisers; a
    `Network` names them by their path. Weights with one explicit `name` are
    one shared parameter (as Kaldi shares components by name).
    """

    init: float | FrozenArray | Initializer = attrs.field(converter=_weight_init)
    name: str | None = attrs.field(default=None, validator=lambda self, attribute, value: _check_name(value))
    token: _Token | None = attrs.field(
        default=attrs.Factory(lambda self: None if self.name else _Token(), takes_self=True), kw_only=True
    )

    #: Whether gradients train it (a `Weight`) or its value is state (a `FixedWeight`).
    trainable: ClassVar[bool] = True

    @property
    def shape(self) -> tuple[int, ...]:
        if isinstance(self.init, Initializer):
            return self.init.shape
        if isinstance(self.init, FrozenArray):
            return self.init.shape
        return ()

    def initial_value(self, key: jax.Array) -> jax.Array:
        """The initial array; `key` is used only by random initialisers."""
        if isinstance(self.init, Initializer):
            return self.init.init(key, jnp.result_type(float))
        return constant_array(self.init)

    def _format(self, fmt: Formatter) -> tuple[str, int]:
        name = f", name={self.name!r}" if self.name else ""
        return f"Weight({fmt.value(self.init)}{name})", Formatter.ATOM


@layer_class
class FixedWeight(Weight):
    """A value the network keeps but gradients never change: it lives in `network.state`, not `network.params`.

    Kaldi's fixed components (FixedAffine, FixedScale, FixedBias, a
    ConstantFunction with is-updatable=false) and batch-norm statistics are
    such values: model files store them like parameters, but training leaves
    them alone (batch-norm statistics are updated outside gradients). Keeping
    them apart from `params` means an optimiser sees only what it may train,
    with no mask.
    """

    trainable: ClassVar[bool] = False

    def _format(self, fmt: Formatter) -> tuple[str, int]:
        name = f", name={self.name!r}" if self.name else ""
        return f"FixedWeight({fmt.value(self.init)}{name})", Formatter.ATOM


# ----- networks of layers: canonical names, plain evaluation (what `forward` runs) --------------


def canonicalize(outputs: Mapping[str, Layer]) -> tuple[dict[str, Layer], dict[str, Weight]]:
    """Give every Weight its final name, and every typed layer built without a name its default one;
    check that equally named Weights agree.

    Names come from where a depth-first walk in field order first meets a
    layer (`symnet._src.core.naming`): an unnamed Weight is named after the nearest
    enclosing named `Node` (or the output, when there are several) and its
    role for the layer that uses it (`weight` of a matrix product, `bias` of a
    sum, `scale` of a product): `h.weight`, `h.bias`, and `h.weight_2` for a
    second one in `h`; a parameter of a named layer after the layer and the
    field (`h.batchnorm.stats_mean`). Names depend on the structure alone, and
    a change in one Node renames nothing in another. The identity token that
    keeps two `Weight(2.0)` calls apart is dropped, so equal structures are
    equal values.
    """
    roots = [(name if len(outputs) > 1 else "", layer) for name, layer in outputs.items()]
    order = walk([layer for _, layer in roots])
    bases, names = default_names(roots)
    explicit: dict[str, Weight] = {}
    for layer in order:
        if isinstance(layer, Weight) and layer.name is not None:
            other = explicit.setdefault(layer.name, layer)
            if other.init != layer.init:
                raise ParameterError(
                    f"two Weights named {layer.name!r} with different initialisers: "
                    f"{other.init!r} (built at {other.where}) and {layer.init!r} (built at {layer.where})"
                )
    weights: dict[str, Weight] = {}
    rewritten: dict[int, Layer] = {}
    taken = set(explicit)
    for layer in order:
        if isinstance(layer, Weight):
            if layer.name is None:
                name = unique_name(bases[id(layer)], taken)
                taken.add(name)
                new = evolve(layer, name=name, token=None)
            else:
                new = explicit[layer.name]
                new = evolve(new, token=None) if new.token is not None else new
            weights.setdefault(new.name, new)  # type: ignore[arg-type]
            rewritten[id(layer)] = weights[new.name]  # type: ignore[index]
        else:
            changed = layer.with_children(tuple(rewritten[id(c)] for c in layer.children))
            rewritten[id(layer)] = evolve(changed, name=names[id(layer)]) if id(layer) in names else changed
    return {name: rewritten[id(layer)] for name, layer in outputs.items()}, dict(sorted(weights.items()))


def input_tape(value: Any) -> Tape:
    """The input as a Tape: a Tape as it is, a Literal's value, or an array (traced ones too)."""
    if isinstance(value, Tape):
        return value
    if isinstance(value, Literal):
        return Tape(value, value.array)
    if isinstance(value, Layer):
        raise LayerTypeError(f"the input of forward must be a Tape, a Literal, a number or an array, got {value!r}")
    try:
        array = jnp.asarray(value)
    except TypeError:
        array = None
    if array is None or not (jnp.issubdtype(array.dtype, jnp.number) or array.dtype == jnp.bool_):
        raise LayerTypeError(f"cannot use {value!r} (a {type(value).__name__}) as the network's input")
    return Tape(Identity(), array)


def evaluate(
    roots: list[Layer],
    input: Tape | None,
    params: Mapping[str, jax.Array],
    state: Mapping[str, jax.Array] | None = None,
) -> list[Tape]:
    """Run canonical trees on plain arrays (no Indexes), building one Tape per layer.

    `params` are the trainable Weights' values (their tapes get gradients),
    `state` the FixedWeights'.
    """
    values = {**params, **(state or {})}
    tapes: dict[int, Tape] = {}
    for layer in walk(roots):
        name = layer.input_name
        if name is not None:
            if name != "input":
                raise GraphError(
                    f"the network reads input {name!r}: run it with network.compute or symnet.compile, "
                    f"which take named inputs{at(layer.where)}"
                )
            if input is None:
                raise GraphError(f"the network reads its input (x) but no input was given{at(layer.where)}")
            dim = layer.output_dim
            if dim is not None and (not input.shape or input.shape[-1] != dim):
                raise ShapeError(
                    f"the input has shape {input.shape}, but {layer!r} takes {dim} features per row{at(layer.where)}"
                )
            tape = input
        elif isinstance(layer, Weight):
            name = layer.name if layer.trainable else None
            tape = Tape(layer, values[layer.name], parameter=name, parameters=params)  # type: ignore[index]
        elif isinstance(layer, Literal):
            tape = Tape(layer, layer.array, parameters=params)
        elif not layer.rowwise or type(layer).apply is Layer.apply:
            raise GraphError(
                f"{type(layer).__name__} works on Indexes (n, t, x): run the network with "
                f"symnet.compile or network.compute{at(layer.where)}"
            )
        else:
            upstream = tuple(tapes[id(c)] for c in layer.children)
            layer.check(*(u.shape for u in upstream))
            tape = Tape(layer, layer.apply(*(u.value for u in upstream)), upstream, parameters=params)
        tapes[id(layer)] = tape
    return [tapes[id(r)] for r in roots]
