"""Synthesising a corpus: the plan of utterances (pure in the seed), the synthesis in a process pool, each
utterance's wav and record written whole, then the Kaldi data directories, the lexicon and the manifest
`corpus.json`, written last, whose presence says the folder is complete."""

from __future__ import annotations

import hashlib
import io
import json
import math
import multiprocessing
import time
import wave
from collections.abc import Callable, Iterable, Iterator, Mapping, Sequence
from concurrent.futures import ProcessPoolExecutor
from pathlib import Path
from typing import Any

import attrs
import numpy as np
from scipy.signal import resample_poly

from ..base.atomic import atomic_write
from .corpus import Corpus, load_corpus
from .errors import CorpusError
from .espeak import check_espeak_voice, espeak_say, espeak_version
from .flite import flite_alone, flite_say, split_words
from .kaldi_dir import write_set
from .tasks import TASKS, draw_words, vocabulary
from .voices import TEST_VOICES, TRAIN_VOICES, Voice, check_held_out, flite_version, parse_voice

__all__ = ["CorpusSet", "default_sets", "synthesise_corpus"]

FORMAT = 1  # the folder layout's version, part of the cache key
RATE = 16000


def _strings(voices: Iterable[str]) -> tuple[str, ...]:
    return tuple(voices)


@attrs.frozen
class CorpusSet:
    """One set: `count` utterances said by `voices` in turn (`flite:NAME` or `espeak:LANGUAGE+VARIANT`); a
    `held_out` set's voices share no flite voice, espeak-ng language or variant with the other sets'."""

    name: str
    voices: tuple[str, ...] = attrs.field(converter=_strings)
    count: int
    held_out: bool = False


def default_sets(train: int = 1200, test: int = 200) -> tuple[CorpusSet, ...]:
    """`train`: TRAIN_VOICES; `seen`: new utterances by the same voices; `unseen`: TEST_VOICES, held out."""
    return (
        CorpusSet("train", TRAIN_VOICES, train),
        CorpusSet("seen", TRAIN_VOICES, test),
        CorpusSet("unseen", TEST_VOICES, test, held_out=True),
    )


def _check_sets(sets: Sequence[CorpusSet]) -> dict[str, Voice]:
    voices = {v: parse_voice(v) for s in sets for v in s.voices}
    names = [s.name for s in sets]
    for s in sets:
        if not s.name.isidentifier() or names.count(s.name) > 1:
            raise CorpusError(f"set name {s.name!r}: want distinct names of letters, digits and _")
        if s.count < 1 or not s.voices:
            raise CorpusError(f"set {s.name!r}: want count >= 1 and at least one voice, got {s.count} and {s.voices}")
    training = [voices[v] for s in sets if not s.held_out for v in s.voices]
    for s in sets:
        if s.held_out:
            check_held_out(training, [voices[v] for v in s.voices])
    return voices


def _plan(task: str, sets: Sequence[CorpusSet], seed: int, options: Mapping[str, Any]) -> list[dict[str, Any]]:
    """Every utterance's set, voice, words, speed, pitch, noise level and noise seed: pure in `seed`."""
    plan = []
    for k, s in enumerate(sets):
        rng = np.random.default_rng([seed, k])
        for i in range(s.count):
            voice = parse_voice(s.voices[i % len(s.voices)])
            words = draw_words(task, rng, options["digits"])
            stretch, pitch, snr = rng.uniform(*options["stretch"]), rng.uniform(), rng.uniform(*options["snr_db"])
            plan.append(dict(id=f"{voice.speaker}-{s.name}-{i:05d}", set=s.name, voice=str(voice),
                             speaker=voice.speaker, words=words, stretch=stretch, pitch=pitch, snr=snr,
                             noise_seed=[seed, k, i]))  # fmt: skip
    return plan


def _wav_bytes(samples: np.ndarray) -> bytes:
    out = io.BytesIO()
    with wave.open(out, "wb") as w:
        w.setnchannels(1)
        w.setsampwidth(2)
        w.setframerate(RATE)
        w.writeframes(np.clip(np.rint(samples), -32768, 32767).astype("<i2").tobytes())
    return out.getvalue()


