"""Kaldi egs and chain egs (symnet._src.kaldi_io.egs) against Kaldi's own text rendering of the same archives.

tests/data/egs/make_fixtures.sh made every archive with Kaldi's programs (nnet3-get-egs, nnet3-chain-get-egs)
and Kaldi's text form of it (`ark,t`: what Kaldi prints of the same examples, compressed matrices decoded by
Kaldi): symnet's reading of the binary archive must print as Kaldi printed it.
"""

from __future__ import annotations

import struct
from pathlib import Path

import numpy as np
import pytest

from helpers.egs_bytes import binary_eg
from symnet._src.kaldi_io.egs import ChainExample, NnetExample, decode_compressed, egs_chunks, read_cegs, read_egs
from symnet._src.kaldi_io.egs_sparse import MAX_DENSE_VALUES
from symnet._src.kaldi_io.numbers import format_real
from symnet.errors import KaldiDataError

DATA = Path(__file__).resolve().parent.parent / "data" / "egs"
EGS = {"egs_fm": "FM", "egs_cm": "CM", "egs_cm2": "CM2", "egs_cm3": "CM3", "egs_ivec": "FM"}
CEGS = {"cegs_fm": "FM", "cegs_cm": "CM"}


def printed(matrix: np.ndarray) -> np.ndarray:
    """`matrix` as Kaldi's text stream prints it (7 significant digits), read back as float32."""
    return np.array([np.float32(float(format_real(v))) for v in matrix.ravel()], np.float32).reshape(matrix.shape)


def same_io(binary, text) -> None:
    assert binary.name == text.name
    np.testing.assert_array_equal(binary.indexes, text.indexes)
    assert binary.matrix.shape == text.matrix.shape
    np.testing.assert_array_equal(printed(binary.matrix), text.matrix)


@pytest.mark.parametrize("name", sorted(EGS))
def test_egs_binary_reads_as_kaldi_prints_it(name: str) -> None:
    binary = list(read_egs(DATA / f"{name}.ark"))
    text = list(read_egs(f"ark,t:{DATA / name}.txt"))
    assert [e.key for e in binary] == [e.key for e in text] and len(binary) >= 4
    for b, t in zip(binary, text, strict=True):
        assert isinstance(b, NnetExample)
        assert [io.name for io in b.io] == [io.name for io in t.io]
        for bio, tio in zip(b.io, t.io, strict=True):
            same_io(bio, tio)
        assert b["input"].storage == EGS[name]
        assert b["output"].storage == "SM" and t["output"].storage == "text-sparse"
        # the sparse targets as stored: pairs of Kaldi's posteriors
        np.testing.assert_array_equal(b["output"].sparse.offsets, t["output"].sparse.offsets)
        np.testing.assert_array_equal(b["output"].sparse.cols, t["output"].sparse.cols)


def test_egs_content_is_the_features_kaldi_was_given() -> None:
    """Uncompressed egs hold the fixture's features, rows clamped at the utterance's edges (Kaldi's padding)."""
    text = (DATA / "feats.txt").read_text().split("]")
    u1 = np.array([[float(v) for v in row.split()] for row in text[0].split("[")[1].strip().splitlines()], np.float32)
    eg = next(iter(read_egs(DATA / "egs_fm.ark")))
    assert eg.key == "u1-0"
    np.testing.assert_array_equal(eg["input"].indexes[:, 1], np.arange(-2, 9))
    np.testing.assert_array_equal(eg["input"].matrix, u1[np.clip(np.arange(-2, 9), 0, len(u1) - 1)])
    np.testing.assert_array_equal(eg["output"].indexes[:, 1], np.arange(8))
    # post.txt: frame t has pdf t % 3, frame 4 splits 0.75 / 0.25
    assert eg["output"].matrix[4].tolist() == [0.0, 0.75, 0.25]
    assert eg["output"].matrix[0].tolist() == [1.0, 0.0, 0.0]


