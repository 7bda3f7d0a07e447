"""Typed multi-head self-attention over frames: `MultiHeadAttention`, full or restricted to a window.

`MultiHeadAttention("att1", x, heads=4, key_dim=16, value_dim=16, window=(8, 8))`
is, at frame t,

    [k_h(s), v_h(s), q_h(s), p_h(s)] = W x(s) + b              (per head h; node `att1.qkv`)
    a_h(t, o) = <q_h(t), k_h(t + o)> / sqrt(key_dim) + p_h(t)[o]   for o in -left .. right
    y_h(t) = sum_o softmax_o(a_h(t, .)) v_h(t + o)              (node `att1.attention`)
    out(t) = W_out [y_1(t), ..., y_H(t)] + b_out                (node `att1`, `out_dim` columns)

with a learned position bias `p_h` per context position (as Kaldi's
RestrictedAttentionComponent: the query holds it). `window=None` attends to
every frame of the sequence: the window is then `max_frames - 1` frames both
ways, so `max_frames` (the longest sequence) is needed (in a longer sequence
a frame attends to the frames at most `max_frames - 1` away). A regular request
(`net.compute`, `fit`) computes the attention from the `qkv` rows of the
sequence's frames (symnet._src.engine.attention): memory linear in frames for a
window, one score per pair of frames for full attention; planning the window
still costs time quadratic in `max_frames` (seconds at 1,000 frames, once per
request shape).

`padding` says what a context position outside the sequence (before its
first frame, after its end, at padding past a sequence's end) does:

- `'mask'` (the default): it takes no weight; the sequence ends are
  respected (a padded batch gives each sequence the outputs it gets alone,
  when the request gives each sequence's end).
- `'zeros'`: Kaldi's RestrictedAttentionComponent: its key and value are
  zeros and it still takes weight through its position bias. This one writes
  to Kaldi configs and models (`'mask'` raises ConfigWriteError: Kaldi has no
  such component).
"""

from __future__ import annotations

import math
from typing import Any, ClassVar

from ..base.errors import LayerOptionError, ShapeError, at
from ..components.attention import RestrictedAttentionComponent, _AttentionCore
from ..components.base import Component
from ..core.descriptor import Append, Const, IfDefined, Node, Offset
from ..core.layer import Layer, child, layer_class
from ..core.source import user_line
from .base import KaldiPart, Typed, checked_call, static_input_dim
from .dense import Affine

__all__ = ["MultiHeadAttention"]


@layer_class
class _ZeroPaddedAttention(KaldiPart, RestrictedAttentionComponent):
    component = RestrictedAttentionComponent


@layer_class
class _MaskedAttention(Typed, Component):
    """Attention over a window in which the positions outside the sequence take no weight (see the module doc)."""

    input: Layer = child()
    num_heads: int = 1
    key_dim: int = 1
    value_dim: int = 1
    num_left_inputs: int = 0
    num_right_inputs: int = 0
    time_stride: int = 1
    key_scale: float = 1.0

    rowwise: ClassVar[bool] = False

    _format = Layer._format  # every field, as the call that builds it

    @property
    def kind(self) -> str:
        return "MultiHeadAttention"  # the typed layer it is the core of (no Kaldi component has its masking)

    @property
    def input_dim(self) -> int:
        return self.num_heads * (2 * self.key_dim + self.value_dim + self.num_left_inputs + 1 + self.num_right_inputs)

    @property
    def output_dim(self) -> int:
        return self.num_heads * self.value_dim

    def expand(self) -> Layer:
        w = self.where
        flagged = Append(self.input, Const(1.0, 1, where=w), where=w)  # the flag reads 0 where the frame is absent
        parts = [
            flagged if o == 0 else IfDefined(Offset(flagged, o * self.time_stride, where=w), where=w)
            for o in range(-self.num_left_inputs, self.num_right_inputs + 1)
        ]
        return _AttentionCore(
            self.name,
            Append(*parts, where=w),
            self.num_heads,
            self.key_dim,
            self.value_dim,
            self.num_left_inputs,
            self.num_right_inputs,
            self.key_scale,
            False,
            masked=True,
            where=w,
        )

    def _kaldi_gap(self) -> str:
        return "Kaldi's RestrictedAttentionComponent attends to absent frames as zeros; use padding='zeros'"


