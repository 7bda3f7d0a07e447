"""16-bit PCM wav files read and written as Kaldi's programs read them: samples as float32 with the int16 values
(not scaled to [-1, 1]), the sample rate from the header."""

from __future__ import annotations

import os
import wave
from typing import Any

import numpy as np

from .kaldi import FeatureError

__all__ = ["read_wav", "write_wav"]


def read_wav(path: str | os.PathLike[str]) -> tuple[np.ndarray, int]:
    """`(samples, sample_rate)` of a 16-bit PCM wav file: samples float32 `[n]` for one channel, `[n, channels]`
    for more; a FeatureError names the file and what is wrong (another sample width, a damaged header)."""
    try:
        with wave.open(os.fspath(path), "rb") as w:
            channels, width, rate = w.getnchannels(), w.getsampwidth(), w.getframerate()
            if width != 2:
                raise FeatureError(f"{path}: {8 * width}-bit samples; symnet reads 16-bit PCM wav files")
            data = w.readframes(w.getnframes())
    except (wave.Error, EOFError) as e:
        raise FeatureError(f"{path}: not a PCM wav file ({e})") from None
    except OSError as e:
        raise FeatureError(f"{path}: cannot read it ({e.strerror or e})") from None
    samples = np.frombuffer(data[: len(data) // (2 * channels) * 2 * channels], dtype="<i2").astype(np.float32)
    return (samples if channels == 1 else samples.reshape(-1, channels)), rate


def write_wav(path: str | os.PathLike[str], samples: Any, sample_rate: int) -> None:
    """A 16-bit PCM wav file of `samples` (`[n]` or `[n, channels]`, rounded and clipped to int16)."""
    samples = np.asarray(samples)
    channels = 1 if samples.ndim == 1 else samples.shape[1]
    pcm = np.clip(np.rint(samples), -32768, 32767).astype("<i2")
    with wave.open(os.fspath(path), "wb") as w:
        w.setnchannels(channels)
        w.setsampwidth(2)
        w.setframerate(int(sample_rate))
        w.writeframes(pcm.tobytes())
