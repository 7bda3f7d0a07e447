"""`fit(chunk=(12, 8, 4))`: a chunk whose sequence ends early is computed at the smallest width that holds it.

Cutting a chunk down to its sequence's end removes only padding (frames of
weight 0 past the end, and the repeated last frame as input), so every loss
and gradient is the one of the full-width chunk: for a TDNN with right
context, and for a BLSTM trained with its sequence ends.
"""

from __future__ import annotations

import jax
import numpy as np
import optax
import pytest

from helpers import nets
from helpers.blstm import chunk_loss_reference, network, sequences
from symnet import Input, Network
from symnet._src.train import trainer as training
from symnet._src.train.objectives import Linear
from symnet.train import CheckpointError, Chunks, TrainingError, fit, make_chunks, steps_per_epoch

LENGTHS = [7, 12, 3, 9, 11, 2]


def tdnn() -> Network:
    """Context (2, 2), no recurrence: its outputs do not depend on where a sequence ends."""
    return nets.tdnn(Input("input", 3), hidden=6, out=5, log_softmax=True, seed=1)


def trainer(net, chunks, widths, batch=2):
    return training.Trainer(
        net, optax.sgd(0.1), batch_size=batch, chunks=chunks, objective=Linear(), input="input", output="output",
        widths=widths,
    )  # fmt: skip


def chunks_of(net, lengths=LENGTHS, chunk=12):
    left, right = net.context()
    return make_chunks(*sequences(lengths), chunk=chunk, left=left, right=right)


def test_each_chunk_gets_the_smallest_width_that_holds_it():
    chunks = chunks_of(tdnn())
    assert list(chunks.widths((4, 8, 12))) == [8, 12, 4, 12, 12, 4]
    assert list(chunks.widths((12,))) == [12] * 6
    # a sequence longer than the chunk: its last chunk is cut down, the others are full
    long = chunks_of(tdnn(), [17], chunk=8)
    assert list(long.widths((2, 4, 8))) == [8, 8, 2]
    unknown = Chunks(chunks.features, chunks.targets, chunks.weights, chunks.left, chunks.right)
    assert list(unknown.widths((4, 8, 12))) == [12] * 6  # without the ends, no frame is known to be padding


def test_minibatches_hold_one_width_and_every_chunk_once():
    net = network()
    chunks = chunks_of(net)
    multi = trainer(net, chunks, (4, 8))
    assert multi.widths == (4, 8, 12)
    order = np.random.default_rng(0).permutation(len(chunks))
    batches = multi.batches(chunks, order)
    assert sorted(np.concatenate(batches).tolist()) == list(range(len(chunks)))
    need = chunks.widths(multi.widths)
    assert all(len(set(need[idx])) == 1 for idx in batches)
    firsts = [int(np.flatnonzero(order == idx[0])[0]) for idx in batches]
    assert firsts == sorted(firsts)  # ordered by where each minibatch's first chunk comes in the shuffle
    one = trainer(net, chunks, ())
    assert [b.tolist() for b in one.batches(chunks, order)] == [order[i : i + 2].tolist() for i in range(0, 6, 2)]


@pytest.mark.parametrize("make", [network, tdnn], ids=["blstm", "tdnn"])
def test_a_cut_down_minibatch_has_the_full_width_loss_and_gradients(make):
    net = make()
    chunks = chunks_of(net)
    multi, full = trainer(net, chunks, (4, 8)), trainer(net, chunks, ())
    opt_state = optax.sgd(0.1).init(net.params)
    key = jax.random.PRNGKey(0)
    widths = set()
    for b, idx in enumerate(multi.batches(chunks, np.arange(len(chunks)))):
        cut_batch, whole_batch = multi.minibatch(b, chunks, idx), full.minibatch(b, chunks, idx)
        widths.add(cut_batch.width)
        cut = multi.step(net, opt_state, *multi.arrays(cut_batch), key, multi.ends(cut_batch))
        whole = full.step(net, opt_state, *full.arrays(whole_batch), key, full.ends(whole_batch))
        assert float(cut[2]) == pytest.approx(float(whole[2]), rel=1e-5)  # the loss
        for name, value in whole[0].params.items():
            np.testing.assert_allclose(np.asarray(cut[0].params[name]), np.asarray(value), rtol=1e-5, atol=1e-6)
        assert float(cut[6]) == float(whole[6]) == chunks.weights[idx].sum()  # the frames
    assert widths == {4, 8, 12}


def test_the_blstm_scores_as_each_chunk_computed_alone():
    net = network()
    feats, labels = sequences(LENGTHS)
    left, right = net.context()
    chunks = make_chunks(feats, labels, chunk=5, left=left, right=right)
    multi = trainer(net, chunks, (2, 3))
    assert set(chunks.widths(multi.widths)) == {2, 3, 5}
    assert multi.score(net, chunks)[0] == pytest.approx(chunk_loss_reference(net, feats, labels, 5), rel=1e-5)


def test_fit_compiles_one_step_per_width_and_resumes_bit_identically(tmp_path, monkeypatch):
    net = tdnn()
    data = sequences(LENGTHS * 2)
    kw = dict(epochs=2, batch_size=2, chunk=(12, 8, 4), seed=3, progress=False)
    trainers = []
    init = training.Trainer.__init__
    monkeypatch.setattr(
        training.Trainer, "__init__", lambda self, *a, **k: (init(self, *a, **k), trainers.append(self))[0]
    )
    whole = fit(net, data, optax.adam(1e-2), **kw)
    assert trainers[0].jitted_step._cache_size() == 3  # one compiled step per width
    per_epoch = steps_per_epoch(net, data, batch_size=2, chunk=(12, 8, 4))
    assert whole.history[0].step == per_epoch == len(trainers[0].batches(chunks_of(net, LENGTHS * 2), np.arange(12)))
    assert steps_per_epoch(net, data, batch_size=2, chunk=12) == 6
    path = str(tmp_path / "run.npz")
    fit(net, data, optax.adam(1e-2), checkpoint=path, checkpoint_every=1, max_steps=per_epoch + 2, **kw)
    resumed = fit(net, data, optax.adam(1e-2), checkpoint=path, checkpoint_every=1, **kw)
    for name, value in whole.network.params.items():
        np.testing.assert_array_equal(np.asarray(resumed.network.params[name]), np.asarray(value))
    assert [h.train_loss for h in resumed.history] == [h.train_loss for h in whole.history]
    with pytest.raises(CheckpointError, match="chunk"):  # the widths are part of the run's settings
        fit(net, data, optax.adam(1e-2), checkpoint=path, **{**kw, "chunk": (12, 6)})


@pytest.mark.parametrize("chunk", [(), (0, 5), "20", (5, 2.5), True])
def test_bad_chunk_widths_are_refused(chunk):
    with pytest.raises(TrainingError, match="chunk must be"):
        fit(tdnn(), sequences([5]), optax.sgd(0.1), chunk=chunk, progress=False)
    with pytest.raises(TrainingError, match="chunk must be"):
        steps_per_epoch(tdnn(), sequences([5]), chunk=chunk)
