"""Chain training as Kaldi trains it, on egs made the way recipes make them (tests/data/chain-recipe, made by
make.py there with Kaldi's own programs): numerators weighted by nnet3-chain-get-egs's normalization FST,
derivative weights of 0.5 where chunks overlap, Kaldi's chain topology and a 3-state one, phone LMs of order
3 and 4, frame subsampling 3, a TDNN with `output` and `output-xent`; and symnet's own den graph of the same
phone LM against chain-make-den-fst's.

References are Kaldi's printed numbers: nnet3-chain-compute-prob's objectives of each eg alone, and the
model nnet3-chain-train writes after one step on each eg alone (from the same initial model)."""

from __future__ import annotations

import io
import re
import warnings
from functools import cache
from pathlib import Path

import jax
import jax.numpy as jnp
import numpy as np
import pytest

from symnet._src.kaldi_io.egs import read_cegs
from symnet.chain import (
    ChainOptions,
    Topology,
    chain_objective,
    denominator_graph,
    forward_backward,
    graph_arrays,
    numerator_graph,
    phone_lm_denominator,
    read_fst,
    stack_graphs,
)
from symnet.kaldi import read_model
from symnet.train import KaldiRulesWarning, chain_egs, fit, kaldi_rules

DATA = Path(__file__).resolve().parents[1] / "data" / "chain-recipe"
SCENARIOS = ("chain-topo", "three-state")


@cache
def scenario(name: str):
    """(egs, den.fst, initial model, ChainOptions) of one scenario."""
    folder = DATA / name
    values = dict(re.findall(r"--([\w-]+)=(\S+)", (folder / "opts.txt").read_text()))
    options = ChainOptions(
        l2_regularize=float(values["l2-regularize"]),
        leaky_hmm_coefficient=float(values["leaky-hmm-coefficient"]),
        xent_regularize=float(values["xent-regularize"]),
    )
    egs = list(read_cegs(f"ark:{folder / 'cegs.ark'}"))
    return egs, read_fst(str(folder / "den.fst")), read_model(folder / "init.txt").network, options


def kaldi_objectives(name: str, key: str) -> tuple[float, float, float, float]:
    """nnet3-chain-compute-prob's per-frame (chain objective, l2 term, output-xent objective) and frames."""
    text = (DATA / name / "prob" / f"{key}.txt").read_text()
    chain = re.search(r"'output' is (\S+) \+ (\S+) = \S+ per frame, over (\S+) frames", text)
    xent = re.search(r"'output-xent' is (\S+) per frame", text)
    assert chain and xent, text
    return float(chain[1]), float(chain[2]), float(xent[1]), float(chain[3])


@cache
def all_outputs(name: str) -> dict[str, tuple[jnp.ndarray, jnp.ndarray]]:
    """The initial model's `output` and `output-xent` at each eg's supervised frames (t = 0, 3, 6, ...), by key
    (the scenario's egs have one shape: computed in one call)."""
    egs, _, net, _ = scenario(name)
    x = np.stack([np.asarray(eg.inputs[0].matrix, np.float32) for eg in egs])
    k = int(egs[0].outputs[0].indexes[1, 1] - egs[0].outputs[0].indexes[0, 1])
    y, xent = (jnp.asarray(net.compute(x, mode="valid", output=o))[:, ::k] for o in ("output", "output-xent"))
    return {eg.key: (y[i : i + 1], xent[i : i + 1]) for i, eg in enumerate(egs)}


def outputs(name: str, eg) -> tuple[jnp.ndarray, jnp.ndarray]:
    """The initial model's `output` and `output-xent` at the eg's supervised frames."""
    return all_outputs(name)[eg.key]


@cache
def symnet_den(name: str):
    """symnet's own den graph of the scenario's phone LM (chain-est-phone-lm's) and topology."""
    topology = Topology.parse((DATA / name / "topo").read_text())
    with warnings.catch_warnings():
        warnings.simplefilter("ignore")
        return phone_lm_denominator(read_fst(str(DATA / name / "lm.fst")), topology)


