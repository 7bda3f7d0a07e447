"""Spliced products as one dilated convolution over frames.

A TDNN layer is `Append(Offset(h, o) for o in offsets) @ W`: in a regular
request each part reads a slice of h's rows, and the plain lowering
concatenates the slices and makes one product. Where the slices start at
evenly spaced rows (`start + j * step`, `j < k`), the same product is
`lax.conv_general_dilated` of h over its rows with W as a kernel of `k`
taps dilated by `step` (`[k, D, out]`, W's rows in the Append's order): no
`[rows, N, k D]` copy of the input is made, forward or backward, and h is
computed once (sliced, XLA would recompute an elementwise h, such as a
batch-norm of a ReLU, once per slice).

With frame subsampling the layer where a network moves to every `s`-th
frame reads strided slices (rows `start + j * step + s * i`): a convolution
with window stride `s`, or, where one output's taps fit in `s` rows
(`(k - 1) * step < s`, as `-1,0,1` at `s = 3`), h's frames reshaped to
`[rows, s, N, D]` and the taps taken from each group of `s` (one transpose,
then one product; its backward is the same moves reversed). Either replaces
the `k` gathers, the concatenation and the scatters of their gradient.

A product is any layer whose `product()` says which operands are its input,
its matrix (`[in, out]`, or `[out, in]` as Kaldi stores it) and its bias:
`Dot`, and Kaldi's AffineComponent, NaturalGradientAffineComponent,
FixedAffineComponent and LinearComponent (a TdnnComponent is one of these
after an Append of Offsets). `find_splices` finds them at plan time from the
planned row maps (so any descriptors that move rows as one slice qualify,
not only `Offset`), and `splice_value` computes one; `spliced_rows` is the
concatenation it stands for, which the backward of a layer whose `vjp` is
not the product's exact gradient (natural gradient) is given.
`compile(..., lowering=...)` decides where they are used (`convolutions`:
`fused` everywhere, `auto` on CPU), for products of at least `MIN_ROWS` rows.

The source goes through `materialized` first (engine/materialize.py): XLA's
CPU convolution reads it as `[N, T, D]` (the product) and `[D, T, N]` (the
weight gradient), transposes that should copy a buffer, not recompute the
source's ReLU and normalisation each.
"""

from __future__ import annotations

from collections.abc import Mapping, Sequence
from typing import TYPE_CHECKING, Any, NamedTuple

import jax
import jax.numpy as jnp
import numpy as np

from ..core.descriptor import Combine
from ..core.layer import Layer, Product, Weight
from .layout import as_flat_rows, as_frames, as_layout
from .materialize import materialized
from .rowmap import RowMap
from .semantics import combine

if TYPE_CHECKING:
    from .recurrence import Lowering

__all__ = ["AUTO_BACKENDS", "MIN_ROWS", "Splice", "convolutions", "find_splices", "splice_value", "spliced_rows"]

#: The backends where `lowering="auto"` makes spliced products convolutions; `fused` makes them convolutions on
#: every backend, `plain` on none (slices, a concatenation and one product: the reference, as for recurrences).
#: On an H200 (`benchmarks/gpu.sh`, docs/performance.md) XLA's GPU compiler planned 129 and 145 GiB of buffers
#: for W2's programs with convolutions, more than the card holds; W2's training step took 1.20 of the
#: hand-written reference's time with convolutions, 0.98-1.02 with slices (one round each).
AUTO_BACKENDS = ("cpu",)


def convolutions(lowering: Lowering) -> bool:
    """Whether `lowering` makes spliced products convolutions on this process's default backend."""
    return lowering == "fused" or (lowering == "auto" and jax.default_backend() in AUTO_BACKENDS)


#: The fewest rows (frames times sequences) a spliced product needs to be a convolution. On the project's 2-core
#: CPU, W2's training step with convolutions took 1.09-1.17 of the CPU time of slices and a concatenation at
#: 4 sequences of 50 frames and 0.94-0.97 at 8 of 100 (`benchmarks/splice_lowering.py --sequences 4 --frames 50`,
#: docs/performance.md).
MIN_ROWS = 512


