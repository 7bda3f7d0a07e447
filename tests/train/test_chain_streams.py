"""`stream_chain_data`: chain egs cut on the fly from a data directory (features by scp, phone lengths), read as
`fit` trains, against the same egs made in memory by `chain_examples` (fixtures: tests/data/chain-chunks)."""

from __future__ import annotations

from pathlib import Path

import kaldiio
import numpy as np
import optax
import pytest

from helpers.fit_results import assert_same
from symnet import Append, Input, Network, Offset, Weight
from symnet._src.kaldi_io.tables import iter_table
from symnet._src.train import chain_streams
from symnet._src.train.chain_egs import StreamedChainEgs
from symnet.chain import ChainOptions, Topology, read_fst
from symnet.errors import KaldiDataError
from symnet.train import SkippedDataWarning, chain_egs, chain_examples, fit, stream_chain_data

DATA = Path(__file__).parent.parent / "data" / "chain-chunks"
OPTIONS = ChainOptions(leaky_hmm_coefficient=0.1, l2_regularize=5e-4)


def phone_lengths() -> dict[str, np.ndarray]:
    out = {}
    for line in (DATA / "chain.lengths.txt").read_text().splitlines():
        key, rest = line.split(maxsplit=1)
        out[key] = np.array([[int(v) for v in part.split()] for part in rest.split(";")])
    return out


@pytest.fixture
def corpus(tmp_path):
    """The fixture's features as a data directory's feats.ark + feats.scp."""
    features = dict(iter_table(f"ark,t:{DATA / 'chain.feats.txt'}"))
    with kaldiio.WriteHelper(f"ark,scp:{tmp_path / 'feats.ark'},{tmp_path / 'feats.scp'}") as writer:
        for key, value in features.items():
            writer(key, value)
    return features, f"scp:{tmp_path / 'feats.scp'}"


def net(pdfs: int) -> Network:
    x = Input("input", 1)
    w = Weight(np.zeros((3, pdfs), np.float32), name="w")
    return Network(Append(Offset(x, -1), x, Offset(x, 1)) @ w + Weight(np.zeros(pdfs, np.float32), name="b"))


ARGS = {"num_frames": 45, "left_context": 1, "right_context": 1, "seed": 3}


def test_a_stream_trains_as_the_same_egs_in_memory(corpus, tmp_path, monkeypatch) -> None:
    features, scp = corpus
    topology = Topology.parse((DATA / "chain.topo").read_text())
    den = read_fst(str(DATA / "chain.den.fst"))
    norm = read_fst(str(DATA / "chain.norm.fst"))
    lengths = phone_lengths()
    egs = list(chain_examples(features, lengths, topology, norm, **ARGS))
    memory = chain_egs(egs, den=den, options=OPTIONS)

    def stream():
        return stream_chain_data(scp, lengths, topology, den, normalization=norm, options=OPTIONS, buffer_size=10**6,
                                 **ARGS)  # fmt: skip

    s = stream()
    assert list(s.train.keys) == [eg.key for eg in egs] and s.frame_subsampling_factor == 3
    pdfs = egs[0].outputs[0].supervision.label_dim
    settings = {"epochs": 2, "batch_size": 8, "progress": False, "seed": 1}
    want = fit(net(pdfs), memory.chunks, optax.adam(0.05), objective=memory.objective, frame_subsampling_factor=3,
               **settings)  # fmt: skip
    got = fit(net(pdfs), s.train, optax.adam(0.05), objective=s.objective, frame_subsampling_factor=3,
              **settings)  # fmt: skip
    assert_same(got, want)  # bit for bit: numerators padded to powers of two train as in memory
    assert got.history[-1].train_loss < got.history[0].train_loss
    # the second epoch took every numerator from the cache; with no room for any, each is made again, alike
    assert set(s.train._made) == set(range(len(s.train)))
    monkeypatch.setattr(chain_streams, "NUMERATOR_CACHE_BYTES", 0)
    uncached = stream()
    made_again = fit(net(pdfs), uncached.train, optax.adam(0.05), objective=uncached.objective,
                     frame_subsampling_factor=3, **settings)  # fmt: skip
    assert not uncached.train._made
    assert_same(made_again, want)