@cache
def objective_program(name: str, den_graph=None):
    """The chain objective of one eg as one jitted program per scenario and denominator: numerators padded to the
    scenario's largest, so that every eg runs the same program."""
    egs, den, _, options = scenario(name)
    num_pdfs = egs[0].outputs[0].supervision.label_dim
    dg = graph_arrays(denominator_graph(den, num_pdfs) if den_graph is None else den_graph)
    return jax.jit(lambda y, xent, num: chain_objective(y, dg, num, options=options, xent_output=xent))


def objective(name: str, eg, shift: float = 0.0, den_graph=None):
    """symnet's chain objective of one eg, its numerator's arcs out of the start state `shift` nats heavier, on
    Kaldi's den.fst or on `den_graph`."""
    egs, *_ = scenario(name)
    graphs = []
    for other in egs:
        sup = other.outputs[0].supervision
        fst = sup.fst
        if other is eg and shift:
            weight = fst.weight.copy()
            weight[fst.src == fst.start] += shift
            fst = type(fst)(**{**fst.__dict__, "weight": weight})
        graphs.append(numerator_graph(fst, sup.label_dim))
    stacked = stack_graphs(graphs)
    i = egs.index(eg)
    num = type(stacked)(*(a[i : i + 1] for a in stacked))
    return objective_program(name, den_graph)(*outputs(name, eg), num)


@pytest.mark.parametrize("name", SCENARIOS)
def test_objectives_equal_nnet3_chain_compute_prob(name):
    egs, *_ = scenario(name)
    for eg in egs:
        like, l2, xent, frames = kaldi_objectives(name, eg.key)
        r = objective(name, eg)
        assert float(r.weight) == frames
        # Kaldi prints six significant digits
        assert float(r.objf) / frames == pytest.approx(like, rel=1e-5, abs=2e-6), eg.key
        assert float(r.l2_term) / frames == pytest.approx(l2, rel=1e-5, abs=2e-6), eg.key
        assert float(r.xent_objf) / frames == pytest.approx(xent, rel=1e-5, abs=2e-6), eg.key


@pytest.mark.parametrize("shift", [70.0, 1000.0])
def test_heavy_numerator_weights_keep_kaldis_objective(shift):
    """Weights Kaldi accepts, however heavy: the numerator's arcs out of its start state `shift` nats heavier
    (the normalization FST puts tens of nats there) lower the objective by exactly `shift` and leave the
    derivative as it was, as Kaldi's log-space numerator computes them. In probability space exp(-114) is 0
    in float32 and the objective was -inf."""
    name = "chain-topo"
    egs, *_ = scenario(name)
    eg = egs[0]
    like, _, xent, frames = kaldi_objectives(name, eg.key)
    r = objective(name, eg, shift)
    assert np.isfinite(float(r.objf))
    assert float(r.objf) == pytest.approx(like * frames - shift, rel=2e-6, abs=5e-4)
    assert float(r.xent_objf) / frames == pytest.approx(xent, rel=1e-5)
    plain = objective(name, eg)
    # float32 sums at the weight's magnitude: 2e-5 of a posterior at 70 nats, 1e-4 at 1000
    np.testing.assert_allclose(np.asarray(r.num_post), np.asarray(plain.num_post), atol=2e-5 if shift < 100 else 1e-4)


def trained_step(name: str, *egs):
    """One `fit` step on these egs as one minibatch with Kaldi's rules (the model's learning rates, max-param-change
    2), as nnet3-chain-train took it: the documented call, without `chunk`."""
    _, den, net, options = scenario(name)
    data = chain_egs(list(egs), den=den, options=options, xent_output="output-xent")
    with warnings.catch_warnings():
        warnings.simplefilter("ignore", KaldiRulesWarning)
        rules = kaldi_rules(net, max_param_change=2.0)
    result = fit(
        net,
        data.chunks,
        rules,
        objective=data.objective,
        frame_subsampling_factor=data.frame_subsampling_factor,
        batch_size=len(egs),
        max_steps=1,
        progress=False,
    )
    return net, result.network


