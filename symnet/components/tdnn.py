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
learning rates) are kept in `options`.
"""

from __future__ import annotations

import math
from typing import Any, ClassVar, Mapping

import attrs

from ..core.descriptor import Append, Offset
from ..core.initializers import Zeros
from ..core.layer import Layer, Weight, child, layer_class
from .affine import AffineComponent, LinearComponent
from .base import Component, OptionReader, normal_init, param_name, register, shape_of, updatable_options


def _offsets(value: Any) -> tuple[int, ...]:
    return tuple(int(v) for v in value)


def _shape(layer: Component, field: str) -> tuple[int, ...]:
    shape = shape_of(getattr(layer, field))
    if shape is None:
        raise TypeError(f"{type(layer).__name__} {layer.name!r}: the shape of {field} is not known before running")
    return shape


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
        return _shape(self, "bias_params") != (0,)

    @property
    def input_dim(self) -> int:
        return _shape(self, "linear_params")[1] // len(self.time_offsets)

    @property
    def output_dim(self) -> int:
        return _shape(self, "linear_params")[0]

    def param_shapes(self) -> dict[str, tuple[int, ...]]:
        out, spliced = _shape(self, "linear_params")
        return {"linear_params": (out, spliced), "bias_params": (out,) if self.use_bias else (0,)}

    def expand(self) -> Layer:
        """The equivalent composition: Append of the input at each time offset, then the affine map."""
        w = self.where
        parts = [self.input if o == 0 else Offset(self.input, o, where=w) for o in self.time_offsets]
        spliced = parts[0] if len(parts) == 1 else Append(*parts, where=w)
        try:
            use_bias = self.use_bias
        except TypeError:  # a bias operand of unknown shape: take it as a bias
            use_bias = True
        if use_bias:
            return AffineComponent(self.name, spliced, self.linear_params, self.bias_params, where=w)
        return LinearComponent(self.name, spliced, self.linear_params, where=w)


@register("TdnnComponent")
def tdnn_component(name: str, options: Mapping[str, Any], input: Layer, *, read_matrix=None) -> Layer:
    """Options (Kaldi's TdnnComponent::InitFromConfig): time-offsets (required, e.g. -1,0,1; distinct),
    input-dim, output-dim (required), use-bias (true), param-stddev (1/sqrt(input-dim * num-offsets); a
    negative value means the default), bias-stddev (1.0), bias-mean (0.0), orthonormal-constraint (0.0),
    use-natural-gradient (true), rank-in (min(20, (spliced-dim + 1) / 2)), rank-out (min(80, (output-dim + 1) / 2)),
    alpha-in (4.0), alpha-out (4.0), num-samples-history (2000); learning rates.
    """
    opts = OptionReader("TdnnComponent", name, options)
    meta = updatable_options(opts)
    time_offsets = opts.int_list("time-offsets")
    opts.require(len(time_offsets) > 0, "time-offsets must not be empty", "time-offsets")
    opts.require(len(set(time_offsets)) == len(time_offsets),
                 f"repeated time-offsets: {','.join(map(str, time_offsets))}", "time-offsets")
    input_dim = opts.int("input-dim")
    output_dim = opts.int("output-dim")
    opts.positive("input-dim", input_dim)
    opts.positive("output-dim", output_dim)
    spliced = input_dim * len(time_offsets)
    param_stddev = opts.float("param-stddev", -1.0)
    if param_stddev < 0.0:
        param_stddev = 1.0 / math.sqrt(spliced)
    bias_stddev = opts.float("bias-stddev", 1.0)
    bias_mean = opts.float("bias-mean", 0.0)
    use_bias = opts.bool("use-bias", True)
    meta.append(("orthonormal-constraint", opts.float("orthonormal-constraint", 0.0)))
    rank_in = opts.int("rank-in", -1)
    rank_out = opts.int("rank-out", -1)
    meta += [
        ("use-natural-gradient", opts.bool("use-natural-gradient", True)),
        ("rank-in", rank_in if rank_in >= 0 else min(20, (spliced + 1) // 2)),
        ("rank-out", rank_out if rank_out >= 0 else min(80, (output_dim + 1) // 2)),
        ("alpha-in", opts.float("alpha-in", 4.0)),
        ("alpha-out", opts.float("alpha-out", 4.0)),
        ("num-samples-history", opts.float("num-samples-history", 2000.0)),
    ]
    opts.finish()
    bias_init = normal_init((output_dim,), bias_stddev, bias_mean) if use_bias else Zeros((0,))
    return TdnnComponent(
        name,
        input,
        Weight(normal_init((output_dim, spliced), param_stddev), param_name(name, "linear_params")),
        Weight(bias_init, param_name(name, "bias_params")),
        time_offsets,
        options=meta,
    )
