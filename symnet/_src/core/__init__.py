"""The core: layers, descriptors, tapes, Indexes, initialisers and randomness; nothing here knows the engine."""

from . import operators as _operators

__all__ = []


def _load_arithmetic() -> None:
    from . import arithmetic  # noqa: F401  (it registers the layers that Layer's operators build)


# Python runs this before any module of the package, so Layer's operators always find their classes; the
# import waits for the first operator, since arithmetic imports numpy (and `import symnet` imports none).
_operators.on_first_use(_load_arithmetic)
