"""What the typed layers share: options as fields, dims and image shapes taken from the input, the repr.

A typed layer (`BatchNorm(h)`, `Conv2d(img, 16)`, ...) is a layer class whose
constructor takes the input and readable options; what follows from them
(the input dim, an image's shape, the parameters with their initialisers) is
filled in by field factories, in field order, when not given. A dim comes
from the engine's static dims of the input expression
(`symnet._src.engine.dims.node_shapes`); where that cannot tell (the input is
`Identity()` with no declared dim) the layer needs it as an argument, and says
so naming the layer and the line that built it.

Where Kaldi has a component with the layer's math, the typed layer is a
subclass of that component (so batch-norm statistics, test mode, dropout
keys and model files work as for the component) and `kaldi_form` gives the
plain component; a Network writes as a Kaldi config through it
(`symnet._src.layers.kaldi.kaldi_forms`, which `symnet.kaldi.network_config_lines` applies).
"""

from __future__ import annotations

import difflib
import functools
import inspect
import math
import numbers
from collections.abc import Callable
from typing import TYPE_CHECKING, Any, ClassVar

import attrs

from ..base.errors import (
    ConfigWriteError,
    LayerOptionError,
    ShapeError,
    SymnetError,
    UnknownOptionError,
    UnknownShapeError,
    at,
)
from ..core.arithmetic import BinaryLayer, Negate, Power
from ..core.descriptor import IfDefined, Node, Offset, ReplaceIndex, Round, Scale
from ..core.elementwise import Elementwise
from ..core.formatting import Formatter
from ..core.layer import Layer, as_layer
from ..core.source import user_line
from ..engine.dims import node_shapes, static_dim
from ..engine.graph import Graph

__all__ = [
    "KaldiPart",
    "Typed",
    "as_component",
    "derived",
    "image_shape_of",
    "input_dim",
    "option",
    "param",
    "static_input_dim",
]

Image = tuple[int, int, int]


# ----- fields ----------------------------------------------------------------------------------


def checked_call(build: Callable[..., Any]) -> Callable[..., Any]:
    """A layer-building function (`LSTM`, `GRU`, ...) whose misspelled keyword is an UnknownOptionError naming the
    nearest option it takes and the user's line, and whose missing or extra arguments are a LayerOptionError
    there too, not Python's bare TypeError."""
    signature = inspect.signature(build)
    named = [p.name for p in signature.parameters.values() if p.kind is not inspect.Parameter.VAR_KEYWORD]
    options = [p.name for p in signature.parameters.values() if p.kind is inspect.Parameter.KEYWORD_ONLY]
    open_ended = any(p.kind is inspect.Parameter.VAR_KEYWORD for p in signature.parameters.values())

    @functools.wraps(build)
    def call(*args: Any, **kwargs: Any) -> Any:
        if not open_ended:
            for keyword in kwargs:
                if keyword not in named:
                    near = difflib.get_close_matches(keyword, options or named, n=1, cutoff=0.6)
                    hint = f"did you mean {near[0]!r}? " if near else ""
                    raise UnknownOptionError(
                        f"{build.__name__} takes no option {keyword!r}: {hint}its options are "
                        f"{', '.join(options or named)}{at(user_line())}"
                    )
        try:
            signature.bind(*args, **kwargs)
        except TypeError as e:
            raise LayerOptionError(f"{build.__name__}: {e}{at(user_line())}") from None
        return build(*args, **kwargs)

    return call


def option(
    default: Any = attrs.NOTHING,
    *,
    converter: Callable[[Any], Any] | None = None,
    kw_only: bool = True,
    alias: str | None = None,
) -> Any:
    """A field the user gives (shown by repr where it is not the default, and by the notebook view)."""
    return attrs.field(default=default, converter=converter, kw_only=kw_only, alias=alias, metadata={"option": True})