@pytest.mark.parametrize("name", sorted(CEGS))
def test_cegs_binary_reads_as_kaldi_prints_it(name: str) -> None:
    binary = list(read_cegs(DATA / f"{name}.ark"))
    text = list(read_cegs(DATA / f"{name}.txt"))
    assert [e.key for e in binary] == [e.key for e in text] and len(binary) >= 4
    for b, t in zip(binary, text, strict=True):
        assert isinstance(b, ChainExample)
        for bio, tio in zip(b.inputs, t.inputs, strict=True):
            same_io(bio, tio)
        assert b.inputs[0].storage == CEGS[name]
        (bo,), (to,) = b.outputs, t.outputs
        assert bo.name == to.name == "output"
        np.testing.assert_array_equal(bo.indexes[:, 1], [0, 3, 6])  # frame-subsampling-factor 3
        np.testing.assert_array_equal(bo.indexes, to.indexes)
        np.testing.assert_array_equal(bo.deriv_weights, to.deriv_weights)
        bs, ts = bo.supervision, to.supervision
        assert (
            (bs.weight, bs.num_sequences, bs.frames_per_sequence, bs.label_dim, bs.e2e)
            == (ts.weight, ts.num_sequences, ts.frames_per_sequence, ts.label_dim, ts.e2e)
            == (1.0, 1, 3, 4, False)
        )
        bf, tf = bs.fst, ts.fst
        assert (bf.num_states, bf.start) == (tf.num_states, tf.start)
        for field in ("src", "dst", "ilabel", "olabel", "final"):
            np.testing.assert_array_equal(getattr(bf, field), getattr(tf, field))
        np.testing.assert_array_equal(printed(bf.weight), tf.weight)
        assert bf.ilabel.dtype == np.int32 and bf.weight.dtype == np.float32


def test_cegs_supervision_is_an_acceptor_of_frames_per_sequence_labels() -> None:
    """Every path of a supervision FST has frames_per_sequence arcs, labels pdf + 1 (chain-get-supervision's
    output on the alignments of make_fixtures.sh: phones 1..4 are pdfs 0..3, labels 1..4)."""
    for eg in read_cegs(DATA / "cegs_fm.ark"):
        sup = eg.outputs[0].supervision
        fst = sup.fst
        depth = np.full(fst.num_states, -1)
        depth[fst.start] = 0
        for s, d in sorted(zip(fst.src.tolist(), fst.dst.tolist(), strict=True)):  # states are topologically sorted
            assert depth[s] >= 0 and depth[d] in (-1, depth[s] + 1)
            depth[d] = depth[s] + 1
        assert set(depth[np.isfinite(fst.final)]) == {sup.frames_per_sequence}
        assert 1 <= fst.ilabel.min() and fst.ilabel.max() <= 4


def test_compressed_decoding_matches_kaldis_formulas_independently() -> None:
    """CM2 and CM3 against the formulas of compressed-matrix.cc written out in float64 (they agree to float32)."""
    rng = np.random.default_rng(0)
    q16 = rng.integers(0, 65536, (3, 4), dtype=np.uint16)
    got = decode_compressed("CM2", -1.5, 3.25, 3, 4, q16.astype("<u2").tobytes())
    np.testing.assert_allclose(got, -1.5 + q16 * (3.25 / 65535), rtol=0, atol=1e-6)
    q8 = rng.integers(0, 256, (3, 4), dtype=np.uint8)
    got = decode_compressed("CM3", 0.5, 2.0, 3, 4, q8.tobytes())
    np.testing.assert_allclose(got, 0.5 + q8 * (2.0 / 255), rtol=0, atol=1e-6)
    # CM: per column percentiles p0 <= p25 <= p75 <= p100 and piecewise-linear bytes, stored column-major
    heads = np.array([[0, 20000, 40000, 65535], [100, 100, 200, 300]], np.uint16)
    col0 = np.array([0, 64, 128, 192, 255], np.uint8)
    col1 = np.array([1, 2, 3, 200, 250], np.uint8)
    got = decode_compressed("CM", -2.0, 4.0, 5, 2, heads.astype("<u2").tobytes() + col0.tobytes() + col1.tobytes())
    p = -2.0 + 4.0 / 65535 * heads.astype(np.float64)
    for c, col in enumerate((col0, col1)):
        p0, p25, p75, p100 = p[c]
        want = [
            p0 + (p25 - p0) * v / 64
            if v <= 64
            else p25 + (p75 - p25) * (v - 64) / 128
            if v <= 192
            else p75 + (p100 - p75) * (v - 192) / 63
            for v in col.astype(np.float64)
        ]
        np.testing.assert_allclose(got[:, c], want, rtol=0, atol=2e-6)


