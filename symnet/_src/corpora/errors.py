"""The corpus entry's one exception class."""

from __future__ import annotations

from ..base.errors import SymnetError

__all__ = ["CorpusError"]


class CorpusError(SymnetError, ValueError):
    """A corpus that cannot be made or read: no synthesiser installed (names the package to install), an
    unknown voice or task, a word not in the lexicon, a corpus folder that is incomplete or damaged."""
