"""Files an scp line names: the line chooses the file and the offset, so an error names them but never quotes what
the file holds there (a token read at a chosen offset of another file could be a secret), and an egs scp keeps
few archives open (issue 48, items 3 and 10)."""

from __future__ import annotations

import io
import os
import struct
from pathlib import Path

import pytest

from symnet._src.kaldi_io import egs
from symnet._src.kaldi_io.egs import read_cegs, read_egs
from symnet._src.kaldi_io.scp import entry_rows, read_entry
from symnet._src.kaldi_io.tables import iter_table, read_posteriors
from symnet.errors import KaldiDataError

DATA = Path(__file__).resolve().parent.parent / "data" / "egs"
SECRET = "sk-live-7f3a9c"
#: Files a neighbour may know the place of but not the contents: an environment dump, a key file.
SECRETS = {
    "env.txt": f"HOME=/root\nAPI_KEY={SECRET}\nPATH=/bin\n",
    "key.bin": f"\0B{SECRET} FM \x04",
    "posterior-like.txt": f"[ {SECRET} 1.0 ]\n",
}


@pytest.fixture
def secrets(tmp_path: Path) -> Path:
    for name, text in SECRETS.items():
        (tmp_path / name).write_bytes(text.encode("latin-1"))
    return tmp_path


def offsets(folder: Path) -> list[tuple[str, int]]:
    """`(file, offset)` pairs an scp line might choose: the start, the secret's own start, one byte into it."""
    out = []
    for name, text in SECRETS.items():
        at = text.index(SECRET)
        out += [(str(folder / name), 0), (str(folder / name), at), (str(folder / name), at + 1)]
        if name == "env.txt":
            out.append((str(folder / name), text.index("API_KEY")))
    return out


def assert_hidden(error: BaseException, file: str, offset: int) -> None:
    text = str(error)
    for part in (SECRET, SECRET[3:], SECRET[:7], "API_KEY", "live", "7f3a"):
        assert part not in text, text
    assert file in text and str(offset) in text, text


def test_egs_and_cegs_scp_errors_name_the_file_and_offset_never_the_bytes(secrets: Path) -> None:
    """Before: `read_egs("scp:leak.scp")` printed "expected <Nnet3Eg>, got 'API_KEY=sk-live-...'"."""
    for file, offset in offsets(secrets):
        (secrets / "leak.scp").write_text(f"u1 {file}:{offset}\n")
        for read in (read_egs, read_cegs):
            with pytest.raises(KaldiDataError) as info:
                list(read(f"scp:{secrets / 'leak.scp'}"))
            assert_hidden(info.value, file, offset)
            assert "leak.scp:1" in str(info.value) and "not shown" in str(info.value)


def test_an_egs_scp_error_still_says_what_was_expected(secrets: Path) -> None:
    (secrets / "leak.scp").write_text(f"u1 {secrets / 'env.txt'}:0\n")
    with pytest.raises(KaldiDataError, match=r"env.txt: byte 0: example 'u1' .*expected <Nnet3Eg>"):
        list(read_egs(f"scp:{secrets / 'leak.scp'}"))
    # an archive the user names directly is the user's own: its errors may show the token at fault
    (secrets / "mine.ark").write_text("k1 HOME=/root\n")
    with pytest.raises(KaldiDataError, match="got 'HOME=/root'"):
        list(read_egs(secrets / "mine.ark"))


def test_scp_entries_of_tables_never_quote_the_bytes_they_point_at(secrets: Path) -> None:
    """Before: `symnet compute` with a feats scp printed "value 1 of 3, 'API_KEY=sk-live-...', is not a number"."""
    for file, offset in offsets(secrets):
        entry = f"{file}:{offset}"
        for read, posterior in ((read_entry, False), (entry_rows, False), (read_entry, True)):
            with pytest.raises(KaldiDataError) as info:
                read(entry, "feats.scp", "u0", **({"posterior": True} if posterior else {}))
            assert_hidden(info.value, file, offset)
    (secrets / "feats.scp").write_text(f"u0 {secrets / 'env.txt'}:{SECRETS['env.txt'].index('API_KEY')}\n")
    with pytest.raises(KaldiDataError) as info:
        list(iter_table(f"scp:{secrets / 'feats.scp'}", "features"))
    assert_hidden(info.value, str(secrets / "env.txt"), SECRETS["env.txt"].index("API_KEY"))
    (secrets / "post.scp").write_text(f"u0 {secrets / 'posterior-like.txt'}:0\n")
    with pytest.raises(KaldiDataError) as info:
        dict(read_posteriors(f"scp:{secrets / 'post.scp'}"))
    assert_hidden(info.value, str(secrets / "posterior-like.txt"), 0)


