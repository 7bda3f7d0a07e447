"""A synthesised corpus read back from its folder: the sets' utterances with their words, phone segments and
frame labels, the lexicon and the phone set, and the sets as `Dataset`s of filterbank features."""

from __future__ import annotations

import json
from collections.abc import Mapping
from pathlib import Path
from typing import Any

import attrs
import numpy as np

from ..datasets import Dataset
from ..features.kaldi import FbankOptions, fbank
from ..features.wav import read_wav
from .errors import CorpusError
from .kaldi_dir import STATES, frame_segments, read_set, read_table

__all__ = ["Corpus", "Utterance", "load_corpus"]


@attrs.frozen
class Utterance:
    """One utterance: its id, speaker (the voice, as a Kaldi speaker id), words, wav file, phone segments
    `(phone, start, end)` in seconds, and per 10 ms frame its phone id and state (0 to 2), int32."""

    id: str
    speaker: str
    words: tuple[str, ...]
    wav: Path
    segments: tuple[tuple[str, float, float], ...] = attrs.field(repr=False)
    phone_ids: np.ndarray = attrs.field(repr=False, eq=False)
    states: np.ndarray = attrs.field(repr=False, eq=False)

    @property
    def num_frames(self) -> int:
        return len(self.phone_ids)


@attrs.frozen
class Corpus:
    """A corpus folder's sets (name -> utterances sorted by id), lexicon (word -> pronunciations), phones (the
    phone set, sorted; phone id k is `phones[k - 1]`, 0 being `<eps>`) and manifest (corpus.json: the settings,
    the synthesisers' versions, per set its voices, utterances, utterances left out and hours)."""

    folder: Path
    sets: Mapping[str, tuple[Utterance, ...]] = attrs.field(repr=False)
    lexicon: Mapping[str, tuple[tuple[str, ...], ...]] = attrs.field(repr=False)
    phones: tuple[str, ...]
    manifest: Mapping[str, Any] = attrs.field(repr=False)

    @property
    def num_pdfs(self) -> int:
        """Labels of `state_labels`: STATES per phone."""
        return len(self.phones) * STATES

    def pronunciations(self, word: str) -> tuple[tuple[str, ...], ...]:
        """`word`'s pronunciations; a CorpusError for a word not in the lexicon."""
        if word not in self.lexicon:
            raise CorpusError(f"{word!r} is not in the lexicon of {self.folder} ({len(self.lexicon)} words)")
        return self.lexicon[word]

    def phone_lengths(self, utterance: Utterance) -> np.ndarray:
        """`[instances, 2]` int64 (phone id, frames) of each phone segment of `utterance` that has frames, in
        order, as `ali-to-phones --write-lengths` writes them (chain training's input): a phone said twice in a row
        is two instances. A frame belongs to the first segment ending after its centre, as the frame labels are
        made; frames past the last segment are one more pause."""
        names = [phone for phone, _, _ in utterance.segments] + ["pau"]
        segment = frame_segments(utterance.segments, utterance.num_frames)
        starts = np.flatnonzero(np.diff(segment, prepend=-1))
        lengths = np.diff(np.append(starts, utterance.num_frames))
        ids = [self.phones.index(names[s]) + 1 for s in segment[starts].tolist()]
        return np.stack([np.asarray(ids), lengths], axis=1).astype(np.int64)

    def state_labels(self, utterance: Utterance) -> np.ndarray:
        """Per frame, int32: (phone id - 1) * 3 + state, in [0, num_pdfs)."""
        return (utterance.phone_ids - 1) * STATES + utterance.states

    def dataset(self, name: str, options: FbankOptions | None = None, *, subtract_mean: bool = True) -> Dataset:
        """Set `name`'s filterbank features (`options`: 40 bins, no dither, by default), each utterance's mean
        subtracted unless `subtract_mean` is False, and its frames' state labels."""
        options = options or FbankOptions(num_mel_bins=40, dither=0.0)
        if (options.frame_shift_ms, options.frame_length_ms, options.snip_edges) != (10.0, 25.0, True):
            raise CorpusError("the labels are of 25 ms frames every 10 ms with snip_edges: options must keep those")
        feats, labels = [], []
        for u in self.utterances(name):
            f = fbank(read_wav(u.wav)[0], options)
            feats.append(f - f.mean(axis=0) if subtract_mean else f)
            labels.append(self.state_labels(u))
        return Dataset(feats, labels)

    def utterances(self, name: str) -> tuple[Utterance, ...]:
        """Set `name`'s utterances; a CorpusError naming the sets there are for another name."""
        if name not in self.sets:
            raise CorpusError(f"{self.folder} has no set {name!r} (its sets: {', '.join(self.sets)})")
        return self.sets[name]


def _utterances(
    folder: Path, tables: Mapping[str, Mapping[str, list[str]]], phones: tuple[str, ...]
) -> tuple[Utterance, ...]:
    out = []
    for uid, (path,) in sorted(tables["wav.scp"].items()):
        row = tables["phones.ctm"][uid]
        segments = tuple((p, float(s), float(s) + float(d)) for s, d, p in zip(row[0::3], row[1::3], row[2::3]))
        phone_ids = np.array(tables["phone_ali.txt"][uid], np.int32)
        states = np.array(tables["state_ali.txt"][uid], np.int32)
        if len(phone_ids) != len(states) or not set(phone_ids) <= set(range(1, len(phones) + 1)):
            raise CorpusError(f"{folder}: {uid}'s phone and state alignments differ in length or name unknown phones")
        unknown = [p for p, _, _ in segments if p not in phones]
        if unknown:
            raise CorpusError(f"{folder / 'phones.ctm'}: {uid} has phone {unknown[0]!r}, not in phones.txt")
        (speaker,) = tables["utt2spk"][uid]
        out.append(
            Utterance(uid, speaker, tuple(tables["text"][uid]), folder.parent / path, segments, phone_ids, states)
        )
    return tuple(out)


def load_corpus(folder: str | Path) -> Corpus:
    """The corpus in `folder` (made by `synthesise_corpus`, or shipped); a CorpusError if its manifest is missing
    (a build that did not finish: run it again to complete it), a file is missing or damaged, or a transcript
    has a word that is not in the lexicon."""
    folder = Path(folder)
    try:
        manifest = json.loads((folder / "corpus.json").read_text())
    except OSError:
        raise CorpusError(
            f"{folder}: no corpus.json, so not a complete corpus (a build that stopped? run it again)"
        ) from None
    lexicon: dict[str, list[tuple[str, ...]]] = {}
    for line in (folder / "lexicon.txt").read_text().splitlines():
        word, *pron = line.split()
        lexicon.setdefault(word, []).append(tuple(pron))
    ids = read_table(folder / "phones.txt")
    phones = tuple(p for p, (i,) in sorted(ids.items(), key=lambda item: int(item[1][0])) if i != "0")
    sets = {}
    for s in manifest["sets"]:
        utts = _utterances(folder / s["name"], read_set(folder / s["name"]), phones)
        for u in utts:
            missing = [w for w in u.words if w not in lexicon]
            if missing:
                raise CorpusError(
                    f"{folder / s['name'] / 'text'}: {u.id} says {missing[0]!r}, which is not in lexicon.txt"
                )
        sets[s["name"]] = utts
    return Corpus(folder, sets, {w: tuple(p) for w, p in lexicon.items()}, phones, manifest)
