"""A reference evaluator for symnet networks over Indexes, written independently of the engine.

Values are kept in a dictionary from Cindex `(layer, Index)` to a row vector,
computed one Index at a time by memoised recursion, with no cleverness: this
is Kaldi nnet3's semantics read straight off the table in
`symnet/_src/core/descriptor.py`. `None` means "not computable".

The array module is a parameter (`numpy` by default, float64), so the same
evaluator run with `jax.numpy` on traced parameters gives reference gradients
through `jax.grad`.

    ref = Reference(net.outputs['output'], {'input': {Index(0, 3): row, ...}}, net.params)
    ref.value(Index(0, 3))          # the output row, or None
    evaluate(layer, inputs, params, Index(0, 3))   # one-shot form
"""

from __future__ import annotations

import contextlib
import sys
from collections.abc import Iterable, Mapping
from typing import Any

import numpy as np

from symnet._src.core.arithmetic import Divide, Dot, Minus, Negate, Plus, Power, Times
from symnet._src.core.descriptor import (
    Append,
    Const,
    Descriptor,
    DimRange,
    Failover,
    IfDefined,
    Input,
    Node,
    Offset,
    Ref,
    ReplaceIndex,
    Round,
    Scale,
    Sum,
    Switch,
)
from symnet._src.core.elementwise import Exp, Log, LogSoftmax, ReLU, Sigmoid, Softmax, Tanh
from symnet._src.core.frozen import FrozenArray
from symnet._src.core.index import Index
from symnet._src.core.layer import Identity, Layer, Literal, Weight
from symnet.components import AffineComponent, FixedAffineComponent, LinearComponent

DEFAULT_INPUT = "input"

__all__ = [
    "Reference",
    "evaluate",
    "computable",
    "rows_to_dict",
    "dict_to_matrix",
    "reference_outputs",
]


class NotSupported(Exception):
    """The reference does not know this layer type."""


@contextlib.contextmanager
def _deep_recursion(limit: int = 50_000):
    old = sys.getrecursionlimit()
    sys.setrecursionlimit(max(old, limit))
    try:
        yield
    finally:
        sys.setrecursionlimit(old)


def _named_nodes(roots: Iterable[Layer]) -> dict[str, Node]:
    found: dict[str, Node] = {}
    stack, seen = list(roots), set()
    while stack:
        layer = stack.pop()
        if id(layer) in seen:
            continue
        seen.add(id(layer))
        if isinstance(layer, Node):
            found.setdefault(layer.name, layer)
        stack.extend(layer.children)
    return found


