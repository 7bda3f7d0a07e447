"""Kaldi's filterbank and MFCC features (`compute-fbank-feats`, `compute-mfcc-feats`) and CMVN (`apply-cmvn`).

Each step follows Kaldi's `feat/` code (feature-window.cc, mel-computations.cc, feature-fbank.cc,
feature-mfcc.cc), with its option names and defaults:

- frames of `frame_length_ms` every `frame_shift_ms`; with `snip_edges` (Kaldi's default) only whole frames,
  from sample 0; without, one frame per shift rounded to the nearest, centred, the signal reflected at its ends;
- per frame: dither (Gaussian noise of that standard deviation), the DC offset removed, the raw log energy
  (before pre-emphasis and window, floored at float epsilon), pre-emphasis, the window (`povey` and Kaldi's
  others), zero-padding to a power of two;
- the power spectrum (`use_power`, else magnitude) through triangular mel filters laid out in Kaldi's float
  arithmetic (mel = 1127 ln(1 + f / 700), bins between `low_freq` and `high_freq`; `high_freq <= 0` counts
  from the Nyquist frequency), floored at float epsilon and logged;
- MFCC: the DCT (orthonormal, first `num_ceps` rows), the cepstral lifter, C0 replaced by the energy with
  `use_energy`, and HTK's order with `htk_compat`.

Computed in float64 and returned as float32: equal to Kaldi's float computation to its precision (tests
compare with the outputs of Kaldi's programs on shipped waveforms). Dither draws from NumPy's generator
(`seed`), not Kaldi's: with `dither > 0` the values differ from Kaldi's by the noise itself; `dither=0` is
exact. VTLN warping is not offered (`vtln_warp` other than 1 is refused).
"""

from __future__ import annotations

import math
from typing import Any

import attrs
import numpy as np

from ..base.errors import SymnetError

__all__ = ["FeatureError", "FbankOptions", "MfccOptions", "apply_cmvn", "cmvn_stats", "fbank", "mfcc"]

_EPSILON = float(np.finfo(np.float32).eps)  # std::numeric_limits<float>::epsilon()
WINDOWS = ("hamming", "hanning", "povey", "rectangular", "sine", "blackman")


class FeatureError(SymnetError, ValueError):
    """Options or a waveform that Kaldi's feature programs refuse."""


def _positive(instance: Any, attribute: Any, value: float) -> None:
    if not value > 0:
        raise FeatureError(f"{attribute.name} must be positive, got {value!r}")


@attrs.frozen(kw_only=True)
class FbankOptions:
    """The options of Kaldi's `compute-fbank-feats` (FrameExtractionOptions, MelBanksOptions, FbankOptions), by
    Kaldi's names with `_` for `-`, and its defaults."""

    sample_frequency: float = attrs.field(default=16000.0, validator=_positive)
    frame_shift_ms: float = attrs.field(default=10.0, validator=_positive)
    frame_length_ms: float = attrs.field(default=25.0, validator=_positive)
    dither: float = 1.0
    preemphasis_coefficient: float = 0.97
    remove_dc_offset: bool = True
    window_type: str = "povey"
    round_to_power_of_two: bool = True
    blackman_coeff: float = 0.42
    snip_edges: bool = True
    num_mel_bins: int = 23
    low_freq: float = 20.0
    high_freq: float = 0.0
    use_energy: bool = False
    energy_floor: float = 0.0
    raw_energy: bool = True
    htk_compat: bool = False
    use_log_fbank: bool = True
    use_power: bool = True

    def __attrs_post_init__(self) -> None:
        if self.window_type not in WINDOWS:
            raise FeatureError(f"window_type {self.window_type!r}: Kaldi's windows are {', '.join(WINDOWS)}")
        if not 0.0 <= self.preemphasis_coefficient <= 1.0:
            raise FeatureError(f"preemphasis_coefficient must be in [0, 1], got {self.preemphasis_coefficient}")
        if self.dither < 0:
            raise FeatureError(f"dither must be >= 0, got {self.dither}")
        if self.num_mel_bins < 3:
            raise FeatureError(f"num_mel_bins must be at least 3 (Kaldi's MelBanks), got {self.num_mel_bins}")
        if self.window_size < 2 or self.window_shift < 1:
            raise FeatureError(
                f"frames of {self.frame_length_ms} ms every {self.frame_shift_ms} ms at {self.sample_frequency} Hz "
                f"are {self.window_size} samples every {self.window_shift}"
            )

    @property
    def window_shift(self) -> int:
        return int(self.sample_frequency * 0.001 * self.frame_shift_ms)

    @property
    def window_size(self) -> int:
        return int(self.sample_frequency * 0.001 * self.frame_length_ms)

    @property
    def padded_window_size(self) -> int:
        size = self.window_size
        return 1 << (size - 1).bit_length() if self.round_to_power_of_two else size


