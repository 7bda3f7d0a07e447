"""Kaldi archives and scp files read safely (`symnet._src.kaldi_io.ark`): values exactly as kaldiio reads them, sizes
checked before reading, no pickle, and an scp entry that is a command runs only with allow_pipes."""

from __future__ import annotations

import pickle

import kaldiio
import numpy as np
import pytest

from helpers import fuzz
from symnet._src.kaldi_io.ark import iter_ark
from symnet._src.kaldi_io.ark_stream import MAX_ENTRY_BYTES
from symnet._src.kaldi_io.scp import read_entry
from symnet._src.kaldi_io.tables import iter_table, read_posteriors, read_table
from symnet.train import KaldiDataError, read_kaldi_data

rng = np.random.default_rng(3)
TABLE = {
    "a": rng.standard_normal((5, 3)).astype(np.float32),
    "b": rng.standard_normal((2, 3)),
    "c": np.arange(4, dtype=np.int32),
    "v": rng.standard_normal(7).astype(np.float32),
}


@pytest.mark.parametrize("text", [False, True])
def test_values_are_kaldiios(tmp_path, text):
    kaldiio.save_ark(str(tmp_path / "t.ark"), TABLE, scp=str(tmp_path / "t.scp"), text=text)
    ours = dict(iter_table(f"ark:{tmp_path / 't.ark'}"))
    theirs = dict(kaldiio.load_ark(str(tmp_path / "t.ark")))
    assert ours.keys() == theirs.keys()
    for key in theirs:
        assert ours[key].dtype == theirs[key].dtype
        np.testing.assert_array_equal(ours[key], theirs[key])
    table = read_table(f"scp:{tmp_path / 't.scp'}")
    for key in theirs:
        np.testing.assert_array_equal(table[key], theirs[key])


@pytest.mark.parametrize("method", [1, 2, 3, 4, 5, 6, 7])
def test_compressed_matrices_are_kaldiios(tmp_path, method):
    feats = {"x": np.abs(rng.standard_normal((20, 4))).astype(np.float32) % 1, "y": np.zeros((3, 4), np.float32)}
    kaldiio.save_ark(str(tmp_path / "c.ark"), feats, compression_method=method)
    ours = dict(iter_table(f"ark:{tmp_path / 'c.ark'}"))
    for key, value in kaldiio.load_ark(str(tmp_path / "c.ark")):
        np.testing.assert_array_equal(ours[key], value)


def test_text_archives_as_kaldiio_reads_them(tmp_path):
    (tmp_path / "t.ark").write_text("u1 1 2 3\nu2 4 5\nu3 [ 1.5 2\n 3 4 ]\n\nu4  [ 1 2 ]\n")
    ours = dict(iter_table(f"ark:{tmp_path / 't.ark'}"))
    assert list(ours) == ["u1", "u2", "u3", "u4"] and ours["u3"].shape == (2, 2) and ours["u1"].dtype == np.int32


def test_a_pickle_entry_is_refused_and_never_unpickled(tmp_path, monkeypatch):
    """Before: kaldiio unpickled an entry that starts with PKL."""
    marker = tmp_path / "PWNED"

    class Touch:
        def __reduce__(self):
            return (open, (str(marker), "w"))

    (tmp_path / "evil.ark").write_bytes(b"u1 PKL" + pickle.dumps(Touch()))
    monkeypatch.setattr(pickle, "load", lambda *a, **k: pytest.fail("unpickled"))
    with pytest.raises(KaldiDataError, match="is a pickle, not a Kaldi matrix"):
        list(iter_table(f"ark:{tmp_path / 'evil.ark'}"))
    assert not marker.exists()


@pytest.mark.parametrize(
    "entry,message",
    [
        (
            fuzz.kaldi_matrix_entry("u1", 2**31 - 1, 2**31 - 1),
            r"a 2147483647 x 2147483647 matrix needs \d+ bytes, but "
            r"only 0 bytes are left",
        ),
        (fuzz.kaldi_matrix_entry("u1", 2**20, 2**20, kind=b"CM "), "compressed 1048576 x 1048576 matrix needs"),
        (fuzz.kaldi_matrix_entry("u1", -1, 3), "the row count is -1"),
        (fuzz.kaldi_int_vector_entry("u1", 2**31 - 1), "an int32 vector of 2147483647 elements needs"),
        (b"u1 \0BXY \x04", "unknown binary object type 'XY'"),
        (b"u1 [ 1 2 3\n", r"a text matrix '\[' without its '\]'"),
        (b"u1 [ a b ]\n", "a text vector: value 1 of 2, 'a', is not a number"),
        (b"k" * (1 << 17) + b" [ 1 ]\n", "an utterance id is longer than"),
        (b"u1 NPY\x01\xc8", "is a NumPy array"),
        (b"u1 ", "nothing after the utterance id"),
    ],
)
def test_hostile_entries_are_named_errors_before_anything_is_allocated(tmp_path, entry, message):
    (tmp_path / "x.ark").write_bytes(entry)
    with pytest.raises(KaldiDataError, match=message) as e:
        list(iter_table(f"ark:{tmp_path / 'x.ark'}", "features"))
    assert str(tmp_path / "x.ark") in str(e.value) and "AssertionError" not in str(e.value)


