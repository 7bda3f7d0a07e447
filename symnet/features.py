"""Acoustic features as Kaldi's programs compute them: filterbanks (`compute-fbank-feats`), MFCCs
(`compute-mfcc-feats`) and CMVN (`compute-cmvn-stats`, `apply-cmvn`), from one-channel waveforms; see
`symnet._src.features.kaldi` for each step and docs/features.md.

    wave, rate = read_wav("utt1.wav")
    feats = fbank(wave, FbankOptions(num_mel_bins=80, dither=0.0))
"""

from symnet._src.base import exports as _exports

__getattr__, __dir__, __all__ = _exports.attach(__name__, __file__, eager=True)
