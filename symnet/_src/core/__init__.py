"""The core: layers, descriptors, tapes, Indexes, initialisers and randomness; nothing here knows the engine."""

__all__ = []
