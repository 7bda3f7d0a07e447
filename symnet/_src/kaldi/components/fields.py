"""What the model-file side of every component record shares: typed field access, parameter values.

Reading (a record's `read_fields`): `ModelFields` gives typed access to the
fields of a component as a model file stores it (an `NnetComponent` of
`symnet._src.kaldi.models.nnet_file`); its errors are `ModelFormatError`s naming the file,
the component and the token. `dim_token`, `matrix_dims` and `vector_dim` read
a component's dims and remember where they came from, for the errors about
dims that disagree with the node lines. Stored float32 numbers become options
by their shortest decimal (`stored_float`), so a config option survives the
round trip config -> model file -> network exactly.

Writing (a record's `write_fields`): nested blocks are `Block`s; `ParamValues` gives a component's
parameter values as Kaldi's float32 arrays (a `ModelWriteError` for a
parameter the network does not hold); `option_or` reads its metadata with
Kaldi's default; `updatable_fields` are UpdatableComponent's fields.
"""

from __future__ import annotations

import builtins
from collections.abc import Iterable, Mapping
from typing import TYPE_CHECKING, Any

import attrs
import numpy as np

from ...base.errors import ModelFormatError, ModelWriteError
from ...components.base import Component
from ...core.layer import Weight
from ..models.token_kinds import BOOL, DOUBLE, FLOAT, INT, VECTOR

if TYPE_CHECKING:
    from ..models.nnet_file import NnetComponent

__all__ = [
    "Block",
    "IN_OUT_KINDS",
    "NONLINEAR_KINDS",
    "UPDATABLE_KINDS",
    "ModelFields",
    "ParamValues",
    "describe_value",
    "dim_token",
    "empty_vector",
    "f32",
    "matrix_dims",
    "option_or",
    "read_in_out",
    "stored_float",
    "updatable_field_options",
    "updatable_fields",
    "vector_dim",
    "write_in_out",
]

#: UpdatableComponent::WriteUpdatableCommon (nnet-component-itf.cc).
UPDATABLE_KINDS = {
    "LearningRateFactor": FLOAT,
    "IsGradient": BOOL,
    "MaxChange": FLOAT,
    "L2Regularize": FLOAT,
    "LearningRate": FLOAT,
}
#: NonlinearComponent::Write (nnet-component-itf.cc).
NONLINEAR_KINDS = {
    "Dim": INT,
    "BlockDim": INT,
    "ValueAvg": VECTOR,
    "DerivAvg": VECTOR,
    "Count": DOUBLE,
    "OderivRms": VECTOR,
    "OderivCount": DOUBLE,
    "NumDimsSelfRepaired": DOUBLE,
    "NumDimsProcessed": DOUBLE,
    "SelfRepairLowerThreshold": FLOAT,
    "SelfRepairUpperThreshold": FLOAT,
    "SelfRepairScale": FLOAT,
}
#: The components whose only fields are their dims.
IN_OUT_KINDS = {"InputDim": INT, "OutputDim": INT}


# ----- reading: fields -> config options --------------------------------------------------------

_REQUIRED = object()


def stored_float(value: Any) -> float:
    """A stored number as a config option: float32 by its shortest decimal, so 0.001 stays 0.001."""
    if isinstance(value, np.float32):
        return float(str(value))
    return float(value)


