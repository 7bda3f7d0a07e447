"""Building a corpus: the plan is pure in the seed, the errors name what is missing; where flite and espeak-ng
are installed, two utterances are synthesised, loaded, found again in the cache and completed after a kill."""

from __future__ import annotations

import ctypes.util
import shutil
from pathlib import Path

import pytest

from symnet._src.corpora import build, espeak, voices
from symnet.datasets import CorpusError, CorpusSet, load_corpus, parse_voice, synthesise_corpus, vocabulary
from symnet.features import FbankOptions, fbank, read_wav

OPTIONS = {"digits": [1, 7], "stretch": [0.8, 1.25], "snr_db": [10.0, 30.0]}
SETS = (CorpusSet("train", ("flite:awb", "espeak:en-us+f2"), 2), CorpusSet("test", ("flite:rms",), 1, held_out=True))


def test_the_plan_is_pure_in_the_seed() -> None:
    first, again, other = (build._plan("digits", SETS, seed, OPTIONS) for seed in (3, 3, 4))
    assert first == again and first != other
    assert [p["id"] for p in first] == ["flite-awb-train-00000", "espeak-en-us+f2-train-00001", "flite-rms-test-00000"]
    assert all(1 <= len(p["words"]) <= 7 and set(p["words"]) <= set(vocabulary("digits")) for p in first)


def test_bad_voices_tasks_and_held_out_sets_are_refused() -> None:
    with pytest.raises(CorpusError, match="unknown flite voice 'kal8'.*kal, kal16, awb, rms, slt"):
        parse_voice("flite:kal8")
    with pytest.raises(CorpusError, match="want flite:NAME or espeak:LANGUAGE"):
        parse_voice("festival:kal")
    with pytest.raises(CorpusError, match="unknown task 'letters'"):
        vocabulary("letters")
    leaky = [CorpusSet("train", ("espeak:en-us+f2",), 1), CorpusSet("test", ("espeak:en-gb+f2",), 1, held_out=True)]
    with pytest.raises(CorpusError, match="held-out voice espeak:en-gb\\+f2 is heard in training .*variant f2"):
        synthesise_corpus("unused", sets=leaky)
    with pytest.raises(CorpusError, match="flite voice kal"):
        voices.check_held_out([parse_voice("flite:kal16")], [parse_voice("flite:kal")])


def test_a_missing_synthesiser_says_which_package_to_install(monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setattr(shutil, "which", lambda name: None)
    with pytest.raises(CorpusError, match="apt-get install flite"):
        synthesise_corpus("unused", sets=[CorpusSet("train", ("flite:awb",), 1)])
    monkeypatch.setattr(espeak, "_state", {})
    monkeypatch.setattr(ctypes.util, "find_library", lambda name: None)
    with pytest.raises(CorpusError, match="apt-get install espeak-ng"):
        synthesise_corpus("unused", sets=[CorpusSet("train", ("espeak:en-us+m1",), 1)])


needs_synthesisers = pytest.mark.skipif(
    shutil.which("flite") is None or ctypes.util.find_library("espeak-ng") is None,
    reason="needs flite and espeak-ng (apt-get install flite espeak-ng)",
)


@needs_synthesisers
def test_an_unknown_espeak_voice_or_variant_is_named() -> None:
    with pytest.raises(CorpusError, match="unknown espeak-ng voice 'en-xx'.*en-gb-scotland"):
        synthesise_corpus("unused", sets=[CorpusSet("train", ("espeak:en-xx+m1",), 1)])
    with pytest.raises(CorpusError, match="unknown espeak-ng variant 'm99'"):
        synthesise_corpus("unused", sets=[CorpusSet("train", ("espeak:en-us+m99",), 1)])


@needs_synthesisers
def test_two_synthesised_utterances_load_are_cached_and_a_killed_build_is_completed(tmp_path: Path) -> None:
    sets = [CorpusSet("train", ("flite:kal", "espeak:en-gb-x-rp+m2"), 2)]
    corpus = synthesise_corpus(tmp_path, "commands", sets=sets, workers=1, log=None)
    utts = corpus.sets["train"]
    assert [u.speaker for u in utts] == ["espeak-en-gb-x-rp+m2", "flite-kal"]
    for u in utts:
        assert len(fbank(read_wav(u.wav)[0], FbankOptions(dither=0.0))) == u.num_frames
    wavs = {u.id: u.wav.read_bytes() for u in utts}
    assert synthesise_corpus(tmp_path, "commands", sets=sets, workers=1, log=None).folder == corpus.folder
    (corpus.folder / "corpus.json").unlink()  # as if killed before the end, after one utterance
    (corpus.folder / "utts" / f"{utts[0].id}.json").unlink()
    utts[0].wav.unlink()
    lines: list[str] = []
    again = synthesise_corpus(tmp_path, "commands", sets=sets, workers=1, log=lines.append)
    assert "synthesising 1 of 2 utterances" in lines[0]
    assert {u.id: u.wav.read_bytes() for u in again.sets["train"]} == wavs  # the same bytes: deterministic
    assert load_corpus(corpus.folder).manifest == again.manifest
