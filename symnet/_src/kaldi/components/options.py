"""What the config side of every component record shares: reading options, writing them back.

Reading: `ComponentOptionReader` reads a component's config options with
Kaldi's rules (values may be strings from a config file or Python values),
remembering which were used, so that `finish()` reports the unknown ones as
Kaldi's `HasUnusedValues` does; errors are `ComponentConfigError`s naming the
component and the option. `updatable_options` reads Kaldi's learning-rate
options; `load_array` reads the file an option such as `matrix=` names (with
`read_matrix`, or `read_matrix_file`: Kaldi text or binary, or .npy); `normal_init` is Kaldi's
`SetRandn(); Scale(stddev); Add(mean)` as an initialiser.

Writing (a record's `config_options`): `meta_options` gives the metadata
options a component keeps, `init_options` the options that make a Weight's
initialiser, `field_options` options named after the component's fields.
"""

from __future__ import annotations

import builtins
import math
import numbers
import os
from collections.abc import Callable, Iterable, Mapping
from typing import IO, Any

import numpy as np

from ...base.errors import ComponentConfigError, ModelFormatError, SymnetError
from ...base.safe_read import open_regular, read_bounded
from ...components.base import Component
from ...core.initializers import Full, Initializer, Normal, Zeros
from ...core.layer import Layer
from ...kaldi_io.binary import parse_kaldi_array

__all__ = [
    "LEARNING",
    "NATURAL",
    "ComponentOptionReader",
    "MatrixReader",
    "field_options",
    "in_out_options",
    "init_options",
    "load_array",
    "meta_options",
    "normal_init",
    "param_shape",
    "positive_dim",
    "read_matrix_file",
    "updatable_options",
]

#: `read_matrix(path)`: the matrix or vector in a file a config option names.
MatrixReader = Callable[[str], np.ndarray]

# ----- reading options ---------------------------------------------------------------------

_REQUIRED = object()


class ComponentOptionReader:
    """Reads a component's config options with Kaldi's rules, remembering which were used.

    Values may be strings (from a config file) or Python values. Errors are
    ComponentConfigError naming the component and the option. (The options
    of a config file's node lines are `symnet._src.kaldi.text.config.OptionReader`'s.)
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

    def int_list(self, key: builtins.str, default: Any = _REQUIRED) -> Any:
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

    def require(self, condition: builtins.bool, message: builtins.str, option: builtins.str | None = None) -> None:
        if not condition:
            raise self.error(message, option)

    def positive(self, key: builtins.str, value: Any) -> None:
        if not value > 0:
            raise self.error(f"option {key}={value} must be positive", key)

    def nonnegative(self, key: builtins.str, value: Any) -> None:
        if not value >= 0:
            raise self.error(f"option {key}={value} must not be negative", key)

    def finish(self) -> None:
        """Kaldi's `HasUnusedValues`: any option not read is an error."""
        unused = [k for k in self.raw if k not in self.used]
        if unused:
            raise self.error(
                f"unknown option{'s' if len(unused) > 1 else ''} {', '.join(unused)} for {self.type}", unused[0]
            )


def updatable_options(opts: ComponentOptionReader) -> list[tuple[str, Any]]:
    """Kaldi's UpdatableComponent options (InitLearningRatesFromConfig), checked, with Kaldi's defaults."""
    result = []
    for key, default in (
        ("learning-rate", 0.001),
        ("learning-rate-factor", 1.0),
        ("max-change", 0.0),
        ("l2-regularize", 0.0),
    ):
        value = opts.float(key, default)
        opts.nonnegative(key, value)
        result.append((key, value))
    result.append(("is-gradient", False))
    return result


# ----- reading matrices named in configs -------------------------------------------------


#: The largest matrix file a config option may name (far beyond any real LDA or PCA matrix).
MAX_MATRIX_FILE_BYTES = 1 << 30


def read_matrix_file(path: str) -> np.ndarray:
    """The matrix or vector in a file a config option names, as Kaldi reads it: a Kaldi matrix or
    vector, text (`[ 1 2\\n 3 4 ]`) or binary (what Kaldi's own scripts write), or a `.npy` file.

    The file is named inside another file, so it is treated as untrusted: it is opened once and only a
    regular file of at most MAX_MATRIX_FILE_BYTES is read (a device or FIFO could be read forever), a `.npy`
    header's shape must match the file's real size before anything is allocated, and an error names the file
    and what was expected but never quotes what the file holds (`matrix=/proc/self/environ` must not print it)."""
    f, st = open_regular(path, ModelFormatError, "matrix file")
    with f:
        if st.st_size > MAX_MATRIX_FILE_BYTES:
            raise ModelFormatError(
                f"{path}: the matrix file has {st.st_size} bytes, more than the {MAX_MATRIX_FILE_BYTES} allowed"
            )
        if str(path).endswith(".npy"):
            return _read_npy(f, path, st.st_size)
        data = read_bounded(f, st.st_size, MAX_MATRIX_FILE_BYTES)
    try:
        if len(data) > MAX_MATRIX_FILE_BYTES:
            raise ModelFormatError(f"{path}: the matrix file grew past {MAX_MATRIX_FILE_BYTES} bytes as it was read")
        return parse_kaldi_array(data, path)
    except ModelFormatError:
        raise ModelFormatError(
            f"{path}: not a Kaldi matrix or vector (text `[ ... ]` or binary, as Kaldi's scripts write) or a .npy file"
        ) from None


