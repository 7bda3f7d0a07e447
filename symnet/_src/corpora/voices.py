"""Voices: `flite:NAME` (one of flite's voices) or `espeak:LANGUAGE+VARIANT` (an espeak-ng English language
and one of its voice variants), the default training and held-out voices, and the check that a held-out
set shares no voice, language or variant with the training side."""

from __future__ import annotations

import shutil
import subprocess
from collections.abc import Iterable

import attrs

from .errors import CorpusError

__all__ = [
    "FLITE_VOICES",
    "TEST_VOICES",
    "TRAIN_VOICES",
    "Voice",
    "check_held_out",
    "flite_version",
    "parse_voice",
]

FLITE_VOICES = ("kal", "kal16", "awb", "rms", "slt")
ESPEAK_TRAIN = (
    ("en-us", "en-gb", "en-gb-x-rp", "en-gb-x-gbclan", "en-029"),
    ("m1", "m2", "m4", "m5", "f1", "f2", "f4"),
)
ESPEAK_TEST = (("en-gb-scotland", "en-us-nyc", "en-gb-x-gbcwmd"), ("m3", "m6", "f3", "f5"))

#: The default training voices: flite's kal (8 kHz, upsampled) and kal16 (the same speaker), awb and slt, and
#: 5 espeak-ng English accents times 7 variants.
TRAIN_VOICES = tuple(f"flite:{v}" for v in ("kal", "kal16", "awb", "slt")) + tuple(
    f"espeak:{lang}+{var}" for lang in ESPEAK_TRAIN[0] for var in ESPEAK_TRAIN[1]
)
#: The default held-out voices: flite's rms, and 3 other espeak-ng accents times 4 other variants.
TEST_VOICES = ("flite:rms",) + tuple(f"espeak:{lang}+{var}" for lang in ESPEAK_TEST[0] for var in ESPEAK_TEST[1])


@attrs.frozen
class Voice:
    """One synthetic speaker: `synth` "flite" or "espeak", `name` the flite voice or espeak-ng language,
    `variant` the espeak-ng variant ("" for flite, or for espeak-ng's default variant)."""

    synth: str
    name: str
    variant: str = ""

    def __str__(self) -> str:
        return f"{self.synth}:{self.name}" + (f"+{self.variant}" if self.variant else "")

    @property
    def speaker(self) -> str:
        """The Kaldi speaker id: the voice with `-` for `:` (no spaces, sorts as the utterance ids do)."""
        return str(self).replace(":", "-")


def parse_voice(text: str) -> Voice:
    """`flite:awb` or `espeak:en-gb-scotland+f3` as a Voice; a CorpusError for another form or an unknown flite
    voice (espeak-ng's languages and variants are checked when its library is loaded)."""
    synth, sep, rest = text.partition(":")
    if not sep or synth not in ("flite", "espeak") or not rest:
        raise CorpusError(f"voice {text!r}: want flite:NAME or espeak:LANGUAGE+VARIANT (e.g. espeak:en-us+f2)")
    if synth == "flite":
        if rest not in FLITE_VOICES:
            raise CorpusError(f"unknown flite voice {rest!r} in {text!r}: flite's voices are {', '.join(FLITE_VOICES)}")
        return Voice("flite", rest)
    name, _, variant = rest.partition("+")
    if not name or any(c in rest for c in " /\\"):
        raise CorpusError(f"voice {text!r}: want espeak:LANGUAGE+VARIANT (e.g. espeak:en-us+f2)")
    return Voice("espeak", name, variant)


def check_held_out(training: Iterable[Voice], held_out: Iterable[Voice]) -> None:
    """A CorpusError naming what a held-out voice shares with the training voices: a flite voice (kal and kal16
    count as one speaker), an espeak-ng language or an espeak-ng variant."""
    training, held_out = list(training), list(held_out)

    def speaker(v: Voice) -> str:
        return "kal" if v.synth == "flite" and v.name == "kal16" else v.name

    flite = {speaker(v) for v in training if v.synth == "flite"}
    languages = {v.name for v in training if v.synth == "espeak"}
    variants = {v.variant for v in training if v.synth == "espeak"}
    for v in held_out:
        if v.synth == "flite" and speaker(v) in flite:
            raise CorpusError(f"held-out voice {v} is heard in training (flite voice {v.name})")
        if v.synth == "espeak" and v.name in languages:
            raise CorpusError(f"held-out voice {v} is heard in training (espeak-ng language {v.name})")
        if v.synth == "espeak" and v.variant in variants:
            raise CorpusError(f"held-out voice {v} is heard in training (espeak-ng variant {v.variant or 'default'})")


def flite_version() -> str:
    """flite's version line; a CorpusError saying to install it when it is not on the PATH."""
    if shutil.which("flite") is None:
        raise CorpusError("flite voices need the flite synthesiser, which is not installed: apt-get install flite")
    out = subprocess.run(["flite", "--version"], capture_output=True, text=True).stdout  # exits 1 after printing it
    return next((line.strip() for line in out.splitlines() if "version" in line), out.strip())
