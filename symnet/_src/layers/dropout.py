"""`Dropout`: Kaldi's GeneralDropoutComponent, with PyTorch's semantics (inverted dropout).

In training mode each value is zeroed with probability `proportion` and the
others are scaled by `1 / (1 - proportion)`, so the expected value is the
input's; in test mode (`test_mode=True`, or `symnet.components.set_test_mode`)
the layer is the identity. `per_frame=True` drops whole rows (one mask value
per frame, Kaldi's block-dim=1). `continuous=True` multiplies by values
uniform on `[1 - 2p, 1 + 2p]` instead (Kaldi's continuous dropout, which
Kaldi's TDNN-F recipes use).

The mask comes from `symnet.rng.key_for(name)`, so forward and backward see
one mask; `symnet.train.fit` supplies the key, else run the step inside
`with symnet.rng.randomness(key):`.
"""

from __future__ import annotations

import numbers
from typing import Any

import attrs

from ..base.errors import LayerOptionError, at
from ..components.misc import GeneralDropoutComponent
from ..core.layer import Layer, child, layer_class
from ..core.source import user_line
from .base import Typed, as_component, boolean, derived, input_dim, option, optional_name, positive_int

__all__ = ["Dropout"]


def _proportion(value: Any) -> float:
    if isinstance(value, bool) or not isinstance(value, numbers.Real) or not 0.0 <= float(value) < 1.0:
        raise LayerOptionError(f"Dropout: proportion must be a number in [0, 1), got {value!r}{at(user_line())}")
    return float(value)


@layer_class
class Dropout(Typed, GeneralDropoutComponent):
    """`Dropout(h, 0.1)`: zero each value with probability 0.1 while training, scaling the rest by 1/0.9.

    Kaldi: GeneralDropoutComponent (block-dim = dim, or 1 with `per_frame`).
    """

    # mypy takes the base component's fields as positional ones with defaults; attrs makes them keyword-only
    input: Layer = child()  # type: ignore[misc]
    dropout_proportion: float = option(0.5, converter=_proportion, kw_only=False, alias="proportion")
    per_frame: bool = option(False, converter=boolean("Dropout", "per_frame"))
    continuous: bool = option(False, converter=boolean("Dropout", "continuous"))
    test_mode: bool = option(False, converter=boolean("Dropout", "test_mode"))
    name: str | None = option(None, converter=optional_name)  # type: ignore[assignment]
    dim: int = derived(lambda self: input_dim(self, "dim"), converter=positive_int("Dropout", "dim"))
    block_dim: int = derived(
        lambda self: 1 if self.per_frame else self.dim, converter=positive_int("Dropout", "block_dim")
    )
    time_period: int = attrs.field(default=0, init=False)
    specaugment_max_proportion: float = attrs.field(default=0.0, init=False)
    specaugment_max_regions: int = attrs.field(default=1, init=False)

    name_stem = "dropout"
    keeps_layout = True

    def kaldi_form(self, name: str) -> Layer:
        return as_component(self, GeneralDropoutComponent, name=self.name or name)
