"""symnet: symbolic networks as immutable expression trees, with Kaldi nnet3's Indexes, on JAX.

The names here are the public API. Layers build trees (`(1.0 + x) * Weight(2.0)`),
descriptors move rows labelled by Indexes (`Offset`, `Append`, ...), a
`Network` holds a tree and its parameters as a JAX pytree, and `compile`
plans a `ComputationRequest` into one jitted program. Kaldi configs and
models are in `symnet.kaldi`, components in `symnet.components`, training in
`symnet.train`, notebook views in `symnet.display`; `save` and `load` keep any
network, or a whole training state, in one file (`symnet.saving`).

`export` writes a network's inference function as a `jax.export` program
that runs without symnet (`symnet.exporting`).

Every name but the errors and `__version__` is imported from its module on
first use (PEP 562), so `import symnet` imports neither jax nor numpy, and a
program pays only for what it uses (`symnet --help` and `symnet info CONFIG`
import no jax; `symnet compute` no display, saving or optax); `symnet.display` is imported
before the first notebook view is drawn.
`import symnet` leaves the process's malloc as it is; `tune_host_memory()`
opts in to keeping freed host memory (`symnet.host_memory`).
"""

from __future__ import annotations

import importlib
import warnings
from typing import TYPE_CHECKING, Any

from .core import html as _html
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
from .version import __version__

if TYPE_CHECKING:  # what the names are, for mypy and editors; at run time `__getattr__` imports them
    from . import display
    from .components import natural_gradient
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
    from .core.precision import Precision
    from .core.tape import Tape
    from .core.walk import rewrite, walk
    from .engine import Computation, ComputationRequest, Stream, compile
    from .engine.cache import clear_caches
    from .exporting import export
    from .host_memory import tune_host_memory
    from .network import Network
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
    "Precision",
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
    "export",
    "layer_class",
    "load",
    "natural_gradient",
    "rewrite",
    "rng",
    "save",
    "tune_host_memory",
    "walk",
]


#: Module -> the public names it defines (None: the module itself, by its last name). Every name in `__all__`
#: but the errors and `__version__` is imported from its module on first use (`__getattr__`).
_MODULES: dict[str, tuple[str | None, ...]] = {
    ".core.rng": (None,),
    ".core.descriptor": (
        "Append", "Const", "Descriptor", "DimRange", "Failover", "IfDefined", "IndexedLayer", "Input", "Node",
        "Offset", "Ref", "ReplaceIndex", "Round", "Scale", "Sum", "Switch",
    ),
    ".core.elementwise": ("Elementwise", "Exp", "Log", "LogSoftmax", "ReLU", "Sigmoid", "Softmax", "Tanh"),
    ".core.formatting": ("Formatter",),
    ".core.index": ("Index", "IndexSet"),
    ".core.initializers": ("Glorot", "Initializer", "Normal", "Uniform", "Zeros"),
    ".core.layer": (
        "BinaryLayer", "Divide", "Dot", "FixedWeight", "Identity", "Layer", "Literal", "Minus", "Negate", "Plus",
        "Power", "Structure", "Times", "Weight", "child", "children_field", "layer_class",
    ),
    ".core.precision": ("Precision",),
    ".core.tape": ("Tape",),
    ".core.walk": ("rewrite", "walk"),
    ".engine": ("Computation", "ComputationRequest", "Stream", "compile"),
    ".engine.cache": ("clear_caches",),
    ".host_memory": ("tune_host_memory",),
    ".network": ("Network",),
    ".exporting": ("export",),
    ".display": (None,),
    ".components.natural_gradient": (None,),
    ".saving": ("load", "save"),
}  # fmt: skip

#: Public name -> (module, attribute; None for the module itself).
_LAZY = {
    (module.rsplit(".", 1)[-1] if name is None else name): (module, name)
    for module, names in _MODULES.items()
    for name in names
}


#: Names that were public by mistake: still found, for one release, with a DeprecationWarning naming their home.
_DEPRECATED = {"user_line": (".core.source", "the user's source line for error messages is internal")}


def __getattr__(name: str) -> Any:
    """A public name's object, imported from its module on first use (PEP 562)."""
    if name in _DEPRECATED:
        module, why = _DEPRECATED[name]
        warnings.warn(
            f"symnet.{name} is deprecated ({why}); import it from symnet{module} if you must",
            DeprecationWarning,
            stacklevel=2,
        )
        return getattr(importlib.import_module(module, __name__), name)
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
