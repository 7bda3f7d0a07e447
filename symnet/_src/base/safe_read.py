"""Reading files that may be hostile: regular files only, every size checked before anything is read.

`NpzArchive` opens a NumPy `.npz` archive (symnet's model files and checkpoints)
and reads an array only after its `.npy` header was checked: the dtype is a
plain number (or text, where asked for), never an object (so never a pickle);
the shape the header states matches the bytes the member holds; and it matches
what the caller expects (`shape=`, `dtype=`) and a size limit, all before the
data is decompressed or allocated. So a small file cannot make symnet allocate
much more than the caller agreed to, and a member that nobody asks for is never
read at all. `read_file` reads a whole regular file of bounded size (a
`matrix=` file named by a config, say). Each file is opened once
(`open_regular`: never blocking on a FIFO) and what was opened is checked, so
a file swapped for a FIFO or a link to `/dev/zero` after a look by name is
refused, never read.

Every problem is an error of the class the caller names (a SymnetError such as
ModelFormatError or a checkpoint's CheckpointError) whose message names the
file and the member.
"""

from __future__ import annotations

import json
import os
import stat
import zipfile
from typing import IO, Any

import numpy as np

from .errors import ModelFormatError, SymnetError

__all__ = [
    "EXTENDED_DTYPES",
    "as_read",
    "as_stored",
    "extended_dtype",
    "is_extended",
    "stored_dtype",
    "ArraySpec",
    "DEFLATE_MAX_RATIO",
    "MAX_ARRAY_BYTES",
    "MAX_HEADER_BYTES",
    "MAX_MEMBERS",
    "MAX_TEXT_BYTES",
    "NpzArchive",
    "open_regular",
    "read_bounded",
    "read_file",
    "regular_file",
]

#: Limits no real file reaches: the members of one archive, the bytes of one array, of a text or JSON member.
MAX_MEMBERS = 1 << 18
MAX_ARRAY_BYTES = 1 << 34
MAX_TEXT_BYTES = 1 << 26
#: The `.npy` header size NumPy itself allows by default.
MAX_HEADER_BYTES = 10000

_NUMBER_KINDS = "biufc"


#: The number types of `ml_dtypes` (JAX's bfloat16, float8, int4, ...): files hold them by name, their data as
#: the raw bits in unsigned integers of the same size (NumPy's `.npy` has no name for them).
EXTENDED_DTYPES = (
    "bfloat16", "float8_e4m3fn", "float8_e5m2", "float8_e4m3fnuz", "float8_e5m2fnuz", "float8_e4m3b11fnuz",
    "float8_e3m4", "float8_e4m3", "float8_e8m0fnu", "float6_e2m3fn", "float6_e3m2fn", "float4_e2m1fn",
    "int4", "uint4", "int2", "uint2",
)  # fmt: skip


def extended_dtype(name: str) -> np.dtype | None:
    """The `ml_dtypes` type of that name (None for any other name, or where this ml_dtypes has none)."""
    import ml_dtypes

    kind = getattr(ml_dtypes, name, None) if name in EXTENDED_DTYPES else None
    return np.dtype(kind) if kind is not None else None


def is_extended(dtype: np.dtype) -> bool:
    dtype = np.dtype(dtype)
    return dtype.kind == "V" and dtype.fields is None and extended_dtype(dtype.name) == dtype


def stored_dtype(dtype: np.dtype) -> np.dtype:
    """The dtype a file stores `dtype`'s values as: an extended type's bits as unsigned integers of its size."""
    dtype = np.dtype(dtype)
    return np.dtype(f"<u{dtype.itemsize}") if is_extended(dtype) else dtype


def as_stored(array: np.ndarray) -> np.ndarray:
    """`array` as a file stores it (`stored_dtype`; a view, no copy)."""
    return array.view(stored_dtype(array.dtype)) if is_extended(array.dtype) else array


def as_read(array: np.ndarray, dtype: np.dtype) -> np.ndarray:
    """An array read as `stored_dtype(dtype)`, as `dtype` again."""
    return array.view(dtype) if is_extended(dtype) else array


def regular_file(path: str, error: type[SymnetError], what: str = "file") -> os.stat_result:
    """`path`'s stat if it is a regular file; else `error` (a device, FIFO or folder could be read forever).

    A look by name only: a reader then opens the file with `open_regular`, which checks what it opened."""
    try:
        st = os.stat(path)
    except FileNotFoundError:
        raise
    except OSError as e:
        raise error(f"{path}: cannot open the {what}: {e.strerror or e}") from None
    _check_regular(path, st, error, what)
    return st


