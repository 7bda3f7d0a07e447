"""Training data from Kaldi tables: scp/ark/ark,t through kaldiio, matched by utterance id,
clear errors for missing utterances, length mismatches and unreadable specifiers; one tiny epoch of `fit`."""

from __future__ import annotations

import math

import kaldiio
import numpy as np
import optax
import pytest

from helpers import nets
from symnet import Input, Network, Normal, SymnetError, Weight, Zeros
from symnet._src.kaldi_io.tables import read_table
from symnet.train import KaldiData, KaldiDataError, fit, read_kaldi_data

DIM, CLASSES = 3, 4
LENGTHS = {"utt-a": 12, "utt-b": 9, "utt-c": 15, "utt-d": 7}


def utterances(seed=0):
    rng = np.random.default_rng(seed)
    feats = {u: rng.standard_normal((n, DIM)).astype(np.float32) for u, n in LENGTHS.items()}
    ali = {u: rng.integers(0, CLASSES, size=n).astype(np.int32) for u, n in LENGTHS.items()}
    return feats, ali


def write(spec, table):
    with kaldiio.WriteHelper(spec) as writer:
        for key, value in table.items():
            writer(key, value)


@pytest.fixture
def archives(tmp_path, monkeypatch):
    """feats.ark + feats.scp, binary ali.ark, text ali.txt (alignments in another utterance order)."""
    feats, ali = utterances()
    monkeypatch.chdir(tmp_path)
    write("ark,scp:feats.ark,feats.scp", feats)
    shuffled = {u: ali[u] for u in ["utt-c", "utt-a", "utt-d", "utt-b"]}
    write("ark:ali.ark", shuffled)
    write("ark,t:ali.txt", shuffled)
    return tmp_path, feats, ali


@pytest.mark.parametrize(
    "feats_spec,ali_spec",
    [
        ("scp:feats.scp", "ark:ali.ark"),
        ("ark:feats.ark", "ark,t:ali.txt"),
        ("scp:{dir}/feats.scp", "ark:{dir}/ali.ark"),  # absolute paths
        ("ark:cat feats.ark |", "ark,t:ali.txt"),  # a pipe, as Kaldi's rspecifiers allow
        ("ark,s,cs:feats.ark", "ark,t,p:ali.txt"),  # Kaldi's reading options are accepted
    ],
)
def test_reads_features_and_alignments_matched_by_utterance(archives, feats_spec, ali_spec):
    folder, feats, ali = archives
    data = read_kaldi_data(feats_spec.format(dir=folder), ali_spec.format(dir=folder))
    assert isinstance(data, KaldiData) and len(data) == 4
    assert data.utt_ids == tuple(LENGTHS)  # in the order of the features' table
    np.testing.assert_array_equal(data.lengths, list(LENGTHS.values()))
    assert data.num_frames == sum(LENGTHS.values()) and data.feat_dim == DIM
    for u, f, t in zip(data.utt_ids, data.features, data.targets, strict=True):
        np.testing.assert_array_equal(f, feats[u])
        np.testing.assert_array_equal(t, ali[u])
        assert f.dtype == np.float32 and t.dtype == np.int32 and not f.flags.writeable
    assert data.labels is data.targets
    np.testing.assert_array_equal(data["utt-c"][1], ali["utt-c"])
    assert "4 utterances" in repr(data)


def test_read_table_is_an_ordered_mapping(archives):
    _, feats, _ = archives
    table = read_table("scp:feats.scp")
    assert list(table) == list(LENGTHS) and len(table) == 4 and "utt-b" in table and "nope" not in table
    np.testing.assert_array_equal(table["utt-b"], feats["utt-b"])


def tdnn():
    """Context (1, 1); both layers with a bias, stddevs 1 / sqrt(fan-in)."""
    return nets.tdnn(Input("input", DIM), hidden=8, out=CLASSES, second=(0,), scale=None, bias=True, log_softmax=True)


def test_fit_trains_one_epoch_on_kaldi_archives(archives):
    data = read_kaldi_data("scp:feats.scp", "ark:ali.ark")
    result = fit(tdnn(), data, optax.adam(1e-2), valid=data, epochs=1, batch_size=4, chunk=5, progress=False)
    (stats,) = result.history
    assert stats.step == math.ceil(sum(math.ceil(n / 5) for n in LENGTHS.values()) / 4)
    assert np.isfinite(stats.train_loss) and 0.0 <= stats.valid_accuracy <= 1.0
    # the same result as training on the arrays themselves
    feats, ali = utterances()
    direct = fit(
        tdnn(),
        ([feats[u] for u in LENGTHS], [ali[u] for u in LENGTHS]),
        optax.adam(1e-2),
        valid=data,
        epochs=1,
        batch_size=4,
        chunk=5,
        progress=False,
    )
    for name, value in direct.network.params.items():
        np.testing.assert_array_equal(np.asarray(value), np.asarray(result.network.params[name]))


