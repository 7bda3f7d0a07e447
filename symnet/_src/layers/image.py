"""Images as rows: the layout, `Reshape` and `Flatten`, and the padding rules of convolution and pooling.

An image is one row (one Index: a batch of images is rows `(n, 0, 0)`, as any
batch of vectors), and the row holds its `height x width x channels` values
flattened channels-last (HWC, as JAX's and TensorFlow's NHWC, and as Kaldi's
ConvolutionComponent, MaxpoolingComponent and TimeHeightConvolutionComponent
lay out their rows): the value of channel c at pixel (i, j) is column

    (i * width + j) * channels + c.

`Reshape(x, (28, 28, 1))` says that `x`'s rows are such images (it takes
`[..., 784]` rows, or plain `[..., 28, 28, 1]` arrays, which it flattens); the
image layers (`Conv2d`, `MaxPool2d`, `AvgPool2d`) read the shape from their
input (through nonlinearities, batch-norm, dropout and Nodes) and give the
shape of their output, so only the first needs it. `Flatten(img)` ends the
image: its rows are plain features for `Affine`.

Padding (of `Conv2d`, `MaxPool2d`, `AvgPool2d`) is PyTorch's and
`jax.lax.conv_general_dilated`'s: an int p (p rows and columns on every
side), a pair (ph, pw), explicit `((top, bottom), (left, right))`, `'valid'`
(none) or `'same'` (XLA's SAME: the output has `ceil(size / stride)` pixels,
the padding split with the smaller half first). Output size per axis:
`floor((size + low + high - dilation * (kernel - 1) - 1) / stride) + 1`.
"""

from __future__ import annotations

import math
import numbers
from typing import TYPE_CHECKING, Any

from ..base.errors import LayerOptionError, ShapeError, at
from ..core.formatting import Formatter
from ..core.layer import Layer, child, layer_class
from ..core.source import user_line
from .base import Image, Typed, derived, image_shape_of, option, static_input_dim

if TYPE_CHECKING:
    import jax
else:
    from ..core.lazyjax import jax

__all__ = ["Flatten", "Reshape", "image_of", "output_size", "padding", "resolve_padding"]

Pads = tuple[tuple[int, int], tuple[int, int]]


def _shape(value: Any) -> tuple[int, ...]:
    try:
        shape = tuple(value)
    except TypeError:
        shape = ()
    if not shape or any(isinstance(s, bool) or not isinstance(s, numbers.Integral) or s <= 0 for s in shape):
        raise LayerOptionError(
            f"Reshape: shape must be a tuple of positive integers, e.g. (28, 28, 1) for "
            f"(height, width, channels), got {value!r}{at(user_line())}"
        )
    return tuple(int(s) for s in shape)


def _flat(x: jax.Array, shape: tuple[int, ...]) -> jax.Array:
    """`x` with trailing dims equal to `shape` flattened into one; `x` itself when its last dim already is."""
    k = len(shape)
    if k > 1 and x.ndim >= k and tuple(x.shape[-k:]) == shape:
        return x.reshape(x.shape[:-k] + (math.prod(shape),))
    return x


def _check_rows(layer: Any, x: tuple[int, ...], shape: tuple[int, ...]) -> None:
    k, size = len(shape), math.prod(shape)
    if (x and x[-1] == size) or (k > 1 and len(x) >= k and tuple(x[-k:]) == shape):
        return
    raise ShapeError(
        f"{type(layer).__name__}{at(layer.where)}: the input has shape {tuple(x)}; expected rows of "
        f"{size} values ({' x '.join(map(str, shape))} flattened)"
    )


@layer_class
class Reshape(Typed, Layer):
    """`Reshape(x, (height, width, channels))`: the rows of `x` are images of this shape (HWC, see the module doc).

    The value is the same numbers as flat rows of `prod(shape)` columns; a
    plain array whose trailing dims are `shape` is flattened. Any shape is
    allowed; the image layers need three dims.
    """

    input: Layer = child()
    shape: tuple[int, ...] = option(converter=_shape, kw_only=False)

    @property
    def image_shape(self) -> Image | None:
        return (self.shape[0], self.shape[1], self.shape[2]) if len(self.shape) == 3 else None

    @property
    def output_dim(self) -> int:
        return math.prod(self.shape)

    def check(self, x: tuple[int, ...]) -> None:
        _check_rows(self, x, self.shape)

    def apply(self, x: jax.Array) -> jax.Array:
        return _flat(x, self.shape)

    def vjp(self, delta: jax.Array, value: jax.Array, x: jax.Array) -> tuple[jax.Array | None, ...]:
        return (delta.reshape(x.shape),)

    def kaldi_form(self, name: str) -> Layer:
        return self.input


def _layout(layer: Any) -> tuple[int, ...] | None:
    image = image_shape_of(layer.input)
    if image is not None:
        return image
    dim = static_input_dim(layer.input)
    return None if dim is None else (dim,)


@layer_class
class Flatten(Typed, Layer):
    """`Flatten(img)`: the image's rows as plain features (the same numbers; plain `[..., h, w, c]` arrays are
    flattened), for `Affine` and the other row-wise layers."""

    input: Layer = child()
    in_shape: tuple[int, ...] | None = derived(_layout)

    @property
    def output_dim(self) -> int | None:
        return None if self.in_shape is None else math.prod(self.in_shape)

    def check(self, x: tuple[int, ...]) -> None:
        if self.in_shape is not None:
            _check_rows(self, x, self.in_shape)

    def apply(self, x: jax.Array) -> jax.Array:
        return x if self.in_shape is None else _flat(x, self.in_shape)

    def vjp(self, delta: jax.Array, value: jax.Array, x: jax.Array) -> tuple[jax.Array | None, ...]:
        return (delta.reshape(x.shape),)

    def kaldi_form(self, name: str) -> Layer:
        return self.input


