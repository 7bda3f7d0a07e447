"""Streams: corpora `fit` reads as it trains. A stream whose one window holds it all trains exactly as the same
data in memory (an independent path: chunks cut and shuffled in memory); a stream of several windows resumes
mid-epoch bit for bit; Kaldi tables stream with the values `read_kaldi_data` reads; bad data mid-corpus is named
(file, utterance, offset) or skipped and counted, never changed silently."""

from __future__ import annotations

import warnings

import kaldiio
import numpy as np
import optax
import pytest

from helpers import nets
from helpers.fit_results import assert_same
from symnet import Input, Network
from symnet._src.train.minibatches import StreamBatches, window_plan
from symnet.errors import ShapeError
from symnet.train import (
    Chain,
    KaldiDataError,
    SkippedDataWarning,
    TrainingError,
    fit,
    read_kaldi_data,
    steps_per_epoch,
    stream_kaldi_data,
    stream_sequences,
)

DIM, CLASSES = 3, 4


def net(seed: int = 0) -> Network:
    return nets.tdnn(
        Input("input", DIM), hidden=8, out=CLASSES, second=(0,), names=("l1.w", "out.w"), scale=(None, 0.3),
        bias=("l1.b", False), log_softmax=True, seed=seed,
    )  # fmt: skip


def corpus(n: int = 30, seed: int = 0) -> dict[str, tuple[np.ndarray, np.ndarray]]:
    rng = np.random.default_rng(seed)
    out = {}
    for i, length in enumerate(rng.integers(5, 60, size=n)):
        out[f"utt-{i:03d}"] = (
            rng.standard_normal((int(length), DIM)).astype(np.float32),
            rng.integers(0, CLASSES, size=int(length)).astype(np.int32),
        )
    return out


def write(spec: str, table: dict) -> None:
    with kaldiio.WriteHelper(spec) as writer:
        for key, value in table.items():
            writer(key, value)


@pytest.fixture
def kaldi_dir(tmp_path, monkeypatch):
    """feats.ark + feats.scp and a binary ali.ark (in another order) of `corpus()`."""
    data = corpus()
    monkeypatch.chdir(tmp_path)
    write("ark,scp:feats.ark,feats.scp", {k: f for k, (f, _) in data.items()})
    write("ark:ali.ark", {k: data[k][1] for k in reversed(list(data))})
    return data


SETTINGS = {"epochs": 2, "batch_size": 4, "chunk": (10, 20), "progress": False, "seed": 3}


def test_a_stream_in_one_window_trains_as_the_same_data_in_memory():
    data = corpus()
    pairs = list(data.values())
    in_memory = fit(net(), ([f for f, _ in pairs], [t for _, t in pairs]), optax.adam(1e-2), **SETTINGS)
    for random_access in (False, True):
        stream = stream_sequences(pairs, window_frames=10**6)
        stream.random_access = random_access
        streamed = fit(net(), stream, optax.adam(1e-2), **SETTINGS)
        assert_same(streamed, in_memory)