def derived(factory: Callable[[Any], Any], *, converter: Callable[[Any], Any] | None = None) -> Any:
    """A field that follows from the input and the options (`factory(layer)`), unless given."""
    return attrs.field(
        default=attrs.Factory(factory, takes_self=True), converter=converter, kw_only=True, metadata={"derived": True}
    )


def param(factory: Callable[[Any], Layer]) -> Any:
    """A parameter operand (a Weight made by `factory(layer)` unless given): a child, not shown by repr."""
    return attrs.field(
        default=attrs.Factory(factory, takes_self=True),
        converter=as_layer,
        kw_only=True,
        metadata={"child": True, "param": True},
    )


def positive_int(layer: str, option: str) -> Callable[[Any], int]:
    """A converter: a positive integer, else LayerOptionError naming the layer, the option and the line."""

    def convert(value: Any) -> int:
        if isinstance(value, bool) or not isinstance(value, numbers.Integral) or value <= 0:
            raise LayerOptionError(f"{layer}: {option} must be a positive integer, got {value!r}{at(user_line())}")
        return int(value)

    return convert


def positive_float(layer: str, option: str) -> Callable[[Any], float]:
    def convert(value: Any) -> float:
        if isinstance(value, bool) or not isinstance(value, numbers.Real) or not float(value) > 0:
            raise LayerOptionError(f"{layer}: {option} must be a positive number, got {value!r}{at(user_line())}")
        return float(value)

    return convert


def boolean(layer: str, option: str) -> Callable[[Any], bool]:
    def convert(value: Any) -> bool:
        if not isinstance(value, bool):
            raise LayerOptionError(f"{layer}: {option} must be True or False, got {value!r}{at(user_line())}")
        return value

    return convert


def optional_name(value: Any) -> str | None:
    if value is not None and (not isinstance(value, str) or not value):
        raise LayerOptionError(f"a layer's name must be a non-empty string or None, got {value!r}{at(user_line())}")
    return value


# ----- what the input tells ------------------------------------------------------------------------


def static_input_dim(layer: Layer) -> int | None:
    """The number of columns of `layer`'s value if the engine knows it without running, else None."""
    try:
        dim = layer.output_dim
    except UnknownShapeError:
        dim = None
    if isinstance(dim, int):
        return dim
    try:
        graph = Graph({"output": layer})
        return static_dim(node_shapes(graph, strict=False), graph.outputs["output"])
    except SymnetError:  # e.g. a Ref to a Node outside this expression
        return None


def input_dim(owner: Any, argument: str = "in_dim") -> int:
    """The dim of `owner.input`, or a ShapeError naming the layer, its line and the argument that gives it."""
    dim = static_input_dim(owner.input)
    if dim is None:
        raise ShapeError(
            f"{type(owner).__name__}{at(owner.where)}: the dim of its input is not known before running "
            f"(the input is {short(owner.input)}); give it as {argument}=..., or read the input as "
            f"Input(name, dim)"
        )
    return dim


#: Layers whose value has the column layout of their first operand (an image stays that image).
LAYOUT_KEEPING: tuple[type, ...] = (Node, Elementwise, Negate, Power, Offset, IfDefined, Round, Scale, ReplaceIndex)


def image_shape_of(layer: Layer) -> Image | None:
    """The image shape `(height, width, channels)` of `layer`'s rows, looking through layers that keep the
    layout (nonlinearities, Nodes, batch-norm, dropout, arithmetic with a constant), else None."""
    stack, seen = [layer], set()
    while stack:
        item = stack.pop()
        if id(item) in seen:
            continue
        seen.add(id(item))
        shape = getattr(item, "image_shape", None)
        if shape is not None:
            return shape
        if isinstance(item, LAYOUT_KEEPING) or getattr(item, "keeps_layout", False):
            stack.append(item.children[0])
        elif isinstance(item, BinaryLayer):
            stack += [item.rhs, item.lhs]
    return None


def short(layer: Layer, width: int = 60) -> str:
    text = repr(layer)
    return text if len(text) <= width else text[: width - 1] + "…"


# ----- the typed-layer mixin ---------------------------------------------------------------------