class Reference:
    """Index-by-Index evaluation of `root` (a layer) given input rows and parameters.

    `inputs` is `{input name: {Index: vector}}` (`Identity()` reads `'input'`);
    `params` maps each Weight's name to its array (use a Network's canonical
    layers, `net.outputs[name]`, whose Weights carry their names). `extra_roots`
    are searched for `Node`s too, so a `Ref` may name a node of another output.
    """

    def __init__(
        self,
        root: Layer,
        inputs: Mapping[str, Mapping[Any, Any]],
        params: Mapping[str, Any] | None = None,
        *,
        xp: Any = np,
        extra_roots: Iterable[Layer] = (),
    ):
        self.root = root
        self.xp = xp
        self.nodes = _named_nodes([root, *extra_roots])
        self.inputs = {
            name: {Index(*k): xp.asarray(np.asarray(v, dtype=np.float64)) for k, v in rows.items()}
            for name, rows in inputs.items()
        }
        self.params = dict(params or {})
        self._memo: dict[tuple[Layer, Index], Any] = {}
        self._busy: set[tuple[Layer, Index]] = set()
        self._dims: dict[Layer, int | None] = {}
        self._dims_busy: set[Layer] = set()

    # ----- public -----------------------------------------------------------------

    def value(self, index: Any, layer: Layer | None = None):
        """The row of `layer` (default: the root) at `index`, or None where not computable."""
        with _deep_recursion():
            return self._value(self.root if layer is None else layer, Index(*index))

    def is_computable(self, index: Any, layer: Layer | None = None) -> bool:
        return self.value(index, layer) is not None

    # ----- evaluation ---------------------------------------------------------------

    def _resolve(self, layer: Layer) -> Layer:
        while isinstance(layer, Ref):
            if layer.name not in self.nodes:
                raise KeyError(f"Ref({layer.name!r}) names no node")
            layer = self.nodes[layer.name]
        return layer

    def _value(self, layer: Layer, index: Index):
        layer = self._resolve(layer)
        if isinstance(layer, Weight):
            return self.xp.asarray(self.params[layer.name])
        if isinstance(layer, Literal):
            return self.xp.asarray(_literal(layer))
        key = (layer, index)
        if key in self._memo:
            return self._memo[key]
        if key in self._busy:  # depends on itself at the same Index: never computable
            return None
        self._busy.add(key)
        try:
            result = self._compute(layer, index)
        finally:
            self._busy.discard(key)
        self._memo[key] = result
        return result

    def _compute(self, layer: Layer, index: Index):
        xp = self.xp
        n, t, x = index
        if isinstance(layer, Identity):
            return self.inputs.get(DEFAULT_INPUT, {}).get(index)
        if isinstance(layer, Input):
            return self.inputs.get(layer.name, {}).get(index)
        if isinstance(layer, Const):
            return xp.full((layer.dim,), layer.value, dtype=np.float64)
        if isinstance(layer, Offset):
            return self._value(layer.arg, Index(n, t + layer.t_offset, x + layer.x_offset))
        if isinstance(layer, Round):
            m = layer.t_modulus
            return self._value(layer.arg, Index(n, (t // m) * m, x))  # Python's // is floor
        if isinstance(layer, ReplaceIndex):
            if layer.variable == "t":
                return self._value(layer.arg, Index(n, layer.value, x))
            if layer.variable == "x":
                return self._value(layer.arg, Index(n, t, layer.value))
            raise NotSupported(f"ReplaceIndex of {layer.variable!r}")
        if isinstance(layer, IfDefined):
            v = self._value(layer.arg, index)
            if v is None:
                return xp.zeros((self.dim(layer.arg),), dtype=np.float64)
            return v
        if isinstance(layer, Failover):
            a = self._value(layer.first, index)
            return a if a is not None else self._value(layer.second, index)
        if isinstance(layer, Switch):
            k = len(layer.parts)
            return self._value(layer.parts[t % k], index)  # Python's % is the floor modulus
        if isinstance(layer, Append):
            parts = self._all(layer.parts, index)
            if parts is None:
                return None
            return xp.concatenate([xp.reshape(p, (-1,)) for p in parts])
        if isinstance(layer, Sum):
            parts = self._all(layer.parts, index)
            if parts is None:
                return None
            total = parts[0]
            for p in parts[1:]:
                total = total + p
            return total
        # Row-wise layers: the same Index of every operand.
        args = self._all(layer.children, index)
        if args is None:
            return None
        return apply_rowwise(layer, args, xp)

    def _all(self, layers, index: Index):
        """The values of every layer at `index`, or None as soon as one is not computable.

        Stopping at the first uncomputable operand changes no result (the whole
        is uncomputable anyway) but ends recursions such as
        `h = x + IfDefined(Offset(h, -1))` before the first frame of `x`.
        """
        out = []
        for c in layers:
            v = self._value(c, index)
            if v is None:
                return None
            out.append(v)
        return out

    # ----- dims ---------------------------------------------------------------------

    def dim(self, layer: Layer) -> int | None:
        """The number of columns of an indexed layer (None if only a cycle determines it)."""
        layer = self._resolve(layer)
        if layer in self._dims:
            return self._dims[layer]
        if layer in self._dims_busy:
            return None
        self._dims_busy.add(layer)
        try:
            shape = self._shape(layer)
        finally:
            self._dims_busy.discard(layer)
        d = None if shape is None else (shape[-1] if shape else 1)
        if d is not None:  # an unknown dim may be known once the cycle that hid it is done
            self._dims[layer] = d
        return d

    def _shape(self, layer: Layer) -> tuple[int, ...] | None:
        layer = self._resolve(layer)
        if isinstance(layer, Weight):
            return tuple(np.shape(self.params[layer.name]))
        if isinstance(layer, Literal):
            return tuple(np.shape(_literal(layer)))
        if isinstance(layer, (Input, Identity)):
            name = layer.name if isinstance(layer, Input) else DEFAULT_INPUT
            if isinstance(layer, Input):
                return (layer.dim,)
            rows = self.inputs.get(name, {})
            for v in rows.values():
                return tuple(np.shape(v))
            return None
        if isinstance(layer, Const):
            return (layer.dim,)
        if isinstance(layer, (Offset, Round, ReplaceIndex, IfDefined, Node)):
            return _opt_shape(self.dim(layer.children[0]))
        if isinstance(layer, Failover):
            return _opt_shape(_first_known(self.dim(layer.first), self.dim(layer.second)))
        if isinstance(layer, (Switch, Sum)):
            return _opt_shape(_first_known(*(self.dim(p) for p in layer.parts)))
        if isinstance(layer, Append):
            dims = [self.dim(p) for p in layer.parts]
            return None if any(d is None for d in dims) else (sum(dims),)
        if isinstance(layer, DimRange):
            return (layer.dim,)
        # Row-wise: apply the layer to zeros of the operands' shapes.
        shapes = []
        for c in layer.children:
            if is_indexed(c):
                shapes.append(_opt_shape(self.dim(c)))
            else:
                shapes.append(self._shape(c))
        if all(s is None for s in shapes):
            return None
        known = next(s for s in shapes if s is not None)
        if isinstance(layer, (Plus, Minus, Times, Divide)) and any(s is None for s in shapes):
            return known
        if isinstance(layer, Dot) and shapes[1] is not None and len(shapes[1]) == 2:
            return shapes[1][1:]
        if any(s is None for s in shapes):
            return None
        with np.errstate(all="ignore"):
            out = apply_rowwise(layer, [np.ones(s) for s in shapes], np)
        return tuple(np.shape(out))


def _opt_shape(d: int | None) -> tuple[int, ...] | None:
    return None if d is None else (d,)


def _first_known(*dims: int | None) -> int | None:
    for d in dims:
        if d is not None:
            return d
    return None


def _literal(layer: Literal) -> np.ndarray:
    value = layer.value
    if isinstance(value, FrozenArray):
        return np.asarray(value.array, dtype=np.float64)
    return np.asarray(value, dtype=np.float64)


def is_indexed(layer: Layer) -> bool:
    """Whether a layer's value depends on the Index (contains an input or a descriptor)."""
    if isinstance(layer, (Descriptor, Identity)):
        return True
    return any(is_indexed(c) for c in layer.children)


def apply_rowwise(layer: Layer, args: list, xp: Any):
    """A row-wise layer on one row (1-d operands; weights keep their shapes), in `xp`."""
    if isinstance(layer, Node):
        return args[0]
    if isinstance(layer, Scale):
        return layer.scale * args[0]
    if isinstance(layer, DimRange):
        return args[0][layer.offset : layer.offset + layer.dim]
    if isinstance(layer, Plus):
        return args[0] + args[1]
    if isinstance(layer, Minus):
        return args[0] - args[1]
    if isinstance(layer, Times):
        return args[0] * args[1]
    if isinstance(layer, Divide):
        return args[0] / args[1]
    if isinstance(layer, Dot):
        return xp.matmul(args[0], args[1])
    if isinstance(layer, Negate):
        return -args[0]
    if isinstance(layer, (AffineComponent, FixedAffineComponent)):  # Kaldi's y = W x + b (and its subclasses')
        return xp.matmul(args[1], args[0]) + args[2]
    if isinstance(layer, LinearComponent):  # Kaldi's y = W x
        return xp.matmul(args[1], args[0])
    if isinstance(layer, Power):
        return args[0] ** layer.exponent
    if isinstance(layer, Exp):
        return xp.exp(args[0])
    if isinstance(layer, Log):
        return xp.log(args[0])
    if isinstance(layer, Tanh):
        return xp.tanh(args[0])
    if isinstance(layer, Sigmoid):
        return 1.0 / (1.0 + xp.exp(-args[0]))
    if isinstance(layer, ReLU):
        return xp.maximum(args[0], 0.0)
    if isinstance(layer, Softmax):
        a = args[0] - xp.max(args[0], axis=-1, keepdims=True)
        e = xp.exp(a)
        return e / xp.sum(e, axis=-1, keepdims=True)
    if isinstance(layer, LogSoftmax):
        a = args[0] - xp.max(args[0], axis=-1, keepdims=True)
        return a - xp.log(xp.sum(xp.exp(a), axis=-1, keepdims=True))
    raise NotSupported(f"the reference does not know {type(layer).__name__}")


# ----- conveniences ----------------------------------------------------------------------


def evaluate(layer: Layer, inputs: Mapping[str, Mapping[Any, Any]], params: Mapping[str, Any] | None, index: Any):
    """The row of `layer` at `index` (a vector), or None where it is not computable."""
    return Reference(layer, inputs, params).value(index)


def computable(layer: Layer, inputs, params, indexes: Iterable[Any], **kw) -> list[Index]:
    """The Indexes among `indexes` at which `layer` is computable, in the given order."""
    ref = Reference(layer, inputs, params, **kw)
    return [Index(*i) for i in indexes if ref.value(i) is not None]


def rows_to_dict(indexes: Iterable[Any], matrix: Any) -> dict[Index, np.ndarray]:
    """`{Index: row}` from a matrix whose rows are labelled by `indexes` (in order)."""
    matrix = np.asarray(matrix, dtype=np.float64)
    idx = [Index(*i) for i in indexes]
    assert matrix.shape[0] == len(idx), (matrix.shape, len(idx))
    return {i: matrix[r] for r, i in enumerate(idx)}


def dict_to_matrix(rows: Mapping[Index, Any], indexes: Iterable[Any], xp: Any = np):
    """Stack `rows[i]` for `i` in `indexes` into a matrix (raises KeyError if one is missing)."""
    return xp.stack([rows[Index(*i)] for i in indexes])


def reference_outputs(
    outputs: Mapping[str, Layer],
    inputs: Mapping[str, Mapping[Any, Any]],
    params: Mapping[str, Any],
    wanted: Mapping[str, Iterable[Any]],
    xp: Any = np,
) -> dict[str, Any]:
    """`{output: matrix}` for the requested Indexes of each output; raises LookupError if one is not computable."""
    roots = list(outputs.values())
    result = {}
    for name, indexes in wanted.items():
        ref = Reference(outputs[name], inputs, params, xp=xp, extra_roots=roots)
        rows = []
        for i in indexes:
            v = ref.value(i)
            if v is None:
                raise LookupError(f"output {name!r} is not computable at {Index(*i)}")
            rows.append(v)
        result[name] = xp.stack(rows)
    return result