@pytest.mark.parametrize("name", SCENARIOS)
def test_one_step_equals_nnet3_chain_train(name):
    """Each eg's step moves every parameter as nnet3-chain-train moves it, including the egs whose frames at
    the ends have derivative weight 0.5 (Kaldi scales the derivatives of `output` and `output-xent` by them)."""
    egs, *_ = scenario(name)
    halved = [bool((eg.outputs[0].deriv_weights < 1).any()) for eg in egs]
    assert True in halved and False in halved
    for eg in (egs[halved.index(True)], egs[halved.index(False)]):  # one of each kind (all: the merged test)
        before, after = trained_step(name, eg)
        assert_step_is_kaldis(before, after, read_model(DATA / name / "step" / f"{eg.key}.txt").network, eg.key)


def assert_step_is_kaldis(before, after, kaldi, what):
    for key, want in kaldi.params.items():
        want, start = np.asarray(want), np.asarray(before.params[key])
        change = np.abs(want - start).max()
        assert change > 0, key
        np.testing.assert_allclose(
            np.asarray(after.params[key]), want, rtol=0, atol=1e-3 * change, err_msg=f"{what} {key}"
        )


@pytest.mark.parametrize("name", SCENARIOS)
def test_one_step_on_merged_egs_equals_nnet3_chain_train(name):
    """The egs merged into one minibatch (nnet3-chain-merge-egs, make_merged.sh), as recipes train: one `fit` step
    with every eg in one minibatch moves every parameter as nnet3-chain-train's step on the merged eg does
    (sequences interleaved in Kaldi's row order, each with its own numerator and derivative weights)."""
    egs, *_ = scenario(name)
    before, after = trained_step(name, *egs)
    assert_step_is_kaldis(before, after, read_model(DATA / name / "step" / "merged.txt").network, "merged")


def test_symnet_den_graph_gives_kaldis_objective():
    """symnet's den graph of chain-est-phone-lm's LM with Kaldi's chain topology (phone_lm_denominator: the
    expansion, chain-make-den-fst's three passes of reversed and regular minimisation, PushSpecial) gives
    nnet3-chain-compute-prob's objectives, which were computed on chain-make-den-fst's den.fst."""
    name = "chain-topo"
    egs, den, *_ = scenario(name)
    ours = symnet_den(name)
    for eg in egs:
        like, l2, xent, frames = kaldi_objectives(name, eg.key)
        r = objective(name, eg, den_graph=ours)
        assert float(r.objf) / frames == pytest.approx(like, rel=1e-5, abs=2e-6), eg.key
        assert float(r.xent_objf) / frames == pytest.approx(xent, rel=1e-5, abs=2e-6), eg.key
    # and log p_den of any outputs, leaky HMM included, is Kaldi's den.fst's
    kaldi = denominator_graph(den, ours.num_pdfs)
    y = jnp.asarray(np.random.default_rng(0).normal(scale=3.0, size=(3, 40, ours.num_pdfs)), jnp.float32)
    lengths = jnp.array([40, 25, 9])
    for leaky in (0.1, 1e-5):
        mine = forward_backward(graph_arrays(ours), y, lengths, leaky=leaky, clamp=30.0)[0]
        theirs = forward_backward(graph_arrays(kaldi), y, lengths, leaky=leaky, clamp=30.0)[0]
        np.testing.assert_allclose(np.asarray(mine) / lengths, np.asarray(theirs) / lengths, atol=1e-6)


def test_den_graph_of_a_multi_state_topology_warns_and_stays_close():
    """A 3-state left-to-right topology: Kaldi's den.fst keeps states symnet's graph merges; symnet says so, and
    the objective stays within 5e-4 per frame of Kaldi's den.fst (before symnet minimised as Kaldi does:
    7.8e-4 on random outputs)."""
    name = "three-state"
    egs, den, *_ = scenario(name)
    topology = Topology.parse((DATA / name / "topo").read_text())
    with pytest.warns(UserWarning, match="more than one emitting state"):
        phone_lm_denominator(read_fst(str(DATA / name / "lm.fst")), topology)
    for eg in egs:
        like, _, _, frames = kaldi_objectives(name, eg.key)
        r = objective(name, eg, den_graph=symnet_den(name))
        assert abs(float(r.objf) / frames - like) < 5e-4, eg.key


