"""The phone LM and its denominator graph against Kaldi's chain-est-phone-lm and chain-make-den-fst
(fixtures in tests/data/chain/phone_lm, made by its make.sh)."""

from __future__ import annotations

import warnings
from pathlib import Path

import numpy as np
import pytest
from scipy.special import logsumexp

from symnet._src.chain.den_minimize import K_DELTA
from symnet._src.chain.phone_lm_graph import expand_with_phones
from symnet.chain import Fst, Topology, estimate_phone_lm, phone_lm_denominator, push_special, read_fst
from symnet.errors import ChainError

DATA = Path(__file__).parent.parent / "data" / "chain" / "phone_lm"
OPTION_SETS = range(7)


def sequences(name: str) -> list[list[int]]:
    return [[int(p) for p in line.split()[1:]] for line in (DATA / f"{name}.txt").read_text().splitlines()]


def options(i: int) -> dict[str, int]:
    out = {}
    for item in (DATA / f"opts.{i}").read_text().split():
        key, value = item[2:].split("=")
        out[key.replace("-", "_")] = int(value)
    return out


@pytest.mark.parametrize("data", ["task", "rand"])
@pytest.mark.parametrize("i", OPTION_SETS)
def test_phone_lm_equals_kaldi(data: str, i: int) -> None:
    kaldi = read_fst(str(DATA / f"lm.{data}.{i}.fst"))
    ours = estimate_phone_lm(sequences(data), **options(i))
    assert (ours.start, ours.num_states, ours.num_arcs) == (kaldi.start, kaldi.num_states, kaldi.num_arcs)
    for name in ("src", "dst", "ilabel", "olabel"):
        np.testing.assert_array_equal(getattr(ours, name), getattr(kaldi, name), err_msg=name)
    np.testing.assert_allclose(ours.weight, kaldi.weight, rtol=1e-6, atol=1e-6)
    np.testing.assert_array_equal(np.isinf(ours.final), np.isinf(kaldi.final))
    finite = np.isfinite(kaldi.final)
    np.testing.assert_allclose(ours.final[finite], kaldi.final[finite], rtol=1e-6, atol=1e-6)


def test_pruning_happened_in_the_fixtures() -> None:
    """The option sets exercise Kaldi's backoff: some prune states, some cannot (BackoffAllowed)."""
    full = estimate_phone_lm(sequences("rand"), ngram_order=4, num_extra_lm_states=10_000)
    pruned = estimate_phone_lm(sequences("rand"), **options(2))
    assert pruned.num_states < full.num_states // 5


def test_phone_lm_probabilities_by_hand() -> None:
    """A bigram of two sentences, counted by hand: from the start, 1 -> 1/2 and 2 -> 1/2."""
    lm = estimate_phone_lm([[1, 2], [2]], ngram_order=2, no_prune_ngram_order=2)
    arcs = {(int(s), int(p)): (int(d), float(np.exp(-w))) for s, p, d, w in zip(lm.src, lm.ilabel, lm.dst, lm.weight)}
    start = lm.start
    assert arcs[(start, 1)][1] == pytest.approx(0.5) and arcs[(start, 2)][1] == pytest.approx(0.5)
    after_two = arcs[(start, 2)][0]
    assert np.exp(-lm.final[after_two]) == pytest.approx(1.0)  # 2 always ends the sentence
    after_one = arcs[(start, 1)][0]
    assert arcs[(after_one, 2)][1] == pytest.approx(1.0)


@pytest.mark.parametrize(
    "kwargs, match",
    [
        ({"ngram_order": 1}, "ngram_order must be >= 2"),
        ({"no_prune_ngram_order": 5}, "no_prune_ngram_order"),
        ({"num_extra_lm_states": -1}, "num_extra_lm_states"),
        ({"ngram_order": 2.5}, "must be an integer"),
    ],
)
def test_phone_lm_refuses_options_kaldi_refuses(kwargs: dict, match: str) -> None:
    with pytest.raises(ChainError, match=match):
        estimate_phone_lm([[1, 2]], **kwargs)


