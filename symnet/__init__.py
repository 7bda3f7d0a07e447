"""symnet: symbolic networks as immutable expression trees, with Kaldi nnet3's Indexes, on JAX."""

from .descriptor import (
    Append,
    Const,
    DimRange,
    Failover,
    IfDefined,
    Input,
    Node,
    Offset,
    Ref,
    ReplaceIndex,
    Round,
    Scale,
    Sum,
    Switch,
)
from .engine import Computation, ComputationRequest, compile
from .errors import (
    ConfigError,
    DescriptorError,
    ModelFormatError,
    GraphError,
    LayerTypeError,
    ParameterError,
    PlanError,
    ShapeError,
    SymnetError,
)
from .initializers import Glorot, Initializer, Normal, Uniform, Zeros
from .layer import (
    Divide,
    Dot,
    Exp,
    Identity,
    Layer,
    Literal,
    Log,
    LogSoftmax,
    Minus,
    Negate,
    Plus,
    Power,
    ReLU,
    Sigmoid,
    Softmax,
    Tanh,
    Times,
    Weight,
)
from .index import Index, IndexSet
from .network import Network
from .tape import Tape

__version__ = "0.1.0"