def _say(job: Mapping[str, Any], folder: Path) -> tuple[np.ndarray, list[tuple[str, float, float]]]:
    """The utterance's samples at RATE (float) and its phone segments."""
    voice, text = parse_voice(job["voice"]), " ".join(job["words"])
    if voice.synth == "flite":
        path = folder / "wav" / f".{job['id']}.flite.wav"
        try:
            segments = flite_say(text, voice.name, str(path), job["stretch"], 90 + 120 * job["pitch"])
            with wave.open(str(path), "rb") as w:
                rate, data = w.getframerate(), w.readframes(w.getnframes())
        finally:
            path.unlink(missing_ok=True)
        samples = np.frombuffer(data, "<i2").astype(np.float64)
    else:
        raw, rate, segments = espeak_say(text, voice.name, voice.variant, job["stretch"], 30 + 40 * job["pitch"])
        samples = raw.astype(np.float64)
    if rate != RATE:
        g = math.gcd(rate, RATE)
        samples = resample_poly(samples, RATE // g, rate // g)
    return samples, segments


def synthesise_one(
    job: Mapping[str, Any], folder: Path, alone: Mapping[str, Mapping[str, list[tuple[str, ...]]]]
) -> str:
    """Make one utterance: its wav (noise added) and its record `utts/ID.json`, each written whole, the record
    last; an utterance whose phones are not its words' (see `split_words`) is recorded as left out. Its id."""
    samples, segments = _say(job, folder)
    voice = parse_voice(job["voice"])
    spoken = [p for p, _, _ in segments if p != "pau"]
    prons = split_words(job["words"], spoken, alone["flite" if voice.synth == "flite" else voice.name])
    record = {k: job[k] for k in ("id", "set", "voice", "speaker", "words")}
    if prons is None:
        record["left_out"] = (
            f"its phones {' '.join(spoken)} are not its words' (a word over one edit from those said alone)"
        )
    else:
        rng = np.random.default_rng(job["noise_seed"])
        noise = rng.standard_normal(len(samples)) * np.sqrt(np.mean(samples**2) / 10 ** (job["snr"] / 10))
        atomic_write(folder / "wav" / f"{job['id']}.wav", _wav_bytes(samples + noise))
        end = len(samples) / RATE
        record.update(
            samples=len(samples), prons=prons, segments=[(p, min(s, end), min(e, end)) for p, s, e in segments]
        )
    atomic_write(folder / "utts" / f"{job['id']}.json", json.dumps(record).encode())
    return job["id"]


def _run(args: tuple[Mapping[str, Any], Path, Mapping[str, Any]]) -> str:
    return synthesise_one(*args)


def _alone(task: str, voices: Sequence[Voice]) -> dict[str, dict[str, list[tuple[str, ...]]]]:
    """Each word's phones said alone: by flite (one lexicon for all its voices) and by each espeak-ng language
    in use (at its default variant, speed and pitch: variants change the voice, not the phonemes)."""
    words = vocabulary(task)
    out: dict[str, dict[str, list[tuple[str, ...]]]] = {}
    if any(v.synth == "flite" for v in voices):
        out["flite"] = {w: [p] for w, p in flite_alone(words).items()}
    for language in sorted({v.name for v in voices if v.synth == "espeak"}):
        out[language] = {
            w: [tuple(p for p, _, _ in espeak_say(w, language, "", 1.0, 50)[2] if p != "pau")] for w in words
        }
    return out


def _versions(voices: Sequence[Voice]) -> dict[str, str]:
    """The synthesisers' versions (part of the cache key); a CorpusError naming a missing one or unknown voice."""
    versions = {}
    if any(v.synth == "flite" for v in voices):
        versions["flite"] = flite_version()
    if any(v.synth == "espeak" for v in voices):
        versions["espeak"] = espeak_version()
        for v in voices:
            if v.synth == "espeak":
                check_espeak_voice(v.name, v.variant)
    return versions


def synthesise_corpus(
    root: str | Path,
    task: str = "digits",
    *,
    sets: Sequence[CorpusSet] | None = None,
    seed: int = 0,
    workers: int = 2,
    digits: tuple[int, int] = (1, 7),
    stretch: tuple[float, float] = (0.8, 1.25),
    snr_db: tuple[float, float] = (10.0, 30.0),
    log: Callable[[str], None] | None = print,
) -> Corpus:
    """Synthesise `task` ("digits" or "commands") into `root/TASK-KEY/`, KEY a hash of every setting and the
    synthesisers' versions, and load it (a `Corpus`). An existing complete folder is loaded as it is; a folder a
    killed build left is completed, making only the utterances it lacks. `sets` defaults to `default_sets()`;
    each utterance's speed is its voice's times 1 / uniform(`stretch`), its pitch uniform over a range of the
    voice's, white noise at uniform(`snr_db`) dB SNR; digit strings have `digits` digits (inclusive). `workers`
    processes synthesise; `log` gets progress lines (None: quiet)."""
    if task not in TASKS:
        raise CorpusError(f"unknown task {task!r}: the tasks are {', '.join(TASKS)}")
    if not 1 <= digits[0] <= digits[1] or not 0 < stretch[0] <= stretch[1] or snr_db[0] > snr_db[1] or workers < 1:
        raise CorpusError(
            f"want 1 <= digits, 0 < stretch, snr_db low <= high, workers >= 1: "
            f"got {digits}, {stretch}, {snr_db}, {workers}"
        )
    sets = tuple(default_sets() if sets is None else sets)
    voices = list(_check_sets(sets).values())
    options = {"digits": list(digits), "stretch": list(stretch), "snr_db": list(snr_db)}
    settings = {"format": FORMAT, "task": task, "seed": seed, "options": options, "versions": _versions(voices),
                "sets": [attrs.asdict(s) for s in sets]}  # fmt: skip
    key = hashlib.sha256(json.dumps(settings, sort_keys=True).encode()).hexdigest()[:12]
    folder = Path(root) / f"{task}-{key}"
    if (folder / "corpus.json").exists():
        return load_corpus(folder)
    started = time.perf_counter()
    plan = _plan(task, sets, seed, options)
    (folder / "wav").mkdir(parents=True, exist_ok=True)
    (folder / "utts").mkdir(exist_ok=True)
    alone = _alone(task, voices)
    todo = [job for job in plan if not (folder / "utts" / f"{job['id']}.json").exists()]
    say = log or (lambda line: None)
    say(f"{folder}: synthesising {len(todo)} of {len(plan)} utterances with {workers} processes")
    args = [(job, folder, alone) for job in todo]
    if workers == 1:
        done: Iterator[str] = map(_run, args)
    else:
        pool = ProcessPoolExecutor(workers, mp_context=multiprocessing.get_context("spawn"))
        done = pool.map(_run, args, chunksize=4)
    try:
        for n, _ in enumerate(done, 1):
            if n % max(len(todo) // 10, 1) == 0 or n == len(todo):
                say(f"  {n}/{len(todo)} utterances, {time.perf_counter() - started:.0f} s")
    finally:
        if workers > 1:
            pool.shutdown(cancel_futures=True)
    _assemble(folder, settings, plan, alone, time.perf_counter() - started)
    return load_corpus(folder)


def _assemble(
    folder: Path, settings: dict[str, Any], plan: Sequence[Mapping[str, Any]], alone: Mapping, seconds: float
) -> None:
    """The Kaldi directories, lexicon.txt, phones.txt, then corpus.json, from the utterances' records."""
    records = [json.loads((folder / "utts" / f"{job['id']}.json").read_text()) for job in plan]
    kept = [r for r in records if "left_out" not in r]
    lexicon = {(w, tuple(p)) for prons in alone.values() for w, ps in prons.items() for p in ps}
    lexicon |= {(w, tuple(p)) for r in kept for w, p in zip(r["words"], r["prons"])}
    phones = sorted({p for _, pron in lexicon for p in pron} | {p for r in kept for p, _, _ in r["segments"]} | {"pau"})
    phone_ids = {p: i for i, p in enumerate(phones, 1)}
    summary = []
    for s in settings["sets"]:
        mine = [r for r in kept if r["set"] == s["name"]]
        write_set(folder / s["name"], mine, phone_ids)
        left = [r for r in records if r["set"] == s["name"] and "left_out" in r]
        speakers, hours = len({r["speaker"] for r in mine}), sum(r["samples"] for r in mine) / RATE / 3600
        summary.append({**s, "utterances": len(mine), "left_out": len(left), "speakers": speakers, "hours": hours})
    atomic_write(folder / "lexicon.txt", "".join(f"{w} {' '.join(p)}\n" for w, p in sorted(lexicon)).encode())
    atomic_write(folder / "phones.txt", "".join(f"{p} {i}\n" for p, i in [("<eps>", 0), *phone_ids.items()]).encode())
    manifest = {**settings, "sets": summary, "build_seconds": round(seconds, 1)}
    atomic_write(folder / "corpus.json", json.dumps(manifest, indent=1).encode())
