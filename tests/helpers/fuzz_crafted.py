"""Hand-made hostile inputs, per reader: what an attacker writes on purpose rather than what mutation finds.

`CRAFTED[name](job)` yields `(label, bytes)`; the labels name the attack, so a
failure reads as what was tried. The job's folder is where the files an input
names (an scp's archive) and the files a command would create live.
"""

from __future__ import annotations

import io
import json
import pickle
import struct
import zipfile
from collections.abc import Callable, Iterator
from pathlib import Path
from typing import Any

import numpy as np

from helpers import fuzz

Inputs = Iterator[tuple[str, bytes]]


# ----- npz archives (symnet model files and checkpoints share the container) --------------------------


def _lying_npz(name: str, shape: tuple[int, ...], data: bytes = b"\0" * 16, dtype: str = "<f4") -> bytes:
    return fuzz.npz_bytes(
        {name: fuzz.npy_bytes(header={"descr": dtype, "fortran_order": False, "shape": shape}, data=data)}
    )


def _with_method(archive: bytes, method: int) -> bytes:
    """The archive with every member's compression method set to `method` (local and central headers)."""
    out = bytearray(archive)
    for magic, at in ((b"PK\x03\x04", 8), (b"PK\x01\x02", 10)):
        i = out.find(magic)
        while i >= 0:
            out[i + at : i + at + 2] = struct.pack("<H", method)
            i = out.find(magic, i + 4)
    return bytes(out)


def _with_flag(archive: bytes, flag: int) -> bytes:
    out = bytearray(archive)
    for magic, at in ((b"PK\x03\x04", 6), (b"PK\x01\x02", 8)):
        i = out.find(magic)
        while i >= 0:
            out[i + at : i + at + 2] = struct.pack("<H", flag)
            i = out.find(magic, i + 4)
    return bytes(out)


def _claiming(archive: bytes, size: int) -> bytes:
    """The archive with every central directory entry claiming `size` uncompressed bytes (data unchanged)."""
    out = bytearray(archive)
    i = out.find(b"PK\x01\x02")
    while i >= 0:
        out[i + 24 : i + 28] = struct.pack("<I", size)
        i = out.find(b"PK\x01\x02", i + 4)
    return bytes(out)


