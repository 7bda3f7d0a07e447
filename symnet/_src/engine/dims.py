"""The shape of every node's value without running the network: dims of indexed nodes, shapes of the rest.

An indexed node's value is a matrix of rows; what is static about it is its
number of columns, written here as the shape `(1, dim)` of one row. A node that
does not depend on Indexes (a Weight, a Literal, a function of them) has a
static shape of its own. Shapes come from the declarations (Input dims, Weight
and Literal shapes, a layer's `output_dim`) and flow through the rules of the
layers; where a rule cannot decide, JAX's abstract evaluation of the layer's
`apply` does. A recurrence may need several passes, and a dim of 1 that might
be broadcasting is only trusted when nothing better is known.

This is the one dim inference of the engine: it sizes the zero blocks of parts
no row reads, the buffers of scanned recurrences, and what display shows.
"""

from __future__ import annotations

from collections.abc import Mapping, Sequence
from typing import TYPE_CHECKING

import numpy as np

from ..base.errors import ShapeError
from ..core.arithmetic import BinaryLayer, Dot, Negate, Power
from ..core.descriptor import Combine, IndexedLayer, Node
from ..core.elementwise import Elementwise
from ..core.frozen import FrozenArray
from ..core.layer import Layer, Literal, Weight
from .graph import Graph
from .semantics import combine

if TYPE_CHECKING:
    import jax
    import jax.numpy as jnp
else:
    from ..core.lazyjax import jax, jnp

__all__ = ["node_shapes", "Shape", "static_dim"]

Shape = tuple[int, ...]

_PASS_THROUGH = (Node, Elementwise, Negate, Power)


def node_shapes(graph: Graph, known: Mapping[int, int] | None = None, *, strict: bool = True) -> list[Shape | None]:
    """Per node: `(1, dim)` for an indexed node, the full shape for another; None where nothing tells.

    `known` gives the dims of some nodes (e.g. the actual columns of values
    already computed), which take precedence. Operands that do not fit raise
    the layer's ShapeError, or with `strict=False` leave the node unknown (for
    views of a network that does not run).
    """
    shapes: list[Shape | None] = [None] * len(graph.layers)
    for nid, dim in (known or {}).items():
        shapes[nid] = (1, int(dim))
    order = graph.operands_first()
    for lenient in (False, True):
        changed = True
        while changed:
            changed = False
            for nid in order:
                if shapes[nid] is not None:
                    continue
                try:
                    shape = _rule(graph, nid, [shapes[op] for op in graph.operands[nid]], lenient)
                except (ShapeError, TypeError, ValueError):
                    if strict:
                        raise
                    shape = None
                if shape is not None:
                    shapes[nid] = shape
                    changed = True
    return shapes


def _rule(graph: Graph, nid: int, ops: Sequence[Shape | None], lenient: bool) -> Shape | None:
    layer = graph.layers[nid]
    name = graph.input_name(nid)
    if name is not None:
        dim = graph.input_dims.get(name)
        return None if dim is None else (1, dim)
    if isinstance(layer, Weight):
        return layer.shape
    if isinstance(layer, Literal):
        return tuple(layer.value.shape) if isinstance(layer.value, FrozenArray) else ()
    dim = layer.output_dim
    if isinstance(dim, int):
        return (1, dim)
    how = combine(layer)
    if isinstance(layer, _PASS_THROUGH) or how is Combine.FORWARD:
        return ops[0]
    if how is Combine.APPEND:
        return (1, sum(s[-1] for s in ops if s is not None)) if all(s is not None for s in ops) else None
    if how is Combine.SUM:
        return _any_dim(ops, lenient)
    if isinstance(layer, Dot) and ops[0] is None and ops[1] is not None and len(ops[1]) == 2:
        return (1, ops[1][-1])
    if isinstance(layer, BinaryLayer) and not all(s is not None for s in ops):
        return _any_dim(ops, lenient) if graph.indexed[nid] else None
    if not all(s is not None for s in ops):
        return None
    if isinstance(layer, IndexedLayer):
        return _abstract_rows(layer, ops)  # type: ignore[arg-type]
    if layer.rowwise:
        return _abstract(layer, ops)  # type: ignore[arg-type]
    return None


def _any_dim(ops: Sequence[Shape | None], lenient: bool) -> Shape | None:
    """The dim of the parts whose dim is known (a dim of 1 may be broadcast: trusted only if `lenient`)."""
    known = [s[-1] for s in ops if s is not None and len(s) > 0 and (lenient or s[-1] != 1)]
    return (1, known[0]) if known else None


def _abstract(layer: Layer, ops: Sequence[Shape]) -> Shape:
    """The shape `layer.apply` gives for operands of these shapes (the layer's `output_shape`, else JAX's
    abstract evaluation).

    Operands that do not fit raise the layer's ShapeError, naming the line that built it.
    """
    layer.check(*ops)
    known = layer.output_shape(*ops)
    if known is not None:
        return known
    args = [jax.ShapeDtypeStruct(s, jnp.result_type(float)) for s in ops]
    return tuple(int(d) for d in jax.eval_shape(layer.apply, *args).shape)


def _abstract_rows(layer: IndexedLayer, ops: Sequence[Shape]) -> Shape:
    """An IndexedLayer's row shape: its `apply_rows` evaluated abstractly on one row read."""
    dtype = jnp.result_type(float)
    args = [jax.ShapeDtypeStruct((1, 1, ops[0][-1]), dtype)] + [jax.ShapeDtypeStruct(w, dtype) for w in ops[1:]]
    owner = np.zeros(1, dtype=np.int64)
    return (1, int(jax.eval_shape(lambda v, *w: layer.apply_rows(v, owner, 1, *w), *args).shape[-1]))


def static_dim(shapes: Sequence[Shape | None], nid: int) -> int | None:
    """The number of columns of node `nid` from `node_shapes`' result, or None."""
    shape = shapes[nid]
    return None if shape is None or not len(shape) else int(np.asarray(shape)[-1])