def test_index_vector_general_form(tmp_path: Path) -> None:
    """Kaldi's WriteIndexVector: a byte -124..124 is t's step (n and x kept), 127 is followed by n, t, x (merged
    examples, where n changes)."""
    full = lambda n, t, x: b"\x7f" + b"".join(b"\x04" + struct.pack("<i", v) for v in (n, t, x))  # noqa: E731
    data = struct.pack("b", -3) + b"\x01" + full(1, -3, 0) + b"\x01" + full(2, 500, 7) + struct.pack("b", -100)
    path = tmp_path / "egs.ark"
    path.write_bytes(binary_eg(data, 6, 6))
    (eg,) = read_egs(path)
    assert eg["input"].indexes.tolist() == [[0, -3, 0], [0, -2, 0], [1, -3, 0], [1, -2, 0], [2, 500, 7], [2, 400, 7]]


def test_scp_with_offsets(tmp_path: Path) -> None:
    ark = DATA / "cegs_cm.ark"
    data = ark.read_bytes()
    keys = [e.key for e in read_cegs(ark)]
    offsets = [data.index(k.encode() + b" \0B") + len(k) + 1 for k in keys]
    scp = tmp_path / "cegs.scp"
    scp.write_text("".join(f"{k} {ark}:{o}\n" for k, o in reversed(list(zip(keys, offsets, strict=True)))))
    via_scp = list(read_cegs(f"scp:{scp}"))
    assert [e.key for e in via_scp] == keys[::-1]
    np.testing.assert_array_equal(via_scp[-1].inputs[0].matrix, next(iter(read_cegs(ark))).inputs[0].matrix)
    scp.write_text(f"{keys[0]} {ark}:{len(data) + 5}\n")
    with pytest.raises(KaldiDataError, match="past the end"):
        list(read_cegs(f"scp:{scp}"))
    scp.write_text(f"{keys[0]} cat {ark} |\n")
    with pytest.raises(KaldiDataError, match="file:offset"):
        list(read_cegs(f"scp:{scp}"))


# ---------------------------------------------------------------------------------------------- damaged input


def _read_all(path: Path, chain: bool) -> None:
    list(read_cegs(path) if chain else read_egs(path))


@pytest.mark.parametrize(
    "name", ["egs_cm.ark", "egs_fm.ark", "egs_cm2.ark", "cegs_fm.ark", "cegs_cm.txt", "egs_fm.txt"]
)
def test_truncated_archives_are_kaldi_data_errors(tmp_path: Path, name: str) -> None:
    """Cut after every byte of the first example (and a few later): a KaldiDataError naming the archive, never
    another exception; a cut between examples reads the examples before it."""
    data = (DATA / name).read_bytes()
    chain = name.startswith("cegs")
    second = data.index(b"u1-", 4) if b"u1-" in data[4:] else len(data)
    path = tmp_path / name
    cuts = list(range(1, min(second, 700))) + list(range(second, len(data), 97))
    for cut in cuts:
        path.write_bytes(data[:cut])
        try:
            _read_all(path, chain)
        except KaldiDataError as e:
            assert str(path) in str(e)
            continue


def test_corrupted_bytes_are_kaldi_data_errors(tmp_path: Path) -> None:
    rng = np.random.default_rng(1)
    for name in ("egs_cm.ark", "egs_cm2.ark", "egs_cm3.ark", "cegs_cm.ark", "cegs_fm.ark"):
        data = bytearray((DATA / name).read_bytes())
        path = tmp_path / name
        for _ in range(150):
            bad = bytearray(data)
            for pos in rng.integers(0, len(bad), rng.integers(1, 4)):
                bad[pos] = int(rng.integers(0, 256))
            path.write_bytes(bytes(bad))
            try:
                _read_all(path, name.startswith("cegs"))
            except KaldiDataError:
                pass


def _patched(tmp_path: Path, name: str, old: bytes, new: bytes) -> Path:
    data = (DATA / name).read_bytes()
    assert old in data
    path = tmp_path / name
    path.write_bytes(data.replace(old, new, 1))
    return path


