"""Kaldi's egs and chain egs streamed into `fit` (symnet._src.train.egs_streams): a stream whose one window holds
every example trains bit for bit as the same egs in memory (`egs_chunks`, `chain_egs`); mixed chunk widths make
minibatches of one width each; a run stopped mid-epoch resumes bit for bit; damage is named (archive and byte) or
skipped and counted; the examples held at once are bounded by the window, not by the archive."""

from __future__ import annotations

import warnings
import weakref
from pathlib import Path

import numpy as np
import optax
import pytest

from helpers import nets
from helpers.egs_bytes import write_egs
from helpers.fit_results import assert_same
from symnet import Input, Network
from symnet._src.kaldi_io.egs import egs_chunks, read_cegs, read_egs
from symnet._src.train.minibatches import StreamBatches
from symnet.chain import read_fst
from symnet.kaldi import read_model
from symnet.train import (
    Chunks,
    KaldiDataError,
    SkippedDataWarning,
    chain_egs,
    fit,
    steps_per_epoch,
    stream_cegs,
    stream_egs,
)

DIM, PDFS = 4, 5
RECIPE = Path(__file__).resolve().parents[1] / "data" / "chain-recipe" / "chain-topo"


def net(seed: int = 0) -> Network:
    return nets.tdnn(
        Input("input", DIM), hidden=8, out=PDFS, names=("l1.w", "out.w"), scale=(None, 0.3), log_softmax=True,
        seed=seed,
    )  # fmt: skip


SETTINGS = {"epochs": 2, "batch_size": 4, "progress": False, "seed": 3}


@pytest.mark.parametrize("compress", [False, True])
def test_streamed_egs_train_as_the_same_egs_in_memory(tmp_path, compress):
    path = tmp_path / "egs.1.ark"
    write_egs(path, [8] * 22, dim=DIM, num_pdfs=PDFS, compress=compress)
    in_memory = fit(net(), Chunks(*egs_chunks(list(read_egs(path)))), optax.adam(1e-2), **SETTINGS)
    streamed = fit(net(), stream_egs(f"ark:{path}", buffer_size=1000), optax.adam(1e-2), **SETTINGS)
    assert_same(streamed, in_memory)


def test_sources_are_archives_globs_scps_and_lists(tmp_path):
    for i in (1, 2, 10):
        write_egs(tmp_path / f"egs.{i}.ark", [8] * 3, seed=i)
    keys = [f"{i}:{eg.key}" for i in (1, 2, 10) for eg in read_egs(tmp_path / f"egs.{i}.ark")]
    stream = stream_egs(str(tmp_path / "egs.*.ark"))
    assert [p.file for p in stream.places] == [str(tmp_path / f"egs.{i}.ark") for i in (1, 2, 10) for _ in range(3)]
    assert len(stream) == len(keys) == 9
    listed = stream_egs([f"ark:{tmp_path / 'egs.2.ark'}", tmp_path / "egs.1.ark"])
    assert [p.file for p in listed.places][:3] == [str(tmp_path / "egs.2.ark")] * 3
    scp = tmp_path / "egs.scp"
    scp.write_text("".join(f"{p.key} {p.file}:{p.offset}\n" for p in reversed(stream.places)))
    from_scp = stream_egs(f"scp:{scp}")
    assert from_scp.places == list(reversed(stream.places))
    with pytest.raises(KaldiDataError, match="no file matches"):
        stream_egs(str(tmp_path / "cegs.*.ark"))