def test_phone_lm_refuses_phone_zero_and_no_data() -> None:
    with pytest.raises(ChainError, match="sequence 1 has phone 0"):
        estimate_phone_lm([[1, 2], [0, 1]])
    with pytest.raises(ChainError, match="no sequences"):
        estimate_phone_lm([])


# -- topologies ------------------------------------------------------------------------------------------------

KALDI_SMOKE_TOPO = """<Topology>
<TopologyEntry>
<ForPhones>
1 2 3 4
</ForPhones>
<State> 0 <PdfClass> 0 <Transition> 0 0.5 <Transition> 1 0.5 </State>
<State> 1 </State>
</TopologyEntry>
</Topology>"""


def test_topology_parse_and_constructors() -> None:
    smoke = Topology.parse(KALDI_SMOKE_TOPO)
    assert smoke == Topology.left_to_right([1, 2, 3, 4], 1, self_loop=0.5)
    assert smoke.monophone_pdfs() == {1: (0,), 2: (1,), 3: (2,), 4: (3,)}
    chain = Topology.parse((DATA / "topochain").read_text())
    assert chain == Topology.chain(range(1, 13))
    assert chain.monophone_pdfs()[3] == (4, 5)  # two pdf-classes per phone
    two = Topology.parse((DATA / "topo2").read_text())
    assert two.phones[1][1].loop_probability(1) == pytest.approx(0.7)
    assert two.monophone_pdfs()[5] == (8, 9)


@pytest.mark.parametrize(
    "text, match",
    [
        ("<Topology> </Topology>", "no <TopologyEntry>"),
        ("not a topology", "in text form"),
        (KALDI_SMOKE_TOPO.replace("<PdfClass> 0 ", ""), "needs <PdfClass>"),
        (KALDI_SMOKE_TOPO.replace("<Transition> 1 0.5", "<Transition> 7 0.5"), "transition to 7"),
        (KALDI_SMOKE_TOPO.replace("1 2 3 4", "1 2 2"), "phone 2 is listed twice"),
        (KALDI_SMOKE_TOPO.replace("<State> 1 </State>", ""), "at least one emitting state"),
    ],
)
def test_topology_errors_name_the_entry(text: str, match: str) -> None:
    with pytest.raises(ChainError, match=match):
        Topology.parse(text, name="topo")


# -- the denominator graph ---------------------------------------------------------------------------------------


def path_weight(fst: Fst, labels: list[int]) -> float:
    """log of the total probability of `labels` (sum over paths, final weights included)."""
    alpha = np.full(fst.num_states, -np.inf)
    alpha[fst.start] = 0.0
    for label in labels:
        arcs = fst.ilabel == label
        new = np.full(fst.num_states, -np.inf)
        np.logaddexp.at(new, fst.dst[arcs], alpha[fst.src[arcs]] - fst.weight[arcs].astype(np.float64))
        alpha = new
    return float(logsumexp(alpha - fst.final.astype(np.float64)))


def sample_path(fst: Fst, rng: np.random.Generator, longest: int = 60) -> list[int] | None:
    prob, final = np.exp(-fst.weight.astype(np.float64)), np.exp(-fst.final.astype(np.float64))
    state, labels = fst.start, []
    while len(labels) <= longest:
        arcs = np.flatnonzero(fst.src == state)
        weights = np.append(prob[arcs], final[state])
        choice = rng.choice(len(weights), p=weights / weights.sum())
        if choice == len(arcs):
            return labels
        labels.append(int(fst.ilabel[arcs[choice]]))
        state = int(fst.dst[arcs[choice]])
    return None


