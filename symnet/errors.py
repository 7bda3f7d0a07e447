"""Exception classes: every error symnet raises about user input is one of these.

Each names what is at fault (a node and the line that built it, a value, a
shape) so that a traceback from deep inside JAX never reaches the user.
"""

from __future__ import annotations


class SymnetError(Exception):
    """Base class of all symnet errors."""


class LayerTypeError(SymnetError, TypeError):
    """An operand that is not a layer, number or array."""


class ShapeError(SymnetError, ValueError):
    """Shapes that do not fit together (broadcasting, matrix products, deltas)."""


class ParameterError(SymnetError, ValueError):
    """Parameters missing, of the wrong shape, or two Weights claiming one name."""


class GraphError(SymnetError, ValueError):
    """A network graph that cannot be built: unknown references, bad cycles."""


class DescriptorError(SymnetError, ValueError):
    """A descriptor built with arguments Kaldi does not allow."""


class PlanError(SymnetError, ValueError):
    """A computation request that cannot be planned (uncomputable outputs, bad inputs)."""


def at(where: str | None) -> str:
    """Format a source location for an error message."""
    return f" (built at {where})" if where else ""
