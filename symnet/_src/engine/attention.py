"""Attention over a window of frames, computed from its source's frames: no `[T, window, dim]` copy.

Kaldi's RestrictedAttentionComponent and symnet's MultiHeadAttention expand to
a row-wise core (components/attention.py) over an `Append` of the source (the
key/value/query projection) at every context position `o = -left .. right`,
`stride` frames apart (`IfDefined(Offset(...))` for the optional positions).
Lowered as planned, that Append is a copy of the source per context position:
`[T, C, dim]`, quadratic in frames for full attention (C about 2 T).

Where the planned row maps say that context position j of output row r reads
source row `r + d0 + j * stride` exactly where `0 <= r + d0 + j * stride < S`
(S the source's rows) and nothing otherwise, a regular request computes the
core from the source's rows instead (`find_attentions`, `attention_value`):

- each head's key, value, query and position biases are column ranges of the
  source's rows (`[S, N, H, .]`); a query and its biases are its own row's;
- the scores `key_scale * q(r).k(s) + p(r)[j]` at `s = r + d0 + j * stride`,
  the bias put in place by a skew (pads and reshapes, no gather) with `-inf`
  between and outside the window's positions; a softmax over s; the values
  weighted. Where the window is narrower than the source (`B + span < S`,
  `span = (C - 1) * stride`, `B = max(span, MIN_BLOCK)`), in blocks of B
  output rows, each against its `B + span` source rows (memory `O(T (B +
  span))`); else every output row against every source row, as a hand-written
  attention does.
- Absent positions are what the core makes of them: with `masked` (symnet's)
  they take no weight; else (Kaldi's) their key and value are zeros and their
  bias still counts: zero keys padded around the source in blocks, their
  biases as extra columns of the softmax otherwise.
- With sequence ends, key s counts as absent for sequence n where an
  `IfDefined` part reading s is masked for n (`picks`: one such read per s;
  they all tell whether the source is computable at s in n's own request); a
  row's own frame is always read, as in the expansion.

Nothing else changes: planning, contexts, chunks and ends are the expansion's;
only the Append and the nodes between it and the source (`absorbed`) are not
computed. `compile(..., lowering="plain")` keeps the expansion (the reference).
Gradients are JAX's autodiff of `attention_value`.
"""

from __future__ import annotations

from collections.abc import Mapping, Sequence
from typing import Any, NamedTuple

import jax
import jax.numpy as jnp
import numpy as np

from ..core.attention_spec import AttentionSpec
from ..core.descriptor import Append, Const, IfDefined, Offset
from ..core.layer import Layer
from ..core.tape import Tape
from .layout import as_frames, as_layout
from .rowmap import RowMap
from .values_only import linearized

__all__ = ["FusedAttention", "MIN_BLOCK", "attention_tape", "attention_value", "find_attentions"]

#: The fewest output frames per block where a window is computed in blocks.
MIN_BLOCK = 32


class FusedAttention(NamedTuple):
    """Attention node `nid` computed from `source`'s rows (see the module doc): output row r, context position j
    reads source row `r + d0 + j * stride` where it is one of the `num_source` rows. `picks`: per IfDefined part
    used for sequence ends, `(its node id, its rows read, the source rows they read)`; `absorbed`: the nodes
    it makes unnecessary; `block`: output frames per block, or None (every row against every source row)."""

    nid: int
    source: int
    spec: AttentionSpec
    stride: int
    d0: int
    rows: int
    num_source: int
    picks: tuple[tuple[int, np.ndarray, np.ndarray], ...]
    absorbed: frozenset[int]
    block: int | None

    def explain(self, graph: Any) -> str:
        """One line: the node, its window and how it is computed."""
        how = "all frames at once" if self.block is None else f"in blocks of {self.block} frames"
        c = self.spec.context
        return (
            f"attention {graph.describe(self.nid)}: {c} context position(s) {self.stride} frame(s) apart over "
            f"{self.num_source} source frames, {how}"
        )


