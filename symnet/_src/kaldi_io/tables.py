"""Kaldi tables read by rspecifier (`scp:feats.scp`, `ark:ali.ark`, `ark,t:ali.txt`, `ark:cmd |`): entries one at
a time (`iter_table`) or as an ordered mapping by key (`read_table`, `read_posteriors`; scp tables read an entry when
it is asked for). Entries are read by `symnet._src.kaldi_io.ark` (sizes checked before reading, no pickles); an scp
entry that is a shell command runs only with `allow_pipes=True`. Errors are `KaldiDataError`s naming the specifier.
"""

from __future__ import annotations

import contextlib
from collections.abc import Iterator, Mapping
from typing import Any

import numpy as np

from ..base.errors import KaldiDataError
from .ark import _read_object, iter_ark
from .posterior import Posterior, _read_posterior
from .scp import iter_scp, open_spec, read_entry

__all__ = ["Table", "iter_table", "parse_spec", "read_posteriors", "read_table", "reading", "scp_entries"]


def parse_spec(spec: Any, what: str) -> tuple[str, str]:
    """`('ark' | 'scp', path)` of a Kaldi rspecifier, or a KaldiDataError saying what is wrong."""
    import kaldiio

    if not isinstance(spec, str):
        raise KaldiDataError(
            f"{what}: expected a Kaldi rspecifier such as 'scp:feats.scp' or 'ark:ali.ark', "
            f"got {spec!r} ({type(spec).__name__})"
        )
    if ":" not in spec:
        raise KaldiDataError(
            f"{what} {spec!r} is not a Kaldi rspecifier: it has no 'scp:' or 'ark:' prefix; "
            "write e.g. 'scp:feats.scp', 'ark:ali.ark' or 'ark,t:ali.txt'"
        )
    try:
        parsed = kaldiio.parse_specifier(spec)
    except ValueError as e:
        raise KaldiDataError(
            f"{what} {spec!r} is not a Kaldi rspecifier ({e}); "
            "write e.g. 'scp:feats.scp', 'ark:ali.ark' or 'ark,t:ali.txt'"
        ) from None
    if parsed["ark"] is not None and parsed["scp"] is not None:
        raise KaldiDataError(f"{what} {spec!r}: an rspecifier for reading names either an ark or an scp, not both")
    kind = "scp" if parsed["scp"] is not None else "ark"
    path = parsed[kind]
    if not path:
        raise KaldiDataError(f"{what} {spec!r}: no file name after the ':'")
    return kind, path


@contextlib.contextmanager
def reading(spec: str, what: str) -> Iterator[None]:
    """Turn the OS's and kaldiio's errors while opening or reading `spec` into KaldiDataErrors."""
    try:
        yield
    except KaldiDataError as e:
        raise KaldiDataError(f"{what} {spec!r}: cannot read it: {e}") from None
    except Exception as e:  # kaldiio and the OS signal bad files with many types
        raise KaldiDataError(f"{what} {spec!r}: cannot read it: {type(e).__name__}: {e}") from None


def scp_entries(path: str, spec: str, what: str, allow_pipes: bool) -> dict[str, str]:
    entries: dict[str, str] = {}
    with reading(spec, what), open_spec(path, "r") as f:
        for key, entry in iter_scp(f, path, allow_pipes):
            entries[key] = entry  # a later line wins, as in kaldiio
    return entries


def iter_table(spec: str, what: str = "table", *, allow_pipes: bool = False) -> Iterator[tuple[str, np.ndarray]]:
    """`(utterance id, array)` for every entry of a Kaldi rspecifier, in order, reading one at a time."""
    return _iter_table(spec, what, allow_pipes, False)


def _iter_table(spec: str, what: str, allow_pipes: bool, posterior: bool) -> Iterator[tuple[str, Any]]:
    kind, path = parse_spec(spec, what)
    if kind == "scp":
        for key, entry in scp_entries(path, spec, what, allow_pipes).items():
            with reading(spec, what):
                value = read_entry(entry, path, key, allow_pipes, posterior=posterior)
            yield key, value
        return
    with reading(spec, what), open_spec(path, "rb") as f:
        yield from iter_ark(f, path, _read_posterior if posterior else _read_object)


class Table(Mapping[str, Any]):
    """A Kaldi table as an ordered mapping id -> array (or `Posterior`); scp tables read an entry when it is
    asked for."""

    def __init__(self, spec: str, what: str, allow_pipes: bool = False, posterior: bool = False):
        self.spec, self.what, self.allow_pipes, self.posterior = spec, what, allow_pipes, posterior
        kind, self.path = parse_spec(spec, what)
        self._values: dict[str, Any] = {}
        self._scp: dict[str, str] | None = None
        if kind == "scp":
            self._scp = scp_entries(self.path, spec, what, allow_pipes)
            self._keys = list(self._scp)
        else:
            for key, value in _iter_table(spec, what, allow_pipes, posterior):
                if key in self._values:
                    raise KaldiDataError(f"{what} {spec!r}: utterance {key!r} appears twice")
                self._values[key] = value
            self._keys = list(self._values)

    def __getitem__(self, key: str) -> Any:
        if self._scp is None:
            return self._values[key]
        if key not in self._scp:
            raise KeyError(key)
        with reading(self.spec, self.what):
            return read_entry(self._scp[key], self.path, key, self.allow_pipes, posterior=self.posterior)

    def __contains__(self, key: object) -> bool:
        return key in (self._scp if self._scp is not None else self._values)

    def __iter__(self) -> Iterator[str]:
        return iter(self._keys)

    def __len__(self) -> int:
        return len(self._keys)


def read_table(spec: str, what: str = "table", *, allow_pipes: bool = False) -> Mapping[str, np.ndarray]:
    """A Kaldi table (`scp:...`, `ark:...`, `ark,t:...`, `ark:cmd |`) as an ordered mapping utterance id -> array.

    scp tables are read lazily, one entry when it is asked for; an scp entry that is a
    command runs only with `allow_pipes` (see the module doc).
    """
    return Table(spec, what, allow_pipes)


def read_posteriors(spec: str, what: str = "posteriors", *, allow_pipes: bool = False) -> Mapping[str, Posterior]:
    """A table of Kaldi posteriors (`ali-to-post` output, binary or text `[ pdf weight ... ] ...`) as an
    ordered mapping utterance id -> `Posterior` (scp tables read lazily, as `read_table`)."""
    return Table(spec, what, allow_pipes, posterior=True)
