"""The common machinery of Kaldi nnet3 components as symnet layers.

A component is a layer whose operands are its input and its parameters (as
`Weight` layers, named `f"{component_name}.{param}"` after Kaldi's tokens:
`<LinearParams>` -> `linear_params`), whose hyper-parameters are plain fields,
and whose Kaldi metadata that symnet does not use (learning rates, max-change,
natural-gradient ranks, self-repair settings...) sits in the frozen `options`
field so that it survives a round trip.

Values are matrices whose last axis is the feature dimension; every leading
axis is a row axis (a plain `[N, D]` batch or the engine's `[R, B, D]`).

`COMPONENTS` maps a Kaldi type name to a builder
`(name, options, input, *, read_matrix=None) -> Layer` that parses Kaldi's
config options with Kaldi's defaults and initialises the parameters as Kaldi
does.
"""

from __future__ import annotations

import math
import numbers
import os
from typing import Any, Callable, ClassVar, Iterable, Mapping

import attrs
import jax
import jax.numpy as jnp
import numpy as np

from ..errors import ShapeError, SymnetError, at
from ..core.frozen import FrozenArray
from ..core.initializers import Initializer, Normal, Zeros
from ..core.formatting import Formatter
from ..core.layer import Layer, Literal, Weight, layer_class


# ----- errors -----------------------------------------------------------------------


class ComponentConfigError(SymnetError, ValueError):
    """A component's config options are missing, unknown or out of range.

    `component` is the component's name, `type` its Kaldi type and `option`
    the option at fault (None when the fault is not one option's).
    """

    def __init__(self, message: str, *, component: str = "", type: str = "", option: str | None = None):
        self.message = message
        self.component = component
        self.type = type
        self.option = option
        where = f"component {component!r} ({type})" if component else type
        super().__init__(f"{where}: {message}" if where else message)


class ComponentModeError(SymnetError, RuntimeError):
    """A component run in a mode symnet does not support yet (e.g. dropout in training mode)."""


# ----- parameters ------------------------------------------------------------------


@layer_class
class FixedWeight(Weight):
    """A parameter that training must leave alone.

    Kaldi's fixed components (FixedAffine, FixedScale, FixedBias, a
    ConstantFunction with is-updatable=false) and batch-norm statistics keep
    arrays that live in the model file but are never trained. They live in the
    Network's parameter mapping like any Weight (so model files map 1:1), but
    the components return no delta for them, so their gradients are zeros; an
    optimiser should also mask them (`trainable_mask`), e.g. against weight
    decay.
    """

    def _format(self, fmt: Formatter) -> tuple[str, int]:
        name = f", name={self.name!r}" if self.name else ""
        return f"FixedWeight({self.init!r}{name})", Formatter.ATOM


@attrs.frozen
class Constant(Initializer):
    """Every element equal to `value` (Kaldi's `Set(value)`)."""

    value: float = 0.0

    def init(self, key: jax.Array, dtype: Any) -> jax.Array:
        return jnp.full(self.shape, self.value, dtype)


def normal_init(shape: tuple[int, ...], stddev: float, mean: float = 0.0) -> Initializer:
    """Kaldi's `SetRandn(); Scale(stddev); Add(mean)`, as the simplest initialiser that does it."""
    if stddev == 0.0:
        return Zeros(shape) if mean == 0.0 else Constant(shape, float(mean))
    return Normal(shape, float(stddev), float(mean))


def trainable_mask(net: Any) -> dict[str, bool]:
    """Parameter name -> whether training may change it (False for a FixedWeight), for `optax.masked`.

    `net` is a Network (or anything with a `weights` mapping of name -> Weight).
    """
    return {name: not isinstance(weight, FixedWeight) for name, weight in net.weights.items()}


def shape_of(layer: Layer) -> tuple[int, ...] | None:
    """The static shape of a Weight or Literal operand, else None (unknown until run)."""
    if isinstance(layer, Weight):
        return layer.shape
    if isinstance(layer, Literal):
        return tuple(np.shape(layer.value.array)) if isinstance(layer.value, FrozenArray) else ()
    return None


