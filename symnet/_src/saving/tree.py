"""A training state (a pytree) as JSON and arrays and back: containers, scalars, arrays, Networks, optax states.

`encode_tree` writes one JSON node per value, depth first:

    null, true, 3, "text", 0.5          None, a bool, an int, a str, a float (as Python's json writes them)
    {"float": "nan"}                    a float JSON has no number for: "nan", "inf", "-inf"
    {"list": [...]}, {"tuple": [...]}   a list, a tuple
    {"dict": [[key, node], ...]}        a dict, in its order; keys are str, int, bool or None
    {"array": K, "kind": "jax"}         array K of the archive: a jax.Array ("jax"), a NumPy array ("numpy")
                                        or a NumPy scalar ("scalar")
    {"network": K}                      network K of the header's `networks`
    {"namedtuple": NAME, "fields": [[field, node], ...]}
                                        a namedtuple (optax's states: ScaleByAdamState, EmptyState, ...)

Reading never imports a module or calls a class the file names. A namedtuple
comes back as the type at the same place in the template (`like`) when it has
the same fields, else as the optax state type of that NAME: NAME is
`optax.ScaleByAdamState` for a class optax exports (in `optax`,
`optax.contrib`, `optax.transforms`, `optax.schedules`), and only those
classes are looked up. Any other namedtuple (a user's) needs a template.
"""

from __future__ import annotations

import functools
import math
from collections.abc import Callable, Mapping, Sequence
from typing import Any

import jax
import jax.numpy as jnp
import numpy as np

from ..base.errors import ModelFormatError, SaveError
from ..base.safe_read import is_extended
from ..network import Network

__all__ = ["NO_TEMPLATE", "OPTAX_MODULES", "check_like", "decode_tree", "encode_tree", "optax_states"]

_NON_FINITE = {"nan": math.nan, "inf": math.inf, "-inf": -math.inf}
#: The modules whose exported namedtuple classes a file may name (the allow-list of `optax_states`).
OPTAX_MODULES = ("optax", "optax.contrib", "optax.transforms", "optax.schedules")


@functools.cache
def optax_states() -> dict[str, type]:
    """`'optax.ScaleByAdamState'` -> the class, for every namedtuple class the OPTAX_MODULES export."""
    import importlib

    found: dict[str, type] = {}
    for module_name in OPTAX_MODULES:
        module = importlib.import_module(module_name)
        for name in dir(module):
            value = getattr(module, name)
            if _is_namedtuple_class(value):
                found.setdefault(f"optax.{name}", value)
    return found


def _is_namedtuple_class(value: Any) -> bool:
    return isinstance(value, type) and issubclass(value, tuple) and isinstance(getattr(value, "_fields", None), tuple)


def _field_names(value: Any) -> tuple[str, ...]:
    """A namedtuple's field names."""
    return tuple(value._fields)


def _state_name(cls: type) -> str:
    """The name a file gives a namedtuple class: its optax name, else `module:qualname`."""
    if cls.__module__.split(".")[0] == "optax":
        for name, known in optax_states().items():
            if known is cls:
                return name
    return f"{cls.__module__}:{cls.__qualname__}"


