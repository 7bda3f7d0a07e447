"""Mixed precision: a `Precision` policy says the dtypes of parameters, compute and outputs.

As jmp's `Policy` or Flax's `param_dtype`/`dtype`: parameters are kept (and
optimised) in `params`; a call casts them, and the inputs, to `compute`; its
outputs are cast to `output`. Casts are differentiable, so gradients come
back in each parameter's and input's own dtype. Layers whose sums lose too
much in 16 bits (softmax, log-softmax, normalisations, batch-norm statistics,
statistics pooling, attention's softmax) compute in float32 inside and give
back the compute dtype (`in_float32`); objectives read float32 outputs.

Presets by name: `"float32"`, `"bfloat16"` (float32 parameters and outputs,
bfloat16 compute), `"float16"` (the same with float16, and dynamic loss
scaling in `fit`: `loss_scale`). No policy (`precision=None`, the default)
computes in the dtypes given, by JAX's type promotion (docs/precision.md).
"""

from __future__ import annotations

import functools
from collections.abc import Callable, Mapping
from typing import TYPE_CHECKING, Any, TypeVar

import attrs
import numpy as np

from ..base.errors import ShapeError

if TYPE_CHECKING:
    import jax
    import jax.numpy as jnp
else:
    from .lazyjax import jax, jnp

__all__ = ["DTYPES", "get_precision", "in_float32", "Precision", "PRESETS", "wide"]

#: The names of the floating dtypes a policy may name (jax.numpy's dtypes of these names).
DTYPES = ("float32", "bfloat16", "float16")


def _dtype(value: Any) -> Any:
    name = value if isinstance(value, str) else getattr(np.dtype(value) if _is_dtype(value) else None, "name", None)
    if name not in DTYPES:
        raise ShapeError(f"a precision dtype must be one of {sorted(DTYPES)}, got {value!r}")
    return jnp.dtype(getattr(jnp, name))


def _is_dtype(value: Any) -> bool:
    try:
        np.dtype(value)
    except TypeError:
        return False
    return True


def _loss_scale(value: Any) -> float | None:
    if value is None:
        return None
    if isinstance(value, bool) or not isinstance(value, (int, float)) or not value > 0 or not np.isfinite(value):
        raise ShapeError(f"loss_scale must be a positive finite number or None, got {value!r}")
    return float(value)


def _interval(_: Any, attribute: attrs.Attribute[int], value: Any) -> None:
    if isinstance(value, bool) or not isinstance(value, int) or value < 1:
        raise ShapeError(f"{attribute.name} must be an integer >= 1, got {value!r}")


@attrs.frozen(kw_only=True)
class Precision:
    """A mixed-precision policy.

    Attributes:
        params: the dtype parameters are kept and optimised in.
        compute: the dtype a call computes in (parameters and inputs are cast to it).
        output: the dtype of a call's outputs.
        loss_scale: `fit`'s initial dynamic loss scale (None: no loss scaling). The loss is multiplied by it
            before the backward pass and the gradients divided by it; a step whose gradients are not finite
            is skipped and the scale halved; after `growth_interval` good steps in a row it is doubled.
        growth_interval: good steps in a row before the loss scale doubles.
    """

    params: Any = attrs.field(default="float32", converter=_dtype)
    compute: Any = attrs.field(default="float32", converter=_dtype)
    output: Any = attrs.field(default="float32", converter=_dtype)
    loss_scale: float | None = attrs.field(default=None, converter=_loss_scale)
    growth_interval: int = attrs.field(default=2000, validator=_interval)

    def cast(self, value: jax.Array) -> jax.Array:
        """A floating array (a parameter, state) cast to the compute dtype; another as it is."""
        return value.astype(self.compute) if jnp.issubdtype(value.dtype, jnp.floating) else value

    def cast_inputs(self, arrays: Mapping[str, jax.Array]) -> dict[str, jax.Array]:
        """Input arrays cast to the compute dtype (integer and boolean ones too: they are numbers to the network)."""
        return {name: value.astype(self.compute) for name, value in arrays.items()}

    def __str__(self) -> str:
        scale = f", loss_scale={self.loss_scale:g}" if self.loss_scale is not None else ""
        return f"Precision(params={self.params}, compute={self.compute}, output={self.output}{scale})"


#: The named policies: the arguments of each one's Precision (built by `get_precision`, when first named: a
#: dtype is jax's, and importing symnet imports no jax).
PRESETS: dict[str, dict[str, Any]] = {
    "float32": {},
    "bfloat16": {"compute": "bfloat16"},
    "float16": {"compute": "float16", "loss_scale": 2.0**15},
}


def get_precision(value: str | Precision | None) -> Precision | None:
    """The policy `value` names (a preset's name, a Precision, or None: no policy); a ShapeError otherwise."""
    if value is None or isinstance(value, Precision):
        return value
    if isinstance(value, str) and value in PRESETS:
        return _preset(value)
    raise ShapeError(f"precision must be None, a symnet.Precision or one of {sorted(PRESETS)}, got {value!r:.60}")


@functools.cache
def _preset(name: str) -> Precision:
    return Precision(**PRESETS[name])


def wide(dtype: Any) -> Any:
    """The dtype a reduction over values of `dtype` runs in: float32 for narrower floats, else `dtype`."""
    if jnp.issubdtype(dtype, jnp.floating) and jnp.dtype(dtype).itemsize < 4:
        return jnp.dtype(jnp.float32)
    return jnp.dtype(dtype)


F = TypeVar("F", bound=Callable[..., Any])


def in_float32(method: F) -> F:
    """A layer method (`apply`, `apply_rows`, `vjp`, ...) run in float32 on 16-bit floats.

    Every floating array argument narrower than float32 is cast to float32; every
    array the method returns (one, or a tuple) is cast back to the narrowest
    floating dtype among the arguments. Wider arguments run unchanged.
    """

    @functools.wraps(method)
    def run(self: Any, *args: Any, **kwargs: Any) -> Any:
        narrow = [a.dtype for a in args if _narrow(a)]
        if not narrow:
            return method(self, *args, **kwargs)
        back = min(narrow, key=lambda d: d.itemsize)
        out = method(self, *(a.astype(jnp.float32) if _narrow(a) else a for a in args), **kwargs)
        if isinstance(out, tuple):
            return tuple(_back(o, back) for o in out)
        return _back(out, back)

    return run  # type: ignore[return-value]


def _narrow(value: Any) -> bool:
    dtype = getattr(value, "dtype", None)
    return dtype is not None and jnp.issubdtype(dtype, jnp.floating) and jnp.dtype(dtype).itemsize < 4


def _back(value: Any, dtype: Any) -> Any:
    if value is None or not jnp.issubdtype(value.dtype, jnp.floating):
        return value
    return value.astype(dtype)
