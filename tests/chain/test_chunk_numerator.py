"""Chunk numerators cut from an utterance's and normalized, against the chain egs Kaldi's nnet3-chain-get-egs made
(fixtures in tests/data/chain-chunks, made by its make.sh from phone lengths, with Kaldi's normalization FST)."""

from __future__ import annotations

import lzma
from pathlib import Path

import numpy as np
import optax
import pytest
from scipy.special import logsumexp

from symnet import Append, Input, Network, Offset, Weight
from symnet._src.kaldi_io.tables import iter_table
from symnet.chain import (
    ChainGraph,
    ChainOptions,
    Topology,
    chunk_numerator,
    denominator_graph,
    numerator_graph,
    phone_numerator,
    read_fst,
    state_frames,
)
from symnet.errors import ChainError
from symnet.kaldi import read_cegs
from symnet.train import SkippedDataWarning, chain_egs, chain_examples, fit

DATA = Path(__file__).parent.parent / "data" / "chain-chunks"
#: scenario: (left, right) tolerance, as make.sh made its supervision (frame subsampling 3)
SCENARIOS = {"chain": (5, 5), "three": (2, 3)}
SIZES = {"chain": 45, "three": 60}  # frames per eg


def phone_lengths(name: str) -> dict[str, np.ndarray]:
    """`ali-to-phones --write-lengths` text: per utterance, (phone, length) pairs."""
    out = {}
    for line in (DATA / f"{name}.lengths.txt").read_text().splitlines():
        key, rest = line.split(maxsplit=1)
        out[key] = np.array([[int(v) for v in part.split()] for part in rest.split(";")])
    return out


def log_probability(graph: ChainGraph, y: np.ndarray) -> float:
    """log of the sum over the graph's paths of exp(sum of y[t, pdf]) times their weights: a numpy forward."""
    alpha = graph.log_initial.copy()
    for frame in y:
        new = np.full(graph.num_states, -np.inf)
        np.logaddexp.at(new, graph.dst, alpha[graph.src] + graph.log_prob + frame[graph.pdf])
        alpha = new
    return float(logsumexp(alpha + graph.log_final))


@pytest.fixture(scope="module", params=sorted(SCENARIOS))
def scenario(request, tmp_path_factory):
    name = request.param
    egs = tmp_path_factory.mktemp(name) / "egs.ark"
    egs.write_bytes(lzma.decompress((DATA / f"{name}.egs.ark.xz").read_bytes()))
    return name, list(read_cegs(f"ark:{egs}"))


