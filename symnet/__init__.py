"""symnet: symbolic networks as immutable expression trees, with Kaldi nnet3's Indexes, on JAX.

The names here are the public API. Layers build trees (`(1.0 + x) * Weight(2.0)`),
descriptors move rows labelled by Indexes (`Offset`, `Append`, ...), a
`Network` holds a tree and its parameters as a JAX pytree, and `compile`
plans a `ComputationRequest` into one jitted program. Kaldi configs and
models are in `symnet.kaldi`, components in `symnet.components`, training in
`symnet.train`, notebook views in `symnet.display`; `save` and `load` keep any
network, or a whole training state, in one file, and `load_network` reads any network
file (symnet's, a Kaldi model, config or xconfig).

`export` writes a network's inference function as a `jax.export` program
that runs without symnet.

Every name but the errors and `__version__` is imported from its module on
first use (PEP 562), so `import symnet` imports neither jax nor numpy, and a
program pays only for what it uses (`symnet --help` and `symnet info CONFIG`
import no jax; `symnet compute` no display, saving or optax); `symnet.display` is imported
before the first notebook view is drawn.
`import symnet` leaves the process's malloc as it is; `tune_host_memory()`
opts in to keeping freed host memory.
"""

from __future__ import annotations

import importlib
import warnings
from typing import TYPE_CHECKING, Any

from ._src import moved as _moved
from ._src.core import html as _html
from ._src.errors import (
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
from ._src.version import __version__

if TYPE_CHECKING:  # what the names are, for mypy and editors; at run time `__getattr__` imports them
    from . import display
    from ._src.components import natural_gradient
    from ._src.core import rng
    from ._src.core.descriptor import (
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
    from ._src.core.elementwise import Elementwise, Exp, Log, LogSoftmax, ReLU, Sigmoid, Softmax, Tanh
    from ._src.core.index import Index, IndexSet, format_indexes
    from ._src.core.initializers import Full, Glorot, Initializer, Normal, Uniform, Zeros
    from ._src.core.layer import (
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
    from ._src.core.precision import Precision
    from ._src.core.tape import Tape
    from ._src.core.walk import rewrite, walk
    from ._src.engine.memo import clear_caches
    from ._src.exporting import export
    from ._src.host_memory import tune_host_memory
    from ._src.loading import load_network
    from ._src.network import Network
    from ._src.saving.files import load, save
    from .engine import Computation, ComputationRequest, Stream, compile

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
    "Full",
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
    "format_indexes",
    "layer_class",
    "load",
    "load_network",
    "natural_gradient",
    "rewrite",
    "rng",
    "save",
    "tune_host_memory",
    "walk",
]


_moved.install()  # old module paths (`symnet.engine.dense`) still found, for one release

#: Module -> the public names it defines (None: the module itself, by its last name). Every name in `__all__`
#: but the errors and `__version__` is imported from its module on first use (`__getattr__`).
_MODULES: dict[str, tuple[str | None, ...]] = {
    "._src.core.rng": (None,),
    "._src.core.descriptor": (
        "Append", "Const", "Descriptor", "DimRange", "Failover", "IfDefined", "IndexedLayer", "Input", "Node",
        "Offset", "Ref", "ReplaceIndex", "Round", "Scale", "Sum", "Switch",
    ),
    "._src.core.elementwise": ("Elementwise", "Exp", "Log", "LogSoftmax", "ReLU", "Sigmoid", "Softmax", "Tanh"),
    "._src.core.index": ("Index", "IndexSet", "format_indexes"),
    "._src.core.initializers": ("Full", "Glorot", "Initializer", "Normal", "Uniform", "Zeros"),
    "._src.core.layer": (
        "BinaryLayer", "Divide", "Dot", "FixedWeight", "Identity", "Layer", "Literal", "Minus", "Negate", "Plus",
        "Power", "Structure", "Times", "Weight", "child", "children_field", "layer_class",
    ),
    "._src.core.precision": ("Precision",),
    "._src.core.tape": ("Tape",),
    "._src.core.walk": ("rewrite", "walk"),
    ".engine": ("Computation", "ComputationRequest", "Stream", "compile"),
    "._src.engine.memo": ("clear_caches",),
    "._src.host_memory": ("tune_host_memory",),
    "._src.network": ("Network",),
    "._src.exporting": ("export",),
    ".display": (None,),
    "._src.components.natural_gradient": (None,),
    "._src.saving.files": ("load", "save"),
    "._src.loading": ("load_network",),
}  # fmt: skip

#: Public name -> (module, attribute; None for the module itself).
_LAZY = {
    (module.rsplit(".", 1)[-1] if name is None else name): (module, name)
    for module, names in _MODULES.items()
    for name in names
}


#: Names that were public by mistake: still found, for one release, with a DeprecationWarning naming their home.
_DEPRECATED = {
    "user_line": ("._src.core.source", "the user's source line for error messages is internal"),
    "Formatter": (".extend", "it is for new layer classes: symnet.extend.Formatter"),
}


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
