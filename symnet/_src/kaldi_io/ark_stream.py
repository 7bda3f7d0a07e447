"""Bounded reads from a Kaldi archive or object file: each size checked against what the file can still hold before
it is read, and the limits on keys, lines and entries.

The one reader that `ark` (objects and archives), `posterior` and `scp` share, apart so that each reads a stream
the same way and none imports another for it.
"""

from __future__ import annotations

import io
import os
import stat
import struct
from typing import IO

from ..base.errors import KaldiDataError

__all__ = ["MAX_ENTRY_BYTES", "MAX_KEY_BYTES", "MAX_LINE_BYTES"]


#: The most bytes one entry read from a stream (a pipe, stdin) may have: far more than any utterance.
MAX_ENTRY_BYTES = 1 << 31
#: The longest utterance id (Kaldi's keys are short words).
MAX_KEY_BYTES = 1 << 16
#: The longest line of an scp file.
MAX_LINE_BYTES = 1 << 20
_CHUNK = 1 << 20
_READAHEAD = 1 << 16
#: What an error says instead of the bytes of a file an scp line chose (the file and the offset).
_HIDDEN = "what the file holds there is not shown: the scp line chose the file and the offset"


class _Reader:
    """Bounded reads from a binary file, with look-ahead; `left` is what is left in a regular file (else None).

    Reads ahead in blocks of `_READAHEAD` bytes (on a pipe: what is there, `read1`), so scanning a text
    archive for its delimiters costs a `bytes.find` per block, not a Python call per byte.
    """

    def __init__(self, fd: IO[bytes], where: str, readahead: int = _READAHEAD, quote: bool = True):
        self.fd, self.where, self.readahead = fd, where, readahead
        self.quote = quote  # False: an scp chose the file and the offset, so no error shows what is there
        self.buffer, self.pos = b"", 0  # bytes read ahead; buffer[pos:] is not consumed yet
        self.left: int | None = None
        self._consumed = 0  # bytes read from `fd` so far (`tell`)
        self._read_some = getattr(fd, "read1", fd.read)
        try:
            st = os.fstat(fd.fileno())
            if stat.S_ISREG(st.st_mode):
                self.left = st.st_size - fd.tell()
        except (OSError, AttributeError, io.UnsupportedOperation, ValueError):
            self.left = None

    def error(self, key: str | None, message: str) -> KaldiDataError:
        at = f", utterance {key!r}" if key is not None else ""
        note = "" if self.quote else f" ({_HIDDEN})"
        return KaldiDataError(f"{self.where}{at}: {message}{note}")

    def shown(self, text: str | bytes) -> str:
        """`text` read from the file, quoted for an error where the file's contents may be shown."""
        return repr(text) if self.quote else "(not shown)"

    def _account(self, data: bytes) -> bytes:
        self._consumed += len(data)
        if self.left is not None:
            self.left -= len(data)
        return data

    def _buffered(self) -> int:
        return len(self.buffer) - self.pos

    def consumed(self) -> int:
        """Bytes consumed since the reader was made (read ahead but not consumed: not counted)."""
        return self._consumed - self._buffered()

    def _fill(self, n: int) -> int:
        """Read ahead until `n` bytes are buffered or the file ends; the number buffered."""
        while self._buffered() < n:
            part = self._account(self._read_some(max(n - self._buffered(), self.readahead)))
            if not part:
                break
            self.buffer, self.pos = self.buffer[self.pos :] + part, 0
        return self._buffered()

    def available(self) -> int:
        """The most bytes that can still come: what is left of a regular file, else MAX_ENTRY_BYTES."""
        return self._buffered() + (self.left if self.left is not None else MAX_ENTRY_BYTES)

    def peek(self, n: int) -> bytes:
        """Up to `n` next bytes, not consumed."""
        self._fill(n)
        return self.buffer[self.pos : self.pos + n]

    def read(self, n: int, key: str | None, what: str) -> bytes:
        """Exactly `n` bytes, read in chunks (memory grows with the data there, not with what a header says)."""
        self.check_size(n, key, what)
        take = min(n, self._buffered())
        parts, got = [self.buffer[self.pos : self.pos + take]], take
        self.pos += take
        while got < n:
            part = self._account(self.fd.read(min(_CHUNK, n - got)))
            if not part:
                raise self.error(key, f"{what}: the file ends after {got} of {n} bytes")
            parts.append(part)
            got += len(part)
        return b"".join(parts)

    def check_size(self, n: int, key: str | None, what: str) -> None:
        """An error unless `n` more bytes can come (a header's sizes, checked before anything is allocated)."""
        if n > self.available():
            left = (
                f"only {self.available()} bytes are left in the file"
                if self.left is not None
                else f"more than {MAX_ENTRY_BYTES} bytes for one entry"
            )
            raise self.error(key, f"{what} needs {n} bytes, but {left} (a damaged or crafted header)")

    def read_into(self, out: memoryview, key: str | None, what: str) -> None:
        """Fill `out` (whose size the caller checked against `available`) with the next bytes, without copies."""
        n = len(out)
        take = min(n, self._buffered())
        out[:take] = self.buffer[self.pos : self.pos + take]
        self.pos += take
        got = take
        while got < n:
            read = self.fd.readinto(out[got:]) if hasattr(self.fd, "readinto") else None
            if read is None:  # a file object without readinto
                part = self.fd.read(min(_CHUNK, n - got))
                out[got : got + len(part)] = part
                read = len(part)
            if not read:
                raise self.error(key, f"{what}: the file ends after {got} of {n} bytes")
            self._consumed += read
            if self.left is not None:
                self.left -= read
            got += read

    def byte(self) -> bytes:
        """The next byte (b"" at the end)."""
        self._fill(1)
        c = self.buffer[self.pos : self.pos + 1]
        self.pos += len(c)
        return c

    def read_until(self, stop: bytes, cap: int, key: str | None, what: str) -> tuple[bytes, bool]:
        """Bytes up to and including the first one in `stop`, or to the end; `(bytes, found)`.

        More than `cap` bytes without one is an error.
        """
        parts: list[bytes] = []
        got = 0
        while self._fill(1):
            end = min(len(self.buffer), self.pos + cap - got)
            found = [i for i in (self.buffer.find(s, self.pos, end) for s in stop) if i >= 0]
            if found:
                at = min(found) + 1
                parts.append(self.buffer[self.pos : at])
                self.pos = at
                return b"".join(parts), True
            parts.append(self.buffer[self.pos : end])
            got += end - self.pos
            self.pos = end
            if got >= cap and self._fill(1):
                raise self.error(key, f"{what} is longer than {cap} bytes")
        return b"".join(parts), False


def _int32(r: _Reader, key: str | None, what: str) -> tuple[bytes, int]:
    data = r.read(5, key, what)
    if data[:1] != b"\x04":
        raise r.error(key, f"{what}: expected the size byte 4, found {r.shown(data[:1])}")
    (value,) = struct.unpack("<i", data[1:5])
    if value < 0:
        raise r.error(key, f"{what} is {value}")
    return data, value
