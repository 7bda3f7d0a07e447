"""The corpus entry on its shipped samples (tests/data/corpus-samples/make.py made them with flite and
espeak-ng): loading, the held-out split, alignments against the features' frames and the ctm, transcripts in the
lexicon, and the errors. No synthesiser is needed."""

from __future__ import annotations

import shutil
from pathlib import Path

import numpy as np
import pytest

from helpers import unpack_corpus_samples
from symnet.datasets import TEST_VOICES, TRAIN_VOICES, CorpusError, load_corpus, parse_voice
from symnet.features import FbankOptions, fbank, read_wav


@pytest.fixture(scope="module")
def folder(tmp_path_factory: pytest.TempPathFactory) -> Path:
    return unpack_corpus_samples(tmp_path_factory.mktemp("samples"))


@pytest.mark.parametrize(
    ("task", "counts"), [("digits", {"train": 6, "unseen": 3}), ("commands", {"train": 4, "unseen": 2})]
)
def test_the_samples_load_with_their_sets(folder: Path, task: str, counts: dict[str, int]) -> None:
    corpus = load_corpus(folder / task)
    assert {name: len(utts) for name, utts in corpus.sets.items()} == counts
    assert corpus.manifest["task"] == task and corpus.phones == tuple(sorted(corpus.phones)) and "pau" in corpus.phones
    for utts in corpus.sets.values():
        for u in utts:
            assert u.id.startswith(u.speaker + "-") and u.wav.is_file()


def _parts(speaker: str) -> tuple[str, str, str]:
    """(synthesiser, voice or language with kal16 as kal, variant) of a speaker id."""
    voice = parse_voice(speaker.replace("-", ":", 1))
    return voice.synth, "kal" if voice.name == "kal16" else voice.name, voice.variant


@pytest.mark.parametrize("task", ["digits", "commands"])
def test_no_held_out_voice_language_or_variant_is_heard_in_training(folder: Path, task: str) -> None:
    corpus = load_corpus(folder / task)
    train = {_parts(u.speaker) for u in corpus.sets["train"]}
    test = {_parts(u.speaker) for u in corpus.sets["unseen"]}
    assert {s for s, _, _ in test} == {"flite", "espeak"}
    assert not {v for s, v, _ in train if s == "flite"} & {v for s, v, _ in test if s == "flite"}
    assert not {v for s, v, _ in train if s == "espeak"} & {v for s, v, _ in test if s == "espeak"}
    assert not {x for s, _, x in train if s == "espeak"} & {x for s, _, x in test if s == "espeak"}


def test_the_default_voices_hold_out_voices_languages_and_variants() -> None:
    train = {_parts(str(parse_voice(v)).replace(":", "-", 1)) for v in TRAIN_VOICES}
    test = {_parts(str(parse_voice(v)).replace(":", "-", 1)) for v in TEST_VOICES}
    for k in (1, 2):
        for synth in ("flite", "espeak"):
            if k == 2 and synth == "flite":
                continue
            assert not {p[k] for p in train if p[0] == synth} & {p[k] for p in test if p[0] == synth}


def _labels(segments: tuple[tuple[str, float, float], ...], frames: int) -> list[str]:
    """Each frame's phone by its centre (12.5 ms + 10 ms a frame), written out independently of the library; "?"
    where the centre is within the ctm's rounding (1 ms) of a phone's edge, "pau" after the last phone."""
    out = []
    for t in range(frames):
        centre = 0.0125 + 0.01 * t
        if any(abs(centre - e) < 1e-3 for _, _, e in segments):
            out.append("?")
        else:
            out.append(next((p for p, s, e in segments if s <= centre < e), "pau"))
    return out


