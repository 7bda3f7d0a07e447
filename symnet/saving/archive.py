"""The container of symnet's network files: a zip of `.npy` members (a NumPy `.npz`), a JSON header first.

Members: `header.npy`, the header as UTF-8 JSON in a `uint8` vector, and
`arrays/K.npy` for K = 0, 1, ... as the header's `arrays` table lists them
(`{"shape": [...], "dtype": "<f4"}` each). Members are stored uncompressed,
with fixed timestamps, so equal networks give equal bytes and the file's size
bounds everything a reader allocates.

Reading (`read_archive`) trusts nothing: the file must be a regular file; the
header member is size-checked before it is read and its JSON depth-checked
before it is parsed; the members must be exactly the ones the header lists;
every array's `.npy` header must state the shape and dtype of the table, a
plain number type, and exactly the bytes the member holds, all before its data
is read, and never with pickle. Any problem is a ModelFormatError naming the
file and the member. `np.load(path, allow_pickle=False)` reads these files too.
"""

from __future__ import annotations

import json
import os
import re
import stat
import zipfile
from collections.abc import Sequence
from typing import IO, Any

import numpy as np

from ..atomic import atomic_open
from ..errors import ModelFormatError

__all__ = ["HEADER_MEMBER", "MAX_HEADER_BYTES", "MAX_JSON_DEPTH", "array_member", "read_archive", "write_archive"]

HEADER_MEMBER = "header.npy"
#: The largest header symnet reads (a network of about half a million layers), and the deepest JSON nesting.
MAX_HEADER_BYTES = 1 << 26
MAX_JSON_DEPTH = 64
#: The largest `.npy` header of a member (NumPy's own default limit).
_MAX_NPY_HEADER = 10000
_NUMBER_KINDS = "biufc"
_DATE = (1980, 1, 1, 0, 0, 0)


def array_member(k: int) -> str:
    """The member name of array number `k`."""
    return f"arrays/{k}.npy"


def _member_info(name: str) -> zipfile.ZipInfo:
    info = zipfile.ZipInfo(name, date_time=_DATE)
    info.compress_type = zipfile.ZIP_STORED
    info.external_attr = 0o644 << 16
    return info


def write_archive(path: str | os.PathLike[str], header: dict[str, Any], arrays: Sequence[np.ndarray]) -> None:
    """Write the header (its `arrays` table must describe `arrays`) and the arrays, atomically."""
    text = json.dumps(header, allow_nan=False, separators=(",", ":")).encode("utf-8")
    with atomic_open(path) as f, zipfile.ZipFile(f, "w", zipfile.ZIP_STORED, allowZip64=True) as z:
        with z.open(_member_info(HEADER_MEMBER), "w", force_zip64=False) as m:
            np.lib.format.write_array(m, np.frombuffer(text, dtype=np.uint8), allow_pickle=False)
        for k, array in enumerate(arrays):
            with z.open(_member_info(array_member(k)), "w", force_zip64=array.nbytes > (1 << 30)) as m:
                np.lib.format.write_array(m, np.asarray(array, order="C"), allow_pickle=False)


def read_archive(path: str | os.PathLike[str], check_header: Any) -> tuple[dict[str, Any], list[np.ndarray]]:
    """The header and the arrays of a file written by `write_archive`, every size checked first.

    `check_header(header)` validates the parsed header (format, version, the
    arrays table as a list of `(shape, dtype)`) before any array is read and
    returns the table. FileNotFoundError if there is no file; ModelFormatError
    for anything else wrong.
    """
    path = os.fspath(path)
    fail = _Failure(path)
    st = os.stat(path)  # FileNotFoundError, as open() raises it
    if not stat.S_ISREG(st.st_mode):
        raise fail("not a regular file")
    try:
        z = zipfile.ZipFile(path)
    except (zipfile.BadZipFile, OSError, ValueError, EOFError, NotImplementedError) as e:
        raise fail(f"not a symnet network file (not a zip archive: {_reason(e)})") from None
    with z:
        infos = {}
        for info in z.infolist():
            if info.filename in infos:
                raise fail(f"member {info.filename!r} appears twice")
            if info.compress_type != zipfile.ZIP_STORED or info.flag_bits & 0x1:
                raise fail(f"member {info.filename!r} is compressed or encrypted; symnet stores members as they are")
            infos[info.filename] = info
        if HEADER_MEMBER not in infos:
            raise fail(f"not a symnet network file (no {HEADER_MEMBER} member; members {sorted(infos)[:5]})")
        header_info = infos[HEADER_MEMBER]
        if header_info.file_size > MAX_HEADER_BYTES:
            raise fail(f"the header has {header_info.file_size} bytes, more than the {MAX_HEADER_BYTES} allowed")
        text = _read_member(z, header_info, fail, None)
        header = _parse_json(text, fail)
        table = check_header(header)
        wanted = {HEADER_MEMBER, *(array_member(k) for k in range(len(table)))}
        if set(infos) != wanted:
            missing, extra = sorted(wanted - set(infos)), sorted(set(infos) - wanted)
            raise fail(f"the members do not match the header (missing {missing}, not listed {extra})")
        arrays = [_read_member(z, infos[array_member(k)], fail, spec) for k, spec in enumerate(table)]
    return header, arrays