@pytest.mark.parametrize(
    "lm, topo, den, sizes",
    [("lm.task.0", "topo2", "den.task", (59, 57)), ("lm.rand.2", "topochain", "den.rand", (37, 37))],
)
def test_denominator_language_equals_kaldi_den_fst(lm: str, topo: str, den: str, sizes: tuple[int, int]) -> None:
    """Every pdf sequence has the same probability in symnet's graph as in chain-make-den-fst's (sampled from
    both), to Kaldi's weight quantisation: its minimisation rounds weights to multiples of 10 * kDelta three
    times, so up to 1.5 * 10 * kDelta per arc and final weight."""
    topology = Topology.parse((DATA / topo).read_text())
    ours = expand_with_phones(read_fst(str(DATA / f"{lm}.fst")), topology, topology.monophone_pdfs())[0]
    pushed = push_special(ours)
    kaldi = read_fst(str(DATA / f"{den}.fst"))
    assert (ours.num_states, kaldi.num_states) == sizes  # symnet's is not minimised: as large or larger
    rng = np.random.default_rng(0)
    checked = 0
    for source in (ours, kaldi):
        for _ in range(150):
            labels = sample_path(source, rng)
            if labels is None:
                continue
            mine, theirs = path_weight(ours, labels), path_weight(kaldi, labels)
            assert np.isfinite(mine) and np.isfinite(theirs)
            assert abs(mine - theirs) <= 1.5 * 10 * K_DELTA * (len(labels) + 1)
            assert path_weight(pushed, labels) == pytest.approx(mine, abs=1e-5)
            checked += 1
    assert checked > 200


@pytest.mark.parametrize(
    "lm, topo, den, bound", [("lm.rand.2", "topochain", "den.rand", 1e-6), ("lm.task.0", "topo2", "den.task", 5e-4)]
)
def test_phone_lm_denominator_is_kaldis_den_fst(lm: str, topo: str, den: str, bound: float) -> None:
    """log p_den per frame on symnet's graph and on chain-make-den-fst's, for outputs of any size and the leaky
    HMM: equal to float precision with Kaldi's chain topology; within `bound` (and a warning) with two emitting
    states per phone, where Kaldi's minimisation keeps states symnet's merges."""
    import jax.numpy as jnp

    from symnet.chain import denominator_graph, forward_backward, graph_arrays

    topology = Topology.parse((DATA / topo).read_text())
    with warnings.catch_warnings(record=True) as caught:
        warnings.simplefilter("always")
        ours = phone_lm_denominator(read_fst(str(DATA / f"{lm}.fst")), topology)
    assert any("more than one emitting state" in str(w.message) for w in caught) == (topo == "topo2")
    kaldi = denominator_graph(read_fst(str(DATA / f"{den}.fst")), ours.num_pdfs)
    y = jnp.asarray(np.random.default_rng(1).normal(scale=3.0, size=(3, 30, ours.num_pdfs)), jnp.float32)
    lengths = jnp.array([30, 17, 4])
    for leaky in (0.1, 1e-5):
        mine = np.asarray(forward_backward(graph_arrays(ours), y, lengths, leaky=leaky, clamp=30.0)[0])
        theirs = np.asarray(forward_backward(graph_arrays(kaldi), y, lengths, leaky=leaky, clamp=30.0)[0])
        assert (np.abs(mine - theirs) / np.asarray(lengths)).max() <= bound


def test_push_special_makes_outgoing_sums_equal() -> None:
    topology = Topology.parse((DATA / "topo2").read_text())
    lm = read_fst(str(DATA / "lm.task.0.fst"))
    pushed = push_special(expand_with_phones(lm, topology, topology.monophone_pdfs())[0])
    out = np.bincount(pushed.src, np.exp(-pushed.weight.astype(np.float64)), minlength=pushed.num_states)
    out += np.exp(-pushed.final.astype(np.float64))
    assert np.log(out.max() / out.min()) <= K_DELTA * 0.01 + 1e-6


def test_phone_lm_denominator_graph() -> None:
    topology = Topology.chain(range(1, 13))
    graph = phone_lm_denominator(read_fst(str(DATA / "lm.rand.2.fst")), topology)
    assert graph.num_pdfs == 24
    assert graph.initial.sum() == pytest.approx(1.0, abs=1e-5)
    assert (graph.final == 1).all()
    custom = phone_lm_denominator(
        read_fst(str(DATA / "lm.rand.2.fst")), topology, {p: (2 * (12 - p) + 1, 2 * (12 - p)) for p in range(1, 13)}
    )
    assert set(custom.pdf.tolist()) == set(graph.pdf.tolist())