def test_windows_hold_every_chunk_once_and_epochs_differ_in_order_not_in_count():
    stream = stream_sequences(list(corpus(80).values()), window_frames=300)
    windows = window_plan(stream.lengths, 300, seed=0, random_access=True)
    assert len(windows) > 3
    assert sorted(np.concatenate(windows).tolist()) == list(range(len(stream)))
    for w in windows[:-1]:
        assert stream.lengths[w].sum() >= 300

    batches = StreamBatches(Plan(), stream, seed=0)
    orders = []
    for epoch in (0, 1):
        seen = []
        for w in batches.window_order(epoch):
            for rows in batches.batches(epoch, int(w)):
                assert len(rows) <= 4 and len(set(batches.widths[int(w)][rows])) == 1
                seen += [tuple(r) for r in batches.chunks[int(w)][rows]]
        orders.append(seen)
        expected = sum(-(-int(n) // 20) for n in stream.lengths)  # chunks of 20 frames per sequence
        assert len(seen) == len(set(seen)) == expected
    assert orders[0] != orders[1] and sorted(orders[0]) == sorted(orders[1])
    assert steps_per_epoch(net(), stream, batch_size=4, chunk=(10, 20)) == batches.count()


class Plan:
    batch_size, chunk, left, right, widths = 4, 20, 1, 1, (10, 20)


def test_a_stream_resumed_mid_epoch_equals_an_uninterrupted_run(tmp_path):
    pairs = list(corpus(40).values())
    settings = {**SETTINGS, "checkpoint_every": 3}

    def stream():
        return stream_sequences(lambda: iter(pairs), window_frames=200)

    whole = fit(net(), stream(), optax.adam(1e-2), **settings, checkpoint=str(tmp_path / "a.ckpt"))
    steps = whole.history[-1].step
    part = tmp_path / "b.ckpt"
    fit(net(), stream(), optax.adam(1e-2), **settings, checkpoint=str(part), max_steps=steps // 2 + 1)
    fit(net(), stream(), optax.adam(1e-2), **settings, checkpoint=str(part), max_steps=steps - 4)
    resumed = fit(net(), stream(), optax.adam(1e-2), **settings, checkpoint=str(part))
    assert_same(resumed, whole)


def test_a_kaldi_stream_reads_what_read_kaldi_data_reads(kaldi_dir):
    stream = stream_kaldi_data("scp:feats.scp", "ark:ali.ark", window_frames=10**6)
    data = read_kaldi_data("scp:feats.scp", "ark:ali.ark")
    assert stream.keys == data.utt_ids
    assert stream.lengths.tolist() == data.lengths.tolist()
    for position, (features, targets) in stream.read([5, 0, 29]):
        np.testing.assert_array_equal(features, data.features[position])
        np.testing.assert_array_equal(targets, data.targets[position])
    assert_same(fit(net(), stream, optax.adam(1e-2), **SETTINGS), fit(net(), data, optax.adam(1e-2), **SETTINGS))


def test_compressed_features_and_text_alignments_stream(tmp_path, monkeypatch):
    monkeypatch.chdir(tmp_path)
    data = corpus(6)
    write("ark,scp:feats.ark,feats.scp", {k: f for k, (f, _) in data.items()})
    with kaldiio.WriteHelper("ark,scp:cfeats.ark,cfeats.scp", compression_method=2) as writer:
        for key, (f, _) in data.items():
            writer(key, f)
    write("ark,t:ali.txt", {k: t for k, (_, t) in data.items()})
    for feats in ("scp:feats.scp", "scp:cfeats.scp"):
        stream = stream_kaldi_data(feats, "ark,t:ali.txt")
        expected = read_kaldi_data(feats, "ark,t:ali.txt")
        assert stream.lengths.tolist() == expected.lengths.tolist()
        for position, (features, targets) in stream.read(range(len(stream))):
            np.testing.assert_array_equal(features, expected.features[position])
            np.testing.assert_array_equal(targets, expected.targets[position])


def damage(data: dict, key: str) -> int:
    """Overwrite utterance `key`'s matrix header in feats.ark with bytes that are not a Kaldi object; its offset."""
    entries = dict(line.split() for line in open("feats.scp"))
    offset = int(entries[key].rsplit(":", 1)[1])
    with open("feats.ark", "r+b") as f:
        f.seek(offset + 2)  # past "\0B": the type token
        f.write(b"XX ")
    return offset


def test_bad_data_mid_corpus_is_named_or_skipped_and_counted(kaldi_dir, tmp_path):
    stream = stream_kaldi_data("scp:feats.scp", "ark:ali.ark", window_frames=200)
    skipping = stream_kaldi_data("scp:feats.scp", "ark:ali.ark", window_frames=200, on_error="skip")
    offset = damage(kaldi_dir, "utt-017")  # after the streams were indexed: found while training
    checkpoint = tmp_path / "run.ckpt"
    with pytest.raises(KaldiDataError, match=rf"feats\.ark:{offset}.*utt-017|utt-017.*feats\.ark:{offset}"):
        fit(net(), stream, optax.adam(1e-2), **SETTINGS, checkpoint=str(checkpoint), checkpoint_every=2)
    assert checkpoint.exists()  # the steps before it are kept

    with pytest.warns(SkippedDataWarning, match="utt-017"):
        result = fit(net(), skipping, optax.adam(1e-2), **SETTINGS)
    assert [key for key, _ in skipping.skipped] == ["utt-017", "utt-017"]  # once per epoch
    frames = sum(len(f) for k, (f, _) in kaldi_dir.items() if k != "utt-017")
    assert result.history[0].step > 0
    np.testing.assert_allclose(
        steps_per_epoch(net(), skipping, batch_size=4, chunk=(10, 20)) * 2, result.history[-1].step, atol=2
    )
    assert frames < stream.num_frames
    with pytest.warns(SkippedDataWarning, match="utt-017.*unknown binary object type"):
        indexed = stream_kaldi_data("scp:feats.scp", "ark:ali.ark", on_error="skip")  # found while indexing
    assert "utt-017" not in indexed.keys and len(indexed) == 29


def test_with_a_mesh_a_skipped_sequence_keeps_its_place_at_weight_0(kaldi_dir):
    """With a mesh each process cuts only its devices' part of a minibatch, so a chunk of a bad sequence keeps
    its place (a weight-0 repeat) instead of leaving the minibatch: every planned step is taken, and the losses
    and parameters are those of the run without a mesh, which leaves the chunk out (a mean over the same frames)."""
    import jax

    streams = {
        name: stream_kaldi_data("scp:feats.scp", "ark:ali.ark", window_frames=200, on_error="skip")
        for name in ("one", "mesh")
    }
    damage(kaldi_dir, "utt-017")  # after the streams were indexed: found while training
    runs = {}
    for name, mesh in (("one", None), ("mesh", jax.make_mesh((1,), ("data",)))):
        skipping = streams[name]
        with pytest.warns(SkippedDataWarning, match="utt-017"):
            runs[name] = fit(net(), skipping, optax.adam(1e-2), **SETTINGS, mesh=mesh)
        assert [key for key, _ in skipping.skipped] == ["utt-017", "utt-017"]
    planned = steps_per_epoch(net(), skipping, batch_size=4, chunk=(10, 20), seed=SETTINGS["seed"]) * 2
    assert runs["mesh"].history[-1].step == planned
    one, mesh = runs["one"], runs["mesh"]
    np.testing.assert_allclose([h.train_loss for h in mesh.history], [h.train_loss for h in one.history], rtol=1e-5)
    for name, value in one.network.values.items():
        np.testing.assert_allclose(np.asarray(mesh.network.values[name]), np.asarray(value), rtol=1e-5, atol=1e-6)


def test_a_length_mismatch_and_a_missing_alignment_are_named(kaldi_dir):
    ali = {k: t for k, (_, t) in kaldi_dir.items() if k != "utt-004"}
    ali["utt-009"] = ali["utt-009"][:-2]
    write("ark:short.ark", ali)
    with pytest.raises(KaldiDataError, match="no entry for 1 of the 30 utterances.*utt-004"):
        stream_kaldi_data("scp:feats.scp", "ark:short.ark")
    stream = stream_kaldi_data("scp:feats.scp", "ark:short.ark", skip_missing=True)
    assert stream.missing == ("utt-004",) and "utt-004" not in stream.keys
    with pytest.raises(KaldiDataError, match="utt-009.*frames of features but"):
        list(stream.read(range(len(stream))))


def test_a_header_claiming_more_than_the_file_is_refused_at_indexing(kaldi_dir):
    entries = dict(line.split() for line in open("feats.scp"))
    offset = int(entries["utt-029"].rsplit(":", 1)[1])
    with open("feats.ark", "r+b") as f:
        f.seek(offset + 2 + 3 + 1)  # "\0B", "FM ", the size byte: the row count
        f.write(np.int32(10**8).tobytes())
    with pytest.raises(KaldiDataError, match="utt-029.*bytes"):
        stream_kaldi_data("scp:feats.scp", "ark:ali.ark")


def test_what_a_stream_cannot_be_is_refused_with_the_way_out(kaldi_dir):
    with pytest.raises(KaldiDataError, match="copy-feats"):
        stream_kaldi_data("ark:feats.ark", "ark:ali.ark")
    with pytest.raises(ShapeError, match="fresh iterator"):
        stream_sequences(iter(corpus(3).values()))
    with pytest.raises(ShapeError, match="sequence 'a': its features and targets must be arrays"):
        stream_sequences([("a", [[1.0], [1.0, 2.0]], [0, 1])])
    stream = stream_kaldi_data("scp:feats.scp", "ark:ali.ark")
    with pytest.raises(TrainingError, match="denominator graph given"):
        fit(net(), stream, optax.adam(1e-2), objective=Chain(), progress=False)
    with pytest.raises(KaldiDataError, match="on_error"):
        stream_kaldi_data("scp:feats.scp", "ark:ali.ark", on_error="ignore")


def test_a_source_that_changes_between_passes_is_an_error():
    calls = []

    def source():
        calls.append(1)
        base = [(k, f, t) for k, (f, t) in corpus(4).items()]
        return iter(base if len(calls) == 1 else base[::-1])

    stream = stream_sequences(source)
    with warnings.catch_warnings(), pytest.raises(KaldiDataError, match="same sequences each time"):
        list(stream.read(range(4)))


def test_kaldi_chunks_on_the_fly_are_the_splitters_each_once_an_epoch():
    """With num_frames, every minibatch holds chunks cut as nnet3-get-egs cuts them (tests/train/test_egs_split.py
    compares those with Kaldi's egs), each chunk of each utterance once an epoch, batched by size."""
    from symnet._src.train.egs_split import KaldiSplitter, cut_kaldi_chunk

    data = corpus(40)
    pairs = list(data.values())
    stream = stream_sequences(pairs, window_frames=300, num_frames="8,6,5", num_frames_overlap=1)

    class Plan:
        batch_size, chunk, left, right, widths, subsampling = 4, 8, 2, 1, (5, 6, 8), 1

    batches = StreamBatches(Plan(), stream, seed=5)
    splitter = KaldiSplitter("8,6,5", 1)
    expected = {}
    for p, (f, t) in enumerate(pairs):
        for c in splitter.chunks(len(f), np.random.default_rng([5, p, 1 << 21])):
            expected[(p, c.first_frame)] = cut_kaldi_chunk(f, t, c, left=2, right=1)
    seen = []
    with batches.epoch(0) as minibatches:
        for minibatch in minibatches:
            chunks = minibatch.chunks
            assert chunks.ends is None and chunks.chunk in (5, 6, 8) and minibatch.count <= 4
            seen.append(chunks)
    found = 0
    for chunks in seen:
        for i in range(len(chunks)):
            x, w = chunks.features[i], chunks.weights[i]
            matches = [
                key for key, (x2, _, w2, _) in expected.items()
                if len(w2) == chunks.chunk and np.array_equal(x, x2) and np.array_equal(w, w2)
            ]  # fmt: skip
            assert len(matches) == 1
            found += 1
    assert found == len(expected) == sum(batches.widths[w].size for w in range(len(batches.windows)))


def test_fit_on_kaldi_chunks_trains_at_their_sizes_and_resumes_bit_for_bit(tmp_path):
    pairs = list(corpus(40).values())

    def stream():
        return stream_sequences(pairs, window_frames=400, num_frames="10,8")

    settings = {"epochs": 2, "batch_size": 4, "progress": False, "seed": 1, "checkpoint_every": 3}
    whole = fit(net(), stream(), optax.adam(1e-2), **settings, checkpoint=str(tmp_path / "a.ckpt"))
    assert whole.options.widths == (8, 10)
    assert np.isfinite(whole.history[-1].train_loss) and whole.history[-1].train_loss < whole.history[0].train_loss
    part = tmp_path / "b.ckpt"
    fit(net(), stream(), optax.adam(1e-2), **settings, checkpoint=str(part), max_steps=whole.history[-1].step // 2)
    assert_same(fit(net(), stream(), optax.adam(1e-2), **settings, checkpoint=str(part)), whole)
    with pytest.raises(TrainingError, match="Kaldi's chunks of \\[10, 8\\]"):
        fit(net(), stream(), optax.adam(1e-2), chunk=20, progress=False)