# ----- options ---------------------------------------------------------------------


def _freeze_value(value: Any) -> Any:
    if isinstance(value, (list, tuple)):
        return tuple(_freeze_value(v) for v in value)
    if isinstance(value, np.ndarray):
        return tuple(value.tolist())
    return value


def freeze_options(value: Any) -> tuple[tuple[str, Any], ...]:
    """Options as a tuple of `(key, value)` pairs (hashable, order kept)."""
    if value is None:
        return ()
    items = value.items() if isinstance(value, Mapping) else value
    return tuple((str(k), _freeze_value(v)) for k, v in items)


# ----- the component base class ----------------------------------------------------------


def auto_vjp(layer: Layer, delta: jax.Array, *args: jax.Array) -> tuple[jax.Array, ...]:
    """The deltas of all operands by JAX's own transpose of `layer.apply`."""
    _, pullback = jax.vjp(layer.apply, *args)
    return pullback(delta)


def rows_sum(delta: jax.Array) -> jax.Array:
    """Sum over every leading (row) axis, keeping the last (feature) axis."""
    return delta.reshape(-1, delta.shape[-1]).sum(axis=0)


def rows_matmul_t(a: jax.Array, b: jax.Array) -> jax.Array:
    """`sum over rows of a[row, :]^T b[row, :]`: `[A] x [B] -> [A, B]`, over all leading axes."""
    return a.reshape(-1, a.shape[-1]).T @ b.reshape(-1, b.shape[-1])


@layer_class
class Component(Layer):
    """Base class of Kaldi components: `name` is Kaldi's component name.

    Subclasses put their input first among their operands, then their
    parameters; `options` holds Kaldi metadata symnet does not interpret.
    """

    name: str
    options: tuple[tuple[str, Any], ...] = attrs.field(factory=tuple, converter=freeze_options, kw_only=True)

    #: Kaldi's type name, e.g. "AffineComponent".
    kaldi_type: ClassVar[str] = ""
    #: The Kaldi token (lower-cased) of each parameter operand, in operand order.
    param_fields: ClassVar[tuple[str, ...]] = ()

    @property
    def input_dim(self) -> int:
        raise NotImplementedError(type(self).__name__)

    @property
    def output_dim(self) -> int:
        raise NotImplementedError(type(self).__name__)

    @property
    def matrixwise(self) -> bool:
        """Whether an output row depends on other rows (batch-norm in training mode): the engine must
        then give it exactly the rows of one minibatch (no padding rows, no chunking)."""
        return False

    @property
    def parameters(self) -> dict[str, Layer]:
        """Kaldi's parameter name (lower case) -> its operand layer (a Weight, normally)."""
        return {f: getattr(self, f) for f in self.param_fields}

    def option(self, key: str, default: Any = None) -> Any:
        """The value of a metadata option (Kaldi's config name, e.g. 'learning-rate')."""
        for k, v in self.options:
            if k == key:
                return v
        return default

    def param_shapes(self) -> dict[str, tuple[int, ...]]:
        """The shape each parameter must have."""
        return {}

    def check(self, *shapes: tuple[int, ...]) -> None:
        where = at(self.where)
        label = f"{type(self).__name__} {self.name!r}"
        try:
            input_dim, expected = self.input_dim, self.param_shapes()
        except TypeError:  # a parameter operand that is not a Weight: shapes known only when run
            return
        x = shapes[0]
        if not x:
            raise ShapeError(f"{label}: the input must be a matrix (rows x {input_dim}), got a scalar{where}")
        if x[-1] != input_dim:
            raise ShapeError(f"{label}: input dim is {x[-1]}, expected {input_dim}{where}")
        for field, shape in zip(self.param_fields, shapes[1:]):
            want = expected.get(field)
            if want is not None and tuple(shape) != tuple(want):
                raise ShapeError(f"{label}: parameter {field} has shape {tuple(shape)}, expected {tuple(want)}{where}")