class _Chain(NamedTuple):
    source: int
    num_source: int  # the source's rows
    src: np.ndarray  # per output row, the source row read (-1: none)
    shift: int  # the Offsets' time shift
    optional: tuple[int, np.ndarray] | None  # the IfDefined node and its rows read, if the part has one
    nodes: tuple[int, ...]  # the nodes between the Append and the source


def find_attentions(
    layers: Sequence[Layer],
    operands: Sequence[tuple[int, ...]],
    maps: Mapping[int, tuple[RowMap | None, ...]],
    users: Mapping[int, set[int]],
    keep: set[int],
) -> dict[int, FusedAttention]:
    """The attention nodes among the planned single steps (`maps`) that read their window as a band of one
    source's rows, by node id. Nodes in `keep` (outputs) and nodes read by other steps are never absorbed."""
    found: dict[int, FusedAttention] = {}
    for nid, layer in enumerate(layers):
        spec_of = getattr(layer, "attention_spec", None)
        if nid not in maps or spec_of is None or len(operands[nid]) != 1:
            continue
        spec: AttentionSpec = spec_of()
        append, rowmap = operands[nid][0], maps[nid][0]
        if rowmap is None or not rowmap.is_identity or append not in maps:
            continue
        if type(layers[append]) is not Append or len(operands[append]) != spec.context:
            continue
        chains = [_chain(p, m, layers, operands, maps, spec.masked) for p, m in zip(operands[append], maps[append])]
        if any(ch is None for ch in chains):
            continue
        chain = [ch for ch in chains if ch is not None]
        if len({ch.source for ch in chain}) != 1:
            continue
        fused = _banded(nid, spec, chain, len(rowmap.src))
        if fused is None:
            continue
        moved = {append} | {n for ch in chain for n in ch.nodes}
        absorbed = frozenset(n for n in moved if not (users.get(n, set()) - moved - {nid}) and n not in keep)
        if append not in absorbed:
            continue
        found[nid] = fused._replace(absorbed=absorbed)
    return found


def _chain(
    part: int,
    rowmap: RowMap | None,
    layers: Sequence[Layer],
    operands: Sequence[tuple[int, ...]],
    maps: Mapping[int, tuple[RowMap | None, ...]],
    masked: bool,
) -> _Chain | None:
    """An Append part as `[IfDefined](Offset(...)(x))`, x the source (masked: `Append(source, Const(1.0, 1))`)."""
    if rowmap is None:
        return None
    src, nid, shift, nodes, num_source = rowmap.src, part, 0, [], rowmap.num_src
    optional: tuple[int, np.ndarray] | None = None
    if isinstance(layers[nid], IfDefined) and nid in maps:
        optional = (nid, src)
    while nid in maps and (isinstance(layers[nid], Offset) or (nid == part and optional is not None)):
        layer, inner = layers[nid], maps[nid][0]
        if inner is None:
            return None
        if isinstance(layer, Offset):
            if layer.x_offset != 0:
                return None
            shift += layer.t_offset
        src = np.where(src >= 0, inner.src[np.maximum(src, 0)], -1) if len(inner.src) else np.full_like(src, -1)
        num_source = inner.num_src
        nodes.append(nid)
        nid = operands[nid][0]
    if masked:
        layer = layers[nid]
        if type(layer) is not Append or len(operands[nid]) != 2 or nid not in maps:
            return None
        flag = layers[operands[nid][1]]
        inner = maps[nid][0]
        if not isinstance(flag, Const) or flag.value != 1.0 or flag.dim != 1 or inner is None:
            return None
        if not inner.is_identity:
            return None
        nodes += [nid, operands[nid][1]]
        nid, num_source = operands[nid][0], inner.num_src
    return _Chain(nid, num_source, src, shift, optional, tuple(nodes))