class Typed:
    """The common behaviour of typed layers (mixed into a layer class before its base)."""

    __slots__ = ()

    if TYPE_CHECKING:  # the classes it is mixed into are attrs classes
        __attrs_attrs__: ClassVar[Any]

    #: Whether the value keeps the input's column layout (an image stays the same image).
    keeps_layout: ClassVar[bool] = False

    @property
    def own_name(self) -> str | None:
        return getattr(self, "name", None)

    def settings(self) -> list[tuple[str, Any]]:
        """Every option and derived value, `(argument name, value)`, in field order (for display)."""
        out = []
        for f in attrs.fields(type(self)):
            if f.metadata.get("option") or f.metadata.get("derived"):
                out.append((f.alias, getattr(self, f.name)))
        return out

    def kaldi_form(self, name: str) -> Layer:
        """The layer in Kaldi's components and descriptors, with the same parameters (Weights), for writing
        Kaldi configs and models; `name` is the component name to use where the layer has none of its own.
        ConfigWriteError where Kaldi has no such component."""
        raise ConfigWriteError(
            f"{type(self).__name__}{at(self.where)} has no Kaldi component "  # type: ignore[attr-defined]
            f"({self._kaldi_gap()})"
        )

    def _kaldi_gap(self) -> str:
        return "Kaldi nnet3 has no component with its math"

    def _format(self, fmt: Formatter) -> tuple[str, int]:
        """`Name(input, positional options, key=value for options not at their default)`."""
        args: list[str] = []
        for f in attrs.fields(type(self)):
            value = getattr(self, f.name)
            if f.metadata.get("child") and not f.metadata.get("param"):
                args.append(fmt.sub(value, 0))
            elif f.metadata.get("option"):
                if not f.kw_only:
                    args.append(self._option_text(fmt, f.name, value))
                elif f.default is attrs.NOTHING or value != f.default:
                    args.append(f"{f.alias}={self._option_text(fmt, f.name, value)}")
        return f"{type(self).__name__}({', '.join(args)})", Formatter.ATOM

    def _option_text(self, fmt: Formatter, field: str, value: Any) -> str:
        """An option's value as the shortest argument that gives it (`3` for the pair `(3, 3)`)."""
        if isinstance(value, tuple) and len(value) == 2 and value[0] == value[1] and isinstance(value[0], int):
            return repr(value[0])
        return fmt.value(value)


class KaldiPart(Typed):
    """A Kaldi component a typed layer is built of (an LSTM's LstmNonlinearityComponent, ...), mixed in before
    that component (`component`): it keeps Kaldi's default training options, so a Kaldi config states only its
    shapes (see `symnet._src.layers.kaldi`), and it shows as that component."""

    __slots__ = ()

    component: ClassVar[type]

    def kaldi_form(self, name: str) -> Layer:
        return as_component(self, self.component)

    @property
    def kind(self) -> str:
        return self.component.__name__

    def _format(self, fmt: Formatter) -> tuple[str, int]:
        return self.kaldi_form("")._format(fmt)


def as_component(layer: Any, cls: type, **changes: Any) -> Layer:
    """The plain component `cls` (a base class of the typed `layer`) with the layer's values of its fields."""
    values = {f.alias: getattr(layer, f.name) for f in attrs.fields(cls) if f.init}
    values.update(changes)
    return cls(**values)


def pair(layer: str, option: str) -> Callable[[Any], tuple[int, int]]:
    """A converter: an int or a pair of ints (height, width), each positive."""
    one = positive_int(layer, option)

    def convert(value: Any) -> tuple[int, int]:
        if isinstance(value, (tuple, list)):
            if len(value) != 2:
                raise LayerOptionError(
                    f"{layer}: {option} must be an integer or a pair (height, width), got {value!r}{at(user_line())}"
                )
            return one(value[0]), one(value[1])
        v = one(value)
        return v, v

    return convert


def product(shape: tuple[int, ...]) -> int:
    return math.prod(shape)