def _check_regular(path: str, st: os.stat_result, error: type[SymnetError], what: str) -> None:
    if not stat.S_ISREG(st.st_mode):
        kind = "a folder" if stat.S_ISDIR(st.st_mode) else "a device, FIFO or socket"
        raise error(f"{path}: the {what} is {kind}, not a regular file")


def open_regular(
    path: str, error: type[SymnetError] = ModelFormatError, what: str = "file"
) -> tuple[IO[bytes], os.stat_result]:
    """`path` opened once for reading, and the stat of what was opened, which must be a regular file (else
    `error`; FileNotFoundError where it is missing). The open never blocks on a FIFO (O_NONBLOCK), and nothing
    is looked up by name after it, so a file swapped for a FIFO or a link to a device meanwhile is refused,
    not read. A link is followed (Kaldi's data folders link archives and matrices): what it leads to is checked."""
    regular_file(path, error, what)  # a device is not even opened (opening some has effects)
    try:
        fd = os.open(path, os.O_RDONLY | os.O_NONBLOCK | getattr(os, "O_CLOEXEC", 0))
    except FileNotFoundError:
        raise
    except OSError as e:
        raise error(f"{path}: cannot open the {what}: {e.strerror or e}") from None
    try:
        st = os.fstat(fd)
        _check_regular(path, st, error, what)
        return os.fdopen(fd, "rb"), st
    except BaseException:
        os.close(fd)
        raise


def read_bounded(f: IO[bytes], size: int, max_bytes: int) -> bytes:
    """The rest of the open regular file `f` of `size` bytes (its fstat), at most `max_bytes + 1` bytes (more
    than `max_bytes`: the file grew past the limit while it was read)."""
    parts = [f.read(min(size, max_bytes) + 1)]
    got = len(parts[0])
    while got > size and got <= max_bytes:  # it grew meanwhile: read on, a bounded block at a time
        part = f.read(min(1 << 20, max_bytes + 1 - got))
        if not part:
            break
        parts.append(part)
        got += len(part)
    return b"".join(parts) if len(parts) > 1 else parts[0]


def read_file(path: str, max_bytes: int, *, error: type[SymnetError] = ModelFormatError, what: str = "file") -> bytes:
    """The bytes of a regular file of at most `max_bytes` (`error` otherwise, naming `path`), opened once."""
    f, st = open_regular(path, error, what)
    with f:
        if st.st_size > max_bytes:
            raise error(f"{path}: the {what} has {st.st_size} bytes, more than the {max_bytes} allowed")
        data = read_bounded(f, st.st_size, max_bytes)
    if len(data) > max_bytes:  # it grew while we read it
        raise error(f"{path}: the {what} has more than the {max_bytes} bytes allowed")
    return data


class ArraySpec:
    """What a member's `.npy` header says: shape, dtype, Fortran order, and where the data starts."""

    __slots__ = ("shape", "dtype", "fortran", "offset")

    def __init__(self, shape: tuple[int, ...], dtype: np.dtype, fortran: bool, offset: int):
        self.shape, self.dtype, self.fortran, self.offset = shape, dtype, fortran, offset

    @property
    def count(self) -> int:
        return int(np.prod(self.shape, dtype=object))

    @property
    def nbytes(self) -> int:
        return self.count * self.dtype.itemsize


#: The most a deflated member can expand: deflate's best ratio is 1032 to 1.
DEFLATE_MAX_RATIO = 1032


def _member_size_problem(info: zipfile.ZipInfo, file_size: int) -> str | None:
    """Why the sizes the zip directory gives for a member cannot be true of this file (None if they can be):
    they decide what is allocated, so they are checked against the real file before anything is read."""
    if info.header_offset + info.compress_size > file_size:
        return (
            f"the zip directory says it has {info.compress_size} bytes at offset {info.header_offset}, "
            f"but the file has {file_size} bytes"
        )
    if info.compress_type == zipfile.ZIP_STORED:
        if info.file_size != info.compress_size:
            return f"a stored member of {info.compress_size} bytes that the zip directory says holds {info.file_size}"
    elif info.compress_type == zipfile.ZIP_DEFLATED:
        if info.file_size > DEFLATE_MAX_RATIO * info.compress_size + 1024:
            return (
                f"the zip directory says {info.compress_size} compressed bytes hold {info.file_size}, more than "
                f"deflate can expand them to ({DEFLATE_MAX_RATIO} to 1)"
            )
    else:
        return f"compressed with zip method {info.compress_type}; symnet reads stored and deflated members"
    return None