def _banded(nid: int, spec: AttentionSpec, chain: list[_Chain], rows: int) -> FusedAttention | None:
    """The band the parts read, if they read exactly `r + d0 + j * stride` where that source row exists."""
    src = np.stack([ch.src for ch in chain], axis=1)  # [T, C]
    counts = {ch.num_source for ch in chain}
    num_source = counts.pop() if len(counts) == 1 else None
    center = src[:, spec.left]
    if num_source is None or rows == 0 or (center < 0).any():
        return None
    c0 = int(center[0])
    shifts = [ch.shift - chain[spec.left].shift for ch in chain]
    stride = 1
    for j, s in enumerate(shifts):
        if j != spec.left:
            stride = s // (j - spec.left)
            break
    if stride < 1 or any(s != (j - spec.left) * stride for j, s in enumerate(shifts)):
        return None
    d0 = c0 - spec.left * stride
    want = np.arange(rows)[:, None] + d0 + stride * np.arange(spec.context)[None, :]
    want = np.where((want >= 0) & (want < num_source), want, -1)
    if not np.array_equal(src, want):
        return None
    span = (spec.context - 1) * stride
    block: int | None = max(span, MIN_BLOCK)
    if block is not None and block + span >= num_source:
        block = None
    picks = _picks(chain, src)
    return FusedAttention(nid, chain[0].source, spec, stride, d0, rows, num_source, picks, frozenset(), block)


def _picks(chain: list[_Chain], src: np.ndarray) -> tuple[tuple[int, np.ndarray, np.ndarray], ...]:
    """For sequence ends: IfDefined parts (fewest first-fit) whose reads cover every source row they can."""
    covered: set[int] = set()
    picks = []
    candidates = [(j, ch) for j, ch in enumerate(chain) if ch.optional is not None]
    while candidates:
        best, best_new = None, np.zeros(0, np.int64)
        for j, ch in candidates:
            col = src[:, j]
            rows = np.flatnonzero(col >= 0)
            new = rows[~np.isin(col[rows], np.fromiter(covered, np.int64, len(covered)))]
            if len(new) > len(best_new):
                best, best_new = (j, ch), new
        if best is None:
            break
        j, ch = best
        assert ch.optional is not None
        ifdef, read_rows = ch.optional
        picks.append((ifdef, read_rows[best_new], src[best_new, j]))
        covered.update(int(s) for s in src[best_new, j])
        candidates = [c for c in candidates if c[0] != j]
    return tuple(picks)


# ----- the arithmetic -------------------------------------------------------------------------------


def attention_tape(
    fused: FusedAttention,
    layer: Layer,
    source: Tape,
    masks: Sequence[jax.Array | None],
    rows: Any,
    params: Mapping[str, jax.Array],
    batch: int,
    batched: bool,
) -> Tape:
    """The tape node of a fused attention: its value from the source's, its pullback JAX's."""

    def fn(v: jax.Array) -> jax.Array:
        return attention_value(fused, v, batch, masks, batched)

    value, vjp = linearized(fn, source.value)
    return Tape(layer, value, (source,), rows=rows, pullback=vjp, parameters=params)


