"""Kaldi matrix archives written as `symnet._src.base.atomic` writes files: all of the archive (and its scp), or, on
any error, none of it.

`ArchiveWriter(wspecifier)` takes Kaldi's write specifiers `ark:FILE`, `ark,t:FILE` (text) and
`ark,scp:FILE,SCP`; it writes to temporary files beside the targets, which `commit` moves over them and
`abort` removes, and writes through to a device or FIFO (`ark:/dev/null`); `ark:-` streams to standard output.
The bytes are kaldiio's (`kaldiio.save_ark`), a large float matrix written from its own memory.
"""

from __future__ import annotations

import io
import struct
import sys
from typing import Any

import numpy as np

from ...base.atomic import AtomicFile
from ...base.errors import SymnetError

__all__ = ["ArchiveWriter", "writes_to_stdout"]


def _parsed(spec: str) -> dict[str, Any]:
    from kaldiio.utils import parse_specifier

    try:
        parsed: dict[str, Any] = parse_specifier(spec)
    except ValueError as e:
        raise SymnetError(f"bad wspecifier {spec!r}: {e}") from None
    if parsed["ark"] is None:
        raise SymnetError(f"bad wspecifier {spec!r}: an archive is needed (ark:FILE or ark,scp:FILE,SCP)")
    return parsed


def writes_to_stdout(spec: str) -> bool:
    """Whether the wspecifier `spec` streams its archive to standard output (`ark:-`)."""
    return bool(_parsed(spec)["ark"] == "-")


class ArchiveWriter:
    """A Kaldi wspecifier's archive (and scp), written atomically: `write` each matrix, then `commit` (or
    `abort`, which leaves the targets as they were)."""

    def __init__(self, spec: str):
        parsed = _parsed(spec)
        self.text = bool(parsed["t"])
        self.ark, self.scp = parsed["ark"], parsed["scp"]
        self.stream = self.ark == "-"
        self.written = 0  # bytes of the archive so far: the offsets the scp names
        if self.ark.startswith("|") or self.ark.endswith("|") or (self.scp and self.scp in ("-",)):
            raise SymnetError(f"wspecifier {spec!r}: pipes are not supported; write to a file (or ark:-)")
        self.files: list[AtomicFile] = []
        if self.stream:
            self.fark: Any = sys.stdout.buffer
            self.fscp: Any = None
            return
        try:
            self.files.append(AtomicFile(self.ark, "wb"))
            if self.scp is not None:
                self.files.append(AtomicFile(self.scp, "w"))
        except BaseException:
            self.abort()
            raise
        self.fark = self.files[0].file
        self.fscp = self.files[1].file if self.scp is not None else None

    def write(self, key: str, matrix: np.ndarray) -> None:
        """Append `matrix` (as float32) under `key`, and its line to the scp."""
        import kaldiio

        value = np.asarray(matrix, dtype=np.float32)
        parts: list[bytes | memoryview]
        if self.text or value.ndim != 2:
            buffer = io.BytesIO()
            kaldiio.save_ark(buffer, {key: value}, text=self.text)
            parts = [buffer.getvalue()]
        else:  # kaldiio's bytes, with the matrix written from its own memory (no copy of a large output)
            rows, cols = value.shape
            header = f"{key} ".encode() + b"\0BFM \x04" + struct.pack("<i", rows) + b"\x04" + struct.pack("<i", cols)
            parts = [header, np.ascontiguousarray(value, dtype="<f4").data.cast("B")]
        for part in parts:
            self.fark.write(part)
        if self.fscp is not None:
            self.fscp.write(f"{key} {self.ark}:{self.written + len((key + ' ').encode('utf-8'))}\n")
        self.written += sum(len(part) for part in parts)

    def commit(self) -> None:
        """Move the written files over their targets (flush standard output)."""
        if self.stream:
            self.fark.flush()
            return
        for f in self.files:
            f.commit()

    def abort(self) -> None:
        """Remove the temporary files (after `commit`, nothing is left to remove)."""
        for f in self.files:
            f.abort()