def test_phone_lm_denominator_errors() -> None:
    lm = read_fst(str(DATA / "lm.rand.2.fst"))
    with pytest.raises(ChainError, match="phone 12 has no HMM"):
        phone_lm_denominator(lm, Topology.chain(range(1, 12)))
    with pytest.raises(ChainError, match="phone 1 needs 2 pdf-ids"):
        phone_lm_denominator(lm, Topology.chain(range(1, 13)), {p: (p,) for p in range(1, 13)})


# -- numerators from phone alignments -------------------------------------------------------------------------

SUPERVISION_CASES = [(m, k, tol) for m in ("m2", "mc") for k in (1, 3) for tol in ("55", "02", "11")]


def phone_lengths(name: str) -> dict[str, np.ndarray]:
    """`utt p d ; p d ...` lines as per-frame phone alignments."""
    out = {}
    for line in (DATA / f"{name}.txt").read_text().splitlines():
        utt, rest = line.split(None, 1)
        out[utt] = np.concatenate([np.full(int(d), int(p)) for p, d in (part.split() for part in rest.split(";"))])
    return out


def log_probability(graph, y: np.ndarray) -> float:
    """log sum over the graph's paths (initial to final) of exp(sum of y[t, pdf]) times the arc probabilities, in
    numpy (an independent forward algorithm)."""
    with np.errstate(divide="ignore"):
        alpha = np.log(graph.initial.astype(np.float64))
        log_prob = np.log(graph.prob.astype(np.float64))
        log_final = np.log(graph.final.astype(np.float64))
    for frame in y:
        new = np.full(graph.num_states, -np.inf)
        np.logaddexp.at(new, graph.dst, alpha[graph.src] + log_prob + frame[graph.pdf])
        alpha = new
    return float(logsumexp(alpha + log_final))