def param_name(component: str, field: str) -> str:
    """The parameter name of a component's parameter: `affine1.linear_params`."""
    return f"{component}.{field}"


# ----- option parsing ----------------------------------------------------------------

_REQUIRED = object()


class OptionReader:
    """Reads a component's config options with Kaldi's rules, remembering which were used.

    Values may be strings (from a config file) or Python values. Errors are
    ComponentConfigError naming the component and the option.
    """

    def __init__(self, type_name: str, name: str, options: Mapping[str, Any] | None):
        self.type = type_name
        self.name = name
        self.raw: dict[str, Any] = {}
        for k, v in dict(options or {}).items():
            if k in ("name", "type"):
                continue
            self.raw[str(k)] = v
        self.used: set[str] = set()

    def error(self, message: str, option: str | None = None) -> ComponentConfigError:
        return ComponentConfigError(message, component=self.name, type=self.type, option=option)

    def has(self, key: str) -> bool:
        return key in self.raw

    def _take(self, key: str, default: Any) -> Any:
        if key in self.raw:
            self.used.add(key)
            return self.raw[key]
        if default is _REQUIRED:
            raise self.error(f"option {key} is required", key)
        return default

    def bad(self, key: str, value: Any, what: str) -> ComponentConfigError:
        return self.error(f"option {key}={value!r} is not {what}", key)

    def int(self, key: str, default: Any = _REQUIRED) -> Any:
        value = self._take(key, default)
        if key not in self.raw:
            return value
        if isinstance(value, bool):
            raise self.bad(key, value, "an integer")
        if isinstance(value, numbers.Integral):
            return int(value)
        if isinstance(value, str):
            text = value.strip()
            try:
                return int(text, 10)
            except ValueError:
                pass
        raise self.bad(key, value, "an integer")

    def float(self, key: str, default: Any = _REQUIRED) -> Any:
        value = self._take(key, default)
        if key not in self.raw:
            return value
        if isinstance(value, bool):
            raise self.bad(key, value, "a number")
        if isinstance(value, numbers.Real):
            result = float(value)
        elif isinstance(value, str):
            try:
                result = float(value.strip())
            except ValueError:
                raise self.bad(key, value, "a number") from None
        else:
            raise self.bad(key, value, "a number")
        if math.isnan(result):
            raise self.bad(key, value, "a number")
        return result

    def bool(self, key: str, default: Any = _REQUIRED) -> Any:
        value = self._take(key, default)
        if key not in self.raw:
            return value
        if isinstance(value, bool):
            return value
        if isinstance(value, str):
            # Kaldi's ConfigLine looks at the first character: t/T is true, f/F is false.
            text = value.strip().lower()
            if text in ("t", "true"):
                return True
            if text in ("f", "false"):
                return False
        raise self.bad(key, value, "a boolean (true or false)")

    def str(self, key: str, default: Any = _REQUIRED) -> Any:
        value = self._take(key, default)
        if key not in self.raw:
            return value
        if not isinstance(value, (str, os.PathLike)) or not str(value):
            raise self.bad(key, value, "a non-empty string")
        return str(value)

    def int_list(self, key: str, default: Any = _REQUIRED) -> Any:
        """A comma-separated list of integers (Kaldi's `sizes=3,4,5`)."""
        value = self._take(key, default)
        if key not in self.raw:
            return value
        if isinstance(value, str):
            parts = value.split(",")
            try:
                return tuple(int(p.strip(), 10) for p in parts)
            except ValueError:
                raise self.bad(key, value, "a comma-separated list of integers") from None
        if isinstance(value, Iterable) and not isinstance(value, (bytes, bool)):
            items = tuple(value)
            if all(isinstance(v, numbers.Integral) and not isinstance(v, bool) for v in items):
                return tuple(int(v) for v in items)
        raise self.bad(key, value, "a comma-separated list of integers")

    def require(self, condition: bool, message: str, option: str | None = None) -> None:
        if not condition:
            raise self.error(message, option)

    def positive(self, key: str, value: Any) -> None:
        if not value > 0:
            raise self.error(f"option {key}={value} must be positive", key)

    def nonnegative(self, key: str, value: Any) -> None:
        if not value >= 0:
            raise self.error(f"option {key}={value} must not be negative", key)

    def finish(self) -> None:
        """Kaldi's `HasUnusedValues`: any option not read is an error."""
        unused = [k for k in self.raw if k not in self.used]
        if unused:
            raise self.error(
                f"unknown option{'s' if len(unused) > 1 else ''} {', '.join(unused)} for {self.type}", unused[0]
            )


