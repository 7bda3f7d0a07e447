"""flite: an utterance's audio and its phones with their end times (`flite -psdur`), and the words' phones
found by matching the phone string to the words' pronunciations (flite says no word boundaries)."""

from __future__ import annotations

import os
import subprocess
import tempfile
from collections.abc import Mapping, Sequence

from .errors import CorpusError

__all__ = ["Segments", "flite_alone", "flite_say", "split_words"]

#: (phone, start, end) in seconds, in order, covering the audio
Segments = list[tuple[str, float, float]]

#: The most phone edits a word may differ by from the nearest of its pronunciations said alone, for its
#: utterance to be kept ("the" is "dh ax" alone and "dh iy" before a vowel; more means flite read it otherwise).
MAX_EDITS = 1


def flite_say(text: str, voice: str, wav: str, stretch: float, pitch_hz: float) -> Segments:
    """Synthesise `text` with flite `voice` into the wav file `wav`; its phone segments."""
    command = ["flite", "-voice", voice, "-t", text, "-o", wav, "-psdur", "--setf", f"duration_stretch={stretch:.3f}"]
    command += ["--setf", f"int_f0_target_mean={pitch_hz:.1f}"]
    try:
        out = subprocess.run(command, check=True, capture_output=True, text=True).stdout
    except FileNotFoundError:
        raise CorpusError(
            "flite voices need the flite synthesiser, which is not installed: apt-get install flite"
        ) from None
    segments, start = [], 0.0
    for item in out.split():
        phone, end = item.rsplit(":", 1)
        segments.append((phone, start, float(end)))
        start = float(end)
    return segments


def flite_alone(words: Sequence[str]) -> dict[str, tuple[str, ...]]:
    """flite's phones for each word said alone (its lexicon and letter-to-sound rules are every voice's)."""
    out = {}
    with tempfile.TemporaryDirectory() as folder:
        for word in words:
            segments = flite_say(word, "slt", os.path.join(folder, "w.wav"), 1.0, 170.0)
            out[word] = tuple(p for p, _, _ in segments if p != "pau")
    return out


def _edits(a: Sequence[str], b: Sequence[str]) -> int:
    row = list(range(len(b) + 1))
    for i, x in enumerate(a, 1):
        previous, row[0] = row[0], i
        for j, y in enumerate(b, 1):
            previous, row[j] = row[j], min(row[j] + 1, row[j - 1] + 1, previous + (x != y))
    return row[-1]


def split_words(
    words: Sequence[str], phones: Sequence[str], alone: Mapping[str, Sequence[Sequence[str]]]
) -> list[tuple[str, ...]] | None:
    """Each word's phones: the split of `phones` (no pauses) into one non-empty run per word that differs least
    from the words' pronunciations in `alone`; None when a word's run is more than MAX_EDITS edits from all."""
    n, m = len(words), len(phones)
    inf = n * m + m + 1
    cost = [[inf] * (m + 1) for _ in range(n + 1)]
    back = [[0] * (m + 1) for _ in range(n + 1)]
    cost[0][0] = 0
    for i, word in enumerate(words, 1):
        for j in range(i, m + 1):
            for k in range(i - 1, j):
                if cost[i - 1][k] < inf:
                    c = cost[i - 1][k] + min(_edits(p, phones[k:j]) for p in alone[word])
                    if c < cost[i][j]:
                        cost[i][j], back[i][j] = c, k
    if cost[n][m] >= inf:
        return None
    runs, j = [], m
    for i in range(n, 0, -1):
        runs.append(tuple(phones[back[i][j] : j]))
        j = back[i][j]
    runs.reverse()
    if any(min(_edits(p, r) for p in alone[w]) > MAX_EDITS for w, r in zip(words, runs)):
        return None
    return runs
