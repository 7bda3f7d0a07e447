"""`Conv2d`: 2-D convolution of images held as rows (HWC, see `symnet._src.layers.image`).

`Conv2d(img, 16, kernel=(3, 3), stride=1, padding='same')` is PyTorch's
`Conv2d` and `jax.lax.conv_general_dilated` (a cross-correlation) on each
row's image, plus a bias per output channel:

    y[i, j, o] = b[o] + sum_{a, b, c} x[i*sh + a*dh - top, j*sw + b*dw - left, c] K[o, (a*kw + b)*C + c]

(zero outside the image). The filters `filter_params` are
`[out_channels, kh * kw * in_channels]`, Kaldi's ConvolutionComponent layout
(column `(a * kw + b) * C + c`), initialised normal with stddev
`1 / sqrt(kh * kw * C)`; the bias `bias_params` starts at zero.

Kaldi: a Conv2d without padding and dilation, with a bias, and strides that
tile the image exactly (Kaldi's condition) is a ConvolutionComponent
(input-x = height, input-y = width, input-z = channels, zyx order): configs
and models write it as one. Kaldi has no padded or dilated 2-D convolution.
"""

from __future__ import annotations

import math
from typing import TYPE_CHECKING, Any, ClassVar

from ..base.errors import ConfigWriteError, ShapeError, at
from ..components.base import auto_vjp
from ..components.convolution import ConvolutionComponent
from ..core.initializers import Normal, Zeros
from ..core.layer import Layer, Literal, Weight, child, layer_class
from .base import Image, boolean, derived, option, optional_name, pair, param, positive_int
from .image import ImageLayer, image_of, image_option, output_size, padding, resolve_padding

if TYPE_CHECKING:
    import jax
    from jax import lax
else:
    from ..core.lazyjax import jax, lax

__all__ = ["Conv2d"]


def _filters(layer: Any) -> Weight:
    kh, kw = layer.kernel
    fan_in = kh * kw * layer.image[2]
    return Weight(Normal((layer.out_channels, fan_in), 1.0 / math.sqrt(fan_in)))


@layer_class
class Conv2d(ImageLayer, Layer):
    """`Conv2d(img, out_channels, kernel=(3, 3), stride=1, padding=0, dilation=1)` on HWC image rows
    (see the module doc); the output rows are images too."""

    input: Layer = child()
    out_channels: int = option(converter=positive_int("Conv2d", "out_channels"), kw_only=False)
    kernel: tuple[int, int] = option((3, 3), converter=pair("Conv2d", "kernel"), kw_only=False)
    stride: tuple[int, int] = option((1, 1), converter=pair("Conv2d", "stride"))
    padding: Any = option(((0, 0), (0, 0)), converter=padding("Conv2d"))
    dilation: tuple[int, int] = option((1, 1), converter=pair("Conv2d", "dilation"))
    bias: bool = option(True, converter=boolean("Conv2d", "bias"))
    name: str | None = option(None, converter=optional_name)
    image: Image = derived(image_of, converter=image_option("Conv2d"))
    filter_params: Layer = param(_filters)
    bias_params: Layer = param(lambda self: Weight(Zeros((self.out_channels,))) if self.bias else Literal(0.0))

    name_stem = "conv2d"
    param_fields: ClassVar[tuple[str, ...]] = ("filter_params", "bias_params")

    @property
    def pads(self) -> tuple[tuple[int, int], tuple[int, int]]:
        """The padding as `((top, bottom), (left, right))`."""
        return resolve_padding(self.padding, self.image, self.kernel, self.stride, self.dilation)

    @property
    def image_shape(self) -> Image:
        """The output image's `(height, width, out_channels)`."""
        h, w = output_size(self, self.image, self.kernel, self.stride, self.pads, self.dilation)
        return h, w, self.out_channels

    @property
    def output_dim(self) -> int:
        return math.prod(self.image_shape)

    def check(self, x: tuple[int, ...], w: tuple[int, ...], b: tuple[int, ...]) -> None:
        self._check_image(x)
        kh, kw = self.kernel
        want = (self.out_channels, kh * kw * self.image[2])
        if tuple(w) != want:
            raise ShapeError(f"Conv2d{at(self.where)}: filter_params has shape {tuple(w)}, expected {want}")
        if tuple(b) not in ((), (self.out_channels,)):
            raise ShapeError(
                f"Conv2d{at(self.where)}: bias_params has shape {tuple(b)}, expected ({self.out_channels},)"
            )

    def apply(self, x: jax.Array, w: jax.Array, b: jax.Array) -> jax.Array:
        kh, kw = self.kernel
        kernel = w.reshape(self.out_channels, kh, kw, self.image[2]).transpose(1, 2, 3, 0)  # HWIO
        y = lax.conv_general_dilated(
            self._images(x),
            kernel,
            self.stride,
            self.pads,
            rhs_dilation=self.dilation,
            dimension_numbers=("NHWC", "HWIO", "NHWC"),
        )
        return self._rows(y + b, x)

    def vjp(
        self, delta: jax.Array, value: jax.Array, x: jax.Array, w: jax.Array, b: jax.Array
    ) -> tuple[jax.Array | None, ...]:
        return auto_vjp(self, delta, x, w, b)

    def kaldi_form(self, name: str) -> Layer:
        (height, width, channels), (kh, kw), (sh, sw) = self.image, self.kernel, self.stride
        gaps = []
        if self.pads != ((0, 0), (0, 0)):
            gaps.append(f"padding {self.pads}")
        if self.dilation != (1, 1):
            gaps.append(f"dilation {self.dilation}")
        if not self.bias:
            gaps.append("no bias")
        if (height - kh) % sh or (width - kw) % sw:
            gaps.append(f"strides {self.stride} that do not tile the {height} x {width} image exactly")
        if gaps:
            raise ConfigWriteError(f"Conv2d{at(self.where)}: Kaldi's ConvolutionComponent has no {', '.join(gaps)}")
        return ConvolutionComponent(
            self.name or name,
            self.input,
            self.filter_params,
            self.bias_params,
            height,
            width,
            channels,
            kh,
            kw,
            sh,
            sw,
            "zyx",
            where=self.where,
        )
