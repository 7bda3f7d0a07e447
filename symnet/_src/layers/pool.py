"""`MaxPool2d` and `AvgPool2d`: pooling of images held as rows (HWC, see `symnet._src.layers.image`).

`MaxPool2d(img, kernel=2)` is the maximum over each `kh x kw` window of each
channel, moved by `stride` (the kernel by default), as PyTorch's MaxPool2d and
`jax.lax.reduce_window(x, -inf, lax.max, ...)`: padding counts as minus
infinity. `AvgPool2d` is the mean over each window with padding counted as
zeros (PyTorch's `count_include_pad=True`). The derivative is JAX's (for the
maximum: the window's delta goes to one maximal element).

Kaldi: a MaxPool2d without padding whose windows tile the image exactly with
a stride no larger than the window is a MaxpoolingComponent (pool-z-size 1).
Kaldi has no average pooling component.
"""

from __future__ import annotations

import math
from typing import TYPE_CHECKING, Any

import numpy as np

from ..base.errors import ConfigWriteError, at
from ..components.base import auto_vjp
from ..components.convolution import MaxpoolingComponent
from ..core.layer import Layer, child, layer_class
from .base import Image, derived, option, pair
from .image import ImageLayer, image_of, image_option, output_size, padding, resolve_padding

if TYPE_CHECKING:
    import jax
    import jax.numpy as jnp
    from jax import lax
else:
    from ..core.lazyjax import jax, jnp, lax

__all__ = ["AvgPool2d", "MaxPool2d"]


def _optional_pair(layer: str) -> Any:
    convert = pair(layer, "stride")
    return lambda value: None if value is None else convert(value)


class _Pool(ImageLayer):
    __slots__ = ()

    @property
    def steps(self) -> tuple[int, int]:
        """The stride, or the kernel when no stride was given."""
        return self.stride or self.kernel  # type: ignore[attr-defined]

    @property
    def pads(self) -> tuple[tuple[int, int], tuple[int, int]]:
        return resolve_padding(self.padding, self.image, self.kernel, self.steps)  # type: ignore[attr-defined]

    @property
    def image_shape(self) -> Image:
        h, w = output_size(self, self.image, self.kernel, self.steps, self.pads)  # type: ignore[attr-defined]
        return h, w, self.image[2]  # type: ignore[attr-defined]

    @property
    def output_dim(self) -> int:
        return math.prod(self.image_shape)

    def check(self, x: tuple[int, ...]) -> None:
        self._check_image(x)

    def _window(self, x: jax.Array, init: float, op: Any) -> jax.Array:
        (kh, kw), (sh, sw) = self.kernel, self.steps  # type: ignore[attr-defined]
        (t, b), (left, r) = self.pads
        return lax.reduce_window(
            self._images(x),
            np.asarray(init, x.dtype),
            op,
            (1, kh, kw, 1),
            (1, sh, sw, 1),
            ((0, 0), (t, b), (left, r), (0, 0)),
        )

    def vjp(self, delta: jax.Array, value: jax.Array, x: jax.Array) -> tuple[jax.Array | None, ...]:
        assert isinstance(self, Layer)  # every pool is also a Layer
        return auto_vjp(self, delta, x)


@layer_class
class MaxPool2d(_Pool, Layer):
    """`MaxPool2d(img, kernel=2, stride=None, padding=0)`: the maximum of each window of each channel."""

    input: Layer = child()
    kernel: tuple[int, int] = option((2, 2), converter=pair("MaxPool2d", "kernel"), kw_only=False)
    stride: tuple[int, int] | None = option(None, converter=_optional_pair("MaxPool2d"))
    padding: Any = option(((0, 0), (0, 0)), converter=padding("MaxPool2d"))
    image: Image = derived(image_of, converter=image_option("MaxPool2d"))

    def apply(self, x: jax.Array) -> jax.Array:
        return self._rows(self._window(x, -jnp.inf, lax.max), x)

    def kaldi_form(self, name: str) -> Layer:
        (height, width, channels), (kh, kw), (sh, sw) = self.image, self.kernel, self.steps
        gaps = []
        if self.pads != ((0, 0), (0, 0)):
            gaps.append(f"padding {self.pads}")
        if sh > kh or sw > kw:
            gaps.append(f"a stride {self.steps} larger than the window {self.kernel}")
        if (height - kh) % sh or (width - kw) % sw:
            gaps.append(f"windows that do not tile the {height} x {width} image exactly")
        if gaps:
            raise ConfigWriteError(f"MaxPool2d{at(self.where)}: Kaldi's MaxpoolingComponent has no {', '.join(gaps)}")
        return MaxpoolingComponent(name, self.input, height, width, channels, kh, kw, 1, sh, sw, 1, where=self.where)


@layer_class
class AvgPool2d(_Pool, Layer):
    """`AvgPool2d(img, kernel=2, stride=None, padding=0)`: the mean of each window of each channel
    (padding counts as zeros)."""

    input: Layer = child()
    kernel: tuple[int, int] = option((2, 2), converter=pair("AvgPool2d", "kernel"), kw_only=False)
    stride: tuple[int, int] | None = option(None, converter=_optional_pair("AvgPool2d"))
    padding: Any = option(((0, 0), (0, 0)), converter=padding("AvgPool2d"))
    image: Image = derived(image_of, converter=image_option("AvgPool2d"))

    def apply(self, x: jax.Array) -> jax.Array:
        kh, kw = self.kernel
        return self._rows(self._window(x, 0.0, lax.add) / (kh * kw), x)

    def _kaldi_gap(self) -> str:
        return "Kaldi nnet3 has no average-pooling component"