class _Encoder:
    def __init__(self, arrays: list[np.ndarray], network: Callable[[Any], int]):
        self.arrays = arrays
        self.network = network

    def array(self, value: Any, kind: str) -> dict[str, Any]:
        self.arrays.append(np.asarray(value))
        return {"array": len(self.arrays) - 1, "kind": kind}

    def node(self, value: Any, where: str) -> Any:
        if isinstance(value, np.generic):  # before the Python types: np.float64 is a float, np.str_ a str
            if value.dtype.kind not in "biufc" and not is_extended(value.dtype):
                raise SaveError(f"{where} is a NumPy {value.dtype} scalar: symnet files hold numbers only")
            return self.array(value, "scalar")
        if value is None or isinstance(value, (bool, str, int)):
            return value
        if isinstance(value, float):
            return value if math.isfinite(value) else {"float": repr(value)}
        if isinstance(value, Network):
            return {"network": self.network(value)}
        if isinstance(value, jax.Array) and jax.dtypes.issubdtype(value.dtype, jax.dtypes.prng_key):
            # a typed PRNG key: its data (uint32) and its implementation's name, as jax.random.wrap_key_data takes
            return {**self.array(jax.random.key_data(value), "key"), "impl": str(jax.random.key_impl(value))}
        if isinstance(value, jax.Array):
            return self.array(value, "jax")
        if isinstance(value, np.ndarray):
            return self.array(value, "numpy")
        if isinstance(value, tuple) and _is_namedtuple_class(type(value)):
            fields = [[f, self.node(v, f"{where}.{f}")] for f, v in zip(_field_names(value), value, strict=True)]
            return {"namedtuple": _state_name(type(value)), "fields": fields}
        if type(value) in (list, tuple):
            return {type(value).__name__: [self.node(v, f"{where}[{i}]") for i, v in enumerate(value)]}
        if type(value) is dict:
            items = []
            for key, v in value.items():
                if key is not None and not isinstance(key, (str, int)):
                    raise SaveError(
                        f"{where}: a dict key {key!r} ({type(key).__name__}); keys are str, int, bool or None"
                    )
                items.append([key, self.node(v, f"{where}[{key!r}]")])
            return {"dict": items}
        raise SaveError(
            f"{where} is a {type(value).__module__}.{type(value).__qualname__}: symnet.save holds Networks, arrays, "
            "namedtuples (optax states), dicts, lists, tuples, None, bool, int, float and str"
        )


def encode_tree(tree: Any, arrays: list[np.ndarray], network: Callable[[Any], int]) -> Any:
    """The JSON node of `tree`; arrays are appended to `arrays`, Networks given to `network` (which numbers them).

    A SaveError names the place of anything else (`tree['opt'][1].mu`).
    """
    return _Encoder(arrays, network).node(tree, "tree")


#: `like` when there is no template.
NO_TEMPLATE: Any = object()