def test_a_stream_is_capped(tmp_path):
    (tmp_path / "x.ark").write_bytes(fuzz.kaldi_matrix_entry("u1", 2**30, 4))
    with open(tmp_path / "x.ark", "rb") as f, pytest.raises(KaldiDataError, match=f"more than {MAX_ENTRY_BYTES}"):
        list(iter_ark(_Stream(f), "stdin"))  # no size to compare with: the cap holds


class _Stream:
    def __init__(self, f):
        self.f = f

    def read(self, n=-1):
        return self.f.read(n)


# ----- commands in scp files ---------------------------------------------------------------------------


@pytest.fixture
def piped(tmp_path):
    """feats.ark, and an scp whose entry is a command that also creates a file."""
    kaldiio.save_ark(str(tmp_path / "feats.ark"), {"u0": TABLE["a"]})
    marker = tmp_path / "PWNED"
    # the command writes the matrix (the archive less its key), as `copy-feats ... - |` would
    (tmp_path / "feats.scp").write_text(f"u0 touch {marker}; tail -c +4 {tmp_path / 'feats.ark'} |\n")
    (tmp_path / "ali.txt").write_text("u0 0 1 2 1 0\n")
    return tmp_path, marker


def test_an_scp_command_is_refused_without_allow_pipes(piped):
    """Before: kaldiio ran `touch` from the scp file."""
    folder, marker = piped
    for read in (
        lambda: read_kaldi_data(f"scp:{folder}/feats.scp", f"ark,t:{folder}/ali.txt"),
        lambda: read_table(f"scp:{folder}/feats.scp")["u0"],
        lambda: list(iter_table(f"scp:{folder}/feats.scp")),
    ):
        with pytest.raises(
            KaldiDataError,
            match=r"feats.scp:1: utterance 'u0' is an entry that runs a command; "
            r"pass allow_pipes=True \(symnet's --allow-pipes\)",
        ):
            read()
    assert not marker.exists()


def test_an_scp_command_runs_with_allow_pipes(piped):
    folder, marker = piped
    data = read_kaldi_data(f"scp:{folder}/feats.scp", f"ark,t:{folder}/ali.txt", allow_pipes=True)
    np.testing.assert_array_equal(data.features[0], TABLE["a"])
    assert marker.exists()


def test_a_command_in_the_rspecifier_is_the_users_own_and_runs(piped):
    folder, _ = piped
    ((key, value),) = iter_table(f"ark:cat {folder}/feats.ark |")
    assert key == "u0" and np.array_equal(value, TABLE["a"])


@pytest.mark.parametrize("entry", ["/dev/zero", "/dev/zero:100", "{folder}", "{folder}/feats.ark:99999999"])
def test_scp_entries_that_name_devices_folders_or_offsets_past_the_end(piped, entry):
    folder, _ = piped
    with pytest.raises(KaldiDataError, match="not a regular file|past the end"):
        read_entry(entry.format(folder=folder), "x.scp", "u0")


POSTERIORS = {
    "u1": [[(6, 0.26), (7, 0.74)], [], [(3, 1.0)], [(2, 0.5), (9, 0.25), (2, 0.25)]],
    "u2": [[(0, 1.0)]],
}


def _binary_posterior(key, frames):
    import struct

    out = key.encode() + b" \0B" + struct.pack("<bi", 4, len(frames))
    for frame in frames:
        out += struct.pack("<bi", 4, len(frame))
        out += b"".join(struct.pack("<bibf", 4, pdf, 4, weight) for pdf, weight in frame)
    return out


