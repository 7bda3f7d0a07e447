"""Kaldi's TdnnComponent (nnet-tdnn-component.cc): an affine map over input frames at fixed time offsets.

At frame t the component reads its input at `t + o` for every `o` in
`time_offsets`, concatenates those rows and multiplies by `linear_params`
(`[output_dim, input_dim * len(time_offsets)]`, Kaldi's layout: the columns
of offset number i are `i * input_dim .. (i + 1) * input_dim - 1`), then adds
`bias_params` (`[output_dim]`; empty, shape `(0,)`, with `use-bias=false`, as
Kaldi stores it):

    y(t) = W [x(t + o_1); ...; x(t + o_k)] + b

The component is a macro layer: `expand()` returns the equivalent composition
`AffineComponent(Append(Offset(x, o_1), ..., Offset(x, o_k)), W, b)` (a
`LinearComponent` without bias), so the Index engine plans it as descriptors
(its time offsets become slices) and the matrix product as one row-wise layer.
The parameters are the component's own Weights (`{name}.linear_params`,
`{name}.bias_params`), shared with the expansion.

Kaldi's training-time settings (orthonormal-constraint, natural gradient,
learning rates) are kept in `options`. Kaldi trains the component with natural
gradient over its spliced input unless use-natural-gradient is false
(TdnnComponent::UpdateNaturalGradient), so the expansion is then a
NaturalGradientAffineComponent (a LinearComponent without bias) of the same
name and options, whose backward preconditions inside a
`symnet.natural_gradient.Preconditioning`; with it false, a plain
AffineComponent (a LinearComponent that never preconditions, without bias).
"""

from __future__ import annotations

from typing import Any, ClassVar

import attrs

from ..base.errors import UnknownShapeError
from ..core.descriptor import Append, Offset
from ..core.layer import Layer, Product, child, layer_class
from .affine import AffineComponent, LinearComponent, NaturalGradientAffineComponent, kaldi_preconditioners
from .base import Component, known_shape

__all__ = ["TdnnComponent"]


def _offsets(value: Any) -> tuple[int, ...]:
    return tuple(int(v) for v in value)


@layer_class
class TdnnComponent(Component):
    """`y(t) = linear_params [x(t + o_1); ...; x(t + o_k)] + bias_params` over `time_offsets` o_1..o_k.

    A macro layer: the engine plans `expand()`, an Append of Offsets of the
    input followed by an Affine (or Linear, without bias) component.
    """

    input: Layer = child()
    linear_params: Layer = child()
    bias_params: Layer = child()
    time_offsets: tuple[int, ...] = attrs.field(default=(0,), converter=_offsets)

    kaldi_type: ClassVar[str] = "TdnnComponent"
    param_fields: ClassVar[tuple[str, ...]] = ("linear_params", "bias_params")
    #: It reads rows at other frames (through its expansion), so it is not row-wise.
    rowwise: ClassVar[bool] = False

    @property
    def use_bias(self) -> bool:
        return known_shape(self, "bias_params") != (0,)

    @property
    def input_dim(self) -> int:
        return known_shape(self, "linear_params")[1] // len(self.time_offsets)

    @property
    def output_dim(self) -> int:
        return known_shape(self, "linear_params")[0]

    def param_shapes(self) -> dict[str, tuple[int, ...]]:
        out, spliced = known_shape(self, "linear_params")
        return {"linear_params": (out, spliced), "bias_params": (out,) if self.use_bias else (0,)}

    @property
    def natural(self) -> bool:
        """Whether Kaldi trains it with natural gradient (its use-natural-gradient, true by default)."""
        return self.option("use-natural-gradient", True) is not False

    def natural_gradient_settings(self) -> dict[str, tuple[int, int, dict[str, Any]]]:
        """TdnnComponent::InitFromConfig's preconditioners (none with use-natural-gradient=false): `in` over
        the spliced input (plus the ones column with a bias), `out` over the output (`kaldi_preconditioners`;
        alpha-in and alpha-out, update period 4)."""
        if not self.natural:
            return {}
        out, spliced = known_shape(self, "linear_params")
        return kaldi_preconditioners(self, spliced, out, bias=self.use_bias)

    def expand(self) -> Layer:
        """The equivalent composition: Append of the input at each time offset, then the affine map (one
        whose backward is natural gradient inside a `Preconditioning`, unless use-natural-gradient is false)."""
        w = self.where
        parts = [self.input if o == 0 else Offset(self.input, o, where=w) for o in self.time_offsets]
        spliced = parts[0] if len(parts) == 1 else Append(*parts, where=w)
        try:
            use_bias = self.use_bias
        except UnknownShapeError:  # a bias operand of unknown shape: take it as a bias
            use_bias = True
        if use_bias:
            affine = NaturalGradientAffineComponent if self.natural else AffineComponent
            return affine(self.name, spliced, self.linear_params, self.bias_params, options=self.options, where=w)
        linear = LinearComponent if self.natural else _ExactLinearComponent
        return linear(self.name, spliced, self.linear_params, options=self.options, where=w)


@layer_class
class _ExactLinearComponent(LinearComponent):
    """A LinearComponent whose backward is always the exact gradient: the expansion of a TdnnComponent without
    bias and with use-natural-gradient=false (Kaldi's LinearComponent itself always preconditions)."""

    def natural_gradient_settings(self) -> dict[str, tuple[int, int, dict[str, Any]]]:
        return {}

    def product(self) -> Product:
        return Product(input=0, weight=1, transposed=True)
