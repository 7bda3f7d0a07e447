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

Every name is imported from its module on first use (PEP 562; the names
are listed once, in `__init__.pyi`: `symnet._src.base.exports`), so `import
symnet` imports neither jax nor numpy, and a program pays only for what it
uses (`symnet --help` and `symnet info CONFIG` import no jax; `symnet
compute` no display, saving or optax); `symnet.display` is imported before
the first notebook view is drawn.
`import symnet` leaves the process's malloc as it is; `tune_host_memory()`
opts in to keeping freed host memory.
"""

from ._src.base import exports as _exports
from ._src.base import moved as _moved
from ._src.core import html as _html

#: Names that were public by mistake: still found, for one release, with a DeprecationWarning naming their home.
_DEPRECATED = {
    "user_line": (
        "symnet._src.core.source",
        "user_line",
        "symnet.user_line is deprecated (the user's source line for error messages is internal); import it from "
        "symnet._src.core.source if you must",
    ),
    "Formatter": (
        "symnet.extend",
        "Formatter",
        "symnet.Formatter is deprecated (it is for new layer classes: symnet.extend.Formatter); import it from "
        "symnet.extend if you must",
    ),
}

__getattr__, __dir__, __all__ = _exports.attach(__name__, __file__, deprecated=_DEPRECATED)

_moved.install()  # old module paths (`symnet.engine.dense`) still found, for one release


def _load_display() -> None:
    from . import display  # noqa: F401  (it registers the notebook views of layers, tapes, networks, ...)


_html.on_first_render(_load_display)