# ----- what convolution and pooling share ----------------------------------------------------------


def padding(layer: str) -> Any:
    """A converter of the padding option (see the module doc) to `'same'` or `((top, bottom), (left, right))`."""

    def convert(value: Any) -> Pads | str:
        if value == "same":
            return "same"
        if value == "valid":
            return (0, 0), (0, 0)

        def amount(v: Any) -> int:
            if isinstance(v, bool) or not isinstance(v, numbers.Integral) or v < 0:
                raise ValueError
            return int(v)

        try:
            if isinstance(value, (tuple, list)) and len(value) == 2:
                if all(isinstance(v, (tuple, list)) for v in value):
                    (t, b), (left, r) = value
                    return (amount(t), amount(b)), (amount(left), amount(r))
                h, w = amount(value[0]), amount(value[1])
                return (h, h), (w, w)
            p = amount(value)
            return (p, p), (p, p)
        except (ValueError, TypeError):
            raise LayerOptionError(
                f"{layer}: padding must be 'valid', 'same', an int, a pair (height, width) or "
                f"((top, bottom), (left, right)) of ints >= 0, got {value!r}{at(user_line())}"
            ) from None

    return convert


def padding_text(value: Pads | str) -> str:
    """The padding as the shortest argument that gives it."""
    if isinstance(value, str):
        return repr(value)
    (t, b), (left, r) = value
    if t == b and left == r:
        return repr(t) if t == left else repr((t, left))
    return repr(value)


def resolve_padding(
    spec: Pads | str, image: Image, kernel: tuple[int, int], stride: tuple[int, int], dilation: tuple[int, int] = (1, 1)
) -> Pads:
    """Explicit `((top, bottom), (left, right))` padding of an image for `spec` ('same' as XLA's SAME)."""
    if not isinstance(spec, str):
        return spec
    out = []
    for size, k, s, d in zip(image[:2], kernel, stride, dilation, strict=True):
        total = max((-(-size // s) - 1) * s + d * (k - 1) + 1 - size, 0)
        out.append((total // 2, total - total // 2))
    return out[0], out[1]


def output_size(
    layer: Any,
    image: Image,
    kernel: tuple[int, int],
    stride: tuple[int, int],
    pads: Pads,
    dilation: tuple[int, int] = (1, 1),
) -> tuple[int, int]:
    """The output's (height, width); ShapeError naming the layer when the window is larger than the image."""
    sizes = []
    for size, k, s, d, (lo, hi) in zip(image[:2], kernel, stride, dilation, pads, strict=True):
        n = (size + lo + hi - d * (k - 1) - 1) // s + 1
        if n <= 0:
            raise ShapeError(
                f"{type(layer).__name__}{at(layer.where)}: a window of {d * (k - 1) + 1} pixels does "
                f"not fit an image of {size} (+{lo + hi} padding) pixels"
            )
        sizes.append(n)
    return sizes[0], sizes[1]


def image_of(layer: Any) -> Image:
    """The image shape of `layer.input` (see `image_shape_of`), or a ShapeError naming the layer and its line."""
    image = image_shape_of(layer.input)
    if image is None:
        raise ShapeError(
            f"{type(layer).__name__}{at(layer.where)}: the image shape (height, width, channels) of its input is "
            f"not known; say it with Reshape(x, (height, width, channels)) first, or give image=(h, w, c)"
        )
    return image


def image_option(layer: str) -> Any:
    def convert(value: Any) -> Image:
        try:
            shape = tuple(
                int(v) for v in value if not isinstance(v, bool) and isinstance(v, numbers.Integral) and int(v) > 0
            )
            if len(shape) != 3 or len(tuple(value)) != 3:
                raise ValueError
        except (TypeError, ValueError):
            raise LayerOptionError(
                f"{layer}: image must be (height, width, channels), three positive integers, "
                f"got {value!r}{at(user_line())}"
            ) from None
        return (shape[0], shape[1], shape[2])

    return convert


class ImageLayer(Typed):
    """What `Conv2d` and the pools share: the input image, the padding, the output image, the flat rows."""

    __slots__ = ()

    if TYPE_CHECKING:  # each image layer's own property

        @property
        def image_shape(self) -> Image | None: ...

    def __attrs_post_init__(self) -> None:
        self.image_shape  # noqa: B018  (a window larger than the image is an error where the layer is built)

    def _images(self, x: jax.Array) -> jax.Array:
        """`[..., h*w*c]` rows as `[batch, h, w, c]` images (every leading axis is a row axis)."""
        h, w, c = self.image  # type: ignore[attr-defined]
        return x.reshape((-1, h, w, c))

    def _rows(self, y: jax.Array, x: jax.Array) -> jax.Array:
        return y.reshape(x.shape[:-1] + (math.prod(y.shape[1:]),))

    def _check_image(self, x: tuple[int, ...]) -> None:
        h, w, c = self.image  # type: ignore[attr-defined]
        if not x or x[-1] != h * w * c:
            raise ShapeError(
                f"{type(self).__name__}{at(self.where)}: the input has shape {tuple(x)}; expected rows "  # type: ignore[attr-defined]
                f"of {h * w * c} values (images {h} x {w} x {c}, HWC)"
            )

    def _option_text(self, fmt: Formatter, field: str, value: Any) -> str:
        return padding_text(value) if field == "padding" else Typed._option_text(self, fmt, field, value)
