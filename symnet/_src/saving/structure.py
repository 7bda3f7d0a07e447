"""A network's structure as JSON and back: every distinct layer once, operands first, by class name and fields.

`encode_layers` walks the canonical expression (a DAG) with
`symnet._src.core.walk.walk`, so each distinct layer is one entry, after its
operands, and a shared sub-tree stays one entry however many paths lead to
it: the file is linear in the size of the network. An entry is

    {"class": "Dot", "fields": {"lhs": {"layer": 0}, "rhs": {"layer": 1}}}

with the class's stable name (`symnet._src.core.registry`) and every field the
class's constructor takes, except `where` (the line that built the layer; it
is not part of `==`). Field values are JSON numbers, strings, booleans and
null; a JSON array is a tuple (a Component's `options` are tuples of
`(key, value)` pairs); an object is one of

    {"layer": K}                                 the layer of entry K (K before this entry)
    {"array": K}                                 array K of the archive, a FrozenArray (a Literal's or Weight's value)
    {"initializer": "Normal", "fields": {...}}   an Initializer (a Weight's `init`)
    {"float": "nan"}                             a float JSON has no number for: "nan", "inf", "-inf"

Anything else in a field is a SaveError when saving. `decode_layers`
constructs only registered classes, through their constructors (so their
converters and validators check what the file says), and refuses every
malformed entry with a ModelFormatError naming the entry.
"""

from __future__ import annotations

import math
import numbers
from collections.abc import Callable, Mapping, Sequence
from typing import Any

import attrs
import numpy as np

from .. import components as _components  # noqa: F401  symnet's own layer classes, registered before a file is read
from .. import layers as _layers  # noqa: F401
from ..base.errors import ModelFormatError, SaveError
from ..core import arithmetic as _arithmetic  # noqa: F401  (Plus, Dot, ...: the operators' layers)
from ..core.frozen import FrozenArray
from ..core.initializers import Initializer
from ..core.layer import Layer
from ..core.registry import INITIALIZER_CLASSES, LAYER_CLASSES
from ..core.walk import walk

__all__ = ["check_mapping", "decode_layers", "decode_outputs", "encode_layers", "network_entries"]

_NON_FINITE = {"nan": math.nan, "inf": math.inf, "-inf": -math.inf}


def _constructor_fields(cls: type) -> list[attrs.Attribute]:
    """The attrs fields the constructor takes, `where` left out."""
    return [f for f in attrs.fields(cls) if f.init and f.name != "where"]


class _Encoder:
    """Entries for layers, array entries for FrozenArrays, in the order met."""

    def __init__(self, arrays: list[np.ndarray]):
        self.arrays = arrays
        self.array_ids: dict[int, int] = {}
        self.layer_ids: dict[int, int] = {}

    def layer(self, layer: Layer) -> dict[str, Any]:
        k = len(self.layer_ids)
        name = LAYER_CLASSES.name_of(type(layer))
        if name is None:
            raise SaveError(
                f"layer #{k}, a {type(layer).__module__}.{type(layer).__qualname__}: the class is not registered; "
                f"define it with @symnet.layer_class"
            )
        what = f"layer #{k} ({name}{', built at ' + layer.where if layer.where else ''})"
        fields = {
            f.alias: self.value(getattr(layer, f.name), f"{what}, field {f.name!r}")
            for f in _constructor_fields(type(layer))
        }
        self.layer_ids[id(layer)] = k
        return {"class": name, "fields": fields}

    def value(self, value: Any, what: str) -> Any:
        if value is None or isinstance(value, (bool, str)):
            return value
        if isinstance(value, np.bool_):
            return bool(value)
        if isinstance(value, numbers.Integral):
            return int(value)
        if isinstance(value, numbers.Real) and not isinstance(value, np.ndarray):
            value = float(value)
            return value if math.isfinite(value) else {"float": repr(value)}
        if isinstance(value, tuple):
            return [self.value(v, f"{what}[{i}]") for i, v in enumerate(value)]
        if isinstance(value, Layer):
            k = self.layer_ids.get(id(value))
            if k is None:
                raise SaveError(f"{what} holds a layer that is not an operand (a child field) of it")
            return {"layer": k}
        if isinstance(value, FrozenArray):
            k = self.array_ids.get(id(value))
            if k is None:
                k = self.array_ids[id(value)] = len(self.arrays)
                self.arrays.append(value.array)
            return {"array": k}
        if isinstance(value, Initializer):
            name = INITIALIZER_CLASSES.name_of(type(value))
            if name is None:
                raise SaveError(
                    f"{what}: the initializer class {type(value).__qualname__} is not registered "
                    f"(initializers are attrs frozen subclasses of symnet.Initializer)"
                )
            return {
                "initializer": name,
                "fields": {
                    f.alias: self.value(getattr(value, f.name), f"{what}.{f.name}")
                    for f in attrs.fields(type(value))
                    if f.init
                },
            }
        raise SaveError(
            f"{what} is {value!r}, a {type(value).__name__}: symnet files hold numbers, strings, "
            f"booleans, None, tuples, arrays, initializers and layers"
        )