def test_matrix_targets_for_the_quadratic_objective(archives):
    feats, _ = utterances()
    write("ark:targets.ark", {u: np.tanh(f[:, :2]) for u, f in feats.items()})
    data = read_kaldi_data("scp:feats.scp", "ark:targets.ark")
    assert data.targets[0].shape == (LENGTHS["utt-a"], 2) and data.targets[0].dtype == np.float32
    x = Input("input", DIM)
    net = Network(x @ Weight(Normal((DIM, 2), 0.3)) + Weight(Zeros(2)))
    result = fit(net, data, optax.adam(1e-2), objective="quadratic", epochs=1, batch_size=4, chunk=5, progress=False)
    assert np.isfinite(result.history[0].train_loss)


def test_missing_utterances_are_an_error_or_skipped(archives):
    _, _, ali = archives
    write("ark:partial.ark", {u: ali[u] for u in ["utt-a", "utt-c"]})
    with pytest.raises(KaldiDataError, match=r"no entry for 2 of the 4 utterances.*'utt-b', 'utt-d'.*skip_missing"):
        read_kaldi_data("scp:feats.scp", "ark:partial.ark")
    data = read_kaldi_data("scp:feats.scp", "ark:partial.ark", skip_missing=True)
    assert data.utt_ids == ("utt-a", "utt-c") and data.skipped == ("utt-b", "utt-d")
    write("ark:other.ark", {"x1": ali["utt-a"]})
    with pytest.raises(KaldiDataError, match="no utterance id in common"):
        read_kaldi_data("scp:feats.scp", "ark:other.ark", skip_missing=True)
    # targets for utterances without features are ignored (alignments of a larger set)
    write("ark:more.ark", {**ali, "extra": np.zeros(3, np.int32)})
    assert len(read_kaldi_data("scp:feats.scp", "ark:more.ark")) == 4


def test_length_mismatch_names_the_utterance_and_both_lengths(archives):
    _, _, ali = archives
    write("ark:short.ark", {**ali, "utt-b": ali["utt-b"][:-3]})
    with pytest.raises(
        KaldiDataError, match=r"utterance 'utt-b': 9 frames of features but 6 targets.*one label per frame"
    ):
        read_kaldi_data("scp:feats.scp", "ark:short.ark")


@pytest.mark.parametrize(
    "spec,message",
    [
        ("feats.scp", "not a Kaldi rspecifier"),
        ("foo:feats.scp", "not a Kaldi rspecifier"),
        ("ark,scp:feats.ark,feats.scp", "either an ark or an scp"),
        ("scp:", "no file name"),
        ("scp:missing.scp", "cannot read it: FileNotFoundError.*missing.scp"),
        ("ark:missing.ark", "cannot read it: FileNotFoundError"),
        ("ark:feats.scp", "cannot read it"),  # an scp read as an archive
        ("scp:ali.txt", "cannot read it"),  # an archive read as an scp
        ("ark:garbage.ark", "cannot read it"),
        (None, "expected a Kaldi rspecifier"),
    ],
)
def test_unreadable_specifiers_are_clear_errors(archives, spec, message):
    (archives[0] / "garbage.ark").write_bytes(b"utt-x \x00B\xfe\x01\x02")
    for feats, ali, what in [(spec, "ark:ali.ark", "features"), ("scp:feats.scp", spec, "targets")]:
        with pytest.raises(KaldiDataError, match=message) as e:
            read_kaldi_data(feats, ali)
        assert isinstance(e.value, SymnetError) and str(e.value).startswith(what)
        if spec is not None:
            assert repr(spec) in str(e.value)


def test_a_damaged_scp_entry_names_the_utterance(archives):
    folder = archives[0]
    first = (folder / "feats.scp").read_text().splitlines()[0]
    (folder / "bad.scp").write_text(f"{first}\nutt-b feats.ark:999999\n")
    with pytest.raises(KaldiDataError, match="utterance 'utt-b'"):
        read_kaldi_data("scp:bad.scp", "ark:ali.ark", skip_missing=True)


