"""Chunk numerators cut from an utterance's and normalized, against the chain egs Kaldi's nnet3-chain-get-egs made
(fixtures in tests/data/chain-chunks, made by its make.sh from phone lengths, with Kaldi's normalization FST)."""

from __future__ import annotations

import lzma
from pathlib import Path

import numpy as np
import pytest
from scipy.special import logsumexp

from symnet.chain import (
    ChainGraph,
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

DATA = Path(__file__).parent.parent / "data" / "chain-chunks"
#: scenario: (left, right) tolerance, as make.sh made its supervision (frame subsampling 3)
SCENARIOS = {"chain": (5, 5), "three": (2, 3)}


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