class ModelFields:
    """Typed access to a component's fields; errors name the file, component and token."""

    def __init__(self, component: NnetComponent, file: str, *, label: str | None = None):
        self.component = component
        self.file = file
        #: How errors name the component: `component 'c1' (AffineComponent)`, or a nested block's owner.
        self.label = label or f"component {component.name!r} ({component.type})"
        #: Where the component's dims come from, for error messages: "input"/"output" -> text.
        self.origin: dict[str, str] = {}

    def error(self, message: str, token: str | None = None) -> ModelFormatError:
        where = f" <{token}>" if token else ""
        return ModelFormatError(f"{self.file}: {self.label}{where}: {message}")

    def nested(self, token: str) -> ModelFields:
        """The fields of the nested block `<token>` (a CompositeComponent's part, a `<ConvolutionModel>`);
        its errors name this component too."""
        value = self._get(token, _REQUIRED)
        if not (hasattr(value, "fields") and hasattr(value, "type")):
            raise self.error(f"expected a nested block, got {describe_value(value)}", token)
        return ModelFields(value, self.file, label=f"{self.label} <{token}>")

    def has(self, token: str) -> bool:
        return token in self.component

    def _get(self, token: str, default: Any) -> Any:
        if token in self.component:
            return self.component[token]
        if default is _REQUIRED:
            raise self.error(f"missing: a {self.component.type} needs <{token}>", token)
        return default

    def int(self, token: str, default: Any = _REQUIRED) -> Any:
        value = self._get(token, default)
        if token in self.component and (isinstance(value, bool) or not isinstance(value, (int, np.integer))):
            raise self.error(f"expected an integer, got {value!r}", token)
        return value

    def float(self, token: str, default: Any = _REQUIRED) -> Any:
        value = self._get(token, default)
        if token not in self.component:
            return value
        if isinstance(value, bool) or not isinstance(value, (int, float, np.integer, np.floating)):
            raise self.error(f"expected a number, got {value!r}", token)
        return stored_float(value)

    def bool(self, token: str, default: Any = _REQUIRED) -> Any:
        value = self._get(token, default)
        if token in self.component and not isinstance(value, (bool, np.bool_)):
            raise self.error(f"expected T or F, got {value!r}", token)
        return bool(value)

    def pair(self, token: str, default: Any = _REQUIRED) -> Any:
        value = self._get(token, default)
        if token in self.component and not (isinstance(value, tuple) and len(value) == 2):
            raise self.error(f"expected two values, got {value!r}", token)
        return value

    def array(self, token: str, ndim: builtins.int, default: Any = _REQUIRED) -> Any:
        value = self._get(token, default)
        if token not in self.component:
            return value
        kind = "vector" if ndim == 1 else "matrix"
        if not isinstance(value, np.ndarray) or value.dtype.kind != "f" or value.ndim != ndim:
            raise self.error(f"expected a {kind}, got {describe_value(value)}", token)
        return value

    def blocks(self) -> list[ModelFields]:
        """The nested component blocks (a CompositeComponent's parts), in file order."""
        out: list[ModelFields] = []
        for token, value in self.component.fields:
            if hasattr(value, "fields") and token.endswith("Component"):
                out.append(ModelFields(value, self.file, label=f"{self.label} part {len(out) + 1} <{token}>"))
        return out

    def offset_pairs(self, token: str) -> tuple[tuple[builtins.int, builtins.int], ...]:
        """An integer-pair vector (`[ -1,0 0,1 ]`) as a tuple of pairs."""
        value = self._get(token, _REQUIRED)
        if not (isinstance(value, np.ndarray) and value.dtype.kind in "iu" and value.ndim == 2 and value.shape[1] == 2):
            raise self.error(f"expected a vector of integer pairs, got {describe_value(value)}", token)
        return tuple((int(a), int(b)) for a, b in value)

    def ints(self, token: str) -> tuple[builtins.int, ...]:
        value = self._get(token, _REQUIRED)
        if not isinstance(value, np.ndarray) or value.dtype.kind not in "iu" or value.ndim != 1:
            raise self.error(f"expected an integer vector, got {describe_value(value)}", token)
        return tuple(int(v) for v in value)

    def dims_from(self, which: str, token: str, text: str) -> None:
        self.origin[which] = f"<{token}> {text}"


def describe_value(value: Any) -> str:
    """A stored value, described for an error message."""
    if isinstance(value, np.ndarray):
        return f"an array of shape {value.shape} ({value.dtype})"
    if hasattr(value, "fields") and hasattr(value, "type"):  # an NnetComponent: a nested block
        return f"a nested {value.type}"
    return repr(value)


def updatable_field_options(f: ModelFields) -> dict[str, Any]:
    """UpdatableComponent's learning-rate fields as config options."""
    out = {"learning-rate": f.float("LearningRate", 0.001)}
    for token, key in (
        ("LearningRateFactor", "learning-rate-factor"),
        ("MaxChange", "max-change"),
        ("L2Regularize", "l2-regularize"),
    ):
        if f.has(token):
            out[key] = f.float(token)
    return out


