"""Exception classes: every error symnet raises about user input is one of these.

Each names what is at fault (a node and the line that built it, a value, a
shape) so that a traceback from deep inside JAX never reaches the user.
"""

from symnet._src.base import exports as _exports

__getattr__, __dir__, __all__ = _exports.attach(__name__, __file__, eager=True)
