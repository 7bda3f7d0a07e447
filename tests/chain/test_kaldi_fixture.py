"""The chain objective against real Kaldi: nnet3-chain-compute-prob's printed objective on Kaldi's own
den.fst, chain egs and network outputs (tests/data/chain, made by make.sh there)."""

from __future__ import annotations

import re

import jax.numpy as jnp
import numpy as np
import pytest

from helpers.chain_fixtures import DATA, kaldi_options, kaldi_prob, read_text_matrices
from symnet.chain import (
    chain_objective,
    graph_arrays,
    numerator_graph_from_text,
    read_denominator_graph,
    read_fst,
    stack_graphs,
)

NUM_PDFS = 4

EG = re.compile(
    r"(?P<key>\S+) <Nnet3ChainEg>.*?<NnetIo> input <I1V> \d+ (?P<in_index>.*?)\[.*?"
    r"<NnetChainSup> output <I1V> \d+ (?P<out_index>.*?)<Supervision> <Weight> (?P<weight>\S+) "
    r"<NumSequences> 1 <FramesPerSeq> (?P<frames>\d+) <LabelDim> (?P<dim>\d+) <End2End> F\s*"
    r"(?P<fst>.*?)</Supervision>",
    re.S,
)


def ts(index_text):
    """The t of each `<I1> n t x` index Kaldi writes."""
    return [int(t) for t in re.findall(r"<I1> -?\d+ (-?\d+) -?\d+", index_text)]


@pytest.mark.parametrize("factor", [1, 3])
def test_objective_equals_nnet3_chain_compute_prob(factor):
    outputs = read_text_matrices(DATA / f"outputs{factor}.ark")
    egs = list(EG.finditer((DATA / f"cegs{factor}.txt").read_text()))
    assert len(egs) >= 4
    ys, nums = [], []
    for eg in egs:
        assert int(eg["dim"]) == NUM_PDFS and float(eg["weight"]) == 1.0
        in_t, out_t = ts(eg["in_index"]), ts(eg["out_index"])
        assert len(out_t) == int(eg["frames"]) and out_t == list(range(0, factor * len(out_t), factor))
        rows = outputs[eg["key"]]  # nnet3-compute's output for each input row; the outputs sit at t = 0, f, 2f
        ys.append(rows[[in_t.index(t) for t in out_t]])
        nums.append(numerator_graph_from_text(eg["fst"], NUM_PDFS))
    options = kaldi_options(DATA / f"opts{factor}.txt")
    den = graph_arrays(read_denominator_graph(str(DATA / "den.fst"), NUM_PDFS))
    r = chain_objective(jnp.asarray(np.stack(ys)), den, stack_graphs(nums), options=options)
    like, l2, frames = kaldi_prob(DATA / f"prob{factor}.txt")
    assert float(r.weight) == frames
    # Kaldi prints six significant digits
    assert float(r.objf) / frames == pytest.approx(like, abs=1e-6, rel=5e-6)
    assert float(r.l2_term) / frames == pytest.approx(l2, abs=1e-6, rel=5e-6)


def test_den_fst_reads_as_kaldi_reports_it():
    fst = read_fst(str(DATA / "den.fst"))
    # chain-make-den-fst's log: "Number of states is 16 and arcs 30"
    assert (fst.num_states, fst.num_arcs) == (16, 30)
    assert fst.start == 12 and (fst.ilabel == fst.olabel).all() and set(fst.ilabel) == {1, 2, 3, 4}


@pytest.mark.parametrize("factor", [1, 3])
def test_cegs_read_by_symnet_give_kaldis_objective(factor):
    """The same egs through symnet's own reader (symnet.kaldi.read_cegs) and numerator graphs made from its
    FSTs: Kaldi's objective again, so the egs reader and the objective agree on the FST layout."""
    from symnet._src.kaldi_io.egs import read_cegs
    from symnet.chain import numerator_graph

    outputs = read_text_matrices(DATA / f"outputs{factor}.ark")
    ys, nums = [], []
    for eg in read_cegs(f"ark,t:{DATA / f'cegs{factor}.txt'}"):
        (inputs,) = eg.inputs
        (output,) = eg.outputs
        in_t, out_t = inputs.indexes[:, 1].tolist(), output.indexes[:, 1].tolist()
        ys.append(outputs[eg.key][[in_t.index(t) for t in out_t]])
        nums.append(numerator_graph(output.supervision.fst, output.supervision.label_dim))
    den = graph_arrays(read_denominator_graph(str(DATA / "den.fst"), NUM_PDFS))
    r = chain_objective(
        jnp.asarray(np.stack(ys)), den, stack_graphs(nums), options=kaldi_options(DATA / f"opts{factor}.txt")
    )
    like, _, frames = kaldi_prob(DATA / f"prob{factor}.txt")
    assert float(r.weight) == frames
    assert float(r.objf) / frames == pytest.approx(like, abs=1e-6, rel=5e-6)