class Splice(NamedTuple):
    """Product node `nid` of an Append as a convolution of `source`'s rows (`k` taps `step` rows apart from row
    `start`); `product`: the layer's operand positions (`Layer.product()`), `params`: its operands' node ids
    other than the Append's (the matrix, then the bias if any); `absorbed`: the Append and row-moving nodes it
    makes unnecessary."""

    nid: int
    source: int
    product: Product
    params: tuple[int, ...]
    start: int
    step: int
    k: int
    absorbed: frozenset[int]
    stride: int = 1

    def explain(self, graph: Any) -> str:
        """One line: the product, and its convolution's taps."""
        line = f"spliced product {graph.describe(self.nid)}: one convolution, {self.k} taps {self.step} row(s) apart"
        return line if self.stride == 1 else f"{line}, one output every {self.stride} rows"


def find_splices(
    layers: Sequence[Layer],
    operands: Sequence[tuple[int, ...]],
    maps: Mapping[int, tuple[RowMap | None, ...]],
    users: Mapping[int, set[int]],
    keep: set[int],
) -> dict[int, Splice]:
    """The spliced products among the planned nodes (`maps`: each node's row maps per operand), by node id.

    A candidate is a layer whose `product()` is not None, its input an `Append` read at identity rows, its
    matrix a 2-D `Weight` and its bias (if any) unindexed, whose parts read one source each through row-moving
    descriptors (`Combine.FORWARD`), each part a single slice of the source's rows (every row, or every
    `stride`-th, the same for every part), the slices' starts evenly spaced and increasing. Nodes in `keep`
    (outputs) are never absorbed, nor nodes another step reads.
    """
    found: dict[int, Splice] = {}
    for nid, layer in enumerate(layers):
        product = layer.product() if nid in maps else None
        if product is None:
            continue
        append, rows = operands[nid][product.input], maps[nid][product.input]
        weight = operands[nid][product.weight]
        params = (weight,) if product.bias is None else (weight, operands[nid][product.bias])
        if rows is None or not rows.is_identity or append not in maps:
            continue
        if any(m is not None for i, m in enumerate(maps[nid]) if i != product.input):
            continue  # a matrix or bias that depends on the Index
        if combine(layers[append]) is not Combine.APPEND:
            continue
        w = layers[weight]
        if not isinstance(w, Weight) or len(w.shape) != 2:  # a kernel needs the weight's rows as [k, D]
            continue
        parts = [_part(p, m, layers, operands, maps) for p, m in zip(operands[append], maps[append])]
        if len(parts) < 2 or any(p is None for p in parts):
            continue
        sources = {p[0] for p in parts if p is not None}
        strides = {p[2] for p in parts if p is not None}
        starts = [p[1] for p in parts if p is not None]
        step = starts[1] - starts[0]
        if len(sources) != 1 or len(strides) != 1 or step < 1 or any(b - a != step for a, b in zip(starts, starts[1:])):
            continue
        moved = {append} | {n for p in parts if p is not None for n in p[3]}
        absorbed = frozenset(n for n in moved if not (users.get(n, set()) - moved - {nid}) and n not in keep)
        if append not in absorbed:
            continue
        found[nid] = Splice(nid, sources.pop(), product, params, starts[0], step, len(parts), absorbed, strides.pop())
    return found