def test_mixed_chunk_widths_make_minibatches_of_one_width(tmp_path):
    sizes = [8, 6, 4] * 12 + [8, 8]
    write_egs(tmp_path / "egs.ark", sizes)
    stream = stream_egs(str(tmp_path / "egs.ark"), buffer_size=10)
    assert stream.kaldi_sizes == (8, 6, 4)

    class Plan:
        batch_size, chunk, left, right, widths, subsampling = 4, 8, 2, 2, (4, 6, 8), 1

    batches = StreamBatches(Plan(), stream, seed=SETTINGS["seed"])
    assert len(batches.windows) > 2
    seen = []
    for w in batches.window_order(0):
        for rows in batches.batches(0, int(w)):
            widths = {int(stream.lengths[p]) for p, _ in batches.chunks[int(w)][rows]}
            assert len(rows) <= 4 and len(widths) == 1
            seen += [int(p) for p, _ in batches.chunks[int(w)][rows]]
    assert sorted(seen) == list(range(len(sizes)))
    assert steps_per_epoch(net(), stream, batch_size=4, seed=SETTINGS["seed"]) == batches.count()
    widths = []
    result = fit(net(), stream, optax.adam(1e-2), **SETTINGS, on_step=lambda s: widths.append(s.frames))
    assert len(widths) == 2 * batches.count() and set(widths) <= {float(n * w) for n in (1, 2, 3, 4) for w in (4, 6, 8)}
    assert np.isfinite(result.history[-1].train_loss)