@pytest.mark.parametrize("name", SCENARIOS)
def test_chain_lda_stats_equal_nnet3_chain_acc_lda_stats(name):
    """The chain recipes' LDA statistics (nnet3-chain-acc-lda-stats, make_lda.sh): init.config's network at each
    eg's subsampled supervised frames, classes the posteriors of the supervision FST's own weights (normalization
    included, several pdfs a frame where the tolerances allow them), no pruning; and the transform from them."""
    from symnet._src.kaldi.compute.chain_lda import accumulate_chain_lda_stats
    from symnet._src.kaldi.compute.lda import read_lda_stats
    from symnet.kaldi import read_network

    egs, *_ = scenario(name)
    result = accumulate_chain_lda_stats(read_network(DATA / "lda-init.config"), egs)
    kaldi = read_lda_stats(DATA / name / "lda.stats")
    ours = result.stats.rounded()
    assert (result.utterances, result.frames) == (
        len(egs),
        len(egs) * egs[0].outputs[0].supervision.frames_per_sequence,
    )
    assert ours.count == pytest.approx(kaldi.count, rel=1e-6)
    assert ((ours.counts > 0) == (kaldi.counts > 0)).all()
    # float precision: Kaldi's posteriors are in double, symnet's in float32
    np.testing.assert_allclose(ours.counts, kaldi.counts[: ours.num_classes], rtol=0, atol=1e-5)
    np.testing.assert_allclose(ours.sums, kaldi.sums[: ours.num_classes], rtol=0, atol=1e-5)
    np.testing.assert_allclose(ours.second, kaldi.second, rtol=0, atol=1e-6 * np.abs(kaldi.second).max())
    assert kaldi.num_classes >= ours.num_classes and not kaldi.counts[ours.num_classes :].any()
    np.testing.assert_allclose(ours.transform().matrix, kaldi.transform().matrix, rtol=0, atol=1e-5)


def test_chain_lda_refusals():
    from symnet._src.kaldi.compute.chain_lda import accumulate_chain_lda_stats
    from symnet._src.kaldi.compute.lda import LdaError
    from symnet.kaldi import read_network

    egs, *_ = scenario("chain-topo")
    other = read_network(io.StringIO("input-node name=feats dim=13\noutput-node name=output input=feats\n"))
    with pytest.raises(LdaError, match=f"chain eg '{egs[0].key}': the network has no input 'input'"):
        accumulate_chain_lda_stats(other, egs)
    with pytest.raises(LdaError, match="no chain egs"):
        accumulate_chain_lda_stats(read_network(DATA / "lda-init.config"), [])


def test_symnet_lda_chain_egs_writes_the_transform_and_stats(tmp_path, capsys):
    """`symnet lda --chain-egs`: the same statistics as the library (written as nnet3-chain-acc-lda-stats writes
    them) and their transform; options for features and targets are refused with --chain-egs."""
    from symnet._src.app.cli import main
    from symnet._src.kaldi.compute.chain_lda import accumulate_chain_lda_stats
    from symnet._src.kaldi.compute.lda import read_lda_stats
    from symnet.kaldi import read_network

    cegs, config = f"ark:{DATA / 'chain-topo' / 'cegs.ark'}", str(DATA / "lda-init.config")
    out, stats = tmp_path / "lda.mat", tmp_path / "lda.stats"
    assert main(["lda", "--chain-egs", "--write-stats", str(stats), config, cegs, str(out)]) == 0
    assert "from 6 chain egs" in capsys.readouterr().out
    egs, *_ = scenario("chain-topo")
    expected = accumulate_chain_lda_stats(read_network(DATA / "lda-init.config"), egs).stats
    assert stats.read_bytes() == expected.to_kaldi(binary=True)
    assert read_lda_stats(stats).count == pytest.approx(expected.count)
    assert main(["lda", "--chain-egs", "--alignments", "ark:x.ark", config, cegs, str(tmp_path / "x.mat")]) == 2
    assert "--alignments: with --chain-egs the egs hold the inputs" in capsys.readouterr().err
    assert main(["lda", "--chain-egs", "--targets-length-tolerance", "2", config, cegs, str(tmp_path / "x.mat")]) == 2
    assert "--targets-length-tolerance: with --chain-egs" in capsys.readouterr().err
    assert not (tmp_path / "x.mat").exists()
