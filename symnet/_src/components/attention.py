"""Kaldi's RestrictedAttentionComponent (nnet-attention-component.cc, attention.cc).

Self-attention over a fixed window of frames. With `C = num_left_inputs + 1 +
num_right_inputs` context positions, position `o` (0-based) at output frame t
is the input frame `t + (o - num_left_inputs) * time_stride`. Each input row
holds, per head (head h owns the columns `h * (2 * key_dim + value_dim + C)`
onwards), a key (`key_dim`), a value (`value_dim`) and a query
(`key_dim + C`: a key-like part and a position bias per context position).
For each head, at output frame t, with k_o, v_o the key and value at context
position o and q the query of frame t itself:

    b_o = key_scale * <q[:key_dim], k_o> + q[key_dim + o]
    c = softmax(b)
    out = [sum_o c_o v_o, c]        (the `c` part only with output-context=true)

and the heads' outputs are appended. The positions from
`-num_left_inputs_required` to `num_right_inputs_required` (in steps) are
required for an output to be computable; the others may be missing, and then
their key and value are zeros (they still take part in the softmax through
their position bias), as in Kaldi's zero padding.

The component is a macro layer: `expand()` appends the input at every context
position (`Offset`, or `IfDefined(Offset)` for the positions that are not
required) and applies the row-wise attention, so regular requests stay
gather-free. It has no parameters.
"""

from __future__ import annotations

from typing import TYPE_CHECKING, ClassVar

from ..core.attention_spec import AttentionSpec
from ..core.descriptor import Append, IfDefined, Offset
from ..core.layer import Layer, child, layer_class
from ..core.precision import in_float32
from .base import Component, auto_vjp

if TYPE_CHECKING:
    import jax
    import jax.numpy as jnp
else:
    from ..core.lazyjax import jax, jnp

__all__ = ["RestrictedAttentionComponent"]


@layer_class
class _AttentionCore(Component):
    """The row-wise part of RestrictedAttentionComponent: its input is the C context rows appended."""

    input: Layer = child()
    num_heads: int = 1
    key_dim: int = 1
    value_dim: int = 1
    num_left_inputs: int = 0
    num_right_inputs: int = 1
    key_scale: float = 1.0
    output_context: bool = True
    #: Whether each context row ends with a flag column (1 where the frame exists, 0 where `IfDefined` read it
    #: as absent) and absent positions take no weight (symnet's `MultiHeadAttention`; Kaldi has no such option).
    masked: bool = False

    @property
    def context_dim(self) -> int:
        return self.num_left_inputs + 1 + self.num_right_inputs

    @property
    def head_dim(self) -> int:
        return 2 * self.key_dim + self.value_dim + self.context_dim

    @property
    def input_dim(self) -> int:
        return self.context_dim * (self.num_heads * self.head_dim + (1 if self.masked else 0))

    @property
    def output_dim(self) -> int:
        return self.num_heads * (self.value_dim + (self.context_dim if self.output_context else 0))

    def attention_spec(self) -> AttentionSpec:
        """Its arithmetic, for the engine's banded lowering of the whole window (symnet._src.engine.attention)."""
        return AttentionSpec(
            self.num_heads,
            self.key_dim,
            self.value_dim,
            self.num_left_inputs,
            self.num_right_inputs,
            self.key_scale,
            self.output_context,
            self.masked,
        )

    @in_float32
    def apply(self, x: jax.Array) -> jax.Array:
        lead = x.shape[:-1]
        c_dim, kd, vd = self.context_dim, self.key_dim, self.value_dim
        rows = x.reshape(lead + (c_dim, -1))
        valid = rows[..., -1] > 0.5 if self.masked else None  # [..., C]
        rows = rows[..., : self.num_heads * self.head_dim].reshape(lead + (c_dim, self.num_heads, self.head_dim))
        keys = rows[..., :kd]  # [..., C, H, kd]
        values = rows[..., kd : kd + vd]  # [..., C, H, vd]
        query = rows[..., self.num_left_inputs, :, kd + vd :]  # [..., H, kd + C]
        scores = self.key_scale * jnp.einsum("...hk,...chk->...hc", query[..., :kd], keys) + query[..., kd:]
        if valid is not None:  # the frame itself is always valid, so no row is all -inf
            scores = jnp.where(valid[..., None, :], scores, -jnp.inf)
        weights = jax.nn.softmax(scores, axis=-1)  # [..., H, C]
        out = jnp.einsum("...hc,...chv->...hv", weights, values)
        if self.output_context:
            out = jnp.concatenate([out, weights], axis=-1)
        return out.reshape(lead + (self.output_dim,))

    @in_float32
    def vjp(self, delta: jax.Array, value: jax.Array, x: jax.Array) -> tuple[jax.Array | None, ...]:
        return auto_vjp(self, delta, x)


@layer_class
class RestrictedAttentionComponent(Component):
    """Kaldi's RestrictedAttentionComponent: multi-head self-attention over a window of frames around each
    frame (`num_left_inputs` before, `num_right_inputs` after, `time_stride` apart). Each input row holds every
    head's key, value and query (with a position bias per context position); it has no parameters."""

    input: Layer = child()
    num_heads: int = 1
    key_dim: int = 1
    value_dim: int = 1
    num_left_inputs: int = 0
    num_right_inputs: int = 1
    time_stride: int = 1
    num_left_inputs_required: int = 0
    num_right_inputs_required: int = 1
    output_context: bool = True
    key_scale: float = 1.0

    kaldi_type: ClassVar[str] = "RestrictedAttentionComponent"
    rowwise: ClassVar[bool] = False

    @property
    def context_dim(self) -> int:
        return self.num_left_inputs + 1 + self.num_right_inputs

    @property
    def input_dim(self) -> int:
        return self.num_heads * (2 * self.key_dim + self.value_dim + self.context_dim)

    @property
    def output_dim(self) -> int:
        return self.num_heads * (self.value_dim + (self.context_dim if self.output_context else 0))

    def expand(self) -> Layer:
        w = self.where
        parts = []
        for o in range(-self.num_left_inputs, self.num_right_inputs + 1):
            shift = o * self.time_stride
            part = self.input if shift == 0 else Offset(self.input, shift, where=w)
            required = -self.num_left_inputs_required <= o <= self.num_right_inputs_required
            parts.append(part if required else IfDefined(part, where=w))
        return _AttentionCore(
            self.name,
            Append(*parts, where=w),
            self.num_heads,
            self.key_dim,
            self.value_dim,
            self.num_left_inputs,
            self.num_right_inputs,
            self.key_scale,
            self.output_context,
            where=w,
        )