def _count(option: str, value: Any, minimum: int) -> int:
    if isinstance(value, bool) or not isinstance(value, int) or value < minimum:
        raise LayerOptionError(
            f"MultiHeadAttention: {option} must be an integer >= {minimum}, got {value!r}{at(user_line())}"
        )
    return value


@checked_call
def MultiHeadAttention(
    name: str,
    x: Layer,
    *,
    heads: int,
    key_dim: int,
    value_dim: int | None = None,
    out_dim: int | None = None,
    window: tuple[int, int] | None = None,
    max_frames: int | None = None,
    time_stride: int = 1,
    padding: str = "mask",
) -> Node:
    """Multi-head self-attention over frames (see the module doc): the output Node `name`.

    `value_dim` defaults to `key_dim`, `out_dim` to the input dim; `window=(left, right)` restricts each frame
    to the frames `t - left * time_stride .. t + right * time_stride`; `window=None` attends to the whole
    sequence (needs `max_frames`).
    """
    if not isinstance(name, str) or not name:
        raise LayerOptionError(f"MultiHeadAttention: name must be a non-empty string, got {name!r}{at(user_line())}")
    in_dim = static_input_dim(x)
    if in_dim is None:
        raise ShapeError(
            f"MultiHeadAttention {name!r}{at(user_line())}: the dim of its input is not known before running; "
            f"read the input as Input(name, dim)"
        )
    h, kd = _count("heads", heads, 1), _count("key_dim", key_dim, 1)
    vd = kd if value_dim is None else _count("value_dim", value_dim, 1)
    out = in_dim if out_dim is None else _count("out_dim", out_dim, 1)
    stride = _count("time_stride", time_stride, 1)
    if window is None:
        if max_frames is None:
            raise LayerOptionError(
                f"MultiHeadAttention {name!r}: full attention (window=None) needs max_frames=, the longest "
                f"sequence{at(user_line())}"
            )
        left = right = -(-(_count("max_frames", max_frames, 1) - 1) // stride)
    else:
        if max_frames is not None:
            raise LayerOptionError(
                f"MultiHeadAttention {name!r}: max_frames is for full attention (window=None), not with "
                f"window={window!r}{at(user_line())}"
            )
        if not isinstance(window, (tuple, list)) or len(window) != 2:
            raise LayerOptionError(
                f"MultiHeadAttention {name!r}: window must be a pair (left, right) of frame counts, got "
                f"{window!r}{at(user_line())}"
            )
        left, right = _count("window[0]", window[0], 0), _count("window[1]", window[1], 0)
    context = left + 1 + right
    qkv = Node(f"{name}.qkv", Affine(input=x, out_dim=h * (2 * kd + vd + context), name=f"{name}.qkv"))
    options: dict[str, Any] = {
        "num_heads": h,
        "key_dim": kd,
        "value_dim": vd,
        "num_left_inputs": left,
        "num_right_inputs": right,
        "time_stride": stride,
        "key_scale": 1.0 / math.sqrt(kd),
    }
    attention: Layer
    if padding == "mask":
        attention = _MaskedAttention(f"{name}.attention", qkv, **options)
    elif padding == "zeros":
        attention = _ZeroPaddedAttention(
            f"{name}.attention",
            qkv,
            num_left_inputs_required=0,
            num_right_inputs_required=0,
            output_context=False,
            **options,
        )
    else:
        raise LayerOptionError(
            f"MultiHeadAttention {name!r}: padding must be 'mask' or 'zeros', got {padding!r}{at(user_line())}"
        )
    att = Node(f"{name}.attention", attention)
    return Node(name, Affine(input=att, out_dim=out, name=f"{name}.out", in_dim=h * vd))