def test_a_stream_stopped_mid_epoch_resumes_bit_for_bit(tmp_path):
    write_egs(tmp_path / "egs.ark", [8, 6, 4] * 14)
    settings = {**SETTINGS, "checkpoint_every": 3}

    def stream():
        return stream_egs(str(tmp_path / "egs.ark"), buffer_size=12)

    whole = fit(net(), stream(), optax.adam(1e-2), **settings, checkpoint=str(tmp_path / "a.ckpt"))
    steps = whole.history[-1].step
    part = str(tmp_path / "b.ckpt")
    fit(net(), stream(), optax.adam(1e-2), **settings, checkpoint=part, max_steps=steps // 2 + 1)
    fit(net(), stream(), optax.adam(1e-2), **settings, checkpoint=part, max_steps=steps - 2)
    resumed = fit(net(), stream(), optax.adam(1e-2), **settings, checkpoint=part)
    assert_same(resumed, whole)


def test_damaged_archives_are_named_or_skipped_and_counted(tmp_path):
    path = tmp_path / "egs.ark"
    egs = write_egs(path, [8] * 6)
    offset = sum(len(eg) for eg in egs[:3])
    damaged = bytearray(path.read_bytes())
    at = damaged.index(b"<NnetIo> output", offset)
    damaged[at : at + 8] = b"<NnetXo>"
    path.write_bytes(bytes(damaged))
    start = offset + len("eg-3 ")
    with pytest.raises(KaldiDataError, match=rf"{path}: byte {start}: example 'eg-3'") as info:
        stream_egs(str(path))
    assert "NnetXo" not in str(info.value)
    with pytest.warns(SkippedDataWarning, match="eg-3"):
        stream = stream_egs(str(path), on_error="skip")
    assert len(stream) == 3 and [key for key, _ in stream.skipped] == ["eg-3"]  # the rest of the archive with it

    # damage found while training (the archive changed after it was indexed): named, or skipped and counted
    write_egs(path, [8] * 6)
    stop, skip = stream_egs(str(path), buffer_size=2), stream_egs(str(path), buffer_size=2, on_error="skip")
    damaged = bytearray(path.read_bytes())
    damaged[at : at + 8] = b"<NnetXo>"
    path.write_bytes(bytes(damaged))
    with pytest.raises(KaldiDataError, match=rf"{path}: byte {start}: example 'eg-3'"):
        fit(net(), stop, optax.adam(1e-2), **SETTINGS)
    with warnings.catch_warnings(record=True) as caught:
        warnings.simplefilter("always")
        fit(net(), skip, optax.adam(1e-2), **SETTINGS)
    assert {key for key, _ in skip.skipped} == {"eg-3"}
    assert any(issubclass(w.category, SkippedDataWarning) for w in caught)


def test_the_examples_held_at_once_are_bounded_by_the_window(tmp_path):
    write_egs(tmp_path / "egs.ark", [8] * 240)
    stream = stream_egs(str(tmp_path / "egs.ark"), buffer_size=20)
    live, peak, decoded = [0], [0], [0]
    item = stream._item

    def counted(position):
        features, *rest = item(position)
        live[0] += 1
        decoded[0] += 1
        peak[0] = max(peak[0], live[0])
        weakref.finalize(features, lambda: live.__setitem__(0, live[0] - 1))
        return (features, *rest)

    stream._item = counted
    fit(net(), stream, optax.adam(1e-2), epochs=1, batch_size=4, progress=False)
    assert decoded[0] >= 240  # every example was read
    assert peak[0] <= 4 * 20 + 1  # at most the windows in flight (reading, cutting, training) and the sample


def chain_net():
    return read_model(RECIPE / "init.txt").network


def chain_options():
    from symnet.chain import ChainOptions

    return ChainOptions(l2_regularize=5e-4, leaky_hmm_coefficient=0.1, xent_regularize=0.1)


def test_streamed_chain_egs_train_as_chain_egs_in_memory():
    """Both outputs (`output` and `output-xent`), derivative weights, frame subsampling 3, numerators of different
    sizes: as `chain_egs` of the same egs in memory, bit for bit."""
    den = read_fst(str(RECIPE / "den.fst"))
    path = RECIPE / "cegs.ark"
    data = chain_egs(list(read_cegs(path)), den=den, options=chain_options(), xent_output="output-xent")
    stream = stream_cegs(f"ark:{path}", den, options=chain_options(), xent_output="output-xent", buffer_size=100)
    assert stream.frame_subsampling_factor == data.frame_subsampling_factor == 3
    settings = {"epochs": 2, "batch_size": 2, "progress": False, "seed": 1}
    common = {"frame_subsampling_factor": 3, **settings}
    in_memory = fit(chain_net(), data.chunks, optax.adam(1e-3), objective=data.objective, **common)
    streamed = fit(chain_net(), stream.train, optax.adam(1e-3), objective=stream.objective, **common)
    assert_same(streamed, in_memory)


def test_chain_egs_are_parsed_once_and_kept_for_the_next_epochs(monkeypatch):
    """The egs parsed while indexing are not read again (the cache holds them all); a cache too small to hold one
    reads every eg every epoch, and trains bit for bit as the kept egs do."""
    from symnet._src.kaldi_io.egs_archives import EgsArchives
    from symnet._src.train import egs_streams

    den = read_fst(str(RECIPE / "den.fst"))
    read, reads = EgsArchives.read, []
    monkeypatch.setattr(EgsArchives, "read", lambda self, place: (reads.append(place.offset), read(self, place))[1])

    def run():
        stream = stream_cegs(str(RECIPE / "cegs.ark"), den, options=chain_options(), xent_output="output-xent")
        reads.clear()
        result = fit(chain_net(), stream.train, optax.adam(1e-3), objective=stream.objective, epochs=3,
                     batch_size=2, frame_subsampling_factor=3, progress=False, seed=2)  # fmt: skip
        return result, len(stream.train), list(reads)

    kept, egs, kept_reads = run()
    assert kept_reads == []  # each eg was parsed once, while indexing
    monkeypatch.setattr(egs_streams, "CHAIN_EGS_CACHE_BYTES", 0)
    uncached, _, uncached_reads = run()
    assert len(uncached_reads) >= 3 * egs  # every eg in every epoch
    assert_same(kept, uncached)


@pytest.mark.slow  # make test-all; make test resumes streamed chain egs in test_chain_streams.py
def test_chain_egs_streamed_in_windows_with_validation_resume_bit_for_bit(tmp_path):
    den = read_fst(str(RECIPE / "den.fst"))
    path = RECIPE / "cegs.ark"

    def run(checkpoint, **more):
        stream = stream_cegs(
            str(path), den, valid=str(path), options=chain_options(), xent_output="output-xent", buffer_size=2
        )
        return fit(
            chain_net(), stream.train, optax.adam(1e-3), objective=stream.objective, valid=stream.valid,
            frame_subsampling_factor=3, epochs=2, batch_size=2, progress=False, checkpoint=checkpoint,
            checkpoint_every=2, **more,
        )  # fmt: skip

    whole = run(str(tmp_path / "a.ckpt"))
    assert whole.history[-1].valid_loss is not None
    run(str(tmp_path / "b.ckpt"), max_steps=3)
    assert_same(run(str(tmp_path / "b.ckpt")), whole)