def _part(
    nid: int,
    rowmap: RowMap | None,
    layers: Sequence[Layer],
    operands: Sequence[tuple[int, ...]],
    maps: Mapping[int, tuple[RowMap | None, ...]],
) -> tuple[int, int, int, list[int]] | None:
    """An Append part as (source node, first source row, stride, the row-moving nodes between), if it is one
    slice of the source's rows (every `stride`-th from the first).

    The chain of row-moving nodes stops at a node no single step computes (a recurrence's member): that is the
    source."""
    if rowmap is None:
        return None
    src, between = rowmap.src, []
    while nid in maps and combine(layers[nid]) is Combine.FORWARD and len(operands[nid]) == 1:
        inner = maps[nid][0]
        if inner is None or (src < 0).any():
            return None
        between.append(nid)
        src = inner.src[src]
        nid = operands[nid][0]
    if len(src) == 0 or (src < 0).any():
        return None
    stride = int(src[1] - src[0]) if len(src) > 1 else 1
    if stride < 1 or not np.array_equal(src, src[0] + stride * np.arange(len(src))):
        return None
    return nid, int(src[0]), stride, between


def splice_value(
    splice: Splice, source: jax.Array, params: Sequence[jax.Array], rows: int, batch: int, batched: bool
) -> jax.Array:
    """The product's `rows` rows (per sequence) from the source's value and the product's `params` (matrix, then
    bias if any), flat or `[T, N, D]` as `batched`."""
    weight = params[0]
    k, stride = splice.k, splice.stride
    grouped = stride > 1 and (k - 1) * splice.step < stride  # each output's taps in its own group of `stride`
    # a convolution's source is materialized (see the module docstring); the reshape reads each element once, so
    # an elementwise source (a ReLU) is best fused into its one transpose
    frames = _window(splice, as_frames(source if grouped else materialized(source, weight), batch), rows)
    dtype = jnp.result_type(frames, weight)  # promoted as the product's jnp.matmul would
    dim = frames.shape[-1]
    if grouped:
        groups = frames.reshape(rows, stride, batch, dim)[:, : (k - 1) * splice.step + 1 : splice.step]
        x = groups.transpose(0, 2, 1, 3).reshape(rows * batch, k * dim).astype(dtype)
        w = weight.astype(dtype)
        y = (x @ w.T if splice.product.transposed else x @ w).reshape(rows, batch, -1)
    else:
        if splice.product.transposed:  # [out, k D] (Kaldi's layout): a kernel [out, k, D]
            kernel, spec = weight.reshape(weight.shape[0], k, dim), "OWI"
        else:
            kernel, spec = weight.reshape(k, dim, weight.shape[-1]), "WIO"
        y = jax.lax.conv_general_dilated(
            frames.astype(dtype),
            kernel.astype(dtype),
            (stride,),
            "VALID",
            rhs_dilation=(splice.step,),
            dimension_numbers=("WNC", spec, "WNC"),
        )
    if splice.product.bias is not None:
        y = y + params[1]
    return as_layout(y, batch, batched)


def spliced_rows(splice: Splice, source: jax.Array, rows: int, batch: int) -> jax.Array:
    """The Append the convolution stands for, as flat rows `[rows * N, k D]`: its parts' slices concatenated
    (what a layer's own `vjp` is given where that is not the product's exact gradient)."""
    frames = _window(splice, as_frames(source, batch), rows)
    span, stride = (rows - 1) * splice.stride + 1, splice.stride
    parts = [jax.lax.slice_in_dim(frames, j * splice.step, j * splice.step + span, stride, 0) for j in range(splice.k)]
    return as_flat_rows(jnp.concatenate(parts, axis=-1))


def _window(splice: Splice, frames: jax.Array, rows: int) -> jax.Array:
    """The source's frames the product reads: `(k - 1) * step + (rows - 1) * stride + 1` from `start`, or with
    `stride > 1` at least `rows * stride` (the reshape's groups; zero frames past the source's end, which no tap
    reads)."""
    span = (splice.k - 1) * splice.step + (rows - 1) * splice.stride + 1
    if splice.stride > 1:
        span = max(span, rows * splice.stride)
    end = min(splice.start + span, frames.shape[0])
    window = jax.lax.slice_in_dim(frames, splice.start, end, axis=0)
    missing = splice.start + span - end
    return jnp.pad(window, ((0, missing), (0, 0), (0, 0))) if missing else window