def updatable_options(opts: OptionReader) -> list[tuple[str, Any]]:
    """Kaldi's UpdatableComponent options (InitLearningRatesFromConfig), checked, with Kaldi's defaults."""
    result = []
    for key, default in (("learning-rate", 0.001), ("learning-rate-factor", 1.0), ("max-change", 0.0),
                         ("l2-regularize", 0.0)):
        value = opts.float(key, default)
        opts.nonnegative(key, value)
        result.append((key, value))
    result.append(("is-gradient", False))
    return result


# ----- reading matrices named in configs -------------------------------------------------

MatrixReader = Callable[[str], np.ndarray]


def read_kaldi_text_object(path: str) -> np.ndarray:
    """A Kaldi matrix or vector written in text form (`[ 1 2\\n 3 4 ]`), or a `.npy` file.

    Binary Kaldi files need a reader from symnet's Kaldi I/O, passed to the
    builder as `read_matrix=`.
    """
    if str(path).endswith(".npy"):
        return np.load(path, allow_pickle=False)
    with open(path, "rb") as f:
        data = f.read()
    if data.startswith(b"\0B"):
        raise SymnetError(f"{path}: a binary Kaldi object; pass read_matrix= (symnet's Kaldi reader) to read it")
    text = data.decode("ascii", errors="replace")
    start, end = text.find("["), text.rfind("]")
    if start < 0 or end < start:
        raise SymnetError(f"{path}: not a Kaldi text matrix or vector (no [ ... ])")
    rows = [line.split() for line in text[start + 1 : end].strip().splitlines() if line.strip()]
    try:
        if len(rows) <= 1 and "\n" not in text[start:end].strip():
            return np.array([float(v) for v in (rows[0] if rows else [])])
        return np.array([[float(v) for v in row] for row in rows])
    except ValueError as e:
        raise SymnetError(f"{path}: bad number in Kaldi text object: {e}") from None


def load_array(opts: OptionReader, key: str, read_matrix: MatrixReader | None, ndim: int) -> np.ndarray:
    path = opts.str(key)
    try:
        array = np.asarray((read_matrix or read_kaldi_text_object)(path), dtype=np.float64)
    except (OSError, SymnetError) as e:
        raise opts.error(f"cannot read {key}={path}: {e}", key) from None
    if array.ndim != ndim or array.size == 0:
        kind = "matrix" if ndim == 2 else "vector"
        raise opts.error(f"{key}={path} is not a non-empty {kind} (shape {array.shape})", key)
    return array


# ----- the registry ------------------------------------------------------------------

Builder = Callable[..., Layer]

#: Kaldi type name -> builder `(name, options, input, *, read_matrix=None) -> Layer`.
COMPONENTS: dict[str, Builder] = {}


def register(kaldi_type: str) -> Callable[[Builder], Builder]:
    def decorate(builder: Builder) -> Builder:
        COMPONENTS[kaldi_type] = builder
        return builder

    return decorate


def build_component(
    kaldi_type: str, name: str, options: Mapping[str, Any], input: Layer, *, read_matrix: MatrixReader | None = None
) -> Layer:
    """Build the component of Kaldi type `kaldi_type` from its config options."""
    builder = COMPONENTS.get(kaldi_type)
    if builder is None:
        raise ComponentConfigError(f"unknown component type {kaldi_type!r}", component=name, type=kaldi_type,
                                   option="type")
    return builder(name, options, input, read_matrix=read_matrix)