@pytest.mark.parametrize("task", ["digits", "commands"])
def test_alignments_have_the_features_frames_and_follow_the_ctm(folder: Path, task: str) -> None:
    corpus = load_corpus(folder / task)
    for utts in corpus.sets.values():
        for u in utts:
            wave, rate = read_wav(u.wav)
            assert rate == 16000 and len(fbank(wave, FbankOptions(dither=0.0))) == u.num_frames == len(u.states)
            starts, ends = [s for _, s, _ in u.segments], [e for _, _, e in u.segments]
            assert starts[0] == 0.0 and np.allclose(starts[1:], ends[:-1], atol=1.5e-3)
            assert abs(ends[-1] - len(wave) / rate) < 1.5e-3
            names = [corpus.phones[i - 1] for i in u.phone_ids]
            expected = _labels(u.segments, u.num_frames)
            assert [a for a, b in zip(names, expected) if b != "?"] == [b for b in expected if b != "?"]
            assert set(u.states.tolist()) <= {0, 1, 2} and u.states[0] == 0


@pytest.mark.parametrize("task", ["digits", "commands"])
def test_phone_lengths_are_the_segments_frames_each_instance_apart(folder: Path, task: str) -> None:
    """`Corpus.phone_lengths`: one (phone, frames) per ctm segment that has frames, in order (a phone said twice
    in a row stays two), a frame counted for the first segment ending after its centre (written out here frame by
    frame), frames past the last segment a pause; they add up to the utterance's frames."""
    corpus = load_corpus(folder / task)
    for utts in corpus.sets.values():
        for u in utts:
            owner = [next((i for i, (_, _, e) in enumerate(u.segments) if 0.0125 + 0.01 * t < e), None)
                     for t in range(u.num_frames)]  # fmt: skip
            expected: list[tuple[str, int]] = []
            for i, o in enumerate(owner):
                phone = "pau" if o is None else u.segments[o][0]
                if i and owner[i - 1] == o:
                    expected[-1] = (phone, expected[-1][1] + 1)
                else:
                    expected.append((phone, 1))
            said = [(corpus.phones[int(p) - 1], int(n)) for p, n in corpus.phone_lengths(u)]
            assert said == expected, u.id
            assert sum(n for _, n in said) == u.num_frames


def _says(words: tuple[str, ...], phones: list[str], lexicon: dict) -> bool:
    if not words:
        return not phones
    return any(list(p) == phones[: len(p)] and _says(words[1:], phones[len(p) :], lexicon) for p in lexicon[words[0]])


@pytest.mark.parametrize("task", ["digits", "commands"])
def test_every_transcript_is_in_the_lexicon_and_its_phones_are_its_words(folder: Path, task: str) -> None:
    corpus = load_corpus(folder / task)
    for utts in corpus.sets.values():
        for u in utts:
            assert all(w in corpus.lexicon for w in u.words)
            assert _says(u.words, [p for p, _, _ in u.segments if p != "pau"], dict(corpus.lexicon)), u.id


def test_dataset_gives_features_and_state_labels(folder: Path) -> None:
    corpus = load_corpus(folder / "digits")
    data = corpus.dataset("unseen")
    assert len(data) == 3 and data.feat_dim == 40
    assert all(lab.max() < corpus.num_pdfs and lab.min() >= 0 for lab in data.labels)
    assert np.abs(np.concatenate(data.features).mean(axis=0)).max() < 1e-3
    with pytest.raises(CorpusError, match="25 ms frames every 10 ms"):
        corpus.dataset("unseen", FbankOptions(frame_shift_ms=20.0))
    with pytest.raises(CorpusError, match="no set 'test'.*train, unseen"):
        corpus.dataset("test")


def test_an_unknown_word_and_a_damaged_or_unfinished_folder_are_corpus_errors(folder: Path, tmp_path: Path) -> None:
    copy = tmp_path / "digits"
    shutil.copytree(folder / "digits", copy)
    corpus = load_corpus(copy)
    with pytest.raises(CorpusError, match="'eleven' is not in the lexicon"):
        corpus.pronunciations("eleven")
    text = copy / "train" / "text"
    first, *rest = text.read_text().splitlines()
    text.write_text("\n".join([first + " eleven", *rest]) + "\n")
    with pytest.raises(CorpusError, match="says 'eleven', which is not in lexicon.txt"):
        load_corpus(copy)
    (copy / "corpus.json").unlink()
    with pytest.raises(CorpusError, match="no corpus.json"):
        load_corpus(copy)