def encode_layers(roots: Sequence[Layer], arrays: list[np.ndarray]) -> tuple[list[dict[str, Any]], list[int]]:
    """The entries of every layer under `roots` (operands first) and the entry of each root.

    FrozenArrays are appended to `arrays` (each distinct object once) and named by their position there.
    """
    encoder = _Encoder(arrays)
    entries = [encoder.layer(layer) for layer in walk(roots)]
    return entries, [encoder.layer_ids[id(r)] for r in roots]


class _Decoder:
    def __init__(self, arrays: Sequence[np.ndarray], fail: Callable[[str], ModelFormatError], origin: str):
        self.arrays = arrays
        self.fail = fail
        self.origin = origin
        self.layers: list[Layer] = []
        self.frozen: dict[int, FrozenArray] = {}

    def layer(self, entry: Any) -> Layer:
        k = len(self.layers)
        if not isinstance(entry, dict) or set(entry) != {"class", "fields"} or not isinstance(entry["fields"], dict):
            raise self.fail(f"layer #{k} is not an entry {{'class': ..., 'fields': {{...}}}}")
        name = entry["class"]
        cls = LAYER_CLASSES.lookup(name) if isinstance(name, str) else None
        if cls is None or not issubclass(cls, Layer):
            raise self.fail(
                f"layer #{k} is of class {name!r}, which is not defined in this process: " + _unknown_class_hint(name)
            )
        what = f"layer #{k} ({name})"
        kwargs = self.fields(entry["fields"], cls, what)
        build: Any = cls  # a registered Layer class, its fields known only at run time
        try:
            layer = build(**kwargs, where=f"{self.origin}, layer #{k}")
        except Exception as e:  # the class's own converters and validators: any error a layer class raises
            raise self.fail(f"{what} cannot be built from the stored fields: {type(e).__name__}: {e}") from None
        self.layers.append(layer)
        return layer

    def fields(self, stored: dict[str, Any], cls: Any, what: str) -> dict[str, Any]:
        allowed = {
            f.alias for f in (_constructor_fields(cls) if issubclass(cls, Layer) else attrs.fields(cls)) if f.init
        }
        unknown = sorted(set(stored) - allowed)
        if unknown:
            raise self.fail(f"{what}: {cls.__qualname__} has no field(s) {unknown}")
        return {key: self.value(value, f"{what}, field {key!r}") for key, value in stored.items()}

    def value(self, value: Any, what: str) -> Any:
        if value is None or isinstance(value, (bool, str, int, float)):
            return value
        if isinstance(value, list):
            return tuple(self.value(v, f"{what}[{i}]") for i, v in enumerate(value))
        if not isinstance(value, dict):  # pragma: no cover - JSON has no other values
            raise self.fail(f"{what}: an unexpected value {value!r}")
        keys = set(value)
        if keys == {"layer"} and _is_index(value["layer"], len(self.layers)):
            return self.layers[value["layer"]]
        if keys == {"array"} and _is_index(value["array"], len(self.arrays)):
            k = value["array"]
            if k not in self.frozen:
                self.frozen[k] = FrozenArray(self.arrays[k])
            return self.frozen[k]
        if keys == {"float"} and value["float"] in _NON_FINITE:
            return _NON_FINITE[value["float"]]
        if keys == {"initializer", "fields"} and isinstance(value["fields"], dict):
            name = value["initializer"]
            cls = INITIALIZER_CLASSES.lookup(name) if isinstance(name, str) else None
            if cls is None:
                raise self.fail(
                    f"{what}: initializer class {name!r} is not defined in this process: " + _unknown_class_hint(name)
                )
            kwargs = self.fields(value["fields"], cls, f"{what}, initializer {name}")
            try:
                return cls(**kwargs)
            except Exception as e:  # the initializer's own checks
                raise self.fail(f"{what}: initializer {name} cannot be built: {type(e).__name__}: {e}") from None
        raise self.fail(
            f"{what}: {_short(value)} is not a layer of an earlier entry, an array of the file, "
            "an initializer or a float"
        )


