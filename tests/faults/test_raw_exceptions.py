"""Numbers and names in files that Python's own parsers choke on give symnet errors, not ValueError,
OverflowError or MemoryError: Unicode digits (`'²'.isdigit()` is True, `int('²')` fails), NUL bytes in scp
entries, Index values beyond int32, pdf-classes a topology cannot have (issue 48, item 7); and an error quotes
at most a window of a huge line (item 10)."""

from __future__ import annotations

import io
import re
import struct
from pathlib import Path

import kaldiio
import numpy as np
import pytest

from helpers import EXAMPLES
from helpers.egs_bytes import binary_eg
from symnet._src.app.cli import main
from symnet._src.chain import Topology
from symnet._src.kaldi.text.xconfig import parse_xconfig
from symnet._src.kaldi_io.egs import read_egs
from symnet._src.kaldi_io.tables import iter_table, read_table
from symnet.errors import ChainError, ConfigError, KaldiDataError

EGS = Path(__file__).resolve().parent.parent / "data" / "egs"


def run(*args: str) -> tuple[int, str, str]:
    out, err = io.StringIO(), io.StringIO()
    status = main(list(args), stdout=out, stderr=err)
    return status, out.getvalue(), err.getvalue()


@pytest.mark.parametrize("field", [b"rows=", b"dim="])
def test_a_superscript_count_in_text_egs_is_a_kaldi_data_error(field: bytes, tmp_path: Path) -> None:
    """Text egs are read as latin-1, where byte 0xB2 is '²': `isdigit()` took it, `int()` raised ValueError."""
    data = (EGS / "egs_fm.txt").read_bytes()
    at = data.index(field) + len(field)
    end = data.index(b" ", at)
    (tmp_path / "egs.txt").write_bytes(data[:at] + b"\xb2" + data[end:])
    with pytest.raises(KaldiDataError, match=f"expected {field.decode()}N"):
        list(read_egs(f"ark,t:{tmp_path / 'egs.txt'}"))


def test_a_superscript_offset_or_a_nul_byte_in_an_egs_scp_is_a_kaldi_data_error(tmp_path: Path) -> None:
    scp = tmp_path / "egs.scp"
    scp.write_text(f"u1-0 {EGS / 'egs_fm.ark'}:5²\n")
    with pytest.raises(KaldiDataError, match=r"egs.scp:1: example 'u1-0': expected file:offset"):
        list(read_egs(f"scp:{scp}"))
    scp.write_text(f"u1-0 {EGS / 'egs_fm.ark'}\0x:5\n")
    with pytest.raises(KaldiDataError, match=r"egs.scp:1: example 'u1-0': the file name has a NUL byte"):
        list(read_egs(f"scp:{scp}"))


@pytest.mark.parametrize(
    "read", [lambda spec: dict(read_table(spec, "features")), lambda spec: list(iter_table(spec, "features"))]
)
def test_a_superscript_offset_or_a_nul_byte_in_a_features_scp_is_named(read, tmp_path: Path) -> None:
    kaldiio.save_ark(str(tmp_path / "f.ark"), {"u": np.zeros((3, 2), np.float32)}, scp=str(tmp_path / "f.scp"))
    line = (tmp_path / "f.scp").read_text().strip()
    (tmp_path / "bad.scp").write_text(line + "²\n")  # not an offset: the file 'f.ark:N²', which does not exist
    with pytest.raises(KaldiDataError, match="cannot open") as info:
        read(f"scp:{tmp_path / 'bad.scp'}")
    assert "ValueError" not in str(info.value)
    (tmp_path / "bad.scp").write_text(line.replace("f.ark", "f\0.ark") + "\n")
    with pytest.raises(KaldiDataError, match=r"bad.scp:1: utterance 'u': the entry has a NUL byte") as info:
        read(f"scp:{tmp_path / 'bad.scp'}")
    assert "ValueError" not in str(info.value)


