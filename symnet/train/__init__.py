"""Training: examples with context, Kaldi's objectives and training rules, the fit loop (data-parallel over a
mesh), checkpoints.

The names are imported on first use (PEP 562), so a module that needs only
one part (`symnet compute` reads features with `kaldi_data`) does not pay for
the rest (the fit loop imports optax).
"""

from symnet._src.base import exports as _exports

__getattr__, __dir__, __all__ = _exports.attach(__name__, __file__)