def _read_npy(f: IO[bytes], path: str, size: int) -> np.ndarray:
    """The array of the open .npy file `f`, its header checked against the file's size before the data is read."""
    what = f"{path}: not a readable .npy matrix file"
    try:
        version = np.lib.format.read_magic(f)
        if version == (1, 0):
            shape, fortran, dtype = np.lib.format.read_array_header_1_0(f)
        else:
            shape, fortran, dtype = np.lib.format.read_array_header_2_0(f)
    except ValueError:
        raise ModelFormatError(f"{what} (its header is not a .npy header)") from None
    if dtype.hasobject:
        raise ModelFormatError(f"{what} (it holds Python objects, which would need a pickle)")
    expected = math.prod(shape) * dtype.itemsize
    if expected != size - f.tell():
        raise ModelFormatError(
            f"{what}: its header's shape {shape} of {dtype} is {expected} bytes, but the file has "
            f"{size - f.tell()} after the header"
        )
    array = np.fromfile(f, dtype=dtype, count=math.prod(shape))
    if array.size != math.prod(shape):
        raise ModelFormatError(f"{what}: the file was cut short as it was read")
    return array.reshape(shape, order="F" if fortran else "C")


def load_array(opts: ComponentOptionReader, key: str, read_matrix: MatrixReader | None, ndim: int) -> np.ndarray:
    path = opts.str(key)
    try:
        array = np.asarray((read_matrix or read_matrix_file)(path), dtype=np.float64)
    except (OSError, SymnetError) as e:
        raise opts.error(f"cannot read {key}={path}: {e}", key) from None
    if array.ndim != ndim or array.size == 0:
        kind = "matrix" if ndim == 2 else "vector"
        raise opts.error(f"{key}={path} is not a non-empty {kind} (shape {array.shape})", key)
    return array


def positive_dim(opts: ComponentOptionReader, key: str = "dim") -> int:
    """A required positive integer option (a dim)."""
    dim = opts.int(key)
    opts.positive(key, dim)
    return dim


def normal_init(shape: tuple[int, ...], stddev: float, mean: float = 0.0) -> Initializer:
    """Kaldi's `SetRandn(); Scale(stddev); Add(mean)`, as the simplest initialiser that does it."""
    if stddev == 0.0:
        return Zeros(shape) if mean == 0.0 else Full(shape, float(mean))
    return Normal(shape, float(stddev), float(mean))


# ----- writing options ---------------------------------------------------------------------

#: Kaldi's learning-rate options (UpdatableComponent).
LEARNING = ("learning-rate", "learning-rate-factor", "max-change", "l2-regularize")
#: The natural-gradient options of the affine components.
NATURAL = ("num-samples-history", "alpha", "rank-in", "rank-out", "update-period")


def meta_options(component: Component, keys: Iterable[str]) -> list[tuple[str, Any]]:
    """The metadata options `keys` that the component keeps (those it has)."""
    out = []
    for key in keys:
        value = component.option(key)
        if value is not None:
            out.append((key, value))
    return out


def init_options(layer: Layer, stddev_key: str | None, mean_key: str | None) -> list[tuple[str, Any]]:
    """Options that make Kaldi's `SetRandn(); Scale(stddev); Add(mean)` give this Weight's initialiser."""
    init = getattr(layer, "init", None)
    if isinstance(init, Normal):
        stddev, mean = init.stddev, init.mean
    elif isinstance(init, Zeros):
        stddev, mean = 0.0, 0.0
    elif isinstance(init, Full):
        stddev, mean = 0.0, init.value
    else:
        return []
    out = []
    if stddev_key:
        out.append((stddev_key, stddev))
    if mean_key:
        out.append((mean_key, mean))
    return out


def param_shape(layer: Layer) -> tuple[int, ...]:
    """The shape of a parameter operand (`()` when it has none)."""
    return tuple(getattr(layer, "shape", ()))


def field_options(component: Component, *names: str) -> list[tuple[str, Any]]:
    """Options named after the component's fields (`dropout_proportion` -> `dropout-proportion`)."""
    return [(name.replace("_", "-"), getattr(component, name)) for name in names]


def in_out_options(c: Any) -> list[tuple[str, Any]]:
    """input-dim and output-dim of a component whose only fields are its dims (`in_dim`, `out_dim`)."""
    return [("input-dim", c.in_dim), ("output-dim", c.out_dim)]