@pytest.mark.parametrize("normalization", ["norm.fst", "den.fst"])
def test_every_eg_numerator_equals_kaldis(scenario, normalization) -> None:
    """Each eg's numerator, cut from symnet's own utterance numerator (from the phone lengths) at the eg's chunk
    and normalized with chain-make-den-fst's normalization FST (or with the den.fst's graph, from which symnet
    makes it), has Kaldi's eg's log-probabilities on random outputs, to Kaldi's float32 weights."""
    name, egs = scenario
    topology = Topology.parse((DATA / f"{name}.topo").read_text())
    fst = read_fst(str(DATA / f"{name}.{normalization}"))
    pdfs = 1 + max(max(p) for p in topology.monophone_pdfs().values())
    norm = fst if normalization == "norm.fst" else denominator_graph(fst, pdfs)
    left, right = SCENARIOS[name]
    lengths = phone_lengths(name)
    utterances = {
        key: phone_numerator(pairs, topology, subsampling=3, left_tolerance=left, right_tolerance=right)
        for key, pairs in lengths.items()
    }
    rng = np.random.default_rng(0)
    assert len(egs) >= 30 and len({eg.key.rsplit("-", 1)[0] for eg in egs}) == len(lengths)
    for eg in egs:
        utt, first = eg.key.rsplit("-", 1)
        supervision = eg.outputs[0].supervision
        ours = chunk_numerator(utterances[utt], int(first) // 3, supervision.frames_per_sequence, norm)
        theirs = numerator_graph(supervision.fst, ours.num_pdfs)
        for _ in range(2):
            y = rng.normal(0, 2, size=(supervision.frames_per_sequence, ours.num_pdfs))
            assert log_probability(ours, y) == pytest.approx(log_probability(theirs, y), abs=2e-3), eg.key


def test_chain_examples_at_kaldis_chunks_are_kaldis_egs(scenario) -> None:
    """`chain_examples` cut at the chunks Kaldi chose (its egs' keys) gives Kaldi's egs: the same keys, input and
    output indexes (5 frames of left context and 3 of right), features (compressed as Kaldi compresses them),
    derivative weights (0.5 where neighbouring chunks overlap) and numerators."""
    name, egs = scenario
    topology = Topology.parse((DATA / f"{name}.topo").read_text())
    norm = read_fst(str(DATA / f"{name}.norm.fst"))
    left, right = SCENARIOS[name]
    features = dict(iter_table(f"ark,t:{DATA / f'{name}.feats.txt'}"))
    chunks: dict[str, list[tuple[int, int]]] = {}
    for eg in egs:
        utt, first = eg.key.rsplit("-", 1)
        chunks.setdefault(utt, []).append((int(first), 3 * eg.outputs[0].supervision.frames_per_sequence))
    ours = list(
        chain_examples(
            features,
            phone_lengths(name),
            topology,
            norm,
            num_frames=SIZES[name],
            left_context=5,
            right_context=3,
            left_tolerance=left,
            right_tolerance=right,
            chunks=chunks,
        )
    )
    assert [eg.key for eg in ours] == [eg.key for eg in egs]
    assert any((eg.outputs[0].deriv_weights < 1).any() for eg in egs)
    rng = np.random.default_rng(3)
    for mine, theirs in zip(ours, egs):
        (x,), (y,) = mine.inputs, theirs.inputs
        np.testing.assert_array_equal(x.indexes, y.indexes)
        np.testing.assert_array_equal(x.matrix, y.matrix)  # compressed as Kaldi compresses them, read back alike
        out, kaldi = mine.outputs[0], theirs.outputs[0]
        np.testing.assert_array_equal(out.indexes, kaldi.indexes)
        np.testing.assert_array_equal(out.deriv_weights, kaldi.deriv_weights)
        sup = out.supervision
        assert (sup.frames_per_sequence, sup.label_dim) == (
            kaldi.supervision.frames_per_sequence,
            kaldi.supervision.label_dim,
        )
        pdfs = sup.label_dim
        y_ = rng.normal(0, 2, size=(sup.frames_per_sequence, pdfs))
        a = log_probability(numerator_graph(sup.fst, pdfs), y_)
        b = log_probability(numerator_graph(kaldi.supervision.fst, pdfs), y_)
        assert a == pytest.approx(b, abs=2e-3), mine.key


def test_chain_examples_draw_their_chunks_and_train(scenario) -> None:
    """Drawn chunks cover each utterance as Kaldi's splitter does (the same every call), and the egs train with
    `fit` through `chain_egs` as Kaldi's egs do."""
    name, _ = scenario
    topology = Topology.parse((DATA / f"{name}.topo").read_text())
    norm = read_fst(str(DATA / f"{name}.norm.fst"))
    left, right = SCENARIOS[name]
    features = dict(iter_table(f"ark,t:{DATA / f'{name}.feats.txt'}"))

    def make(seed: int) -> list:
        return list(
            chain_examples(
                features, phone_lengths(name), topology, norm, num_frames=SIZES[name], left_tolerance=left,
                right_tolerance=right, seed=seed, left_context=1, right_context=1,
            )
        )  # fmt: skip

    first, again, other = make(0), make(0), make(1)
    assert [e.key for e in first] == [e.key for e in again] and [e.key for e in first] != [e.key for e in other]
    for eg in first:
        utt, start = eg.key.rsplit("-", 1)
        assert 0 <= int(start) and int(start) + eg.inputs[0].matrix.shape[0] - 2 <= len(features[utt]) + 2
    assert {e.key.rsplit("-", 1)[0] for e in first} == set(features)
    data = chain_egs(
        first, den=read_fst(str(DATA / f"{name}.den.fst")), options=ChainOptions(leaky_hmm_coefficient=0.1)
    )
    pdfs = first[0].outputs[0].supervision.label_dim
    x = Input("input", 1)
    net = Network(Append(Offset(x, -1), x, Offset(x, 1)) @ Weight(np.zeros((3, pdfs), np.float32), name="w")
                  + Weight(np.zeros(pdfs, np.float32), name="b"))  # fmt: skip
    result = fit(
        net, data.chunks, optax.adam(0.05), objective=data.objective, epochs=4, batch_size=8, progress=False,
        frame_subsampling_factor=data.frame_subsampling_factor,
    )  # fmt: skip
    losses = [h.train_loss for h in result.history]
    assert np.isfinite(losses).all() and losses[-1] < losses[0] - 0.05


def test_chain_examples_skip_what_kaldi_skips_and_say_so() -> None:
    topology = Topology.parse((DATA / "chain.topo").read_text())
    norm = read_fst(str(DATA / "chain.norm.fst"))
    x = np.zeros((30, 1), np.float32)
    cases = {
        "no-lengths": (x, None),
        "mismatch": (x, np.array([[1, 12], [2, 6]])),
        "too-short": (x[:18], np.array([[1, 9], [2, 9]])),
    }
    lengths = {k: v for k, (_, v) in cases.items() if v is not None}
    features = {k: f for k, (f, _) in cases.items()}
    with pytest.warns(SkippedDataWarning) as caught:
        assert not list(chain_examples(features, lengths, topology, norm, num_frames=45))
    text = " ".join(str(w.message) for w in caught)
    for what in ("'no-lengths' has no phone lengths", "add up to 18 frames, its features have 30",
                 "'too-short' of 18 frames is shorter than every chunk size (45,)"):  # fmt: skip
        assert what in text


def test_phone_lengths_keep_a_repeated_phone_two_instances() -> None:
    """(phone, length) pairs say where a phone said twice in a row starts again; one id per frame cannot, and its
    numerator allows fewer paths (the fixtures have such repeats)."""
    topology = Topology.parse((DATA / "chain.topo").read_text())
    repeated = [p for p in phone_lengths("chain").values() if (p[1:, 0] == p[:-1, 0]).any()]
    assert repeated
    pairs = repeated[0]
    per_frame = np.repeat(pairs[:, 0], pairs[:, 1])
    two = phone_numerator(pairs, topology, subsampling=3)
    one = phone_numerator(per_frame, topology, subsampling=3)
    y = np.random.default_rng(1).normal(size=(-(-len(per_frame) // 3), two.num_pdfs))
    assert log_probability(two, y) > log_probability(one, y) + 1e-3


def test_state_frames_and_errors() -> None:
    topology = Topology.parse((DATA / "chain.topo").read_text())
    norm = read_fst(str(DATA / "chain.norm.fst"))
    graph = phone_numerator(np.array([[1, 6], [2, 6], [1, 6]]), topology, subsampling=3)
    frames = state_frames(graph)
    assert frames.max() == 6 and (frames[graph.dst] == frames[graph.src] + 1).all()
    with pytest.raises(ChainError, match=r"chunk \[4, 8\) is not inside the utterance's 6 output frames"):
        chunk_numerator(graph, 4, 4, norm)
    looped = ChainGraph(
        graph.num_pdfs, np.array([0, 0]), np.array([1, 0]), np.array([0, 1]), np.zeros(2), np.array([0.0, -np.inf]),
        np.array([-np.inf, 0.0]),
    )  # fmt: skip
    with pytest.raises(ChainError, match="reached at frames 0 and 1"):
        state_frames(looped)
    with_epsilon = read_fst(str(DATA / "chain.norm.fst"))
    with_epsilon.ilabel[0] = 0
    with pytest.raises(ChainError, match="epsilon"):
        chunk_numerator(graph, 0, 6, with_epsilon)


def test_a_chunk_the_normalization_fst_rejects_has_no_path() -> None:
    """Kaldi drops an eg whose composed supervision is empty; its numerator has no final state here."""
    topology = Topology.parse((DATA / "chain.topo").read_text())
    norm = read_fst(str(DATA / "chain.norm.fst"))
    keep = norm.ilabel != 1  # the normalization FST never emits pdf 0 (phone 1's first pdf): silence is unheard
    cut = type(norm)(
        norm.start, norm.final, *(getattr(norm, k)[keep] for k in ("src", "dst", "ilabel", "olabel", "weight"))
    )
    graph = phone_numerator(np.array([[1, 9], [2, 6]]), topology, subsampling=3)
    chunk = chunk_numerator(graph, 0, 3, cut)
    assert not np.isfinite(chunk.log_final).any()
    assert log_probability(chunk, np.zeros((3, graph.num_pdfs))) == -np.inf