@attrs.frozen(kw_only=True)
class MfccOptions(FbankOptions):
    """The options of Kaldi's `compute-mfcc-feats`: FbankOptions' framing and mel banks, with MFCC's defaults."""

    num_ceps: int = 13
    cepstral_lifter: float = 22.0
    use_energy: bool = True

    def __attrs_post_init__(self) -> None:
        super().__attrs_post_init__()
        if not 1 <= self.num_ceps <= self.num_mel_bins:
            raise FeatureError(
                f"num_ceps must be between 1 and num_mel_bins ({self.num_mel_bins}), got {self.num_ceps}"
            )


def num_frames(num_samples: int, options: FbankOptions) -> int:
    """Kaldi's NumFrames (flush=True): whole frames with snip_edges, else samples / shift rounded."""
    shift, size = options.window_shift, options.window_size
    if options.snip_edges:
        return 0 if num_samples < size else 1 + (num_samples - size) // shift
    return (num_samples + shift // 2) // shift


def _frames(wave: np.ndarray, options: FbankOptions) -> np.ndarray:
    """`[frames, window_size]` samples of each frame (reflected at the ends without snip_edges)."""
    count = num_frames(len(wave), options)
    shift, size = options.window_shift, options.window_size
    starts = np.arange(count) * shift
    if not options.snip_edges:
        starts = starts + shift // 2 - size // 2
    index = starts[:, None] + np.arange(size)
    n = len(wave)
    for _ in range(8):  # reflection, repeated only for absurdly short signals (Kaldi's loop)
        index = np.where(index < 0, -index - 1, index)
        index = np.where(index >= n, 2 * n - 1 - index, index)
    return wave[index]


def _window(options: FbankOptions) -> np.ndarray:
    n = options.window_size
    a = 2 * math.pi / (n - 1)
    i = np.arange(n, dtype=np.float64)
    kind = options.window_type
    if kind == "hanning":
        return 0.5 - 0.5 * np.cos(a * i)
    if kind == "sine":
        return np.sin(0.5 * a * i)
    if kind == "hamming":
        return 0.54 - 0.46 * np.cos(a * i)
    if kind == "povey":
        return (0.5 - 0.5 * np.cos(a * i)) ** 0.85
    if kind == "rectangular":
        return np.ones(n)
    b = options.blackman_coeff
    return b - 0.5 * np.cos(a * i) + (0.5 - b) * np.cos(2 * a * i)


def mel_banks(options: FbankOptions) -> np.ndarray:
    """`[num_mel_bins, padded / 2]` triangular filters, computed in float32 as Kaldi's MelBanks computes them."""
    f32 = np.float32
    nyquist = 0.5 * options.sample_frequency
    low = options.low_freq
    high = options.high_freq if options.high_freq > 0 else nyquist + options.high_freq
    if low < 0 or low >= nyquist or high <= 0 or high > nyquist or high <= low:
        raise FeatureError(f"low_freq {low} and high_freq {high} do not fit the Nyquist frequency {nyquist}")
    padded = options.padded_window_size
    bins = padded // 2

    def mel(freq: Any) -> Any:
        return f32(1127.0) * np.log(f32(1.0) + np.asarray(freq, f32) / f32(700.0), dtype=f32)

    mel_low, mel_high = mel(f32(low)), mel(f32(high))
    delta = (mel_high - mel_low) / f32(options.num_mel_bins + 1)
    freqs = f32(options.sample_frequency / padded) * np.arange(bins, dtype=f32)
    mels = mel(freqs)
    out = np.zeros((options.num_mel_bins, bins), dtype=f32)
    for b in range(options.num_mel_bins):
        left, center, right = (mel_low + f32(b + k) * delta for k in (0, 1, 2))
        inside = (mels > left) & (mels < right)
        rising = (mels - left) / (center - left)
        falling = (right - mels) / (right - center)
        out[b] = np.where(inside, np.where(mels <= center, rising, falling), f32(0))
        if not inside.any():
            raise FeatureError(f"mel bin {b} has no FFT bin: num_mel_bins {options.num_mel_bins} is too large")
    return out


def _spectrum(wave: np.ndarray, options: FbankOptions, seed: int) -> tuple[np.ndarray, np.ndarray]:
    """(the mel filter outputs `[frames, bins]`, the log energy per frame) of a waveform."""
    frames = _frames(np.asarray(wave, np.float64), options).astype(np.float64)
    if options.dither:
        frames = frames + options.dither * np.random.default_rng(seed).standard_normal(frames.shape)
    if options.remove_dc_offset:
        frames = frames - frames.mean(axis=1, keepdims=True)
    raw_energy = np.log(np.maximum((frames**2).sum(axis=1), _EPSILON))
    p = options.preemphasis_coefficient
    if p:
        frames = np.concatenate([frames[:, :1] * (1 - p), frames[:, 1:] - p * frames[:, :-1]], axis=1)
    frames = frames * _window(options)
    padded = np.zeros((len(frames), options.padded_window_size))
    padded[:, : frames.shape[1]] = frames
    if not options.raw_energy:
        energy = np.log(np.maximum((padded**2).sum(axis=1), _EPSILON))
    else:
        energy = raw_energy
    spectrum = np.abs(np.fft.rfft(padded, axis=1)) ** 2
    if not options.use_power:
        spectrum = np.sqrt(spectrum)
    banks = mel_banks(options).astype(np.float64)
    energies = spectrum[:, : banks.shape[1]] @ banks.T
    if options.use_energy and options.energy_floor > 0:
        energy = np.maximum(energy, math.log(options.energy_floor))
    return energies, energy


def _waveform(wave: Any, options: FbankOptions, vtln_warp: float) -> np.ndarray:
    wave = np.asarray(wave)
    if wave.ndim != 1:
        raise FeatureError(f"a waveform is one channel [samples], got shape {wave.shape} (pick a channel first)")
    if not np.issubdtype(wave.dtype, np.number) or not np.isfinite(wave).all():
        raise FeatureError("the waveform has values that are not finite numbers")
    if vtln_warp != 1.0:
        raise FeatureError(f"vtln_warp {vtln_warp}: VTLN warping is not offered (only 1.0)")
    return wave


def fbank(wave: Any, options: FbankOptions | None = None, *, seed: int = 0, vtln_warp: float = 1.0) -> np.ndarray:
    """Kaldi's filterbank features `[frames, num_mel_bins (+1 with use_energy)]` (float32) of a one-channel
    waveform of `options.sample_frequency` (Kaldi's sample values: int16 as they are, not scaled to [-1, 1])."""
    options = options or FbankOptions()
    wave = _waveform(wave, options, vtln_warp)
    energies, energy = _spectrum(wave, options, seed)
    if options.use_log_fbank:
        energies = np.log(np.maximum(energies, _EPSILON))
    if options.use_energy:
        column = energy[:, None]
        energies = np.hstack([energies, column] if options.htk_compat else [column, energies])
    return energies.astype(np.float32)


def mfcc(wave: Any, options: MfccOptions | None = None, *, seed: int = 0, vtln_warp: float = 1.0) -> np.ndarray:
    """Kaldi's MFCCs `[frames, num_ceps]` (float32) of a one-channel waveform (as `fbank`)."""
    options = options or MfccOptions()
    wave = _waveform(wave, options, vtln_warp)
    energies, energy = _spectrum(wave, options, seed)
    logs = np.log(np.maximum(energies, _EPSILON))
    n = options.num_mel_bins
    k = np.arange(options.num_ceps)[:, None]
    dct = math.sqrt(2.0 / n) * np.cos(math.pi / n * (np.arange(n) + 0.5) * k)
    dct[0] = math.sqrt(1.0 / n)
    ceps = logs @ dct.T
    if options.cepstral_lifter:
        q = options.cepstral_lifter
        ceps = ceps * (1.0 + 0.5 * q * np.sin(math.pi * np.arange(options.num_ceps) / q))
    if options.use_energy:
        ceps[:, 0] = energy
    if options.htk_compat:
        c0 = ceps[:, 0] * (1.0 if options.use_energy else math.sqrt(2.0))
        ceps = np.hstack([ceps[:, 1:], c0[:, None]])
    return ceps.astype(np.float32)


def cmvn_stats(features: Any) -> np.ndarray:
    """Kaldi's CMVN statistics of one or more `[frames, dim]` matrices (`compute-cmvn-stats`): `[2, dim + 1]`,
    row 0 the sums and the frame count, row 1 the sums of squares (float64)."""
    matrices = [np.asarray(features)] if np.ndim(features) == 2 else [np.asarray(f) for f in features]
    dim = matrices[0].shape[1]
    stats = np.zeros((2, dim + 1))
    for m in matrices:
        if m.ndim != 2 or m.shape[1] != dim:
            raise FeatureError(f"CMVN statistics of matrices of dim {dim}, got one of shape {m.shape}")
        m = m.astype(np.float64)
        stats[0, :dim] += m.sum(axis=0)
        stats[0, dim] += len(m)
        stats[1, :dim] += (m**2).sum(axis=0)
    return stats


def apply_cmvn(features: Any, stats: Any, *, norm_means: bool = True, norm_vars: bool = False) -> np.ndarray:
    """Kaldi's `apply-cmvn`: `features` with the means of `stats` (`cmvn_stats`) subtracted, and with
    `norm_vars` scaled to unit variance (a variance floored at 1e-20, as Kaldi's ApplyCmvn); `norm_means=False`
    returns them as they are, and variances without means are refused (as Kaldi refuses them)."""
    features, stats = np.asarray(features, np.float32), np.asarray(stats, np.float64)
    if norm_vars and not norm_means:
        raise FeatureError("norm_vars without norm_means: Kaldi cannot normalise the variance but not the mean")
    if not norm_means:
        return features
    dim = features.shape[-1]
    if stats.shape != (2, dim + 1):
        raise FeatureError(f"CMVN statistics of shape {stats.shape} for features of dim {dim}")
    count = stats[0, dim]
    if count < 1.0:
        raise FeatureError(f"CMVN statistics of {count} frames: too few to normalise")
    mean = stats[0, :dim] / count
    if not norm_vars:
        return features + (-mean).astype(np.float32)  # Kaldi adds the float offset to float features
    scale = 1.0 / np.sqrt(np.maximum(stats[1, :dim] / count - mean**2, 1e-20))
    return features * scale.astype(np.float32) + (-(mean * scale)).astype(np.float32)