def test_compute_with_a_feats_scp_does_not_print_what_it_points_at(secrets: Path) -> None:
    from helpers.kaldi_models import NNET_TEXT
    from symnet._src.app.cli import main

    (secrets / "nnet.raw").write_text(NNET_TEXT)
    at = SECRETS["env.txt"].index("API_KEY")
    (secrets / "feats.scp").write_text(f"u0 {secrets / 'env.txt'}:{at}\n")
    out, err = io.StringIO(), io.StringIO()
    status = main(
        ["compute", str(secrets / "nnet.raw"), f"scp:{secrets / 'feats.scp'}", f"ark:{secrets / 'out.ark'}"],
        stdout=out,
        stderr=err,
    )
    assert status == 1
    assert_hidden(Exception(err.getvalue()), str(secrets / "env.txt"), at)


# ----- item 10 ----------------------------------------------------------------------------------------------


def test_read_cegs_refuses_a_supervision_weight_that_is_not_a_finite_number_at_least_0(tmp_path: Path) -> None:
    """Before: `read_cegs` gave a NaN weight that `chain_egs` then refused; now the reader names the example."""
    data = (DATA / "cegs_fm.ark").read_bytes()
    at = data.index(b"<Weight> ") + len(b"<Weight> ")
    assert data[at] == 4
    for bad in (float("nan"), float("inf"), -1.0):
        path = tmp_path / "cegs.ark"
        path.write_bytes(data[:at] + b"\x04" + struct.pack("<f", bad) + data[at + 5 :])
        with pytest.raises(KaldiDataError, match=r"example 'u1-0'.*supervision weight is (nan|inf|-1.0)"):
            list(read_cegs(path))
    text = (DATA / "cegs_fm.txt").read_text()
    assert "<Weight> 1 " in text
    (tmp_path / "cegs.txt").write_text(text.replace("<Weight> 1 ", "<Weight> nan ", 1))
    with pytest.raises(KaldiDataError, match="supervision weight is nan"):
        list(read_cegs(f"ark,t:{tmp_path / 'cegs.txt'}"))


def open_files() -> int:
    return len(os.listdir("/proc/self/fd"))


@pytest.mark.skipif(not os.path.isdir("/proc/self/fd"), reason="counts open files in /proc/self/fd")
def test_an_egs_scp_keeps_few_archives_open(tmp_path: Path) -> None:
    """Before: one open file (a memory map) per archive the scp named, so more archives than `ulimit -n` failed."""
    data = (DATA / "egs_fm.ark").read_bytes()
    keys = [eg.key for eg in read_egs(DATA / "egs_fm.ark")]
    first = data.index(keys[0].encode() + b" \0B") + len(keys[0]) + 1
    lines = []
    for i in range(60):
        (tmp_path / f"egs.{i}.ark").write_bytes(data)
        lines.append(f"{keys[0]}-{i} {tmp_path / f'egs.{i}.ark'}:{first}\n")
    lines.append(f"again {tmp_path / 'egs.0.ark'}:{first}\n")  # an archive closed since is opened again
    (tmp_path / "egs.scp").write_text("".join(lines))
    before = open_files()
    most = 0
    examples = []
    for eg in read_egs(f"scp:{tmp_path / 'egs.scp'}"):
        examples.append(eg)
        most = max(most, open_files() - before)
    assert len(examples) == len(lines) and examples[-1].key == "again"
    assert most <= getattr(egs, "MAX_OPEN_ARCHIVES", 8) + 2, most  # before: one per archive, 60
    assert open_files() - before <= 1