class _Failure:
    def __init__(self, path: str):
        self.path = path

    def __call__(self, message: str) -> ModelFormatError:
        return ModelFormatError(f"{self.path}: {message}")


def _reason(error: BaseException) -> str:
    text = str(error).strip().splitlines()[0] if str(error).strip() else ""
    return f"{type(error).__name__}: {text}" if text else type(error).__name__


def _read_member(
    z: zipfile.ZipFile, info: zipfile.ZipInfo, fail: _Failure, spec: tuple[tuple[int, ...], np.dtype] | None
) -> Any:
    """A member's array, after checking its `.npy` header against `spec` (None: the header, UTF-8 text)."""
    name = info.filename
    try:
        with z.open(info) as f:
            shape, dtype = _npy_header(f, name, fail)
            offset = f.tell()
            if spec is None and (dtype != np.uint8 or len(shape) != 1):
                raise fail(f"member {name!r} is {dtype} {list(shape)}, not UTF-8 text")
            if spec is not None and (shape != spec[0] or dtype != spec[1]):
                raise fail(f"member {name!r} holds {dtype} {list(shape)}, the header says {spec[1]} {list(spec[0])}")
            nbytes = int(np.prod(shape, dtype=object)) * dtype.itemsize
            if offset + nbytes != info.file_size:
                raise fail(
                    f"member {name!r}: its .npy header says {nbytes} bytes of data, it holds {info.file_size - offset}"
                )
            data = f.read(nbytes)
            if len(data) != nbytes or f.read(1):
                raise fail(f"member {name!r} ends after {len(data)} of {nbytes} bytes")
    except ModelFormatError:
        raise
    except Exception as e:  # zipfile's BadZipFile (a bad CRC), OSError, numpy's ValueError of a bad .npy header
        raise fail(f"member {name!r} cannot be read ({_reason(e)})") from None
    if spec is None:
        try:
            return data.decode("utf-8")
        except UnicodeDecodeError as e:
            raise fail(f"the header is not UTF-8 ({e.reason} at byte {e.start})") from None
    return np.frombuffer(data, dtype=dtype).reshape(shape).copy()


def _npy_header(f: IO[bytes], name: str, fail: _Failure) -> tuple[tuple[int, ...], np.dtype]:
    fmt = np.lib.format
    version = fmt.read_magic(f)
    if version == (1, 0):
        shape, fortran, dtype = fmt.read_array_header_1_0(f, max_header_size=_MAX_NPY_HEADER)
    elif version == (2, 0):
        shape, fortran, dtype = fmt.read_array_header_2_0(f, max_header_size=_MAX_NPY_HEADER)
    else:
        raise fail(f"member {name!r}: .npy format version {version}; symnet reads 1.0 and 2.0")
    if dtype.hasobject or dtype.fields is not None or dtype.kind not in _NUMBER_KINDS:
        raise fail(f"member {name!r} holds {dtype} values: symnet reads numbers only (never pickled objects)")
    if fortran and len(shape) > 1:
        raise fail(f"member {name!r} is in Fortran order; symnet writes C order")
    return tuple(int(d) for d in shape), dtype


_STRING = re.compile(r'"(?:[^"\\]|\\.)*"')


def _parse_json(text: str, fail: _Failure) -> dict[str, Any]:
    """The header object; deeper nesting than MAX_JSON_DEPTH is refused before parsing."""
    skeleton = np.frombuffer(_STRING.sub("", text).encode("utf-8"), dtype=np.uint8)
    steps = np.isin(skeleton, (ord("["), ord("{"))).astype(np.int64) - np.isin(skeleton, (ord("]"), ord("}")))
    if len(steps) and int(np.cumsum(steps).max()) > MAX_JSON_DEPTH:
        raise fail(f"the header nests deeper than {MAX_JSON_DEPTH} levels")
    try:
        header = json.loads(text, parse_constant=_no_constant)
    except (ValueError, RecursionError) as e:
        raise fail(f"the header is not valid JSON ({_reason(e)})") from None
    if not isinstance(header, dict):
        raise fail("not a symnet network file (the header is not a JSON object)")
    return header


def _no_constant(name: str) -> Any:
    raise ValueError(f"{name} is not JSON")