def attention_value(
    fused: FusedAttention, source: jax.Array, batch: int, masks: Sequence[jax.Array | None] = (), batched: bool = False
) -> jax.Array:
    """The attention's rows (flat, or `[T, N, D]` as `batched`) from the source's (`[S, N, D]` or flat);
    `masks`: per pick, its IfDefined read's `[rows, N]` mask under sequence ends (None: no ends)."""
    x = as_frames(source, batch)
    back = x.dtype
    if jnp.issubdtype(back, jnp.floating) and jnp.dtype(back).itemsize < 4:
        x = x.astype(jnp.float32)  # the core computes in float32 (`in_float32`)
    spec, t = fused.spec, fused.rows
    kd, vd = spec.key_dim, spec.value_dim
    per = jnp.moveaxis(x.reshape(x.shape[0], batch, spec.num_heads, spec.head_dim), 0, 2)  # [N, H, S, hd]
    c0 = fused.d0 + spec.left * fused.stride
    own = jax.lax.slice_in_dim(per, c0, c0 + t, axis=2)
    query, bias = own[..., kd + vd : 2 * kd + vd] * spec.key_scale, own[..., 2 * kd + vd :]  # [N, H, T, .]
    keys, values = per[..., :kd], per[..., kd : kd + vd]
    ok = _key_ok(fused, masks, batch)  # [N, S] or None
    if ok is not None and not spec.masked:  # Kaldi's: a key absent for a sequence is zeros there
        keys, values = keys * ok[:, None, :, None], values * ok[:, None, :, None]
    if fused.block is None:
        out, context = _dense(fused, query, bias, keys, values, ok)
    else:
        out, context = _blocked(fused, query, bias, keys, values, ok)
    if context is not None:
        out = jnp.concatenate([out, context], axis=-1)
    out = jnp.moveaxis(out, 2, 0)  # [T, N, H, .]
    out = out.reshape(t, batch, -1).astype(back)
    return as_layout(out, batch, batched)


def _key_ok(fused: FusedAttention, masks: Sequence[jax.Array | None], batch: int) -> jax.Array | None:
    """`[N, S]`: whether each sequence reads each source row where its IfDefined parts read it (ends)."""
    if not masks or all(m is None for m in masks):
        return None
    ok = jnp.ones((fused.num_source, batch), bool)
    for (_, read_rows, source_rows), mask in zip(fused.picks, masks, strict=True):
        if mask is not None:
            ok = ok.at[jnp.asarray(source_rows, jnp.int32)].set(mask[jnp.asarray(read_rows, jnp.int32)])
    return ok.T


def _skewed(bias: jax.Array, stride: int, first: int, width: int) -> jax.Array:
    """`[..., R, width]`: at `[r, u]` the bias `bias[..., r, j]` where `u - r + first == j * stride`, else -inf."""
    *lead, r, c = bias.shape
    span = (c - 1) * stride + 1
    if stride > 1:  # the biases `stride` columns apart, -inf between
        gaps = jnp.full((*lead, r, c, stride - 1), -jnp.inf, bias.dtype)
        bias = jnp.concatenate([bias[..., None], gaps], axis=-1).reshape(*lead, r, c * stride)[..., :span]
    lo = first - (r - 1)  # column m of the result's rows spans lo .. first + width - 1; one more for the reshape
    cols = r + width
    left, right = max(0, -lo), max(0, lo + cols - span)
    q = jnp.pad(bias, [(0, 0)] * len(lead) + [(0, 0), (left, right)], constant_values=-jnp.inf)
    q = jax.lax.slice_in_dim(q, max(0, lo), max(0, lo) + cols, axis=-1)  # [..., r, cols]: column k is m = lo + k
    flat = q.reshape(*lead, r * cols)
    flat = jax.lax.slice_in_dim(flat, r - 1, r - 1 + r * (cols - 1), axis=-1)
    return flat.reshape(*lead, r, cols - 1)[..., :width]