@pytest.mark.parametrize("model, k, tol", SUPERVISION_CASES)
def test_phone_numerator_equals_chain_get_supervision(model: str, k: int, tol: str) -> None:
    """Numerator log-probabilities of random outputs on symnet's graph and on Kaldi's supervision FST agree, and
    the utterances Kaldi could not make a supervision for have no path in symnet's either."""
    import re

    from symnet.chain import numerator_graph_from_text, phone_numerator

    topology = Topology.parse((DATA / ("topo2" if model == "m2" else "topochain")).read_text())
    alignments = phone_lengths("pl5" if model == "m2" else "pl12")
    text = (DATA / f"sup.{model}.{k}.{tol}.txt").read_text()
    kaldi = {
        m.group(1): m.group(2)
        for m in re.finditer(r"(\S+) <Supervision>.*?<End2End> F \n(.*?)\n</Supervision>", text, re.S)
    }
    rng = np.random.default_rng(k)
    for utt, alignment in alignments.items():
        graph = phone_numerator(
            alignment, topology, subsampling=k, left_tolerance=int(tol[0]), right_tolerance=int(tol[1])
        )
        y = rng.normal(size=(-(-len(alignment) // k), graph.num_pdfs))
        ours = log_probability(graph, y)
        if utt not in kaldi:
            assert not graph.final.any() and not np.isfinite(ours), utt
            continue
        theirs = log_probability(numerator_graph_from_text(kaldi[utt], graph.num_pdfs), y)
        assert ours == pytest.approx(theirs, abs=1e-9), utt
    assert len(kaldi) >= 1


def paths(graph, frames: int) -> dict[tuple[int, ...], int]:
    """Every pdf sequence of `frames` frames from an initial to a final state, with its number of paths."""
    out: dict[tuple[int, ...], int] = {}

    def walk(state: int, prefix: tuple[int, ...]) -> None:
        if len(prefix) == frames:
            if graph.final[state] > 0:
                out[prefix] = out.get(prefix, 0) + 1
            return
        for a in np.flatnonzero(graph.src == state):
            walk(int(graph.dst[a]), prefix + (int(graph.pdf[a]),))

    for s in np.flatnonzero(graph.initial > 0):
        walk(int(s), ())
    return out


def test_open_ends_numerator_is_the_utterance_graph_cut_at_the_chunk() -> None:
    """A chunk's open-ended numerator (no tolerance, no subsampling) has the paths of the whole utterance's
    numerator over the chunk's frames, as Kaldi's SupervisionSplitter cuts it; at the utterance's own start or
    end it also lets a phone be cut there (it does not know where the utterance starts and ends)."""
    from symnet.chain import phone_numerator

    topology = Topology.parse((DATA / "topo2").read_text())
    alignment = np.array([2, 2, 2, 5, 5, 5, 5, 1, 1, 1])
    whole = phone_numerator(alignment, topology, left_tolerance=0, right_tolerance=0)
    full = paths(whole, len(alignment))
    for begin, end in ((0, 5), (2, 8), (4, 10)):
        cut: dict[tuple[int, ...], int] = {}
        for sequence, count in full.items():
            cut[sequence[begin:end]] = cut.get(sequence[begin:end], 0)
            cut[sequence[begin:end]] += count
        chunk = phone_numerator(alignment[begin:end], topology, left_tolerance=0, right_tolerance=0, open_ends=True)
        got = set(paths(chunk, end - begin))
        if 0 < begin and end < len(alignment):
            assert got == set(cut), (begin, end)
        else:
            assert got > set(cut), (begin, end)


def test_phone_numerator_errors() -> None:
    from symnet.chain import phone_numerator

    topology = Topology.chain([1, 2])
    with pytest.raises(ChainError, match="phone 0 is not a phone id"):
        phone_numerator([1, 0], topology)
    with pytest.raises(ChainError, match="phone 3 has no HMM"):
        phone_numerator([1, 3], topology)
    with pytest.raises(ChainError, match="less than the frame subsampling factor 3"):
        phone_numerator([1, 2], topology, subsampling=3, left_tolerance=0, right_tolerance=1)


def test_a_normalized_numerator_weights_each_sequence_by_its_best_denominator_path() -> None:
    """Kaldi's AddWeightToSupervisionFst (composition with the normalization FST, then determinization in the
    tropical semiring), by brute force: the normalized numerator's log-probability of outputs y is log sum over
    the numerator's distinct pdf sequences of (the probability of the sequence's best denominator path, from
    its initial probabilities, ending anywhere) * exp(sum of the sequence's outputs)."""
    import jax.numpy as jnp

    from symnet.chain import chunk_numerator, forward_backward, phone_numerator, stack_graphs

    topology = Topology.chain(range(1, 13))
    den = phone_lm_denominator(read_fst(str(DATA / "lm.rand.2.fst")), topology)
    first = sequences("rand")[0][:3]
    alignment = np.repeat(first, [2, 1, 2])
    num = phone_numerator(alignment, topology, left_tolerance=1, right_tolerance=1)
    frames = len(alignment)
    normalized = chunk_numerator(num, 0, frames, den)
    y = np.random.default_rng(0).normal(size=(frames, den.num_pdfs))

    def best_den_path(pdfs: tuple[int, ...]) -> float:
        best = den.initial.astype(np.float64)
        for p in pdfs:
            arcs = np.flatnonzero(den.pdf == p)
            new = np.zeros(den.num_states)
            np.maximum.at(new, den.dst[arcs], best[den.src[arcs]] * den.prob[arcs])
            best = new
        return float(best.max())

    def all_den_paths(pdfs: tuple[int, ...]) -> float:
        alpha = den.initial.astype(np.float64)
        for p in pdfs:
            arcs = den.pdf == p
            alpha = np.bincount(den.dst[arcs], alpha[den.src[arcs]] * den.prob[arcs], minlength=den.num_states)
        return float(alpha.sum())

    sequences_ = paths(num, frames)
    total = sum(best_den_path(s) * np.exp(sum(y[t, p] for t, p in enumerate(s))) for s in sequences_)
    summed = sum(n * all_den_paths(s) * np.exp(sum(y[t, p] for t, p in enumerate(s))) for s, n in sequences_.items())
    assert np.log(summed) > np.log(total) + 1e-2  # the sum over paths is not Kaldi's weight
    ours, _ = forward_backward(
        stack_graphs([normalized]), jnp.asarray(y[None], jnp.float32), jnp.array([frames]), numerator=True
    )
    assert float(ours[0]) == pytest.approx(np.log(total), abs=1e-4)
    assert total > 0
