"""`fit` on networks whose outputs depend on where a sequence ends: each chunk is trained with its own end.

A backward recurrence over a chunk padded past its sequence's end (the last
frame repeated) would start from the padding; with the chunk's end given to
the request (`ComputationRequest(sequence_ends=True)`) it starts at the
sequence's last frame, as `Network.compute` does on the whole sequence.
"""

from __future__ import annotations

import warnings

import jax
import jax.numpy as jnp
import numpy as np
import optax
import pytest

from helpers.blstm import CLASSES, DIM, chunk_loss_reference, network, sequences
from symnet import Append, Input, LogSoftmax, Network, Normal, Offset, Weight
from symnet._src.train import trainer as training
from symnet._src.train.objectives import Linear, objective
from symnet.train import fit, make_chunks


def trainer_for(net, feats, labels, chunk, batch):
    left, right = net.context()
    chunks = make_chunks(feats, labels, chunk=chunk, left=left, right=right)
    return chunks, training.Trainer(
        net, optax.sgd(0.1), batch_size=batch, chunks=chunks, objective=Linear(), input="input", output="output"
    )


@pytest.mark.parametrize("directions", [(1, -1), (-1,)])
@pytest.mark.parametrize("chunk", [12, 5])
def test_chunk_losses_equal_each_chunk_computed_alone(directions, chunk):
    net = network(directions)
    feats, labels = sequences([7, 12, 3, 9])
    chunks, trainer = trainer_for(net, feats, labels, chunk, batch=3)
    assert trainer.sequence_ends
    loss, _ = trainer.score(net, chunks)
    assert loss == pytest.approx(chunk_loss_reference(net, feats, labels, chunk), rel=1e-5)


def test_spliced_input_before_the_recurrences():
    net = network(splice=True)
    assert net.context() == (1, 1)
    feats, labels = sequences([8, 11, 4])
    chunks, trainer = trainer_for(net, feats, labels, 6, batch=2)
    assert trainer.sequence_ends
    loss, _ = trainer.score(net, chunks)
    assert loss == pytest.approx(chunk_loss_reference(net, feats, labels, 6), rel=1e-5)


def test_the_gradient_is_that_of_the_chunks_computed_alone():
    net = network()
    feats, labels = sequences([6, 2, 5])
    chunks, trainer = trainer_for(net, feats, labels, 6, batch=3)
    minibatch = trainer.minibatch(0, chunks, np.arange(3))
    x, targets, weights = trainer.arrays(minibatch)
    ends = trainer.ends(minibatch)

    def tape_grads(params):
        tape = trainer.computation.forward(net.replace(params=params), {"input": x}, ends)["output"]
        _, _, delta = objective("linear", tape.value, targets, weights)
        return tape.backward(delta)

    def reference_loss(params):
        n = net.replace(params=params)
        total = 0.0
        for f, lab in zip(feats, labels):
            out = n.compute([jnp.asarray(f)], mode="valid")[0]
            total = total - out[jnp.arange(len(f)), lab].sum()
        return total / sum(len(f) for f in feats)

    got, want = tape_grads(net.params), jax.grad(reference_loss)(net.params)
    for name in want:
        np.testing.assert_allclose(np.asarray(got[name]), np.asarray(want[name]), rtol=2e-4, atol=1e-6)


def test_a_forward_only_recurrence_or_a_tdnn_needs_no_ends():
    x = Input("input", DIM)
    tdnn = Network(LogSoftmax(Append(Offset(x, -1), x, Offset(x, 1)) @ Weight(Normal((3 * DIM, CLASSES), 0.5))))
    feats, labels = sequences([7, 12])
    for net in (network((1,)), tdnn):
        chunks, trainer = trainer_for(net, feats, labels, 5, batch=2)
        assert not trainer.sequence_ends
        assert not trainer.computation.request.sequence_ends
        assert trainer.ends(trainer.minibatch(0, chunks, np.arange(2))) is None


def test_fit_trains_a_blstm_with_sequence_ends_and_its_loss_goes_down():
    net = network()
    feats, labels = sequences([7, 12, 3, 9, 10, 4], seed=1)
    result = fit(net, (feats, labels), optax.adam(0.05), epochs=4, batch_size=3, chunk=12, progress=False)
    losses = [h.train_loss for h in result.history]
    assert losses[-1] < losses[0]
    chunks, trainer = trainer_for(result.network, feats, labels, 12, batch=3)
    loss, _ = trainer.score(result.network, chunks)
    assert loss == pytest.approx(chunk_loss_reference(result.network, feats, labels, 12), rel=1e-5)


def test_with_a_mesh_each_chunk_is_trained_with_its_own_end():
    """One device here (the suite's); test_mesh.py compares four devices with one."""
    mesh = jax.make_mesh((1,), ("data",))
    feats, labels = sequences([7, 4, 11])
    kw = dict(epochs=2, batch_size=2, chunk=8, progress=False)
    with warnings.catch_warnings():
        warnings.simplefilter("error")
        meshed = fit(network(), (feats, labels), optax.sgd(0.1), mesh=mesh, **kw)
    alone = fit(network(), (feats, labels), optax.sgd(0.1), **kw)
    assert [h.train_loss for h in meshed.history] == pytest.approx([h.train_loss for h in alone.history], rel=1e-5)
    for name, value in alone.network.params.items():
        np.testing.assert_allclose(np.asarray(meshed.network.params[name]), np.asarray(value), rtol=1e-5, atol=1e-6)