def _dense(
    fused: FusedAttention,
    query: jax.Array,
    bias: jax.Array,
    keys: jax.Array,
    values: jax.Array,
    ok: jax.Array | None,
) -> tuple[jax.Array, jax.Array | None]:
    """Every output row against every source row: `[N, H, T, vd]`, and the weights per context position."""
    spec, stride, t, s = fused.spec, fused.stride, fused.rows, fused.num_source
    logits = jnp.einsum("nhtk,nhsk->nhts", query, keys) + _skewed(bias, stride, -fused.d0, s)
    if spec.masked and ok is not None:
        own = jnp.arange(s)[None, :] == jnp.arange(t)[:, None] + fused.d0 + spec.left * stride
        logits = jnp.where(ok[:, None, None, :] | own, logits, -jnp.inf)
    position = np.arange(t)[:, None] + fused.d0 + stride * np.arange(spec.context)[None, :]  # [T, C]
    inside = (position >= 0) & (position < s)
    absent = not spec.masked and not inside.all()
    if absent:  # Kaldi's absent positions: their biases take part in the softmax, their values are zeros
        logits = jnp.concatenate([logits, jnp.where(inside, -jnp.inf, bias)], axis=-1)
    weights = jax.nn.softmax(logits, axis=-1)
    out = jnp.einsum("nhts,nhsv->nhtv", weights[..., :s], values)
    if not spec.output_context:
        return out, None
    at = np.broadcast_to(np.clip(position, 0, s - 1), weights.shape[:2] + position.shape)
    context = jnp.where(inside, jnp.take_along_axis(weights[..., :s], jnp.asarray(at), axis=-1), 0.0)
    if absent:
        context = context + weights[..., s:]
    return out, context


def _blocked(
    fused: FusedAttention,
    query: jax.Array,
    bias: jax.Array,
    keys: jax.Array,
    values: jax.Array,
    ok: jax.Array | None,
) -> tuple[jax.Array, jax.Array | None]:
    """Blocks of B output rows, each against its `B + span` source rows (zeros, masked where `masked`, outside
    the source): `[N, H, T, vd]`, and the weights per context position."""
    spec, stride, t, s, b = fused.spec, fused.stride, fused.rows, fused.num_source, fused.block
    assert b is not None
    span = (spec.context - 1) * stride
    nb = -(-t // b)
    n, h = query.shape[:2]

    def frames(v: jax.Array, lo: int, count: int) -> jax.Array:  # rows lo .. lo + count - 1 of axis 2, zeros outside
        pad = [(0, 0)] * v.ndim
        pad[2] = (max(0, -lo), max(0, lo + count - v.shape[2]))
        v = jnp.pad(v, pad)
        return jax.lax.slice_in_dim(v, max(0, lo), max(0, lo) + count, axis=2)

    def windows(v: jax.Array) -> jax.Array:  # [N, H, (nb + 1) B, .] -> [N, H, nb, B + span, .]
        lead = v.shape[:2]
        head = v[:, :, : nb * b].reshape(*lead, nb, b, -1)
        tail = v[:, :, b:].reshape(*lead, nb, b, -1)[:, :, :, :span]
        return jnp.concatenate([head, tail], axis=3)

    q = frames(query, 0, nb * b).reshape(n, h, nb, b, -1)
    p = frames(bias, 0, nb * b).reshape(n, h, nb, b, -1)
    k = windows(frames(keys, fused.d0, (nb + 1) * b))
    v = windows(frames(values, fused.d0, (nb + 1) * b))
    logits = jnp.einsum("nhbik,nhbuk->nhbiu", q, k) + _skewed(p, stride, 0, b + span)
    if spec.masked:
        inside = jnp.ones((1, s), bool) if ok is None else ok  # [1 or N, S]
        valid = frames(inside[:, None, :, None].astype(jnp.float32), fused.d0, (nb + 1) * b)
        valid = windows(valid)[:, :, :, None, :, 0] > 0.5  # [1 or N, 1, nb, 1, B + span]
        own = np.arange(b + span)[None, :] == np.arange(b)[:, None] + spec.left * stride
        logits = jnp.where(valid | own, logits, -jnp.inf)
    weights = jax.nn.softmax(logits, axis=-1)
    out = jnp.einsum("nhbiu,nhbuv->nhbiv", weights, v).reshape(n, h, nb * b, -1)[:, :, :t]
    if not spec.output_context:
        return out, None
    at = np.arange(b)[:, None] + stride * np.arange(spec.context)[None, :]  # [B, C]
    context = jnp.take_along_axis(weights, jnp.asarray(np.broadcast_to(at, weights.shape[:3] + at.shape)), axis=-1)
    return out, context.reshape(n, h, nb * b, -1)[:, :, :t]
