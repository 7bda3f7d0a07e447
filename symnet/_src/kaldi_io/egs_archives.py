"""Egs and chain egs archives as examples by position: indexed once, then read one example at a time.

`EgsArchives` takes what Kaldi's recipes leave on disk: an archive (`egs.1.ark`, `ark:egs.1.ark`), an scp
(`scp:egs.scp`), a glob (`egs.*.ark`, `ark:cegs.*.ark`: its files in natural order, `egs.2.ark` before
`egs.10.ark`), or a list of them. `index()` reads every example once, in order, and gives its `Place` (key,
archive, byte offset); `read(place)` reads that example again from its memory-mapped archive (at most
`egs.MAX_OPEN_ARCHIVES` mapped at once), so a training stream holds only the examples it is using.

A damaged example found while indexing is a `KaldiDataError` naming the archive and the byte where the example
starts; `index(skip=True)` gives the error in the example's place instead and goes on where it can: with the next
line of an scp, with the next source after a damaged archive (an archive cannot be read past damage).
"""

from __future__ import annotations

import glob
import os
import re
import threading
from collections.abc import Iterator, Sequence
from typing import Any, NamedTuple

from ..base.errors import KaldiDataError, ModelFormatError
from ..base.safe_read import read_file
from .egs import MAX_SCP_BYTES, Archives, egs_specifier, example_at, scp_place, unreadable
from .egs_parse import Parse

__all__ = ["EgsArchives", "Place", "egs_sources"]

_GLOB = re.compile(r"[*?\[]")


class Place(NamedTuple):
    """Where an example is: its key, its archive and the byte its object starts at (after the key)."""

    key: str
    file: str
    offset: int


def egs_sources(specs: str | os.PathLike[str] | Sequence[str | os.PathLike[str]]) -> list[tuple[str, str]]:
    """`(kind, path)` of every source, `ark` or `scp`, a glob expanded to its files in natural order."""
    items = [specs] if isinstance(specs, (str, os.PathLike)) else list(specs)
    if not items:
        raise KaldiDataError("no egs archives given")
    out: list[tuple[str, str]] = []
    for item in items:
        kind, path = egs_specifier(item)
        if _GLOB.search(path) and not os.path.exists(path):
            found = sorted(glob.glob(path), key=_natural)
            if not found:
                raise KaldiDataError(f"{os.fspath(item)}: no file matches the pattern")
            out += [(kind, name) for name in found]
        else:
            out.append((kind, path))
    return out


def _natural(name: str) -> list[Any]:
    """A sort key that orders the numbers in names by value (`egs.2.ark` before `egs.10.ark`)."""
    return [int(part) if part.isdigit() else part for part in re.split(r"(\d+)", name)]


class EgsArchives:
    """The examples of egs sources (see the module doc), nnet3 ones or, with `chain`, chain ones."""

    def __init__(self, specs: str | os.PathLike[str] | Sequence[str | os.PathLike[str]], *, chain: bool):
        self.sources = egs_sources(specs)
        self.chain = chain
        self._archives = Archives()
        self._lock = threading.Lock()  # the mapped archives are shared by the reading thread and the caller's

    def files(self) -> list[str]:
        """The files the sources name (scps and archives), in order, once each."""
        return list(dict.fromkeys(path for _, path in self.sources))

    def index(self, skip: bool = False) -> Iterator[tuple[Place, Any]]:
        """`(place, example)` of every example in order; with `skip`, `(place, KaldiDataError)` for a damaged one."""
        for kind, path in self.sources:
            if kind == "ark":
                yield from self._archive(path, skip)
            else:
                yield from self._scp(path, skip)

    def read(self, place: Place) -> Any:
        """The example at `place` (a `KaldiDataError` naming the archive and the byte if it cannot be read)."""
        with self._lock:
            return example_at(self._archives, place.file, place.offset, place.key, self.chain, place.file)

    def close(self) -> None:
        with self._lock:
            self._archives.close()

    def _archive(self, path: str, skip: bool) -> Iterator[tuple[Place, Any]]:
        with self._lock:
            data = self._archives[path]
        parse = Parse(data, path, quote=False)
        try:
            for offset, example in parse.entries(self.chain):
                yield Place(parse.key, path, offset), example
        except (ModelFormatError, KaldiDataError) as e:
            error = unreadable(parse, e, parse.start, self.chain)
            if not skip:
                raise error from None
            yield Place(parse.key, path, parse.start), error

    def _scp(self, path: str, skip: bool) -> Iterator[tuple[Place, Any]]:
        try:
            lines = read_file(path, MAX_SCP_BYTES, error=KaldiDataError, what="egs scp").decode("utf-8", "replace")
        except FileNotFoundError as e:
            raise KaldiDataError(f"cannot read {path}: {e.strerror or e}") from None
        for number, line in enumerate(lines.splitlines(), 1):
            if not line.strip():
                continue
            where = f"{path}:{number}"
            key, name, offset = scp_place(line, where)
            place = Place(key, name, offset)
            try:
                with self._lock:
                    example = example_at(self._archives, name, offset, key, self.chain, where)
            except KaldiDataError as e:
                if not skip:
                    raise
                example = e
            yield place, example
