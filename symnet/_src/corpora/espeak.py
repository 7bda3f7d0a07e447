"""espeak-ng through its library (libespeak-ng, by ctypes): an utterance's audio and each phoneme's start from
the library's phoneme events, espeak's phonemes mapped to flite's (CMUdict's) phone set. (The `espeak-ng`
program prints phoneme timings only for mbrola voices, which Debian's main archive lacks; the events are the
synthesiser's own timings, the same ones it builds the audio from.)"""

from __future__ import annotations

import ctypes
import ctypes.util
import json
import os
import subprocess
import sys
from typing import Any

import numpy as np

from .errors import CorpusError
from .flite import Segments

__all__ = ["PHONES", "espeak_say", "espeak_version", "check_espeak_voice"]

#: espeak-ng's English phoneme mnemonics (its phsource/ph_english*) as flite's phones; a mnemonic that is an
#: r-coloured vowel keeps its r (the lexicon is phonemic, as CMUdict is, in every accent); "" marks no sound
#: (`;` palatalises the phoneme before it); "pau" pauses.
PHONES: dict[str, tuple[str, ...]] = {
    **{c: (c,) for c in ("b", "d", "f", "g", "k", "l", "m", "n", "p", "r", "s", "t", "v", "w", "z")},
    "D": ("dh",), "T": ("th",), "S": ("sh",), "Z": ("zh",), "N": ("ng",), "h": ("hh",), "j": ("y",),
    "tS": ("ch",), "dZ": ("jh",), "t#": ("t",), "t2": ("t",), "t[": ("t",), "d#": ("d",), "?": ("t",),
    "x": ("k",), "R": ("r",), "r-": ("r",), "w#": ("w",), "l/": ("l",), "n-": ("ax", "n"), "@L": ("ax", "l"),
    "0": ("aa",), "A:": ("aa",), "A": ("aa",), "A@": ("aa", "r"), "a": ("ae",), "aa": ("ae",), "a#": ("ax",),
    "a2": ("ax",), "@": ("ax",), "@2": ("ax",), "@5": ("ax",), "@-": ("ax",), "3": ("er",), "3:": ("er",),
    "VR": ("er",), "IR": ("er",), "V": ("ah",), "E": ("eh",), "e": ("eh",), "e@": ("eh", "r"), "I": ("ih",),
    "I#": ("ih",), "I2": ("ih",), "i@": ("ih",), "i@3": ("ih", "r"), "i": ("iy",), "i:": ("iy",), "eI": ("ey",),
    "aI": ("ay",), "aI2": ("ay",), "aI@": ("ay", "er"), "aU": ("aw",), "aU@": ("aw", "er"), "OI": ("oy",),
    "O": ("ao",), "O:": ("ao",), "O2": ("ao",), "O@": ("ao", "r"), "o@": ("ao", "r"), "oU": ("ow",), "o": ("ow",),
    "U": ("uh",), "U@": ("uh", "r"), "u:": ("uw",), "u": ("uw",), ";": (), "_": ("pau",), "_:": ("pau",),
    "_!": ("pau",), "_|": ("pau",),
}  # fmt: skip

_OUTPUT_SYNCHRONOUS, _PHONEME_EVENTS = 2, 1

#: One utterance, synthesised by a fresh process: espeak-ng's library carries state from one utterance to the
#: next (its output for the same text differs in the last bits), so a process of its own makes each the same
#: every time. Arguments: the library, voice, words a minute, pitch, text; out: a JSON line (sample rate and
#: phoneme events as [start sample, mnemonic]), then the int16 samples.
_CHILD = r"""
import ctypes, json, sys
lib = ctypes.CDLL(sys.argv[1])
class Id(ctypes.Union):
    _fields_ = [("number", ctypes.c_int), ("name", ctypes.c_char_p), ("string", ctypes.c_char * 8)]
class Event(ctypes.Structure):
    _fields_ = [("type", ctypes.c_int), ("unique_identifier", ctypes.c_uint), ("text_position", ctypes.c_int),
                ("length", ctypes.c_int), ("audio_position", ctypes.c_int), ("sample", ctypes.c_int),
                ("user_data", ctypes.c_void_p), ("id", Id)]
chunks, events = [], []
def collect(wav, count, event):
    if wav and count > 0:
        chunks.append(ctypes.string_at(wav, 2 * count))
    i = 0
    while event[i].type != 0:
        if event[i].type == 7:
            events.append((event[i].sample, bytes(event[i].id.string).rstrip(b"\0").decode()))
        i += 1
    return 0
callback = ctypes.CFUNCTYPE(ctypes.c_int, ctypes.POINTER(ctypes.c_short), ctypes.c_int, ctypes.POINTER(Event))(collect)
rate = lib.espeak_Initialize(2, 0, None, 1)
lib.espeak_SetSynthCallback(callback)
if lib.espeak_SetVoiceByName(sys.argv[2].encode()) != 0:
    sys.exit("espeak-ng did not take voice " + sys.argv[2])
lib.espeak_SetParameter(1, int(sys.argv[3]), 0)
lib.espeak_SetParameter(3, int(sys.argv[4]), 0)
text = sys.argv[5].encode()
lib.espeak_Synth(text, len(text) + 1, 0, 1, 0, 0, None, None)
lib.espeak_Synchronize()
sys.stdout.buffer.write(json.dumps({"rate": rate, "events": events}).encode() + b"\n" + b"".join(chunks))
"""
_state: dict[str, Any] = {}  # this process's library, its version and data folder, its languages


