"""A corpus set as a Kaldi data directory, and the alignment files beside it.

Per set, in `FOLDER/SET/`: `wav.scp` (`UTT wav/UTT.wav`, the path relative to the corpus folder), `text`,
`utt2spk`, `spk2utt` (Kaldi's, sorted), `phones.ctm` (`UTT 1 START DURATION PHONE`, seconds to the
millisecond, every phone and pause in order), `phone_ali.txt` and `state_ali.txt` (`UTT` then one integer per
10 ms frame: the phone's id in `phones.txt`, and which third of the phone's frames the frame is in, 0 to 2).
The frames are Kaldi's (25 ms every 10 ms, `snip_edges`: as many as `symnet.features.fbank` gives); a frame's
phone is the one its centre (10 t + 12.5 ms) falls in, a pause after the last phone."""

from __future__ import annotations

from collections.abc import Mapping, Sequence
from pathlib import Path

import numpy as np

from ..base.atomic import atomic_write
from ..features.kaldi import FbankOptions, num_frames
from .errors import CorpusError
from .flite import Segments

__all__ = ["STATES", "frame_labels", "frame_segments", "read_set", "read_table", "write_set"]

STATES = 3  # label states per phone: thirds of its frames
_FILES = ("wav.scp", "text", "utt2spk", "spk2utt", "phones.ctm", "phone_ali.txt", "state_ali.txt")


def frame_segments(segments: Sequence[tuple[str, float, float]], frames: int) -> np.ndarray:
    """Each of `frames` 10 ms frames' segment: the first ending after the frame's centre (`len(segments)` for a
    frame past the last segment, whose label is a pause)."""
    centres = (np.arange(frames) * 160 + 200) / 16000
    ends = np.array([e for _, _, e in segments])
    return np.searchsorted(ends, centres, side="right")


def frame_labels(segments: Segments, samples: int, phone_ids: Mapping[str, int]) -> tuple[np.ndarray, np.ndarray]:
    """Each 10 ms frame's phone id and state (0 to STATES - 1), int32 `[frames]` each."""
    frames = num_frames(samples, FbankOptions())
    which = frame_segments(segments, frames)
    phones = np.full(frames, phone_ids["pau"], np.int32)
    states = np.full(frames, STATES - 1, np.int32)
    for k, (phone, _, _) in enumerate(segments):
        at = np.flatnonzero(which == k)
        phones[at] = phone_ids[phone]
        states[at] = np.arange(len(at)) * STATES // max(len(at), 1)
    return phones, states


def _lines(rows: Sequence[str]) -> bytes:
    return "".join(f"{row}\n" for row in rows).encode()


def write_set(folder: Path, utterances: Sequence[Mapping], phone_ids: Mapping[str, int]) -> None:
    """`folder`'s Kaldi files for `utterances` (dicts: id, speaker, words, segments, samples), each written whole."""
    utts = sorted(utterances, key=lambda u: u["id"])
    speakers: dict[str, list[str]] = {}
    for u in utts:
        speakers.setdefault(u["speaker"], []).append(u["id"])
    labels = [frame_labels(u["segments"], u["samples"], phone_ids) for u in utts]
    files = {
        "wav.scp": [f"{u['id']} wav/{u['id']}.wav" for u in utts],
        "text": [f"{u['id']} {' '.join(u['words'])}" for u in utts],
        "utt2spk": [f"{u['id']} {u['speaker']}" for u in utts],
        "spk2utt": [f"{s} {' '.join(ids)}" for s, ids in sorted(speakers.items())],
        "phones.ctm": [f"{u['id']} 1 {s:.3f} {e - s:.3f} {p}" for u in utts for p, s, e in u["segments"]],
        "phone_ali.txt": [f"{u['id']} {' '.join(map(str, p))}" for u, (p, _) in zip(utts, labels)],
        "state_ali.txt": [f"{u['id']} {' '.join(map(str, s))}" for u, (_, s) in zip(utts, labels)],
    }
    folder.mkdir(parents=True, exist_ok=True)
    for name in _FILES:
        atomic_write(folder / name, _lines(files[name]))


def read_table(path: Path) -> dict[str, list[str]]:
    """A Kaldi table file (`KEY VALUE...` lines) as key -> values, in order; a CorpusError if it is missing."""
    try:
        text = path.read_text(encoding="utf-8")
    except OSError as e:
        raise CorpusError(f"{path}: cannot read it ({e.strerror or e})") from None
    table: dict[str, list[str]] = {}
    for number, line in enumerate(text.splitlines(), 1):
        key, *values = line.split()
        if key in table:
            raise CorpusError(f"{path}:{number}: {key} appears twice")
        table[key] = values
    return table


def read_set(folder: Path) -> dict[str, dict[str, list[str]]]:
    """A set's files as tables (the ctm's rows grouped by utterance), checked to name the same utterances."""
    tables = {name: read_table(folder / name) for name in _FILES if name not in ("spk2utt", "phones.ctm")}
    ctm: dict[str, list[str]] = {}
    path = folder / "phones.ctm"
    try:
        rows = path.read_text(encoding="utf-8").splitlines()
    except OSError as e:
        raise CorpusError(f"{path}: cannot read it ({e.strerror or e})") from None
    for number, line in enumerate(rows, 1):
        fields = line.split()
        if len(fields) != 5:
            raise CorpusError(f"{path}:{number}: want UTT 1 START DURATION PHONE, got {line!r}")
        ctm.setdefault(fields[0], []).extend(fields[2:])
    tables["phones.ctm"] = ctm
    ids = set(tables["wav.scp"])
    for name, table in tables.items():
        if set(table) != ids:
            odd = sorted(set(table) ^ ids)[0]
            raise CorpusError(f"{folder / name}: its utterances are not wav.scp's (first differing: {odd})")
    return tables
