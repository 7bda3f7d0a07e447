"""symnet: symbolic networks as immutable expression trees, with Kaldi nnet3's Indexes, on JAX.

The names here are the public API. Layers build trees (`(1.0 + x) * Weight(2.0)`),
descriptors move rows labelled by Indexes (`Offset`, `Append`, ...), a
`Network` holds a tree and its parameters as a JAX pytree, and `compile`
plans a `ComputationRequest` into one jitted program. Kaldi configs and
models are in `symnet.kaldi`, components in `symnet.components`, training in
`symnet.train`, notebook views in `symnet.display`; `save` and `load` keep any
network, or a whole training state, in one file (`symnet.saving`).

`display`, `natural_gradient`, `save` and `load` are imported on first use
(PEP 562), and `symnet.display` before the first notebook view is drawn, so a
program that needs neither (`symnet compute`) does not pay for them.
`import symnet` leaves the process's malloc as it is; `tune_host_memory()`
opts in to keeping freed host memory (`symnet.host_memory`).
"""

from __future__ import annotations

import importlib
from typing import TYPE_CHECKING, Any

from .core import html as _html
from .core import rng
from .core.descriptor import (
    Append,
    Const,
    Descriptor,
    DimRange,
    Failover,
    IfDefined,
    IndexedLayer,
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
from .core.elementwise import Elementwise, Exp, Log, LogSoftmax, ReLU, Sigmoid, Softmax, Tanh
from .core.formatting import Formatter
from .core.index import Index, IndexSet
from .core.initializers import Glorot, Initializer, Normal, Uniform, Zeros
from .core.layer import (
    BinaryLayer,
    Divide,
    Dot,
    FixedWeight,
    Identity,
    Layer,
    Literal,
    Minus,
    Negate,
    Plus,
    Power,
    Structure,
    Times,
    Weight,
    child,
    children_field,
    layer_class,
)
from .core.source import user_line
from .core.tape import Tape
from .core.walk import rewrite, walk
from .engine import Computation, ComputationRequest, Stream, compile
from .engine.cache import clear_caches
from .errors import (
    ConfigError,
    DescriptorError,
    GraphError,
    LayerTypeError,
    ModelFormatError,
    ParameterError,
    PlanError,
    SaveError,
    ShapeError,
    SymnetError,
)
from .host_memory import tune_host_memory
from .network import Network
from .version import __version__

if TYPE_CHECKING:
    from . import display
    from .components import natural_gradient
    from .saving import load, save

__all__ = [
    "Append",
    "BinaryLayer",
    "Computation",
    "ComputationRequest",
    "ConfigError",
    "Const",
    "Descriptor",
    "DescriptorError",
    "DimRange",
    "Divide",
    "Dot",
    "Elementwise",
    "Exp",
    "Failover",
    "FixedWeight",
    "Formatter",
    "Glorot",
    "GraphError",
    "Identity",
    "IfDefined",
    "Index",
    "IndexSet",
    "IndexedLayer",
    "Initializer",
    "Input",
    "Layer",
    "LayerTypeError",
    "Literal",
    "Log",
    "LogSoftmax",
    "Minus",
    "ModelFormatError",
    "Negate",
    "Network",
    "Node",
    "Normal",
    "Offset",
    "ParameterError",
    "PlanError",
    "Plus",
    "Power",
    "ReLU",
    "Ref",
    "ReplaceIndex",
    "Round",
    "SaveError",
    "Scale",
    "ShapeError",
    "Sigmoid",
    "Softmax",
    "Stream",
    "Structure",
    "Sum",
    "Switch",
    "SymnetError",
    "Tanh",
    "Tape",
    "Times",
    "Uniform",
    "Weight",
    "Zeros",
    "__version__",
    "child",
    "children_field",
    "clear_caches",
    "compile",
    "display",
    "layer_class",
    "load",
    "natural_gradient",
    "rewrite",
    "rng",
    "save",
    "tune_host_memory",
    "user_line",
    "walk",
]


#: The names imported on first use -> (module, attribute; None for the module itself).
_LAZY = {
    "display": (".display", None),
    "natural_gradient": (".components.natural_gradient", None),
    "save": (".saving", "save"),
    "load": (".saving", "load"),
}


def __getattr__(name: str) -> Any:
    """`display`, `natural_gradient`, `save` and `load`, imported on first use."""
    if name not in _LAZY:
        raise AttributeError(f"module {__name__!r} has no attribute {name!r}")
    module, attribute = _LAZY[name]
    value = importlib.import_module(module, __name__)  # not `from . import`: that would ask this hook again
    value = value if attribute is None else getattr(value, attribute)
    globals()[name] = value  # found directly from now on
    return value


def __dir__() -> list[str]:
    return sorted(set(globals()) | set(__all__))


def _load_display() -> None:
    from . import display  # noqa: F401  (it registers the notebook views of layers, tapes, networks, ...)


_html.on_first_render(_load_display)