def npz_archives(job: dict[str, Any]) -> Inputs:
    """Container-level attacks on any `.npz` reader."""
    good = fuzz.npz_bytes({"a": fuzz.npy_bytes(np.arange(6, dtype=np.float32).reshape(2, 3))})
    yield "not a zip", b"hello"
    yield "empty", b""
    yield "truncated", good[: len(good) // 2]
    yield "zip bomb: 512 MiB of zeros in 0.5 MB", fuzz.deflated_zeros_npz("a", (1 << 27,), 1 << 29)
    yield "header says 10^10 floats, 16 bytes stored", _lying_npz("a", (100000, 100000))
    yield "header says 2^62 bytes", _lying_npz("a", (1 << 31, 1 << 29))
    yield "header says fewer values than stored", _lying_npz("a", (2,), data=b"\0" * 64)
    yield "negative shape", _lying_npz("a", (-1, 4))
    yield (
        "shape of strings",
        fuzz.npz_bytes({"a": fuzz.npy_bytes(header={"descr": "<f4", "fortran_order": False, "shape": ("a",)})}),
    )
    yield "header is not a dict", fuzz.npz_bytes({"a": fuzz.npy_bytes(header=None) + b"x"})
    yield "descr is nonsense", _lying_npz("a", (1,), dtype="<q9")
    yield "object array (a pickle)", fuzz.npz_bytes({"a": fuzz.npy_bytes(np.array([{"x": 1}], dtype=object))})
    yield "structured dtype", fuzz.npz_bytes({"a": fuzz.npy_bytes(np.zeros(2, dtype=[("x", "<f4"), ("y", "<i4")]))})
    yield "bytes dtype", fuzz.npz_bytes({"a": fuzz.npy_bytes(np.array([b"abc"]))})
    yield "datetime dtype", fuzz.npz_bytes({"a": fuzz.npy_bytes(np.zeros(2, dtype="M8[s]"))})
    yield "npy version 3.0", fuzz.npz_bytes({"a": fuzz.npy_bytes(np.zeros(2, np.float32), version=(3, 0))})
    yield "npy version 9.9", fuzz.npz_bytes({"a": b"\x93NUMPY\x09\x09" + b"\0" * 20})
    yield (
        "npy header of 1 MB",
        fuzz.npz_bytes(
            {
                "a": fuzz.npy_bytes(
                    header={"descr": "<f4", "fortran_order": False, "shape": (1,), "pad": "x" * (1 << 20)},
                    data=b"\0" * 4,
                    version=(2, 0),
                )
            }
        ),
    )
    yield "nested header", fuzz.npz_bytes({"a": b"\x93NUMPY\x01\x00" + struct.pack("<H", 9000) + b"(" * 8999 + b"\n"})
    yield "10000 members", fuzz.npz_bytes({f"m{i}": fuzz.npy_bytes(np.zeros(1, np.float32)) for i in range(10000)})
    buffer = io.BytesIO()
    with zipfile.ZipFile(buffer, "w") as z:
        z.writestr("a.npy", fuzz.npy_bytes(np.zeros(2, np.float32)))
        z.writestr("a.npy", fuzz.npy_bytes(np.zeros(3, np.float32)))
    yield "duplicate member", buffer.getvalue()
    yield "zip directory claims 4 GiB of a stored member", _claiming(_lying_npz("a", (0x3FFFFFE0 - 32,)), 0xFFFFFF00)
    deflated = fuzz.deflated_zeros_npz("a", (1 << 10,), 1 << 12)
    yield "zip directory claims 4 GiB of a small deflated member", _claiming(deflated, 0xFFFFFF00)
    yield "unknown compression method", _with_method(good, 99)
    yield "lzma member", _with_method(good, 14)
    yield "encrypted member", _with_flag(good, 1)
    yield "member not .npy", fuzz.npz_bytes({"a.txt": b"hello"})


# ----- checkpoints --------------------------------------------------------------------------------------


def _checkpoint_members(job: dict[str, Any]) -> tuple[dict[str, bytes], dict[str, Any]]:
    from helpers.fuzz_runner import checkpoint_network
    from symnet._src.train import checkpoint

    net, state = checkpoint_network()
    path = Path(job["folder"]) / "good-checkpoint.npz"
    checkpoint.save(str(path), net, state, checkpoint.Position(3, 1, 2), {"history": []}, run={"lr": 0.01})
    members, header = {}, {}
    with zipfile.ZipFile(path) as z:
        for info in z.infolist():
            members[info.filename[:-4]] = z.read(info)
    with np.load(path, allow_pickle=False) as data:
        header = json.loads(data["header"].tobytes())
    return members, header


def checkpoints(job: dict[str, Any]) -> Inputs:
    """A good checkpoint of the runner's network, with one field or member made hostile at a time."""
    members, header = _checkpoint_members(job)
    yield "the good one", fuzz.npz_bytes(members)

    def with_header(value: Any, raw: bytes | None = None) -> bytes:
        return fuzz.npz_bytes({**members, "header": raw if raw is not None else fuzz.json_member(value)})

    for field in ("format", "version", "fingerprint", "position", "opt_leaves", "extra", "run"):
        for value in (None, 1, -1, 2**70, 1.5, True, "x", [], {}, [1, 2], {"a": [1]}):
            yield f"header {field}={value!r}", with_header({**header, field: value})
        partial = dict(header)
        del partial[field]
        yield f"header without {field}", with_header(partial)
    for field in ("step", "epoch", "batch"):
        for value in (-1, 2**63, 1.5, "3", None, True, [1]):
            yield (
                f"position {field}={value!r}",
                with_header({**header, "position": {**header["position"], field: value}}),
            )
    yield "position with extra field", with_header({**header, "position": {**header["position"], "x": 1}})
    yield "extra history of junk", with_header({**header, "extra": {"history": [1, "a", None]}})
    yield "extra history of wrong fields", with_header({**header, "extra": {"history": [{"epoch": "x"}]}})
    yield "extra sums of junk", with_header({**header, "extra": {"sums": "abc"}})
    yield "header is deep JSON", with_header(None, raw=fuzz.npy_bytes(np.frombuffer(fuzz.deep_json(100000), np.uint8)))
    yield "header is not UTF-8", with_header(None, raw=fuzz.npy_bytes(np.frombuffer(b"\xff\xfe{", np.uint8)))
    yield "header is a list", with_header([1, 2, 3])
    yield "header is a 0-d string", with_header(None, raw=fuzz.npy_bytes(np.array(json.dumps(header))))
    yield "header is float64", with_header(None, raw=fuzz.npy_bytes(np.zeros(8)))
    yield "header is 2 MB", with_header(None, raw=fuzz.npy_bytes(np.zeros(2 << 20, np.uint8)))
    yield (
        "header claims 10 GB",
        with_header(None, raw=fuzz.npy_bytes(header={"descr": "|u1", "fortran_order": False, "shape": (10**10,)})),
    )
    names = [n for n in members if n != "header"]
    for name in names:
        base = {k: v for k, v in members.items()}
        yield f"{name} missing", fuzz.npz_bytes({k: v for k, v in base.items() if k != name})
        yield f"{name} float64", fuzz.npz_bytes({**base, name: fuzz.npy_bytes(np.zeros(5, np.float64))})
        yield f"{name} object", fuzz.npz_bytes({**base, name: fuzz.npy_bytes(np.array([None, 1], dtype=object))})
        yield f"{name} text", fuzz.npz_bytes({**base, name: fuzz.npy_bytes(np.array("abc"))})
        yield (
            f"{name} huge shape",
            fuzz.npz_bytes(
                {
                    **base,
                    name: fuzz.npy_bytes(
                        header={"descr": "<f4", "fortran_order": False, "shape": (10**5, 10**5)}, data=b"\0" * 8
                    ),
                }
            ),
        )
    yield (
        "unreferenced 3 GB member",
        fuzz.npz_bytes(
            {
                **members,
                "junk": fuzz.npy_bytes(
                    header={"descr": "<f4", "fortran_order": False, "shape": (3 << 28,)}, data=b"\0" * 8
                ),
            }
        ),
    )
    yield "unreferenced zip bomb", _bomb_beside(members)
    yield "opt leaves count lies", with_header({**header, "opt_leaves": 10**6})


def _bomb_beside(members: dict[str, bytes], name: str = "junk") -> bytes:
    bomb = fuzz.deflated_zeros_npz(name, (1 << 27,), 1 << 29)
    buffer = io.BytesIO(bomb)
    with zipfile.ZipFile(buffer, "a") as z:
        for name, data in members.items():
            z.writestr(name + ".npy", data)
    return buffer.getvalue()


# ----- Kaldi archives and scp files ----------------------------------------------------------------------


def archives(job: dict[str, Any]) -> Inputs:
    """Binary and text archive entries whose headers lie, and entries that are not Kaldi data."""
    mat = np.arange(6, dtype=np.float32).tobytes()
    for kind in (b"FM ", b"DM ", b"CM ", b"CM2 ", b"CM3 "):
        for rows, cols in ((2**31 - 1, 2**31 - 1), (-1, 3), (3, -1), (1 << 20, 1 << 20), (2, 3), (0, 0)):
            yield f"{kind.decode().strip()} {rows}x{cols}", fuzz.kaldi_matrix_entry("u1", rows, cols, mat, kind)
    yield "FV of 2^31-1", b"u1 \0BFV \x04" + struct.pack("<i", 2**31 - 1) + mat
    yield "int32 vector of 2^31-1", fuzz.kaldi_int_vector_entry("u1", 2**31 - 1, b"\x04\0\0\0\0")
    yield "int32 vector of -5", fuzz.kaldi_int_vector_entry("u1", -5)
    yield "int32 vector without size bytes", fuzz.kaldi_int_vector_entry("u1", 3, b"\0" * 15)
    marker = Path(job["folder"]) / "work" / "PWNED"
    evil = pickle.dumps(_Touch(str(marker)))
    yield "a pickle entry (it would create a file)", b"u1 PKL" + evil
    yield "an npy entry", b"u1 NPY" + bytes([1, 200]) + b"\0" * 10
    yield "an audio entry", b"u1 AUDIO" + bytes([4]) + struct.pack("<I", 2**31) + b"x"
    yield "a wav entry", b"u1 RIFF" + b"\0" * 40
    yield "a flac entry", b"u1 fLaC" + b"\0" * 40
    yield "text matrix without ]", b"u1 [ 1 2 3\n 4 5 6\n" * 1000
    yield "text with letters", b"u1 [ a b c ]\n"
    yield "text with nan", b"u1 [ nan inf -inf ]\n"
    yield "alignment with nan", b"u1 1 2 nan 4\n"
    yield "alignment beyond int32", b"u1 1 2 99999999999 4\n"
    yield "ragged text matrix", b"u1 [\n 1 2 3\n 4 5\n ]\n"
    yield "text matrix of 10^6 rows of one value", b"u1 [\n" + b" 1\n" * 1000000 + b" ]\n"
    yield "key of 1 MB", b"k" * (1 << 20) + b" [ 1 ]\n"
    yield "key not UTF-8", b"\xff\xfe [ 1 ]\n"
    yield "key, then nothing", b"u1 "
    yield "key only", b"u1"
    yield "unknown binary type", b"u1 \0BXY \x04\0\0\0\0"
    yield "binary marker then end", b"u1 \0B"
    yield "blank", b"\n\n   \n"
    yield "two good entries", fuzz.kaldi_matrix_entry("a", 2, 3, mat) + fuzz.kaldi_matrix_entry("b", 3, 2, mat)
    yield "zeros", b"\0" * 100000


class _Touch:
    """Unpickling this creates a file: proof that something unpickled an archive."""

    def __init__(self, path: str):
        self.path = path

    def __reduce__(self) -> tuple[Callable[..., Any], tuple[Any, ...]]:
        return (open, (self.path, "w"))


def scp_files(job: dict[str, Any]) -> Inputs:
    """scp lines that run commands, point at devices, offsets past the end, bad ranges."""
    work = Path(job["folder"]) / "work"
    marker = work / "PWNED"
    good = work / "good.ark"
    yield "a good line", f"u1 {good}:3\n".encode()
    yield "command at the end", f"u1 touch {marker}; cat {good} |\n".encode()
    yield "command at the start", f"u1 | touch {marker}\n".encode()
    yield "command in a range", f"u1 touch {marker} |[0:1]\n".encode()
    yield "/dev/zero", b"u1 /dev/zero\n"
    yield "/dev/zero with offset", b"u1 /dev/zero:100\n"
    yield "/dev/stdin", b"u1 /dev/stdin\n"
    yield "a folder", f"u1 {work}\n".encode()
    yield "missing file", b"u1 /nonexistent/feats.ark:10\n"
    yield "offset past the end", f"u1 {good}:999999999999\n".encode()
    yield "offset inside the data", f"u1 {good}:10\n".encode()
    for spec in ("[0:99999999999]", "[5:1]", "[a:b]", "[0:1,0:1,0:1]", "[-3:2]", "[]", "[:]", "[1:2:3]"):
        yield f"range {spec}", f"u1 {good}:3{spec}\n".encode()
    yield "line of 2 MB", b"u1 " + b"x" * (2 << 20) + b"\n"
    yield "no newline, 2 MB", b"u" * (2 << 20)
    yield "one word", b"u1\n"
    yield "not UTF-8", b"u1 \xff\xfe.ark\n"
    yield "NUL bytes", b"u1 a\0b.ark:3\n"


def good_archive() -> bytes:
    """The archive scp inputs point at (`good.ark`: one 2 x 3 float matrix at offset 3)."""
    return fuzz.kaldi_matrix_entry("u1", 2, 3, np.arange(6, dtype=np.float32).tobytes())


# ----- Kaldi configs and models (their readers are in symnet.kaldi) -----------------------------------------


def configs(job: dict[str, Any]) -> Inputs:
    """Config lines with sizes and files no real config has."""
    base = "input-node name=input dim=3\n{line}\noutput-node name=output input=c\n"
    comp = "component name=c type={type} {options}\ncomponent-node name=c component=c input=input"
    cases = {
        "affine input-dim=2^31-1": ("AffineComponent", "input-dim=2147483647 output-dim=2"),
        "affine output-dim=10^9": ("AffineComponent", "input-dim=3 output-dim=1000000000"),
        "tdnn time-offsets=0,2^31-1": ("TdnnComponent", "input-dim=3 output-dim=2 time-offsets=0,2147483647"),
        "tdnn time-offsets=2^22": ("TdnnComponent", "input-dim=3 output-dim=2 time-offsets=0,4194304"),
        "fixed-affine matrix=/dev/zero": ("FixedAffineComponent", "matrix=/dev/zero"),
        "fixed-affine matrix=/etc/passwd": ("FixedAffineComponent", "matrix=/etc/passwd"),
        "fixed-affine matrix=folder": ("FixedAffineComponent", f"matrix={job['folder']}"),
        "relu dim=2^31-1": ("RectifiedLinearComponent", "dim=2147483647"),
        "stats pooling left-context=2^30": (
            "StatisticsPoolingComponent",
            "input-dim=4 input-period=1 left-context=1073741824 right-context=0",
        ),
    }
    for label, (kind, options) in cases.items():
        yield label, base.format(line=comp.format(type=kind, options=options)).encode()
    yield (
        "descriptor 10000 deep",
        (
            "input-node name=input dim=3\noutput-node name=output input="
            + "Sum(" * 10000
            + "input"
            + ", input)" * 10000
            + "\n"
        ).encode(),
    )
    yield "Offset of 2^22", b"input-node name=input dim=3\noutput-node name=output input=Offset(input, 4194304)\n"
    yield (
        "Offset of 2^63",
        b"input-node name=input dim=3\noutput-node name=output input=Offset(input, 9223372036854775808)\n",
    )
    yield "input dim 2^31-1", b"input-node name=input dim=2147483647\noutput-node name=output input=input\n"
    yield "a line of 10 MB", b"input-node name=input dim=3 " + b"x=y " * (10 << 18) + b"\n"


def kaldi_models(job: dict[str, Any]) -> Inputs:
    """Kaldi model files with ids, counts and dims no real model has."""
    from helpers.kaldi_models import AM_TEXT, NNET_TEXT
    from symnet.kaldi import format_model, parse_model

    yield (
        "phone id 999999999",
        AM_TEXT.replace("1 2 \n</ForPhones>", "1 999999999 \n</ForPhones>")
        .replace("2 0 1 \n</Triples>", "999999999 0 1 \n</Triples>")
        .encode(),
    )
    yield "<Triples> 2^31-1", AM_TEXT.replace("<Triples> 2 ", "<Triples> 2147483647 ").encode()
    yield "<NumComponents> 2^31-1", NNET_TEXT.replace("<NumComponents> 7 ", "<NumComponents> 2147483647 ").encode()
    yield "<Dim> 2^31-1", NNET_TEXT.replace("<Dim> 4 <ValueAvg>", "<Dim> 2147483647 <ValueAvg>", 1).encode()
    binary = format_model(parse_model(NNET_TEXT.encode()), binary=True, raw=True)
    at = binary.find(b"FM ")
    for rows, cols in ((2**31 - 1, 2**31 - 1), (-1, 3), (1 << 20, 1 << 20)):
        patched = (
            binary[: at + 3] + b"\x04" + struct.pack("<i", rows) + b"\x04" + struct.pack("<i", cols) + binary[at + 13 :]
        )
        yield f"binary matrix {rows}x{cols}", patched
    yield (
        "<Nnet3> nested 10000 deep",
        NNET_TEXT.replace("input=logsm", "input=" + "Sum(" * 10000 + "logsm" + ", logsm)" * 10000).encode(),
    )


def symnet_models(job: dict[str, Any]) -> Inputs:
    """symnet network files (`symnet.save`'s `.npz`) with a hostile header, structure or array."""
    import symnet
    from helpers import EXAMPLES
    from symnet.kaldi import read_network

    path = Path(job["folder"]) / "good-model.npz"
    symnet.save(path, read_network(str(EXAMPLES / "hmm-tdnn.config")))
    with zipfile.ZipFile(path) as z:
        members = {info.filename[:-4]: z.read(info) for info in z.infolist()}
    header = json.loads(bytes(np.load(path)["header"]).decode("utf-8"))
    array = next(n for n in members if n.startswith("arrays/"))
    yield "the good one", fuzz.npz_bytes(members)

    def json_header(value: Any) -> bytes:
        return fuzz.npy_bytes(np.frombuffer(json.dumps(value).encode("utf-8"), dtype=np.uint8))

    yield (
        "array header says 10^10 floats",
        fuzz.npz_bytes(
            {
                **members,
                array: fuzz.npy_bytes(
                    header={"descr": "<f4", "fortran_order": False, "shape": (100000, 100000)}, data=b"\0" * 16
                ),
            }
        ),
    )
    yield "array is a zip bomb", _bomb_beside({k: v for k, v in members.items() if k != array}, name=array)
    yield (
        "array is an object array",
        fuzz.npz_bytes({**members, array: fuzz.npy_bytes(np.array([1, None], dtype=object))}),
    )
    yield "array is text", fuzz.npz_bytes({**members, array: fuzz.npy_bytes(np.array("abc"))})
    deep = ("[" * 100000 + "]" * 100000).encode("utf-8")
    yield "header is deep JSON", fuzz.npz_bytes({**members, "header": fuzz.npy_bytes(np.frombuffer(deep, np.uint8))})
    yield "header arrays is a dict", fuzz.npz_bytes({**members, "header": json_header({**header, "arrays": {}})})

    def with_header(**changes: Any) -> bytes:
        return fuzz.npz_bytes({**members, "header": json_header({**header, **changes})})

    count = len(header["arrays"])
    yield "header array shape is text", with_header(arrays=[{"shape": "abc", "dtype": 5}] * count)
    yield "header array claims 2^40 values", with_header(arrays=[{"shape": [1 << 20, 1 << 20], "dtype": "<f4"}] * count)
    yield "header version is text", with_header(version="1")
    yield "header is a number array", fuzz.npz_bytes({**members, "header": fuzz.npy_bytes(np.zeros(3))})
    yield "header is not UTF-8", fuzz.npz_bytes({**members, "header": fuzz.npy_bytes(np.full(8, 255, np.uint8))})
    networks = json.dumps(header["networks"])  # format version 2: the layers of each network saved
    yield (
        "a layer of a class nobody registered",
        with_header(networks=json.loads(networks.replace('"Input"', '"os:system"', 1))),
    )
    yield (
        "a layer's dim is 2^31-1",
        with_header(networks=json.loads(networks.replace('"dim":', '"dim":2147483647,"x":', 1))),
    )
    yield "the tree names a network that is not there", with_header(tree={"network": 7})
    yield "the tree is nested 400 deep", with_header(tree=json.loads('{"list":[' * 400 + "null" + "]}" * 400))


def _costly(reader: str) -> Callable[[dict[str, Any]], Inputs]:
    """Issue 48's small files of large costs that `reader` reads (`helpers.costly.CASES`, at the issue's sizes)."""

    def inputs(job: dict[str, Any]) -> Inputs:
        from helpers import costly

        for label, (kind, make) in costly.CASES.items():
            if kind == reader or (reader == "egs" and kind == "egs_chunks"):
                yield label, make()

    return inputs


CRAFTED: dict[str, Callable[[dict[str, Any]], Inputs]] = {
    "npz": npz_archives,
    "checkpoint": checkpoints,
    "ark": archives,
    "scp": scp_files,
    "config": configs,
    "kaldi_model": kaldi_models,
    "symnet_model": symnet_models,
    **{f"costly_{reader}": _costly(reader) for reader in ("egs", "ark", "fst", "topology")},
}