def _library() -> Any:
    if "lib" not in _state:
        name = ctypes.util.find_library("espeak-ng")
        if name is None:
            raise CorpusError("espeak voices need espeak-ng, which is not installed: apt-get install espeak-ng")
        lib = ctypes.CDLL(name)
        rate = lib.espeak_Initialize(_OUTPUT_SYNCHRONOUS, 0, None, _PHONEME_EVENTS)
        if rate <= 0:
            raise CorpusError(f"espeak-ng's library ({name}) did not start (espeak_Initialize gave {rate})")
        lib.espeak_Info.restype = ctypes.c_char_p
        data = ctypes.c_char_p()
        version = lib.espeak_Info(ctypes.byref(data)).decode()
        _state.update(lib=lib, name=name, version=version, data=(data.value or b"").decode())
    return _state["lib"]


def espeak_version() -> str:
    """espeak-ng's version; a CorpusError saying to install it when its library is missing."""
    _library()
    return f"espeak-ng {_state['version']}"


class _Voice(ctypes.Structure):
    _fields_ = [
        ("name", ctypes.c_char_p), ("languages", ctypes.c_void_p), ("identifier", ctypes.c_char_p),
        ("gender", ctypes.c_ubyte), ("age", ctypes.c_ubyte), ("variant", ctypes.c_ubyte), ("xx1", ctypes.c_ubyte),
        ("score", ctypes.c_int), ("spare", ctypes.c_void_p),
    ]  # fmt: skip


def _languages() -> dict[str, str]:
    """espeak-ng's languages (each voice's first, e.g. en-gb) -> the voice's file (gmw/en)."""
    if "languages" not in _state:
        lib = _library()
        lib.espeak_ListVoices.restype = ctypes.POINTER(ctypes.POINTER(_Voice))
        voices, out, i = lib.espeak_ListVoices(None), dict[str, str](), 0
        while voices[i]:
            voice = voices[i].contents
            language = ctypes.string_at(voice.languages + 1).decode()  # after the priority byte
            if not voice.identifier.startswith(b"mb/"):  # mbrola voices need mbrola
                out.setdefault(language, voice.identifier.decode())
            i += 1
        _state["languages"] = out
    return _state["languages"]


def check_espeak_voice(language: str, variant: str) -> str:
    """The name espeak-ng's library takes for `language+variant`; a CorpusError unless espeak-ng has the
    language and the variant (a file of its voices/!v folder)."""
    languages = _languages()
    if language not in languages:
        english = ", ".join(sorted(x for x in languages if x.startswith("en")))
        raise CorpusError(f"unknown espeak-ng voice {language!r} (its English ones: {english})")
    folder = os.path.join(_state["data"], "voices", "!v")
    if variant and not os.path.isfile(os.path.join(folder, variant)):
        known = ", ".join(sorted(os.listdir(folder))) if os.path.isdir(folder) else "none found"
        raise CorpusError(f"unknown espeak-ng variant {variant!r} (its variants: {known})")
    return languages[language] + (f"+{variant}" if variant else "")


def espeak_say(
    text: str, language: str, variant: str, stretch: float, pitch: float
) -> tuple[np.ndarray, int, Segments]:
    """Synthesise `text` at 175 / `stretch` words a minute and pitch `pitch` (0-99, the variant's range); its
    int16 samples, their rate and the phone segments (a phoneme mapped to two phones shares its time equally;
    an r after an r-coloured vowel, as Scottish English says it, joins the vowel's r)."""
    voice = check_espeak_voice(language, variant)
    command = [sys.executable, "-c", _CHILD, _state["name"], voice, str(round(175 / stretch)), str(round(pitch)), text]
    done = subprocess.run(command, capture_output=True)
    if done.returncode != 0:
        raise CorpusError(f"espeak-ng failed on {text!r} ({voice}): {done.stderr.decode(errors='replace').strip()}")
    header, _, raw = done.stdout.partition(b"\n")
    said = json.loads(header)
    samples, rate = np.frombuffer(raw, "<i2"), said["rate"]
    starts: list[tuple[int, str]] = []  # (start sample, phone)
    for sample, name in said["events"]:
        if name not in PHONES:
            raise CorpusError(f"espeak-ng phoneme {name!r} ({language}, in {text!r}) has no phone in the corpus's set")
        if PHONES[name] == ("r",) and starts and starts[-1][1] == "r":
            continue
        starts += [(max(sample, starts[-1][0] if starts else 0), p) for p in PHONES[name]]
    segments: Segments = [("pau", 0.0, starts[0][0] / rate)] if starts and starts[0][0] > 0 else []
    i = 0
    while i < len(starts):
        j = next((k for k in range(i, len(starts)) if starts[k][0] != starts[i][0]), len(starts))
        begin = starts[i][0]
        step = (max(starts[j][0] if j < len(starts) else len(samples), begin) - begin) / (j - i)
        for n in range(i, j):
            phone, a, b = starts[n][1], (begin + step * (n - i)) / rate, (begin + step * (n - i + 1)) / rate
            if phone == "pau" and segments and segments[-1][0] == "pau":
                segments[-1] = ("pau", segments[-1][1], b)
            else:
                segments.append((phone, a, b))
        i = j
    return samples, rate, segments