def test_an_index_t_stepping_beyond_int32_is_a_kaldi_data_error(tmp_path: Path) -> None:
    full = b"\x7f" + b"".join(b"\x04" + struct.pack("<i", v) for v in (0, 2**31 - 1, 0))  # n, t, x in full
    path = tmp_path / "egs.ark"
    path.write_bytes(binary_eg(full + b"\x01", 2))  # then t + 1: 2^31
    with pytest.raises(KaldiDataError, match=r"example .k1., NnetIo 0 \(.input.\): index 1: t leaves the int32 range"):
        list(read_egs(path))
    path.write_bytes(binary_eg(full + b"\x00", 2))  # the control: t stays in int32
    assert next(iter(read_egs(path)))["input"].indexes.tolist() == [[0, 2**31 - 1, 0]] * 2


TOPOLOGY = (
    "<Topology> <TopologyEntry> <ForPhones> 1 2 </ForPhones> <State> 0 <PdfClass> {} "
    "<Transition> 0 0.5 <Transition> 1 0.5 </State> <State> 1 </State> </TopologyEntry> </Topology>"
)


@pytest.mark.parametrize("pdf_class", ["-1", "300000000", "1"])
def test_pdf_classes_must_run_from_zero_without_a_gap(pdf_class: str) -> None:
    """Kaldi's HmmTopology::Check. Before: -1 gave phones no pdf at all, 300000000 a 3.9 GB tuple."""
    with pytest.raises(
        ChainError, match=rf"topo:1: TopologyEntry 0: pdf-class {pdf_class}: an entry's pdf-classes are 0, 1"
    ):
        Topology.parse(TOPOLOGY.format(pdf_class), name="topo").monophone_pdfs()


def test_a_topology_number_in_other_digits_is_refused() -> None:
    """`int('٣')` is 3: a topology takes ASCII integers, as Kaldi's reader does."""
    with pytest.raises(ChainError, match="bad <PdfClass> value '٣'"):
        Topology.parse(TOPOLOGY.format("٣"), name="topo")
    assert Topology.parse(TOPOLOGY.format("0")).monophone_pdfs() == {1: (0,), 2: (1,)}


@pytest.mark.parametrize(
    ("options", "message"),
    [
        (["--frames", "²"], "frames must be a positive size or a symbolic dimension's name"),
        (["--frames", "10", "--batch", "²"], "batch must be a positive size"),
        (["--frames", str(10**23)], "frames=100000000000000000000000 is more than the 1048575"),
        (["--frames", "10", "--batch", str(10**23)], "is more than the 2147483647"),
    ],
)
def test_export_sizes_that_int_or_xla_choke_on_are_plan_errors(options, message, tmp_path: Path) -> None:
    status, _, err = run("export", *options, str(EXAMPLES / "hmm-tdnn.config"), str(tmp_path / "out"))
    assert status == 1 and message in err, err


def test_train_builtin_task_size_in_other_digits_is_refused(tmp_path: Path) -> None:
    status, _, err = run(
        "train", str(EXAMPLES / "hmm-tdnn.config"), "--data", "builtin:hmm:²", "--out", str(tmp_path / "m")
    )
    assert status == 1 and "unknown --data 'builtin:hmm:²'" in err, err


def test_an_error_quotes_at_most_a_window_of_a_huge_descriptor(tmp_path: Path) -> None:
    """Before: the whole 400 KB descriptor was in the message (and the CLI's line)."""
    huge = "Append(" + ", ".join(["nosuch"] * 60000) + ")"
    text = f"input name=input dim=3\nrelu-layer name=r dim=4 input={huge}\noutput-layer name=output dim=2\n"
    with pytest.raises(ConfigError) as info:
        parse_xconfig(text, file="x.xconfig")
    message = str(info.value)
    assert len(message) < 1500 and "no layer named 'nosuch'" in message and re.search(r"… \(\d+ characters\)", message)
    assert message.startswith("x.xconfig:2:") and "…" in message.splitlines()[1]
    (tmp_path / "x.xconfig").write_text(text)
    status, _, err = run("xconfig", str(tmp_path / "x.xconfig"))
    assert status == 1 and len(err) < 800 and "no layer named 'nosuch'" in err, err[:2000]