def test_crafted_sizes_are_refused_before_allocating(tmp_path: Path) -> None:
    huge = struct.pack("<i", 2**31 - 1)
    cases = [
        ("egs_fm.ark", b"<NumIo> \x04" + struct.pack("<i", 2), b"<NumIo> \x04" + huge, "inputs and outputs is"),
        ("egs_fm.ark", b"<I1V> \x04" + struct.pack("<i", 11), b"<I1V> \x04" + huge, "number of indexes"),
        ("egs_fm.ark", b"FM \x04" + struct.pack("<i", 11), b"FM \x04" + huge, "needs"),
        ("egs_fm.ark", b"SM \x04" + struct.pack("<i", 8), b"SM \x04" + huge, "rows of a sparse matrix"),
        (
            "egs_fm.ark",
            b"SV \x04" + struct.pack("<i", 3) + b"\x04" + struct.pack("<i", 1),
            b"SV \x04" + huge + b"\x04" + struct.pack("<i", 2**30),
            "claims 1073741824 elements",
        ),
        ("egs_cm.ark", b"CM ", b"CM4", "expected a matrix"),
        ("cegs_fm.ark", b"compact_acceptor", b"compact_acceptoR", "type"),
        ("cegs_fm.ark", b"<DW2>", b"<DW>\x20", "<DW>"),
    ]
    for name, old, new, message in cases:
        path = _patched(tmp_path, name, old, new)
        with pytest.raises(KaldiDataError, match=message) as info:
            _read_all(path, name.startswith("cegs"))
        assert str(path) in str(info.value) and "example 'u1-0'" in str(info.value)
    # an FST header of 2^31 - 1 states (version, flags, properties and start come after the arc type)
    data = (DATA / "cegs_fm.ark").read_bytes()
    at = data.index(b"standard") + 8 + 4 + 4 + 8 + 8
    path = tmp_path / "states.ark"
    path.write_bytes(data[:at] + struct.pack("<q", 2**31 - 1) + data[at + 8 :])
    with pytest.raises(KaldiDataError, match="FST header of 2147483647 states"):
        list(read_cegs(path))
    # a compressed matrix past the dense limit, in a file that has its bytes
    side = int(np.sqrt(MAX_DENSE_VALUES)) + 1
    header = b"CM3 " + struct.pack("<ffii", 0.0, 1.0, side, side)
    path = tmp_path / "big.ark"
    path.write_bytes(binary_eg(b"\x00", 1, 1).replace(b"FM \x04", header + b"\x00" * 0 + b"FM \x04"))
    with pytest.raises(KaldiDataError):
        list(read_egs(path))


def test_refused_inputs(tmp_path: Path) -> None:
    with pytest.raises(KaldiDataError, match="files only"):
        list(read_egs("ark:-"))
    with pytest.raises(KaldiDataError, match="files only"):
        list(read_egs("ark:cat x |"))
    with pytest.raises(KaldiDataError, match="not a regular file"):
        list(read_egs(tmp_path))
    with pytest.raises(KaldiDataError, match="cannot read"):
        list(read_egs(tmp_path / "missing.ark"))
    (tmp_path / "empty.ark").write_bytes(b"")
    assert list(read_egs(tmp_path / "empty.ark")) == []
    with pytest.raises(KaldiDataError, match="expected <Nnet3ChainEg>"):
        list(read_cegs(DATA / "egs_fm.ark"))


# ---------------------------------------------------------------------------------------------- training


def test_egs_chunks_and_refusals() -> None:
    egs = list(read_egs(DATA / "egs_fm.ark"))
    with pytest.raises(KaldiDataError, match="soft targets"):
        egs_chunks(egs)
    chunks = egs_chunks(egs, soft="max")
    assert chunks.features.shape == (5, 11, 5) and chunks.targets.shape == (5, 8)
    assert (chunks.left, chunks.right) == (2, 1)
    assert chunks.targets[0].tolist() == [0, 1, 2, 0, 1, 2, 0, 1]  # frame 4: 0.75 on pdf 1
    np.testing.assert_array_equal(chunks.features[0], egs[0]["input"].matrix)
    with pytest.raises(KaldiDataError, match="ivector"):
        egs_chunks(list(read_egs(DATA / "egs_ivec.ark")), soft="max")


def test_fit_trains_on_kaldi_egs() -> None:
    import optax

    from symnet import Append, Input, LogSoftmax, Network, Normal, Offset, ReLU, Weight
    from symnet._src.train.examples import Chunks
    from symnet.train import fit

    chunks = Chunks(*egs_chunks(list(read_egs(DATA / "egs_cm.ark")), soft="max"))
    x = Input("input", 5)
    h = ReLU(Append(Offset(x, -2), Offset(x, -1), x, Offset(x, 1)) @ Weight(Normal((20, 16), 0.3)))
    net = Network(LogSoftmax(h @ Weight(Normal((16, 3), 0.3))))
    assert net.context() == (2, 1)
    result = fit(net, chunks, optax.adam(5e-2), epochs=80, batch_size=5, chunk=8, progress=False)
    losses = [e.train_loss for e in result.history]
    assert losses[-1] < 0.6 * losses[0]  # 1.58 -> 0.84: soft frames (0.75/0.25) keep it from 0