def test_posteriors_binary_text_and_scp(tmp_path):
    binary = b"".join(_binary_posterior(key, frames) for key, frames in POSTERIORS.items())
    (tmp_path / "p.ark").write_bytes(binary)
    text = "".join(
        f"{key} " + "".join("[ " + "".join(f"{p} {w} " for p, w in f) + "] " for f in frames) + "\n"
        for key, frames in POSTERIORS.items()
    )
    (tmp_path / "p.txt").write_text(text)
    (tmp_path / "p.scp").write_text(f"u2 {tmp_path / 'p.ark'}:{binary.index(b'u2 ') + 3}\n")
    for spec in (f"ark:{tmp_path / 'p.ark'}", f"ark,t:{tmp_path / 'p.txt'}"):
        table = read_posteriors(spec)
        assert list(table) == ["u1", "u2"]
        u1 = table["u1"]
        assert u1.num_frames == 4 and u1.offsets.tolist() == [0, 2, 2, 3, 6]
        assert u1.pdfs.dtype == np.int32 and u1.pdfs.tolist() == [6, 7, 3, 2, 9, 2]
        assert u1.weights.dtype == np.float32
        np.testing.assert_array_equal(u1.weights, np.float32([0.26, 0.74, 1.0, 0.5, 0.25, 0.25]))
    assert read_posteriors(f"scp:{tmp_path / 'p.scp'}")["u2"].pdfs.tolist() == [0]


@pytest.mark.parametrize(
    ("data", "message"),
    [
        (b"u1 7 7 0\n", "alignments rather than posteriors"),
        (b"u1 [ 1 0.5 ] [ 2 ]\n", "a pdf and a weight"),
        (b"u1 [ 1 0.5 \n", "no closing ]"),
        (b"u1 \0B\x04\x02\x00\x00\x00\x04\x07\x00\x00\x00\x04\x07\x00\x00\x00", "an alignment, not"),  # [7, 7]
        (b"u1 \0B\x04\x03\x00\x00\x00\x04\x01\x00\x00\x00\x04", "utterance 'u1'"),  # cut short
        (b"u1 \0B\x04\xff\xff\xff\x7f", "more than"),  # an improbable number of frames
    ],
)
def test_bad_posteriors_are_errors(tmp_path, data, message):
    (tmp_path / "bad.ark").write_bytes(data)
    with pytest.raises(KaldiDataError, match=message):
        dict(read_posteriors(f"ark:{tmp_path / 'bad.ark'}"))


@pytest.mark.parametrize(
    "entry,message",
    [
        (b"u1 1 2 nan 4\n", "an int32 vector, such as an alignment\\): value 3 of 4, 'nan', is not an int32"),
        (b"u1 1 2 99999999999\n", "value 3 of 3, '99999999999', is not an int32"),
        (b"u1 [\n 1 2\n 3 ]\n", "a text matrix: row 2 has 1 values, row 1 has 2"),
        (b"u1 [\n 1 2\n 3 x ]\n", "a text matrix: value 4 of 4, 'x', is not a number"),
        (b"u1 [ 1 2 ]x", "must end its ']' with a newline"),
    ],
)
def test_text_entries_that_are_not_numbers_name_the_value(tmp_path, entry, message):
    """Before: 'could not convert string 'nan' to int32 at row 0, column 3' from NumPy, through kaldiio."""
    (tmp_path / "x.ark").write_bytes(entry)
    with pytest.raises(KaldiDataError, match=message):
        dict(iter_table(f"ark:{tmp_path / 'x.ark'}"))


def test_text_vectors_are_integers_only_when_every_value_is_one(tmp_path):
    """kaldiio takes a vector's type from its first value, so Kaldi's `[ 0 0.5 ]` fails there; here it is float32."""
    (tmp_path / "t.ark").write_text("a [ 0 0.5 -1e-05 ]\nb [ 1 2 3 ]\nc 4 5\nd 1.5 2\ne [\n 0 1\n 2 3 ]\n")
    ours = dict(iter_table(f"ark:{tmp_path / 't.ark'}"))
    np.testing.assert_array_equal(ours["a"], np.array([0, 0.5, -1e-5], np.float32))
    assert ours["a"].dtype == np.float32 and ours["b"].dtype == ours["c"].dtype == np.int32
    assert ours["d"].dtype == ours["e"].dtype == np.float32 and ours["e"].shape == (2, 2)


def test_an_empty_matrix_reads_by_offset_and_in_an_archive(tmp_path):
    """Kaldi writes a 0 x 0 matrix for an utterance shorter than a frame; the reader that fills arrays in place
    took it for a damaged entry."""
    import kaldiio

    from symnet._src.kaldi_io.scp import read_entry
    from symnet._src.kaldi_io.tables import read_table

    with kaldiio.WriteHelper(f"ark,scp:{tmp_path / 'e.ark'},{tmp_path / 'e.scp'}") as writer:
        writer("short", np.zeros((0, 0), np.float32))
        writer("long", np.ones((3, 2), np.float32))
    key, entry = open(tmp_path / "e.scp").readline().split()
    assert read_entry(entry, "e.scp", key).shape == (0, 0)
    table = read_table(f"ark:{tmp_path / 'e.ark'}")
    assert table["short"].shape == (0, 0) and table["long"].shape == (3, 2)
