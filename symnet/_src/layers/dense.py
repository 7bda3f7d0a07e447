"""Affine maps over a row and over frames: `Affine` (Kaldi's AffineComponent) and `TimeConv` (TdnnComponent).

`Affine(h, 10)` is `y = W x + b` on each row, with `W` `[out_dim, in_dim]`
(Kaldi's layout, `linear_params`) and `b` (`bias_params`, zeros).

`TimeConv(x, 512, offsets=(-1, 0, 1))` is a 1-D convolution over frames (a
TDNN layer): at frame t it reads the input at `t + o` for every offset,
appends those rows and applies one affine map,

    y(t) = W [x(t + o_1); ...; x(t + o_k)] + b,

with `W` `[out_dim, k * in_dim]` (offset i owns columns `i*in_dim ..
(i+1)*in_dim - 1`). A PyTorch `Conv1d(kernel_size=k, dilation=d)` with
'same' padding is `offsets=range(-d * (k // 2), d * (k // 2) + 1, d)` (odd k);
where an offset reads before the first or after the last frame, the engine's
context handling applies (`net.compute` repeats the edge frames, as Kaldi's
nnet3-compute; `mode='valid'` drops those frames).

Stride: rows keep their frame labels (Indexes), so a stride is not a shorter
sequence but fewer computed frames. `stride=s` makes the value at frame t the
convolution at frame `floor(t / s) * s` (it is `Round(conv, s)`): only every
s-th frame is computed, and the layers above read the subsampled sequence; a
layer above that should see s-spaced frames uses offsets that are multiples of
s (`offsets=(-3, 0, 3)` after `stride=3`), as Kaldi's `time-stride`. Read at
the frames `0, s, 2s, ...` the values are PyTorch's `Conv1d(stride=s)`
outputs `0, 1, 2, ...`.

Initialisation: `W` normal with stddev `1 / sqrt(fan-in)` (Kaldi's default),
`b` zeros; both write to Kaldi configs as `param-stddev` and `bias-stddev=0`.
"""

from __future__ import annotations

import math
import numbers
from typing import Any

from ..base.errors import LayerOptionError, at
from ..components.affine import AffineComponent
from ..components.tdnn import TdnnComponent
from ..core.descriptor import Round
from ..core.initializers import Normal, Zeros
from ..core.layer import Layer, Weight, child, layer_class
from ..core.source import user_line
from .base import Typed, as_component, boolean, derived, input_dim, option, optional_name, param, positive_int

__all__ = ["Affine", "TimeConv"]


@layer_class
class Affine(Typed, AffineComponent):
    """`Affine(h, out_dim)`: `y = W x + b` on every row (a fully connected layer). Kaldi: AffineComponent."""

    # mypy takes the base component's fields as positional ones with defaults; attrs makes them keyword-only
    input: Layer = child()  # type: ignore[misc]
    out_dim: int = option(converter=positive_int("Affine", "out_dim"), kw_only=False)
    name: str | None = option(None, converter=optional_name)  # type: ignore[assignment]
    in_dim: int = derived(input_dim, converter=positive_int("Affine", "in_dim"))
    linear_params: Layer = param(lambda self: Weight(Normal((self.out_dim, self.in_dim), 1.0 / math.sqrt(self.in_dim))))
    bias_params: Layer = param(lambda self: Weight(Zeros((self.out_dim,))))

    name_stem = "affine"

    def kaldi_form(self, name: str) -> Layer:
        return as_component(self, AffineComponent, name=self.name or name)


def _offsets(value: Any) -> tuple[int, ...]:
    try:
        offsets = tuple(value)
    except TypeError:
        offsets = ()
    if (
        not offsets
        or any(isinstance(o, bool) or not isinstance(o, numbers.Integral) for o in offsets)
        or len(set(offsets)) != len(offsets)
    ):
        raise LayerOptionError(
            f"TimeConv: offsets must be distinct integers (frames relative to t), e.g. "
            f"(-1, 0, 1), got {value!r}{at(user_line())}"
        )
    return tuple(int(o) for o in offsets)


@layer_class
class TimeConv(Typed, TdnnComponent):
    """`TimeConv(x, out_dim, offsets=(-1, 0, 1))`: `y(t) = W [x(t + o) for o in offsets] + b` (see the module doc).

    `bias=False` leaves `b` out; `stride=s` computes every s-th frame and holds it
    (`Round`). Kaldi: TdnnComponent (with a stride, a Round in the descriptors that read it).
    """

    # mypy takes the base component's fields as positional ones with defaults; attrs makes them keyword-only
    input: Layer = child()  # type: ignore[misc]
    out_dim: int = option(converter=positive_int("TimeConv", "out_dim"), kw_only=False)
    time_offsets: tuple[int, ...] = option(converter=_offsets, alias="offsets")
    stride: int = option(1, converter=positive_int("TimeConv", "stride"))
    bias: bool = option(True, converter=boolean("TimeConv", "bias"))
    name: str | None = option(None, converter=optional_name)  # type: ignore[assignment]
    in_dim: int = derived(input_dim, converter=positive_int("TimeConv", "in_dim"))
    linear_params: Layer = param(
        lambda self: Weight(
            Normal(
                (self.out_dim, self.in_dim * len(self.time_offsets)),
                1.0 / math.sqrt(self.in_dim * len(self.time_offsets)),
            )
        )
    )
    bias_params: Layer = param(lambda self: Weight(Zeros((self.out_dim,) if self.bias else (0,))))

    name_stem = "timeconv"

    @property
    def natural(self) -> bool:
        """False: symnet's layer trains with the plain gradient, as Affine does (its Kaldi form does not)."""
        return False

    def expand(self) -> Layer:
        conv = TdnnComponent.expand(self)
        return conv if self.stride == 1 else Round(conv, self.stride, where=self.where)

    def kaldi_form(self, name: str) -> Layer:
        conv = as_component(self, TdnnComponent, name=self.name or name)
        return conv if self.stride == 1 else Round(conv, self.stride, where=self.where)
