from symnet._src.base.errors import ComponentConfigError as ComponentConfigError
from symnet._src.base.errors import ComponentModeError as ComponentModeError
from symnet._src.components import MODE_COMPONENTS as MODE_COMPONENTS
from symnet._src.components import set_test_mode as set_test_mode
from symnet._src.components.affine import AffineComponent as AffineComponent
from symnet._src.components.affine import BlockAffineComponent as BlockAffineComponent
from symnet._src.components.affine import FixedAffineComponent as FixedAffineComponent
from symnet._src.components.affine import LinearComponent as LinearComponent
from symnet._src.components.affine import NaturalGradientAffineComponent as NaturalGradientAffineComponent
from symnet._src.components.affine import (
    NaturalGradientRepeatedAffineComponent as NaturalGradientRepeatedAffineComponent,
)
from symnet._src.components.affine import RepeatedAffineComponent as RepeatedAffineComponent
from symnet._src.components.attention import RestrictedAttentionComponent as RestrictedAttentionComponent
from symnet._src.components.base import Component as Component
from symnet._src.components.convolution import ConvolutionComponent as ConvolutionComponent
from symnet._src.components.convolution import MaxpoolingComponent as MaxpoolingComponent
from symnet._src.components.convolution import TimeHeightConvolutionComponent as TimeHeightConvolutionComponent
from symnet._src.components.misc import BackpropTruncationComponent as BackpropTruncationComponent
from symnet._src.components.misc import ClipGradientComponent as ClipGradientComponent
from symnet._src.components.misc import DropoutComponent as DropoutComponent
from symnet._src.components.misc import DropoutMaskComponent as DropoutMaskComponent
from symnet._src.components.misc import ElementwiseProductComponent as ElementwiseProductComponent
from symnet._src.components.misc import GeneralDropoutComponent as GeneralDropoutComponent
from symnet._src.components.misc import NoOpComponent as NoOpComponent
from symnet._src.components.misc import PermuteComponent as PermuteComponent
from symnet._src.components.misc import SumBlockComponent as SumBlockComponent
from symnet._src.components.misc import SumGroupComponent as SumGroupComponent
from symnet._src.components.nonlinear import LogSoftmaxComponent as LogSoftmaxComponent
from symnet._src.components.nonlinear import PnormComponent as PnormComponent
from symnet._src.components.nonlinear import RectifiedLinearComponent as RectifiedLinearComponent
from symnet._src.components.nonlinear import SigmoidComponent as SigmoidComponent
from symnet._src.components.nonlinear import SoftmaxComponent as SoftmaxComponent
from symnet._src.components.nonlinear import TanhComponent as TanhComponent
from symnet._src.components.normalize import BatchNormComponent as BatchNormComponent
from symnet._src.components.normalize import NormalizeComponent as NormalizeComponent
from symnet._src.components.normalize import batchnorm_stats_updates as batchnorm_stats_updates
from symnet._src.components.recurrent import GruNonlinearityComponent as GruNonlinearityComponent
from symnet._src.components.recurrent import LstmNonlinearityComponent as LstmNonlinearityComponent
from symnet._src.components.recurrent import OutputGruNonlinearityComponent as OutputGruNonlinearityComponent
from symnet._src.components.scaling import ConstantComponent as ConstantComponent
from symnet._src.components.scaling import ConstantFunctionComponent as ConstantFunctionComponent
from symnet._src.components.scaling import FixedBiasComponent as FixedBiasComponent
from symnet._src.components.scaling import FixedScaleComponent as FixedScaleComponent
from symnet._src.components.scaling import (
    NaturalGradientPerElementScaleComponent as NaturalGradientPerElementScaleComponent,
)
from symnet._src.components.scaling import PerElementOffsetComponent as PerElementOffsetComponent
from symnet._src.components.scaling import PerElementScaleComponent as PerElementScaleComponent
from symnet._src.components.scaling import ScaleAndOffsetComponent as ScaleAndOffsetComponent
from symnet._src.components.statistics import StatisticsExtractionComponent as StatisticsExtractionComponent
from symnet._src.components.statistics import StatisticsPoolingComponent as StatisticsPoolingComponent
from symnet._src.components.structure import CompositeComponent as CompositeComponent
from symnet._src.components.structure import DistributeComponent as DistributeComponent
from symnet._src.components.structure import SpecAugmentTimeMaskComponent as SpecAugmentTimeMaskComponent
from symnet._src.components.tdnn import TdnnComponent as TdnnComponent
from symnet._src.core.layer import FixedWeight as FixedWeight
