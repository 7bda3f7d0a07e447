"""Acoustic features as Kaldi's programs compute them: filterbanks (`compute-fbank-feats`), MFCCs
(`compute-mfcc-feats`) and CMVN (`compute-cmvn-stats`, `apply-cmvn`), from one-channel waveforms; see
`symnet._src.features.kaldi` for each step and docs/features.md.

    wave, rate = read_wav("utt1.wav")
    feats = fbank(wave, FbankOptions(num_mel_bins=80, dither=0.0))
"""

from symnet._src.features.kaldi import (
    FbankOptions,
    FeatureError,
    MfccOptions,
    apply_cmvn,
    cmvn_stats,
    fbank,
    mfcc,
)
from symnet._src.features.wav import read_wav, write_wav

__all__ = [
    "FbankOptions",
    "FeatureError",
    "MfccOptions",
    "apply_cmvn",
    "cmvn_stats",
    "fbank",
    "mfcc",
    "read_wav",
    "write_wav",
]
