"""`fit(drop_partial=True)`: each chunk width's last, short minibatch of an epoch is left out, as Kaldi's
nnet3-merge-egs with one minibatch size discards the egs that do not fill one; the rest of the epoch trains as
the same full minibatches do."""

from __future__ import annotations

import numpy as np
import optax
import pytest

from helpers import nets
from helpers.blstm import sequences
from helpers.egs_bytes import write_egs
from symnet import Input, Network
from symnet._src.train.minibatches import StreamBatches, by_width, count_by_width
from symnet.train import CheckpointError, TrainingError, fit, make_chunks, steps_per_epoch, stream_egs


def tdnn(dim: int = 3, out: int = 5) -> Network:
    return nets.tdnn(Input("input", dim), hidden=6, out=out, log_softmax=True, seed=1)


@pytest.mark.parametrize("seed", range(5))
def test_by_width_keeps_full_minibatches_and_drops_each_widths_last_chunks(seed):
    rng = np.random.default_rng(seed)
    widths = rng.choice([4, 6, 8], size=50)
    order = rng.permutation(50)
    kept = by_width(order, widths, 7, drop_partial=True)
    assert all(len(b) == 7 and len(set(widths[b])) == 1 for b in kept)
    assert len(kept) == count_by_width(widths, 7, drop_partial=True)
    # what is left out: per width, the chunks past its last multiple of 7 in `order`
    left_out = set()
    for w in (4, 6, 8):
        members = [int(p) for p in order if widths[p] == w]
        left_out |= set(members[len(members) - len(members) % 7 :])
    assert set(np.concatenate(kept).tolist()) == set(range(50)) - left_out
    every = by_width(order, widths, 7)
    assert len(every) == count_by_width(widths, 7) == len(kept) + sum(1 for w in (4, 6, 8) if (widths == w).sum() % 7)
    assert [b.tolist() for b in every if len(b) == 7] == [b.tolist() for b in kept]


def test_an_epoch_trains_on_the_chunks_that_fill_minibatches_only():
    feats, labels = sequences([10] * 5)
    chunks = make_chunks(feats, labels, chunk=10, left=2, right=2)  # 5 chunks, one width
    sgd = optax.sgd(0.5)
    dropped = fit(tdnn(), chunks, sgd, batch_size=4, drop_partial=True, seed=7, progress=False)
    assert dropped.history[-1].step == 1 == steps_per_epoch(tdnn(), chunks, batch_size=4, drop_partial=True)
    last = int(np.random.default_rng([7, 0]).permutation(5)[-1])  # the epoch's order (MemoryBatches)
    keep = [i for i in range(5) if i != last]  # a sequence of 10 frames is one chunk
    rest = make_chunks([feats[i] for i in keep], [labels[i] for i in keep], chunk=10, left=2, right=2)
    reference = fit(tdnn(), rest, sgd, batch_size=4, seed=7, progress=False)  # one minibatch of the same 4
    for name, value in reference.network.params.items():
        np.testing.assert_allclose(np.asarray(dropped.network.params[name]), np.asarray(value), rtol=1e-5, atol=1e-7)
    kept = fit(tdnn(), chunks, sgd, batch_size=4, seed=7, progress=False)
    assert kept.history[-1].step == 2  # without drop_partial the fifth chunk is a minibatch of its own


def test_a_stream_drops_each_windows_short_minibatches(tmp_path):
    sizes = [8, 6, 4] * 12 + [8, 8]
    write_egs(tmp_path / "egs.ark", sizes)
    stream = stream_egs(str(tmp_path / "egs.ark"), buffer_size=10)

    class Plan:
        batch_size, chunk, left, right, widths, subsampling = 4, 8, 2, 2, (4, 6, 8), 1

    batches = StreamBatches(Plan(), stream, seed=3, drop_partial=True)
    assert len(batches.windows) > 2
    count = 0
    for w in batches.window_order(0):
        for rows in batches.batches(0, int(w)):
            assert len(rows) == 4 and len({int(stream.lengths[p]) for p, _ in batches.chunks[int(w)][rows]}) == 1
            count += 1
    assert count == batches.count() == steps_per_epoch(tdnn(4), stream, batch_size=4, seed=3, drop_partial=True)
    assert count < StreamBatches(Plan(), stream, seed=3).count()
    frames = []
    fit(tdnn(4), stream, optax.adam(1e-2), batch_size=4, seed=3, drop_partial=True, progress=False,
        on_step=lambda s: frames.append(s.frames))  # fmt: skip
    assert len(frames) == count and set(frames) <= {4.0 * w for w in (4, 6, 8)}  # every minibatch full


def test_nothing_to_train_and_a_bad_flag_are_errors():
    feats, labels = sequences([10] * 3)
    chunks = make_chunks(feats, labels, chunk=10, left=2, right=2)
    with pytest.raises(TrainingError, match="drop_partial=True leaves no minibatch.*batch_size=4 chunks"):
        fit(tdnn(), chunks, optax.sgd(0.1), batch_size=4, drop_partial=True, progress=False)
    with pytest.raises(TrainingError, match="drop_partial must be True or False"):
        fit(tdnn(), chunks, optax.sgd(0.1), drop_partial="yes", progress=False)


def test_a_resume_mid_epoch_with_other_dropping_is_refused(tmp_path):
    feats, labels = sequences([10] * 9)
    chunks = make_chunks(feats, labels, chunk=10, left=2, right=2)
    path = str(tmp_path / "run.npz")
    kw = dict(batch_size=2, epochs=2, checkpoint=path, checkpoint_every=1, progress=False)
    fit(tdnn(), chunks, optax.sgd(0.1), max_steps=2, **kw)
    with pytest.raises(CheckpointError, match="drop_partial.*only at an epoch boundary"):
        fit(tdnn(), chunks, optax.sgd(0.1), drop_partial=True, allow_changes=("drop_partial",), **kw)
    with pytest.raises(CheckpointError, match="drop_partial: saved None, now True"):
        fit(tdnn(), chunks, optax.sgd(0.1), drop_partial=True, **kw)
