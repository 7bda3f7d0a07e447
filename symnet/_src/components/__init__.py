"""The implementation behind `symnet.components` (private: import its names from `symnet.components`)."""

from __future__ import annotations

from collections.abc import Mapping
from typing import Any

from ..base.errors import ArgumentTypeError, ComponentConfigError, ComponentModeError
from ..core.layer import Layer, evolve
from .affine import (
    AffineComponent,
    BlockAffineComponent,
    FixedAffineComponent,
    LinearComponent,
    NaturalGradientAffineComponent,
    NaturalGradientRepeatedAffineComponent,
    RepeatedAffineComponent,
)
from .attention import RestrictedAttentionComponent
from .base import Component, FixedWeight
from .convolution import ConvolutionComponent, MaxpoolingComponent, TimeHeightConvolutionComponent
from .misc import (
    BackpropTruncationComponent,
    ClipGradientComponent,
    DropoutComponent,
    DropoutMaskComponent,
    ElementwiseProductComponent,
    GeneralDropoutComponent,
    NoOpComponent,
    PermuteComponent,
    SumBlockComponent,
    SumGroupComponent,
)
from .nonlinear import (
    LogSoftmaxComponent,
    PnormComponent,
    RectifiedLinearComponent,
    SigmoidComponent,
    SoftmaxComponent,
    TanhComponent,
)
from .normalize import BatchNormComponent, NormalizeComponent, batchnorm_stats_updates
from .recurrent import GruNonlinearityComponent, LstmNonlinearityComponent, OutputGruNonlinearityComponent
from .scaling import (
    ConstantComponent,
    ConstantFunctionComponent,
    FixedBiasComponent,
    FixedScaleComponent,
    NaturalGradientPerElementScaleComponent,
    PerElementOffsetComponent,
    PerElementScaleComponent,
    ScaleAndOffsetComponent,
)
from .statistics import StatisticsExtractionComponent, StatisticsPoolingComponent
from .structure import CompositeComponent, DistributeComponent, SpecAugmentTimeMaskComponent
from .tdnn import TdnnComponent

#: The component classes that have a test mode.
MODE_COMPONENTS = (
    DropoutComponent,
    GeneralDropoutComponent,
    DropoutMaskComponent,
    SpecAugmentTimeMaskComponent,
    BatchNormComponent,
)

#: A component with a `test_mode` field.
_ModeComponent = (
    DropoutComponent
    | GeneralDropoutComponent
    | DropoutMaskComponent
    | SpecAugmentTimeMaskComponent
    | BatchNormComponent
)


def _set_mode_in_tree(roots: list[Layer], test_mode: bool, kinds: tuple[type[_ModeComponent], ...]) -> list[Layer]:
    """Rewrite the trees under `roots` (a DAG: shared sub-trees stay shared), operands first."""
    done: dict[int, Layer] = {}
    stack: list[tuple[Layer, bool]] = [(r, False) for r in reversed(roots)]
    while stack:
        layer, expanded = stack.pop()
        if id(layer) in done:
            continue
        if not expanded:
            stack.append((layer, True))
            stack.extend((c, False) for c in reversed(layer.children) if id(c) not in done)
            continue
        new = layer.with_children(tuple(done[id(c)] for c in layer.children))
        if isinstance(new, kinds) and new.test_mode != test_mode:
            new = evolve(new, test_mode=test_mode)
        done[id(layer)] = new
    return [done[id(r)] for r in roots]


def set_test_mode(target: Any, test_mode: bool = True, *, dropout: bool = True, batchnorm: bool = True) -> Any:
    """`target` (a Layer, a mapping of name -> Layer, or a Network) with its dropout components
    (DropoutComponent, GeneralDropoutComponent, DropoutMaskComponent, SpecAugmentTimeMaskComponent) and
    batch-norm components in test mode, or with
    `test_mode=False` in training mode: Kaldi's SetDropoutTestMode and SetBatchnormTestMode.

    `dropout=False` or `batchnorm=False` leaves that kind alone. A Network keeps its parameters.
    """
    from ..network import Network

    kinds: tuple[type[_ModeComponent], ...] = (
        (DropoutComponent, GeneralDropoutComponent, DropoutMaskComponent, SpecAugmentTimeMaskComponent)
        if dropout
        else ()
    ) + ((BatchNormComponent,) if batchnorm else ())
    if isinstance(target, Network):
        names = [name for name, _ in target.structure.outputs]
        new = _set_mode_in_tree([layer for _, layer in target.structure.outputs], test_mode, kinds)
        return Network(dict(zip(names, new)), params=target.params, state=target.state, objectives=target.objectives)
    if isinstance(target, Layer):
        return _set_mode_in_tree([target], test_mode, kinds)[0]
    if isinstance(target, Mapping):
        names = list(target)
        return dict(zip(names, _set_mode_in_tree([target[n] for n in names], test_mode, kinds)))
    raise ArgumentTypeError(
        f"set_test_mode takes a Layer, a mapping of layers or a Network, not {type(target).__name__}"
    )


__all__ = [
    "MODE_COMPONENTS",
    "AffineComponent",
    "BackpropTruncationComponent",
    "BatchNormComponent",
    "BlockAffineComponent",
    "ClipGradientComponent",
    "Component",
    "ComponentConfigError",
    "ComponentModeError",
    "CompositeComponent",
    "ConstantComponent",
    "ConstantFunctionComponent",
    "ConvolutionComponent",
    "DistributeComponent",
    "DropoutComponent",
    "DropoutMaskComponent",
    "ElementwiseProductComponent",
    "FixedAffineComponent",
    "FixedBiasComponent",
    "FixedScaleComponent",
    "FixedWeight",
    "GeneralDropoutComponent",
    "GruNonlinearityComponent",
    "LinearComponent",
    "LogSoftmaxComponent",
    "LstmNonlinearityComponent",
    "MaxpoolingComponent",
    "NaturalGradientAffineComponent",
    "NaturalGradientPerElementScaleComponent",
    "NaturalGradientRepeatedAffineComponent",
    "NoOpComponent",
    "NormalizeComponent",
    "OutputGruNonlinearityComponent",
    "PerElementOffsetComponent",
    "PerElementScaleComponent",
    "PermuteComponent",
    "PnormComponent",
    "RectifiedLinearComponent",
    "RepeatedAffineComponent",
    "RestrictedAttentionComponent",
    "ScaleAndOffsetComponent",
    "SigmoidComponent",
    "SoftmaxComponent",
    "SpecAugmentTimeMaskComponent",
    "StatisticsExtractionComponent",
    "StatisticsPoolingComponent",
    "SumBlockComponent",
    "SumGroupComponent",
    "TanhComponent",
    "TdnnComponent",
    "TimeHeightConvolutionComponent",
    "batchnorm_stats_updates",
    "set_test_mode",
]
