"""Kaldi's features against Kaldi's own programs: `compute-fbank-feats`, `compute-mfcc-feats`,
`compute-cmvn-stats` and `apply-cmvn` ran on the shipped waveforms (tests/data/kaldi-features/make.py) with
each option set; symnet's features of the same waveforms with the same options equal them to float precision."""

from __future__ import annotations

from pathlib import Path

import attrs
import numpy as np
import pytest

from helpers import fixture_script
from symnet._src.kaldi_io.tables import read_table
from symnet.features import (
    FbankOptions,
    FeatureError,
    MfccOptions,
    apply_cmvn,
    cmvn_stats,
    fbank,
    mfcc,
    read_wav,
    write_wav,
)

DATA = Path(__file__).resolve().parent.parent / "data" / "kaldi-features"
OPTIONS = fixture_script(DATA).OPTIONS

#: Kaldi's option names that symnet spells otherwise.
RENAMED = {"frame-shift": "frame_shift_ms", "frame-length": "frame_length_ms"}


def symnet_options(program: str, flags: list[str]) -> FbankOptions:
    kind = MfccOptions if program == "compute-mfcc-feats" else FbankOptions
    fields = {f.name: f for f in attrs.fields(kind)}
    values: dict[str, object] = {"dither": 0.0}
    for flag in flags:
        name, _, text = flag.removeprefix("--").partition("=")
        field = RENAMED.get(name, name.replace("-", "_"))
        default = fields[field].default
        values[field] = text == "true" if isinstance(default, bool) else type(default)(text)
    return kind(**values)


def waves(rate: int) -> dict[str, np.ndarray]:
    out = {}
    for line in (DATA / f"wav-{rate // 1000}k.scp").read_text().splitlines():
        key, name = line.split()
        samples, found = read_wav(DATA / name)
        assert found == rate
        out[key] = samples
    return out


@pytest.mark.parametrize("name", list(OPTIONS))
def test_features_equal_kaldis(name: str) -> None:
    program, rate, flags = OPTIONS[name]
    options = symnet_options(program, flags)
    compute = mfcc if program == "compute-mfcc-feats" else fbank
    kaldi = read_table(f"ark:{DATA / f'{name}.ark'}")
    for key, wave in waves(rate).items():
        expected = kaldi[key]
        ours = compute(wave, options)
        if not len(expected):  # shorter than a frame: Kaldi writes an empty matrix
            assert ours.shape[0] == 0
            continue
        assert ours.shape == expected.shape, key
        scale = np.abs(expected).max()
        # float64 rounded to float32 against Kaldi's float arithmetic (measured: at most 8.5e-6 of the scale)
        np.testing.assert_allclose(ours, expected, rtol=0, atol=5e-5 * max(scale, 1.0), err_msg=f"{name} {key}")


def test_cmvn_equals_kaldis() -> None:
    feats = read_table(f"ark:{DATA / 'cmvn-input.ark'}")
    stats = read_table(f"ark:{DATA / 'cmvn.ark'}")
    means = read_table(f"ark:{DATA / 'cmvn-means.ark'}")
    variances = read_table(f"ark:{DATA / 'cmvn-vars.ark'}")
    for key in feats:
        ours = cmvn_stats(feats[key])
        np.testing.assert_allclose(ours, stats[key], rtol=1e-6)
        np.testing.assert_allclose(apply_cmvn(feats[key], ours), means[key], atol=1e-5)
        np.testing.assert_allclose(apply_cmvn(feats[key], ours, norm_vars=True), variances[key], atol=1e-4)
        normalised = apply_cmvn(feats[key], ours, norm_vars=True)
        np.testing.assert_allclose(normalised.mean(0), 0, atol=1e-4)
        np.testing.assert_allclose(normalised.std(0), 1, atol=1e-3)


def test_frames_follow_kaldis_counts() -> None:
    """snip_edges: whole frames only; without: samples / shift rounded, centred (Kaldi's NumFrames)."""
    wave = np.random.default_rng(0).standard_normal(16000 * 3 // 10 + 77) * 100
    for snip, count in ((True, 1 + (len(wave) - 400) // 160), (False, (len(wave) + 80) // 160)):
        assert fbank(wave, FbankOptions(dither=0.0, snip_edges=snip)).shape == (count, 23)


def test_dither_is_seeded_noise_and_small() -> None:
    wave = waves(16000)["utt0"]
    plain = fbank(wave, FbankOptions(dither=0.0))
    a, b = fbank(wave, FbankOptions(), seed=1), fbank(wave, FbankOptions(), seed=1)
    np.testing.assert_array_equal(a, b)
    assert not np.array_equal(a, fbank(wave, FbankOptions(), seed=2))
    assert np.abs(a - plain).max() < 0.05  # noise of one sample unit on a signal of thousands


def test_bad_options_and_waves_are_named(tmp_path: Path) -> None:
    with pytest.raises(FeatureError, match="window_type 'gauss'"):
        FbankOptions(window_type="gauss")
    with pytest.raises(FeatureError, match="num_ceps"):
        MfccOptions(num_ceps=30)
    with pytest.raises(FeatureError, match="Nyquist"):
        fbank(np.zeros(1000), FbankOptions(high_freq=9000.0))
    with pytest.raises(FeatureError, match="too large"):
        fbank(np.zeros(1000), FbankOptions(num_mel_bins=300, dither=0.0))
    with pytest.raises(FeatureError, match="one channel"):
        fbank(np.zeros((1000, 2)))
    with pytest.raises(FeatureError, match="VTLN"):
        fbank(np.zeros(1000), vtln_warp=0.9)
    with pytest.raises(FeatureError, match="norm_vars without norm_means"):
        apply_cmvn(np.zeros((3, 2)), np.zeros((2, 3)), norm_means=False, norm_vars=True)
    (tmp_path / "x.wav").write_bytes(b"RIFF0000WAVEjunk")
    with pytest.raises(FeatureError, match="x.wav: not a PCM wav file"):
        read_wav(tmp_path / "x.wav")
    stereo = np.stack([np.arange(10.0), -np.arange(10.0)], axis=1)
    write_wav(tmp_path / "s.wav", stereo, 8000)
    samples, rate = read_wav(tmp_path / "s.wav")
    assert rate == 8000 and samples.shape == (10, 2) and np.array_equal(samples, stereo)