@pytest.mark.slow  # make test resumes streamed chain egs in test_a_resumed_stream_pads_its_numerators_as_the_run_...
def test_a_stream_resumes_bit_for_bit(corpus, tmp_path) -> None:
    features, scp = corpus
    topology = Topology.parse((DATA / "chain.topo").read_text())
    den = read_fst(str(DATA / "chain.den.fst"))
    lengths = phone_lengths()
    norm = read_fst(str(DATA / "chain.norm.fst"))
    pdfs = next(iter(chain_examples(features, lengths, topology, norm, **ARGS))).outputs[0].supervision.label_dim
    settings = {"epochs": 2, "batch_size": 8, "progress": False, "seed": 1}

    def run(**more):
        s = stream_chain_data(scp, lengths, topology, den, options=OPTIONS, buffer_size=20, **ARGS)
        return fit(net(pdfs), s.train, optax.adam(0.05), objective=s.objective, frame_subsampling_factor=3,
                   checkpoint_every=2, **settings, **more)  # fmt: skip

    whole = run(checkpoint=str(tmp_path / "a.ckpt"))
    part = tmp_path / "b.ckpt"
    run(checkpoint=str(part), max_steps=whole.history[-1].step // 2)
    assert_same(run(checkpoint=str(part)), whole)


def test_a_resumed_stream_pads_its_numerators_as_the_run_it_continues(corpus, tmp_path, monkeypatch) -> None:
    """A minibatch's numerators are padded as far as earlier ones of its width were (and padding changes the
    roundoff): the checkpoint keeps the padding so far, so the resumed half pads, and trains, as the whole run."""
    features, scp = corpus
    topology = Topology.parse((DATA / "chain.topo").read_text())
    den, norm = read_fst(str(DATA / "chain.den.fst")), read_fst(str(DATA / "chain.norm.fst"))
    lengths = phone_lengths()
    pdfs = next(iter(chain_examples(features, lengths, topology, norm, **ARGS))).outputs[0].supervision.label_dim
    monkeypatch.setattr(chain_streams, "_power_of_two", lambda n: int(n))  # unrounded: minibatches differ
    padded: list[int] = []  # each minibatch's numerator arcs, as the step gets them
    own: list[int] = []  # and its largest numerator's
    supervision = StreamedChainEgs.supervision

    def recorded(self, targets, *args):
        own.append(max(self.supervisions[int(t[0])].arcs for t in targets))
        out = supervision(self, targets, *args)
        padded.append(out["src"].shape[1])
        return out

    monkeypatch.setattr(StreamedChainEgs, "supervision", recorded)
    settings = {"epochs": 2, "batch_size": 4, "progress": False, "seed": 1, "checkpoint_every": 1}

    def run(path: Path, **more):
        s = stream_chain_data(scp, lengths, topology, den, options=OPTIONS, buffer_size=20, **ARGS)
        return fit(net(pdfs), s.train, optax.adam(0.05), objective=s.objective, frame_subsampling_factor=3,
                   checkpoint=str(path), **settings, **more)  # fmt: skip

    whole = run(tmp_path / "a.ckpt")
    steps, want = whole.history[-1].step, list(padded)
    assert len(want) == steps
    # resume in the second epoch before a minibatch padded further than its own numerators need
    half = next(k for k in range(steps // 2, steps) if own[k] < want[k])
    part = tmp_path / "b.ckpt"
    run(part, max_steps=half)
    del padded[:]
    resumed = run(part)
    assert padded == want[half:]
    assert_same(resumed, whole)


def test_utterances_kaldi_makes_no_egs_of_are_errors_or_skipped(corpus) -> None:
    _, scp = corpus
    topology = Topology.parse((DATA / "chain.topo").read_text())
    den = read_fst(str(DATA / "chain.den.fst"))
    lengths = phone_lengths()
    first = sorted(lengths)[0]
    lengths[first] = lengths[first][:-1]  # no longer adds up to the features' frames
    with pytest.raises(KaldiDataError, match=f"utterance '{first}': its phone lengths add up to"):
        stream_chain_data(scp, lengths, topology, den, num_frames=45)
    del lengths[sorted(lengths)[1]]
    with pytest.warns(SkippedDataWarning, match="has no phone lengths"):
        s = stream_chain_data(scp, lengths, topology, den, num_frames=45, on_error="skip")
    assert [key for key, _ in s.train.skipped] == sorted(phone_lengths())[:2]
    with pytest.raises(KaldiDataError, match="from an scp"):
        stream_chain_data(f"ark:{DATA / 'chain.feats.txt'}", lengths, topology, den)


def test_utterances_shorter_than_every_chunk_are_left_out_with_a_warning_as_kaldi_does(corpus) -> None:
    """Not bad data: nnet3-chain-get-egs makes no egs of them and goes on, so the stream leaves them out (named)
    whatever `on_error`, with the chunks `chain_examples` makes of the rest."""
    features, scp = corpus
    topology = Topology.parse((DATA / "chain.topo").read_text())
    den, norm = read_fst(str(DATA / "chain.den.fst")), read_fst(str(DATA / "chain.norm.fst"))
    short = sorted(key for key, x in features.items() if len(x) < 96)
    assert len(short) == 2  # chain10 (92 frames) and chain03 (93)
    settings = {**ARGS, "num_frames": 96}
    with pytest.warns(SkippedDataWarning, match=f"'{short[0]}' of {len(features[short[0]])} frames is shorter"):
        s = stream_chain_data(scp, phone_lengths(), topology, den, normalization=norm, **settings)  # on_error="stop"
    assert [key for key, _ in s.train.skipped] == short
    with pytest.warns(SkippedDataWarning, match="shorter than every chunk size"):
        egs = list(chain_examples(features, phone_lengths(), topology, norm, **settings))
    places = [f"{key}-{chunk.first_frame}" for key, chunk in s.train.places]
    assert places == [eg.key for eg in egs] and not any(p.startswith(tuple(short)) for p in places)


def test_numerators_are_padded_as_far_as_before_so_later_epochs_compile_nothing(corpus) -> None:
    """Each minibatch's numerators are padded to at least the sizes earlier minibatches of its width were: once an
    epoch has seen the largest, the step compiles nothing new, however the next epochs group the chunks."""
    from helpers.compiles import count_compilations

    features, scp = corpus
    topology = Topology.parse((DATA / "chain.topo").read_text())
    lengths = phone_lengths()
    norm = read_fst(str(DATA / "chain.norm.fst"))
    pdfs = next(iter(chain_examples(features, lengths, topology, norm, **ARGS))).outputs[0].supervision.label_dim
    s = stream_chain_data(scp, lengths, topology, read_fst(str(DATA / "chain.den.fst")), options=OPTIONS, **ARGS)
    seen: list[tuple[int, int]] = []  # after each step: (its epoch, compilations so far)
    settings = {"epochs": 4, "batch_size": 2, "progress": False, "seed": 1}
    with count_compilations() as compiled:
        fit(net(pdfs), s.train, optax.adam(0.05), objective=s.objective, frame_subsampling_factor=3, **settings,
            on_step=lambda st: seen.append((st.epoch, len(compiled))))  # fmt: skip
    after_first = max(n for e, n in seen if e == 0)
    assert [n for e, n in seen if e > 0] == [after_first] * sum(e > 0 for e, _ in seen)


def test_a_window_s_minibatches_of_a_width_are_padded_to_its_largest_numerator(corpus, monkeypatch) -> None:
    """A window's numerators are made before its first minibatch, so each width's minibatches are padded alike, to
    the power of two over its largest numerator (found here from `chain_examples`' egs in memory): one compiled
    step per width, where padding to each minibatch's own largest compiled again whenever one was larger."""
    from symnet._src.chain.graph import numerator_graph

    features, scp = corpus
    topology = Topology.parse((DATA / "chain.topo").read_text())
    den, norm = read_fst(str(DATA / "chain.den.fst")), read_fst(str(DATA / "chain.norm.fst"))
    settings = {**ARGS, "num_frames": "45,30"}
    largest: dict[int, tuple[int, int]] = {}
    for eg in chain_examples(features, phone_lengths(), topology, norm, **settings):
        sup = eg.outputs[0].supervision
        graph = numerator_graph(sup.fst, sup.label_dim)
        arcs, states = largest.get(sup.frames_per_sequence, (0, 0))
        largest[sup.frames_per_sequence] = (max(arcs, graph.num_arcs), max(states, graph.num_states))
        pdfs = sup.label_dim
    power = {frames: tuple(1 << (n - 1).bit_length() for n in sizes) for frames, sizes in largest.items()}
    padded: list[tuple[int, int, int]] = []  # each minibatch's (output frames, arcs, states) as the step gets them
    supervision = StreamedChainEgs.supervision

    def recorded(self, targets, *args):
        out = supervision(self, targets, *args)
        padded.append((out["deriv_weights"].shape[1], out["src"].shape[1], out["log_initial"].shape[1]))
        return out

    monkeypatch.setattr(StreamedChainEgs, "supervision", recorded)
    s = stream_chain_data(scp, phone_lengths(), topology, den, normalization=norm, options=OPTIONS, **settings)
    fit(net(pdfs), s.train, optax.adam(0.05), objective=s.objective, frame_subsampling_factor=3, epochs=1,
        batch_size=2, progress=False, seed=1)  # fmt: skip
    assert len(power) == 2 and {frames for frames, _, _ in padded} == set(power)
    assert all((arcs, states) == power[frames] for frames, arcs, states in padded)


def test_a_checkpoint_s_objective_state_is_checked() -> None:
    """What a checkpoint gives back to the objective is checked: padding per chunk width (two ints), and nothing
    for an objective that keeps no state."""
    from symnet._src.train.objectives import CTC
    from symnet.errors import CheckpointError

    objective = StreamedChainEgs()
    objective.resume({"padding": {"30": [256, 64]}}, "a.ckpt")
    assert objective.run_state() == {"padding": {"30": [256, 64]}}
    for bad in ({"padding": {"30": [256]}}, {"padding": {"thirty": [256, 64]}}, {"padding": [1, 2]}, [1]):
        with pytest.raises(CheckpointError, match="a.ckpt: the chain egs' padding"):
            objective.resume(bad, "a.ckpt")  # type: ignore[arg-type]
    with pytest.raises(CheckpointError, match="b.ckpt: the 'ctc' objective keeps no state"):
        CTC().resume({"padding": {}}, "b.ckpt")
    CTC().resume({}, "b.ckpt")


def test_features_damaged_after_indexing_are_named_or_their_chunks_skipped(corpus, tmp_path) -> None:
    """The stream makes a window's numerators first, then gives its chunks in the order asked, each utterance's
    features read once where its chunks are asked for together: a damaged matrix still names its utterance, or
    leaves its chunks out; the check `fit` makes before training reads one utterance, not the corpus."""
    _, scp = corpus
    topology = Topology.parse((DATA / "chain.topo").read_text())
    den = read_fst(str(DATA / "chain.den.fst"))
    stopping = stream_chain_data(scp, phone_lengths(), topology, den, **ARGS)
    skipping = stream_chain_data(scp, phone_lengths(), topology, den, on_error="skip", **ARGS)
    entries = dict(line.split() for line in (tmp_path / "feats.scp").read_text().splitlines())
    key = sorted(entries)[1]
    with open(tmp_path / "feats.ark", "r+b") as f:  # after indexing: found as the egs are made
        f.seek(int(entries[key].rsplit(":", 1)[1]) + 2)
        f.write(b"XX ")
    chunks = [p for p, (k, _) in enumerate(skipping.train.places) if k == key]
    assert len(chunks) >= 1
    positions = list(reversed(range(len(skipping.train.places))))
    with pytest.raises(KaldiDataError, match=key):
        list(stopping.train.read(positions))
    with pytest.warns(SkippedDataWarning, match=key):
        read = dict(skipping.train.read(positions))
    assert [p for p, item in read.items() if item is None] == sorted(chunks, reverse=True)
    assert len(read) == len(positions)
    reads: list[str] = []
    features = skipping.train._features
    skipping.train._features = lambda k: reads.append(k) or features(k)  # type: ignore[method-assign]
    list(skipping.train.read(positions))
    assert sorted(reads) == sorted({k for k, _ in skipping.train.places})  # once each
    reads.clear()
    skipping.train.sample()
    assert reads == [sorted(entries)[0]]
