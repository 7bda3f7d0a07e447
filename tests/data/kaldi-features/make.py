"""Kaldi's features of a few synthetic waveforms, made by Kaldi's own programs, for tests/features.

    python tests/data/kaldi-features/make.py --kaldi-bin /path/to/kaldi-bin/bin

Writes wav files (16 kHz and 8 kHz, 16-bit: chirps with harmonics and noise, one shorter than a frame) and,
per option set of `OPTIONS`, Kaldi's output as a binary archive (`NAME.ark`), its command line
(`commands.txt`), and CMVN statistics and normalised features. The tests read these files only; Kaldi is
needed only to remake them.
"""

from __future__ import annotations

import argparse
import subprocess
from pathlib import Path

import numpy as np

from symnet.features import write_wav

HERE = Path(__file__).resolve().parent

#: name -> (program, sample rate, options); every set has --dither=0 (Kaldi's dither draws its own noise).
OPTIONS = {
    "fbank-default": ("compute-fbank-feats", 16000, []),
    "fbank-80-nosnip": ("compute-fbank-feats", 16000, ["--num-mel-bins=80", "--snip-edges=false"]),
    "fbank-energy-hamming": (
        "compute-fbank-feats", 16000,
        ["--num-mel-bins=40", "--low-freq=40", "--high-freq=-200", "--use-energy=true", "--window-type=hamming",
         "--preemphasis-coefficient=0.0", "--remove-dc-offset=false"],
    ),
    "fbank-htk-blackman": (
        "compute-fbank-feats", 16000,
        ["--htk-compat=true", "--use-energy=true", "--raw-energy=false", "--energy-floor=1.0", "--use-power=false",
         "--window-type=blackman", "--round-to-power-of-two=false"],
    ),
    "fbank-8k-linear": (
        "compute-fbank-feats", 8000,
        ["--sample-frequency=8000", "--num-mel-bins=15", "--window-type=rectangular", "--use-log-fbank=false"],
    ),
    "mfcc-default": ("compute-mfcc-feats", 16000, []),
    "mfcc-hires": (
        "compute-mfcc-feats", 16000,
        ["--use-energy=false", "--num-mel-bins=40", "--num-ceps=40", "--low-freq=20", "--high-freq=-400"],
    ),
    "mfcc-htk-nolifter": (
        "compute-mfcc-feats", 16000,
        ["--htk-compat=true", "--use-energy=false", "--cepstral-lifter=0", "--snip-edges=false",
         "--window-type=hanning", "--frame-shift=15", "--frame-length=20"],
    ),
    "mfcc-htk-sine": (
        "compute-mfcc-feats", 16000,
        ["--htk-compat=true", "--window-type=sine", "--low-freq=100", "--num-ceps=20", "--energy-floor=2.0"],
    ),
    "mfcc-8k": ("compute-mfcc-feats", 8000, ["--sample-frequency=8000", "--num-mel-bins=20", "--high-freq=3700"]),
}  # fmt: skip


def waveform(rng: np.random.Generator, rate: int, seconds: float) -> np.ndarray:
    t = np.arange(int(rate * seconds)) / rate
    f0 = 120 + 80 * t / seconds  # a rising pitch with harmonics, amplitude-modulated, in noise
    phase = 2 * np.pi * np.cumsum(f0) / rate
    voice = sum(np.sin(k * phase) / k for k in range(1, 12)) * (0.6 + 0.4 * np.sin(2 * np.pi * 3 * t))
    return 3000 * voice + 300 * rng.standard_normal(len(t)) + 50  # a DC offset too


def main() -> None:
    p = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    p.add_argument("--kaldi-bin", required=True)
    bin_ = Path(p.parse_args().kaldi_bin)
    rng = np.random.default_rng(0)
    for rate in (16000, 8000):
        lines = []
        for i, seconds in enumerate((1.3, 0.7, 0.021 if rate == 16000 else 0.031, 1.0)):
            name = HERE / f"utt{i}-{rate // 1000}k.wav"
            write_wav(name, waveform(rng, rate, seconds), rate)
            lines.append(f"utt{i} {name.name}\n")
        (HERE / f"wav-{rate // 1000}k.scp").write_text("".join(lines))
    commands = []
    for name, (program, rate, options) in OPTIONS.items():
        command = [str(bin_ / program), "--dither=0", *options, f"scp:wav-{rate // 1000}k.scp", f"ark:{name}.ark"]
        subprocess.run(command, cwd=HERE, check=True, capture_output=True)
        commands.append(" ".join([program, "--dither=0", *options, f"scp:wav-{rate // 1000}k.scp", f"ark:{name}.ark"]))
    # CMVN of the utterances that have frames (Kaldi's compute-cmvn-stats asserts on an empty matrix)
    subprocess.run(
        [str(bin_ / "copy-feats"), "ark:fbank-default.ark", "ark,scp:cmvn-all.ark,cmvn-all.scp"], cwd=HERE, check=True
    )
    kept = [line for line in (HERE / "cmvn-all.scp").read_text().splitlines() if not line.startswith("utt2 ")]
    subprocess.run(
        [str(bin_ / "copy-feats"), "scp:-", "ark:cmvn-input.ark"], cwd=HERE, check=True,
        input="".join(line + "\n" for line in kept).encode(),
    )  # fmt: skip
    for name in ("cmvn-all.ark", "cmvn-all.scp"):
        (HERE / name).unlink()
    cmvn = [
        ["compute-cmvn-stats", "ark:cmvn-input.ark", "ark:cmvn.ark"],
        ["apply-cmvn", "ark:cmvn.ark", "ark:cmvn-input.ark", "ark:cmvn-means.ark"],
        ["apply-cmvn", "--norm-vars=true", "ark:cmvn.ark", "ark:cmvn-input.ark", "ark:cmvn-vars.ark"],
    ]
    for command in cmvn:
        subprocess.run([str(bin_ / command[0]), *command[1:]], cwd=HERE, check=True, capture_output=True)
        commands.append(" ".join(command))
    (HERE / "commands.txt").write_text("\n".join(commands) + "\n")


if __name__ == "__main__":
    main()
