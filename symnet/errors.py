"""Exception classes: every error symnet raises about user input is one of these.

Each names what is at fault (a node and the line that built it, a value, a
shape) so that a traceback from deep inside JAX never reaches the user.
"""

from symnet._src.errors import *  # noqa: F403  (the public names)
from symnet._src.errors import __all__ as __all__