def _is_index(value: Any, size: int) -> bool:
    return isinstance(value, int) and not isinstance(value, bool) and 0 <= value < size


def _short(value: Any) -> str:
    text = repr(value)
    return text if len(text) <= 80 else text[:79] + "…"


def _unknown_class_hint(name: Any) -> str:
    if isinstance(name, str) and ":" in name:
        module = name.split(":", 1)[0]
        return f"import {module} (the module that defines it) before loading; symnet never imports it for you"
    return "a newer symnet may have written the file, or the file is damaged"


def decode_layers(
    entries: Any, arrays: Sequence[np.ndarray], fail: Callable[[str], ModelFormatError], origin: str
) -> list[Layer]:
    """The layers of `entries` (as `encode_layers` wrote them), each built by its registered class.

    Layers record `where` as `origin, layer #K`; `fail(message)` makes the error for anything malformed.
    """
    if not isinstance(entries, list):
        raise fail("the header's 'layers' is not a list")
    decoder = _Decoder(arrays, fail, origin)
    for entry in entries:
        decoder.layer(entry)
    return decoder.layers


def check_mapping(value: Any, what: str, fail: Callable[[str], ModelFormatError]) -> Mapping[str, Any]:
    """`value` if it is a JSON object, else the error."""
    if not isinstance(value, dict):
        raise fail(f"the header's {what!r} is not an object")
    return value


def network_entries(header: Mapping[str, Any], fail: Callable[[str], ModelFormatError]) -> list[dict[str, Any]]:
    """A version-2 header's `networks`, each checked to be an object."""
    entries = header.get("networks")
    if not isinstance(entries, list):
        raise fail("the header's 'networks' is not a list")
    for k, entry in enumerate(entries):
        if not isinstance(entry, dict):
            raise fail(f"the header's network #{k} is not an object")
    return entries


def decode_outputs(
    entry: Mapping[str, Any], arrays: Sequence[np.ndarray], fail: Callable[[str], ModelFormatError], origin: str
) -> tuple[dict[str, Layer], dict[str, str] | None]:
    """A network entry's outputs (name -> layer) and objectives (None where the file has none)."""
    layers = decode_layers(entry.get("layers"), arrays, fail, origin=origin)
    outputs = {}
    stored_outputs = entry.get("outputs")
    if not isinstance(stored_outputs, list) or not stored_outputs:
        raise fail("the header's 'outputs' is not a non-empty list")
    for item in stored_outputs:
        if (
            not (
                isinstance(item, list)
                and len(item) == 2
                and isinstance(item[0], str)
                and isinstance(item[1], int)
                and 0 <= item[1] < len(layers)
            )
            or item[0] in outputs
        ):
            raise fail(f"the header's output {item!r} is not a distinct [name, layer entry] pair")
        outputs[item[0]] = layers[item[1]]
    objectives = entry.get("objectives")
    if objectives is not None:
        objectives = check_mapping(objectives, "objectives", fail)
        unknown = sorted(set(objectives) - set(outputs))
        if unknown or not all(isinstance(v, str) for v in objectives.values()):
            raise fail(f"the header's objectives {objectives!r} are not strings for outputs of the network")
    return outputs, None if objectives is None else dict(objectives)