class NpzArchive:
    """A `.npz` archive read member by member, each checked before it is read (see the module doc).

    with NpzArchive(path, error=CheckpointError, what="checkpoint") as archive:
        header = archive.read_json("header")
        weights = archive.read("param/w", shape=(3, 4), dtype=np.float32)
    """

    def __init__(
        self, path: str | os.PathLike[str], *, error: type[SymnetError] = ModelFormatError, what: str = "file"
    ):
        self.path = os.fspath(path)
        self.error, self.what = error, what
        self._file, st = open_regular(self.path, error, what)  # read from this open file only
        size = st.st_size
        try:
            self._zip = zipfile.ZipFile(self._file)
            infos = self._zip.infolist()
        except Exception as e:  # zipfile raises BadZipFile, OSError, ValueError, NotImplementedError, ...
            self._file.close()
            raise self._fail(f"not a readable {what} (not a .npz archive: {_reason(e)})") from None
        if len(infos) > MAX_MEMBERS:
            self.close()
            raise self._fail(f"{len(infos)} members, more than the {MAX_MEMBERS} allowed")
        self._members: dict[str, zipfile.ZipInfo] = {}
        for info in infos:
            name = info.filename[:-4] if info.filename.endswith(".npy") else info.filename
            if name in self._members:
                self.close()
                raise self._fail(f"member {name!r} appears twice")
            self._members[name] = info
            problem = _member_size_problem(info, size)
            if problem is not None:
                self.close()
                raise self._fail(f"member {info.filename!r}: {problem}")

    def _fail(self, message: str) -> SymnetError:
        return self.error(f"{self.path}: {message}")

    def __enter__(self) -> NpzArchive:
        return self

    def __exit__(self, *exc: object) -> None:
        self.close()

    def close(self) -> None:
        self._zip.close()
        self._file.close()

    @property
    def names(self) -> list[str]:
        """The members' names (without `.npy`), in the archive's order."""
        return list(self._members)

    def __contains__(self, name: object) -> bool:
        return name in self._members

    def filename(self, name: str) -> str:
        """Member `name`'s file name in the archive (`name.npy` for arrays)."""
        return self._info(name).filename

    def require_stored(self) -> None:
        """Refuse compressed or encrypted members: in an archive of stored members the file's size bounds
        every array, as symnet writes its network files."""
        for info in self._members.values():
            if info.compress_type != zipfile.ZIP_STORED or info.flag_bits & 0x1:
                raise self._fail(
                    f"member {info.filename!r} is compressed or encrypted; symnet stores members as they are"
                )

    def _info(self, name: str) -> zipfile.ZipInfo:
        info = self._members.get(name)
        if info is None:
            raise self._fail(f"no member {name!r}")
        if info.flag_bits & 0x1:
            raise self._fail(f"member {name!r} is encrypted")
        return info

    def spec(self, name: str) -> ArraySpec:
        """What member `name`'s `.npy` header says, checked against the member's size; no data is read."""
        info = self._info(name)
        try:
            with self._zip.open(info) as f:
                return self._header(name, info, f)
        except SymnetError:
            raise
        except Exception as e:  # a damaged member: bad compressed data
            raise self._fail(f"member {name!r} cannot be read ({_reason(e)})") from None

    def _header(self, name: str, info: zipfile.ZipInfo, f: IO[bytes]) -> ArraySpec:
        try:
            return self._parse_header(name, info, f)
        except SymnetError:
            raise
        except Exception as e:  # numpy's ValueErrors, a SyntaxError of the header dict, zlib errors
            raise self._fail(f"member {name!r}: not a readable .npy header ({_reason(e)})") from None

    def _parse_header(self, name: str, info: zipfile.ZipInfo, f: IO[bytes]) -> ArraySpec:
        fmt = np.lib.format
        version = fmt.read_magic(f)
        if version == (1, 0):
            shape, fortran, dtype = fmt.read_array_header_1_0(f, max_header_size=MAX_HEADER_BYTES)
        elif version == (2, 0):
            shape, fortran, dtype = fmt.read_array_header_2_0(f, max_header_size=MAX_HEADER_BYTES)
        else:
            raise self._fail(f"member {name!r}: .npy format version {version}, symnet reads 1.0 and 2.0")
        if dtype.hasobject or dtype.kind not in _NUMBER_KINDS + "U" or dtype.fields is not None:
            raise self._fail(f"member {name!r} holds {dtype} values: only numbers (and text) are read, never objects")
        if any(not isinstance(d, int) or d < 0 for d in shape):
            raise self._fail(f"member {name!r}: bad shape {shape}")
        spec = ArraySpec(tuple(shape), dtype, bool(fortran), f.tell())
        if spec.offset + spec.nbytes != info.file_size:
            raise self._fail(
                f"member {name!r}: its header says {spec.dtype} {list(spec.shape)} ({spec.nbytes} "
                f"bytes), but it holds {info.file_size - spec.offset} bytes of data"
            )
        return spec

    def read(
        self,
        name: str,
        *,
        shape: tuple[int, ...] | None = None,
        dtype: Any = None,
        max_bytes: int = MAX_ARRAY_BYTES,
        text: bool = False,
    ) -> np.ndarray:
        """Member `name` as an array, after checking its header: numbers (or text with `text=True`), the
        given `shape` and `dtype` if given, at most `max_bytes` of data."""
        info = self._info(name)
        try:
            with self._zip.open(info) as f:
                spec = self._header(name, info, f)
                self._expect(name, spec, shape, dtype, max_bytes, text)
                out = np.empty(spec.count, dtype=spec.dtype)
                view = out.view(np.uint8).reshape(-1).data if spec.nbytes else memoryview(bytearray())
                got = 0
                while got < spec.nbytes:
                    n = f.readinto(view[got:])  # type: ignore[attr-defined]  # a ZipExtFile
                    if not n:
                        raise self._fail(f"member {name!r} ends after {got} of {spec.nbytes} bytes")
                    got += n
                if f.read(1):
                    raise self._fail(f"member {name!r} has data beyond its header's shape")
        except SymnetError:
            raise
        except Exception as e:  # a damaged member: bad CRC, bad compressed data
            raise self._fail(f"member {name!r} cannot be read ({_reason(e)})") from None
        return out.reshape(spec.shape, order="F" if spec.fortran else "C")

    def _expect(
        self, name: str, spec: ArraySpec, shape: tuple[int, ...] | None, dtype: Any, max_bytes: int, text: bool
    ) -> None:
        if spec.dtype.kind == "U" and not text:
            raise self._fail(f"member {name!r} holds text, not numbers")
        if text and spec.dtype.kind != "U":
            raise self._fail(f"member {name!r} holds {spec.dtype} numbers, not text")
        if shape is not None and tuple(spec.shape) != tuple(shape):
            raise self._fail(f"member {name!r} has shape {list(spec.shape)}, expected {list(shape)}")
        if dtype is not None and spec.dtype != np.dtype(dtype):
            raise self._fail(f"member {name!r} has dtype {spec.dtype}, expected {np.dtype(dtype)}")
        if spec.nbytes > max_bytes:
            raise self._fail(f"member {name!r} holds {spec.nbytes} bytes, more than the {max_bytes} allowed")

    def read_text(self, name: str, max_bytes: int = MAX_TEXT_BYTES) -> str:
        """A text member: a 0-d string array (symnet's model files) or a uint8 vector of UTF-8 (checkpoints)."""
        spec = self.spec(name)
        if spec.dtype.kind == "U":
            value = self.read(name, shape=(), max_bytes=max_bytes, text=True)
            return str(value[()])
        if spec.dtype != np.uint8 or len(spec.shape) != 1:
            raise self._fail(f"member {name!r} is {spec.dtype} {list(spec.shape)}, not text")
        data = self.read(name, max_bytes=max_bytes).tobytes()
        try:
            return data.decode("utf-8")
        except UnicodeDecodeError as e:
            raise self._fail(f"member {name!r} is not UTF-8 text ({e.reason} at byte {e.start})") from None

    def read_json(self, name: str, max_bytes: int = 1 << 20) -> Any:
        """A JSON text member, parsed (no deeper than Python's recursion allows: deeper is an error)."""
        text = self.read_text(name, max_bytes)
        try:
            return json.loads(text)
        except RecursionError:
            raise self._fail(f"member {name!r}: JSON nested too deeply") from None
        except ValueError as e:
            raise self._fail(f"member {name!r}: not valid JSON ({e})") from None


def _reason(error: BaseException) -> str:
    text = str(error).strip().splitlines()[0] if str(error).strip() else ""
    return f"{type(error).__name__}: {text}" if text else type(error).__name__