def test_bad_contents_are_clear_errors(archives):
    feats, ali = utterances()
    write("ark:empty.ark", {})
    with pytest.raises(KaldiDataError, match="'ark:empty.ark': no utterances"):
        read_kaldi_data("ark:empty.ark", "ark:ali.ark")
    with pytest.raises(KaldiDataError, match="'ark:empty.ark': no utterances"):
        read_kaldi_data("scp:feats.scp", "ark:empty.ark")
    write("ark:float_ali.ark", {u: a.astype(np.float32) for u, a in ali.items()})
    with pytest.raises(KaldiDataError, match="float32 vector, not integer labels"):
        read_kaldi_data("scp:feats.scp", "ark:float_ali.ark")
    write("ark:nan.ark", {**feats, "utt-c": np.where(np.arange(DIM) == 2, np.nan, feats["utt-c"])})
    with pytest.raises(KaldiDataError, match="utterance 'utt-c' has nan at frame 0, dim 2"):
        read_kaldi_data("ark:nan.ark", "ark:ali.ark")
    write("ark:dims.ark", {**feats, "utt-b": feats["utt-b"][:, :2]})
    with pytest.raises(KaldiDataError, match="utterance 'utt-b' has dim 2, but 'utt-a' has dim 3"):
        read_kaldi_data("ark:dims.ark", "ark:ali.ark")
    write("ark:vec.ark", {u: f[:, 0] for u, f in feats.items()})
    with pytest.raises(KaldiDataError, match=r"utterance 'utt-a' has shape \(12,\), not a matrix"):
        read_kaldi_data("ark:vec.ark", "ark:ali.ark")
    write("ark:neg.ark", {**ali, "utt-d": -ali["utt-d"] - 1})
    with pytest.raises(KaldiDataError, match="utterance 'utt-d' has label -"):
        read_kaldi_data("scp:feats.scp", "ark:neg.ark")
    dup = (archives[0] / "ali.ark").read_bytes()
    (archives[0] / "dup.ark").write_bytes(dup + dup)
    with pytest.raises(KaldiDataError, match="'utt-c' appears twice"):
        read_kaldi_data("scp:feats.scp", "ark:dup.ark")


def test_labels_out_of_the_networks_range_are_caught_by_fit(archives):
    _, _, ali = archives
    write("ark:big.ark", {**ali, "utt-a": np.full(LENGTHS["utt-a"], CLASSES + 1, np.int32)})
    data = read_kaldi_data("scp:feats.scp", "ark:big.ark")
    with pytest.raises(SymnetError, match=f"label {CLASSES + 1} is out of range"):
        fit(tdnn(), data, optax.adam(1e-2), epochs=1, batch_size=4, chunk=5, progress=False)


def test_subsampled_alignments_are_taken_with_the_factor(archives):
    """An alignment of ceil(T / 3) labels (a chain model's frame rate) is read with frame_subsampling_factor=3:
    each label held for its 3 frames, so fit's outputs at frames 0, 3, 6, ... train on labels 0, 1, 2, ..."""
    _, feats, _ = archives
    rng = np.random.default_rng(3)
    sub = {u: rng.integers(0, CLASSES, size=-(-n // 3)).astype(np.int32) for u, n in LENGTHS.items()}
    write("ark:sub.ark", sub)
    with pytest.raises(KaldiDataError, match="utt-a': 12 frames of features but 4 targets.*ceil"):
        read_kaldi_data("scp:feats.scp", "ark:sub.ark")
    data = read_kaldi_data("scp:feats.scp", "ark:sub.ark", frame_subsampling_factor=3)
    for key, targets in zip(data.utt_ids, data.targets):
        assert len(targets) == LENGTHS[key] and (targets[::3] == sub[key]).all()
        assert (targets == np.repeat(sub[key], 3)[: LENGTHS[key]]).all()
    # full-rate alignments are still taken as they are with the factor
    full = read_kaldi_data("scp:feats.scp", "ark:ali.ark", frame_subsampling_factor=3)
    plain = read_kaldi_data("scp:feats.scp", "ark:ali.ark")
    assert all((a == b).all() for a, b in zip(full.targets, plain.targets))
    with pytest.raises(KaldiDataError, match="frame_subsampling_factor must be an integer >= 1"):
        read_kaldi_data("scp:feats.scp", "ark:sub.ark", frame_subsampling_factor=0)
