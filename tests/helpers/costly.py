"""Small files that once cost much more than their size (issue 48, item 4), each made by a generator of its
size, and a child process that reads one under an address-space budget.

    data = costly.den_fst_with_empty_states(1_000_000)       # 12 MB
    (outcome,) = costly.read_in_child([("fst", path, 200 << 20)])

`CASES` are the issue's files at the issue's sizes (the fuzz campaign's crafted inputs); the tests use
smaller ones.
"""

from __future__ import annotations

import json
import os
import struct
import subprocess
import sys
from collections.abc import Callable

import numpy as np

FST_MAGIC = 2125659606


def _int32(value: int) -> bytes:
    return b"\x04" + struct.pack("<i", value)


def topology_of_open_entries(size: int) -> bytes:
    """`<TopologyEntry>` opened again and again, never closed: a lazy regular expression read it in
    quadratic time."""
    return b"<Topology> " + b"<TopologyEntry> " * (size // 16) + b"</Topology>\n"


def topology_with_pdf_class(pdf_class: int = 300_000_000) -> bytes:
    """One phone, one state of pdf-class `pdf_class`: gmm-init-mono's numbering made that many pdfs."""
    return (
        f"<Topology>\n<TopologyEntry>\n<ForPhones> 1 </ForPhones>\n"
        f"<State> 0 <PdfClass> {pdf_class} <Transition> 0 0.5 <Transition> 1 0.5 </State>\n"
        f"<State> 1 </State>\n</TopologyEntry>\n</Topology>\n"
    ).encode()


def _eg(key: bytes, ios: list[tuple[bytes, bytes, int, bytes]]) -> bytes:
    """A binary nnet3 example of NnetIos `(name, Index vector bytes, count, matrix bytes)`."""
    body = b"".join(
        b"<NnetIo> " + name + b" <I1V> " + _int32(n) + index + m + b"</NnetIo> " for name, index, n, m in ios
    )
    return key + b" \0B<Nnet3Eg> <NumIo> " + _int32(len(ios)) + body + b"</Nnet3Eg> "


def _float_matrix(rows: int, cols: int) -> bytes:
    return b"FM " + _int32(rows) + _int32(cols) + np.zeros(rows * cols, "<f4").tobytes()


def egs_index_slow_path(count: int) -> bytes:
    """An Index vector of `count` Indexes whose first is written in full (byte 127 and n, t, x): the reader
    then went through all of them one at a time in Python."""
    index = b"\x7f" + _int32(0) + _int32(0) + _int32(0) + b"\x01" * (count - 1)
    return _eg(b"k1", [(b"input", index, count, _float_matrix(count, 0))])


def egs_compressed(rows: int, cols: int, kind: str = "CM") -> bytes:
    """An example whose input is a `kind` compressed matrix of rows x cols (CM: one byte a value)."""
    size = {"CM": 8 * cols + rows * cols, "CM2": 2 * rows * cols, "CM3": rows * cols}[kind]
    matrix = kind.encode() + b" " + struct.pack("<ffii", -1.0, 2.0, rows, cols) + b"\x80" * size
    return _eg(b"k1", [(b"input", b"\x00" * rows, rows, matrix)])


def ark_compressed(rows: int, cols: int) -> bytes:
    """A Kaldi archive of one CM compressed matrix (features, as compress=true writes them)."""
    size = 8 * cols + rows * cols
    return b"u1 \0BCM " + struct.pack("<ffii", -1.0, 2.0, rows, cols) + b"\x80" * size


def egs_sparse(examples: int, rows: int, dim: int, elements: int = 0) -> bytes:
    """`examples` examples, each with an `output` of `rows` sparse rows of dim `dim` with `elements` elements:
    13 bytes a row, a `rows x dim` matrix once dense."""
    pairs = b"".join(_int32(c) + b"\x04" + struct.pack("<f", 1.0) for c in range(elements))
    sparse = b"SM " + _int32(rows) + (b"SV " + _int32(dim) + _int32(elements) + pairs) * rows
    index = b"\x00" + b"\x01" * (rows - 1)
    ios = [(b"input", index, rows, _float_matrix(rows, 1)), (b"output", index, rows, sparse)]
    return b"".join(_eg(b"k%d" % i, ios) for i in range(examples))


def den_fst_with_empty_states(states: int) -> bytes:
    """An OpenFst VectorFst of `states` states with no arcs (12 bytes each); state 0 is final."""
    head = struct.pack("<i", FST_MAGIC) + struct.pack("<i", 6) + b"vector" + struct.pack("<i", 8) + b"standard"
    head += struct.pack("<ii", 2, 0) + struct.pack("<Qqqq", 0, 0, states, 0)
    return head + struct.pack("<fq", 0.0, 0) * states


#: The issue's findings at the issue's sizes: label -> (reader, file bytes).
CASES: dict[str, tuple[str, Callable[[], bytes]]] = {
    "topology text of 256 KB": ("topology", lambda: topology_of_open_entries(256 << 10)),
    "<PdfClass> 300000000": ("topology", lambda: topology_with_pdf_class()),
    "egs Index vector on the slow path, 10 MB": ("egs", lambda: egs_index_slow_path(10_000_000)),
    "compressed matrix of 50 MB": ("egs", lambda: egs_compressed(50_000, 1000)),
    "compressed matrix of 50 MB in an archive": ("ark", lambda: ark_compressed(50_000, 1000)),
    "den.fst of 5M empty states, 60 MB": ("fst", lambda: den_fst_with_empty_states(5_000_000)),
    "sparse outputs of 1000 x 268435, 20 in 380 KB": ("egs_chunks", lambda: egs_sparse(20, 1000, 268435)),
    "1M sparse rows, 14 MB": ("egs", lambda: egs_sparse(1, 1_000_000, 3)),
}


def read(reader: str, path: str) -> None:
    """Read `path` with `reader` (topology, egs, egs_chunks, ark, fst), as symnet's commands do."""
    if reader == "topology":
        from symnet._src.chain.topology import Topology

        Topology.parse(open(path, encoding="utf-8", errors="replace").read(), name=path).monophone_pdfs()
    elif reader in ("egs", "egs_chunks"):
        from symnet._src.kaldi_io.egs import egs_chunks, read_egs

        examples = list(read_egs(path))
        if reader == "egs_chunks":
            egs_chunks(examples, soft="max")
    elif reader == "ark":
        from symnet._src.kaldi_io.tables import iter_table

        for _ in iter_table("ark:" + path, "archive"):
            pass
    elif reader == "fst":
        from symnet._src.kaldi_io.fst import read_fst

        read_fst(path)
    else:
        raise ValueError(f"no reader {reader!r}")


_CHILD = """
import gc, json, resource, sys, time
from helpers import costly
import symnet._src.kaldi_io.egs, symnet._src.chain.topology, symnet._src.kaldi_io.fst, symnet._src.kaldi_io.tables
from symnet.errors import SymnetError
out = []
for reader, path, budget in json.loads(sys.argv[1]):
    gc.collect()
    size = int(open("/proc/self/status").read().split("VmSize:")[1].split()[0]) << 10
    hard = resource.getrlimit(resource.RLIMIT_AS)[1]
    resource.setrlimit(resource.RLIMIT_AS, (size + budget, hard))
    start = time.process_time()
    try:
        costly.read(reader, path)
        outcome = "ok"
    except SymnetError as e:
        outcome = "symnet: " + str(e)
    except MemoryError:
        outcome = "MemoryError"
    seconds = time.process_time() - start
    resource.setrlimit(resource.RLIMIT_AS, (hard, hard))
    out.append({"outcome": outcome, "seconds": seconds})
print(json.dumps(out))
"""


def read_in_child(cases: list[tuple[str, str, int]], timeout: float = 120) -> list[dict]:
    """For each `(reader, path, budget)`, `{"outcome": "ok" | "symnet: message" | "MemoryError", "seconds": CPU
    seconds}` of `read(reader, path)` in one child process, whose address space may grow `budget` bytes during
    that read beyond what it had before it."""
    tests = os.path.dirname(os.path.dirname(os.path.abspath(__file__)))
    path = os.pathsep.join([tests, os.environ.get("PYTHONPATH", "")])
    env = {**os.environ, "PYTHONPATH": path, "JAX_PLATFORMS": "cpu", "OPENBLAS_NUM_THREADS": "1"}
    proc = subprocess.run(
        [sys.executable, "-c", _CHILD, json.dumps(cases)], capture_output=True, text=True, timeout=timeout, env=env
    )
    assert proc.returncode == 0, proc.stderr[-3000:]
    return json.loads(proc.stdout.strip().splitlines()[-1])
