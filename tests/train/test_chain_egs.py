"""Kaldi's chain egs as fit's data (symnet._src.train.chain_egs): fit's validation loss on Kaldi's egs, with a
network equal to Kaldi's, is nnet3-chain-compute-prob's objective (fixtures in tests/data/chain)."""

from __future__ import annotations

import numpy as np
import optax
import pytest

from helpers.chain_fixtures import DATA, kaldi_options, kaldi_prob, read_text_matrices
from symnet import Append, Input, LogSoftmax, Network, Offset, Weight
from symnet._src.kaldi_io.egs import read_cegs
from symnet.chain import read_fst
from symnet.train import TrainingError, chain_egs, fit


def kaldi_network(factor: int) -> Network:
    """The fixtures' Kaldi network (LogSoftmax(Affine(Append(Offset(input, -1), input)))), its parameters
    recovered from nnet3-compute's outputs by least squares on the centred log-probabilities (exact: they
    are an affine function of the inputs up to a per-row constant)."""
    outputs = read_text_matrices(DATA / f"outputs{factor}.ark")
    rows, targets = [], []
    for eg in read_cegs(f"ark,t:{DATA / f'cegs{factor}.txt'}"):
        x = eg.inputs[0].matrix
        y = outputs[eg.key]
        rows.append(np.concatenate([x[:-1], x[1:], np.ones((len(x) - 1, 1))], axis=1))
        targets.append(y[1:] - y[1:].mean(1, keepdims=True))
    solution, *_ = np.linalg.lstsq(np.concatenate(rows), np.concatenate(targets), rcond=None)
    x = Input("input", 4)
    w = Weight(solution[:-1].astype(np.float32), name="w")
    b = Weight(solution[-1].astype(np.float32), name="b")
    return Network(LogSoftmax(Append(Offset(x, -1), x) @ w + b))


@pytest.mark.parametrize("factor", [1, 3])
def test_fit_on_kaldis_chain_egs_gives_kaldis_objective(factor: int) -> None:
    egs = list(read_cegs(f"ark,t:{DATA / f'cegs{factor}.txt'}"))
    options = kaldi_options(DATA / f"opts{factor}.txt")
    data = chain_egs(egs, den=read_fst(str(DATA / "den.fst")), valid=egs, options=options)
    assert data.frame_subsampling_factor == factor
    assert data.chunks.features.shape[0] == len(egs)
    np.testing.assert_array_equal(data.chunks.features[0], egs[0].inputs[0].matrix)
    assert (data.chunks.left, data.chunks.right) == (1, 0)
    result = fit(
        kaldi_network(factor),
        data.chunks,
        optax.sgd(0.0),
        objective=data.objective,
        valid=data.valid,
        frame_subsampling_factor=data.frame_subsampling_factor,
        epochs=1,
        progress=False,
    )
    like, l2, frames = kaldi_prob(DATA / f"prob{factor}.txt")
    assert result.history[0].valid_loss == pytest.approx(-(like + l2), abs=2e-5)


def test_fit_on_chain_egs_trains() -> None:
    egs = list(read_cegs(f"ark,t:{DATA / 'cegs1.txt'}"))
    data = chain_egs(egs, den=read_fst(str(DATA / "den.fst")))
    x = Input("input", 4)
    net = Network(Append(Offset(x, -1), x) @ Weight(np.zeros((8, 4), np.float32), name="w"), seed=0)
    result = fit(net, data.chunks, optax.adam(0.05), objective=data.objective, epochs=20, progress=False)
    assert result.history[-1].train_loss < result.history[0].train_loss - 0.05


def test_chain_egs_refusals() -> None:
    egs = list(read_cegs(f"ark,t:{DATA / 'cegs1.txt'}"))
    den = read_fst(str(DATA / "den.fst"))
    with pytest.raises(TrainingError, match="needs input 'ivector' and output 'output'"):
        chain_egs(egs, den=den, input="ivector")
    with pytest.raises(TrainingError, match="no examples"):
        chain_egs([], den=den)
    three = list(read_cegs(f"ark,t:{DATA / 'cegs3.txt'}"))
    with pytest.raises(TrainingError, match="egs of one shape only"):
        chain_egs(egs + three, den=den)