class _Decoder:
    def __init__(self, arrays: Sequence[np.ndarray], networks: Sequence[Any], fail: Callable[[str], ModelFormatError]):
        self.arrays = arrays
        self.networks = networks
        self.fail = fail

    def node(self, node: Any, like: Any, where: str) -> Any:
        if node is None or isinstance(node, (bool, str, int, float)):
            return node
        if isinstance(node, dict) and len(node) == 1 and "float" in node and node["float"] in _NON_FINITE:
            return _NON_FINITE[node["float"]]
        if isinstance(node, dict) and set(node) == {"array", "kind"}:
            k, kind = node["array"], node["kind"]
            if not _is_index(k, len(self.arrays)) or kind not in ("jax", "numpy", "scalar"):
                raise self.fail(f"{where}: {_short(node)} is not an array of the file")
            array = self.arrays[k]
            if kind == "jax":
                return jnp.asarray(array)
            if kind == "scalar":
                if array.shape != ():
                    raise self.fail(f"{where}: a NumPy scalar of shape {list(array.shape)}")
                return array[()]
            return array
        if isinstance(node, dict) and set(node) == {"array", "kind", "impl"} and node["kind"] == "key":
            k, impl = node["array"], node["impl"]
            if not _is_index(k, len(self.arrays)) or not isinstance(impl, str):
                raise self.fail(f"{where}: {_short(node)} is not a PRNG key of the file")
            try:
                return jax.random.wrap_key_data(jnp.asarray(self.arrays[k]), impl=impl)
            except (TypeError, ValueError) as e:
                raise self.fail(f"{where}: a PRNG key of implementation {impl!r} that JAX cannot make ({e})") from None
        if isinstance(node, dict) and set(node) == {"network"}:
            if not _is_index(node["network"], len(self.networks)):
                raise self.fail(f"{where}: {_short(node)} names no network of the file")
            return self.networks[node["network"]]
        if (
            isinstance(node, dict)
            and set(node) in ({"list"}, {"tuple"})
            and isinstance(next(iter(node.values())), list)
        ):
            kind, items = next(iter(node.items()))
            likes = like if type(like) is (list if kind == "list" else tuple) and len(like) == len(items) else None
            values = [
                self.node(v, likes[i] if likes is not None else NO_TEMPLATE, f"{where}[{i}]")
                for i, v in enumerate(items)
            ]
            return values if kind == "list" else tuple(values)
        if isinstance(node, dict) and set(node) == {"dict"} and isinstance(node["dict"], list):
            out: dict[Any, Any] = {}
            for item in node["dict"]:
                if not (isinstance(item, list) and len(item) == 2) or not (
                    item[0] is None or isinstance(item[0], (str, int))
                ):
                    raise self.fail(f"{where}: the dict item {_short(item)} is not a [key, value] pair")
                key = item[0]
                if key in out:
                    raise self.fail(f"{where}: the dict key {key!r} comes twice")
                sub = like.get(key, NO_TEMPLATE) if isinstance(like, Mapping) else NO_TEMPLATE
                out[key] = self.node(item[1], sub, f"{where}[{key!r}]")
            return out
        if isinstance(node, dict) and set(node) == {"namedtuple", "fields"} and isinstance(node["fields"], list):
            return self.namedtuple(node["namedtuple"], node["fields"], like, where)
        raise self.fail(f"{where}: {_short(node)} is not a value symnet.save writes")

    def namedtuple(self, name: Any, fields: list[Any], like: Any, where: str) -> Any:
        if not all(isinstance(f, list) and len(f) == 2 and isinstance(f[0], str) for f in fields):
            raise self.fail(f"{where}: the fields of namedtuple {name!r} are not [name, value] pairs")
        names = tuple(f[0] for f in fields)
        if isinstance(like, tuple) and _is_namedtuple_class(type(like)) and _field_names(like) == names:
            cls: type = type(like)
        else:
            found = optax_states().get(name) if isinstance(name, str) else None
            if found is None:
                raise self.fail(
                    f"{where}: the namedtuple {name!r} is not an optax state symnet knows by name (those of "
                    f"{', '.join(OPTAX_MODULES)}); give a template with that type there: symnet.load(path, like=...)"
                )
            cls = found
            if tuple(getattr(cls, "_fields", ())) != names:
                raise self.fail(
                    f"{where}: {name} has fields {list(getattr(cls, '_fields', ()))}, the file {list(names)}"
                )
        subs = like if isinstance(like, tuple) and type(like) is cls else None
        return cls(
            *(
                self.node(f[1], subs[i] if subs is not None else NO_TEMPLATE, f"{where}.{f[0]}")
                for i, f in enumerate(fields)
            )
        )


def decode_tree(
    node: Any,
    arrays: Sequence[np.ndarray],
    networks: Sequence[Any],
    fail: Callable[[str], ModelFormatError],
    like: Any = NO_TEMPLATE,
) -> Any:
    """The value `encode_tree` wrote as `node`, namedtuple types taken from `like` where it has them."""
    return _Decoder(arrays, networks, fail).node(node, like, "tree")


def check_like(tree: Any, like: Any, fail: Callable[[str], ModelFormatError]) -> None:
    """Refuse a loaded tree whose structure, or an array's shape or dtype, differs from the template's."""
    mine: Any = jax.tree_util.tree_structure(tree)
    theirs: Any = jax.tree_util.tree_structure(like)
    if mine != theirs:
        raise fail(
            f"the saved tree does not have the template's structure: saved {_short(mine)}, template {_short(theirs)}"
        )
    for (path, a), b in zip(jax.tree_util.tree_leaves_with_path(tree), jax.tree_util.tree_leaves(like), strict=True):
        if hasattr(b, "shape") and hasattr(b, "dtype"):
            saved = a.dtype if hasattr(a, "dtype") else np.asarray(a).dtype  # a typed PRNG key has no NumPy one
            if tuple(np.shape(a)) != tuple(b.shape) or saved != b.dtype:
                raise fail(
                    f"tree{jax.tree_util.keystr(path)}: saved {saved}{list(np.shape(a))}, the template "
                    f"has {b.dtype}{list(b.shape)}"
                )


def _is_index(value: Any, size: int) -> bool:
    return isinstance(value, int) and not isinstance(value, bool) and 0 <= value < size


def _short(value: Any) -> str:
    text = repr(value)
    return text if len(text) <= 120 else text[:119] + "…"