def matrix_dims(f: ModelFields, token: str, *, in_scale: int = 1, out_scale: int = 1) -> tuple[int, int]:
    """(input dim, output dim) from a parameter matrix's columns and rows (times the scales)."""
    m = f.array(token, 2)
    rows, cols = m.shape
    f.dims_from("input", token, f"has {cols} columns" + (f" (x {in_scale})" if in_scale != 1 else ""))
    f.dims_from("output", token, f"has {rows} rows" + (f" (x {out_scale})" if out_scale != 1 else ""))
    if rows == 0 or cols == 0:
        raise f.error(f"an empty matrix (shape {m.shape})", token)
    return cols * in_scale, rows * out_scale


def vector_dim(f: ModelFields, token: str) -> int:
    """The dim (in and out) of a component given by a parameter vector's size."""
    v = f.array(token, 1)
    f.dims_from("input", token, f"has {len(v)} elements")
    f.dims_from("output", token, f"has {len(v)} elements")
    if len(v) == 0:
        raise f.error("an empty vector", token)
    return len(v)


def dim_token(f: ModelFields, token: str = "Dim") -> int:
    """The dim (in and out) of a component given by an integer token."""
    dim = f.int(token)
    f.dims_from("input", token, f"is {dim}")
    f.dims_from("output", token, f"is {dim}")
    return dim


def read_in_out(f: ModelFields) -> dict[str, Any]:
    """`<InputDim>` and `<OutputDim>` as input-dim and output-dim."""
    input_dim, output_dim = f.int("InputDim"), f.int("OutputDim")
    f.dims_from("input", "InputDim", f"is {input_dim}")
    f.dims_from("output", "OutputDim", f"is {output_dim}")
    return {"input-dim": input_dim, "output-dim": output_dim}


# ----- writing: components -> fields ------------------------------------------------------------


def _block_fields(value: Iterable[tuple[str, Any]]) -> tuple[tuple[str, Any], ...]:
    return tuple(value)


@attrs.frozen
class Block:
    """A nested block a record's `write_fields` gives (a CompositeComponent's part, a `<ConvolutionModel>`):
    Kaldi's `type` and its (token, value) `fields`, written `<type> ... </type>`."""

    type: str
    fields: tuple[tuple[str, Any], ...] = attrs.field(converter=_block_fields)


def option_or(c: Component, key: str, default: Any) -> Any:
    """The component's metadata option `key`, or Kaldi's default when it has none."""
    value = c.option(key, default)
    return default if value is None else value


def updatable_fields(c: Component) -> list[tuple[str, Any]]:
    """UpdatableComponent::WriteUpdatableCommon: the learning-rate fields, in Kaldi's order."""
    out: list[tuple[str, Any]] = []
    factor = option_or(c, "learning-rate-factor", 1.0)
    if factor != 1.0:
        out.append(("LearningRateFactor", np.float32(factor)))
    if option_or(c, "is-gradient", False):
        out.append(("IsGradient", True))
    max_change = option_or(c, "max-change", 0.0)
    if max_change > 0.0:
        out.append(("MaxChange", np.float32(max_change)))
    l2 = option_or(c, "l2-regularize", 0.0)
    if l2 > 0.0:
        out.append(("L2Regularize", np.float32(l2)))
    out.append(("LearningRate", np.float32(option_or(c, "learning-rate", 0.001))))
    return out


class ParamValues:
    """A component's parameter values from the network's parameters, as Kaldi's float32 arrays."""

    def __init__(self, component: Component, params: Mapping[str, Any]):
        self.component = component
        self.params = params

    def __call__(self, field: str) -> np.ndarray:
        c = self.component
        weight = getattr(c, field)
        name = weight.name if isinstance(weight, Weight) else None
        if name is None or name not in self.params:
            raise ModelWriteError(
                f"component {c.name!r} ({c.kaldi_type}): its {field} is not a parameter "
                f"of the network ({type(weight).__name__}); a model file stores arrays"
            )
        return np.array(self.params[name], dtype=np.float32)


def f32(value: Any) -> np.float32:
    """A BaseFloat field value."""
    return np.float32(value)


def empty_vector() -> np.ndarray:
    """An empty float32 vector (a statistic Kaldi writes empty for a fresh component)."""
    return np.zeros(0, np.float32)


def write_in_out(c: Any, p: ParamValues) -> list[tuple[str, Any]]:
    """`<InputDim>` and `<OutputDim>` of a component whose only fields are its dims (`in_dim`, `out_dim`)."""
    return [("InputDim", c.in_dim), ("OutputDim", c.out_dim)]
