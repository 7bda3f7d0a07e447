"""`symnet.kaldi.compute_table`: nnet3-compute over Kaldi tables from Python, the bytes `symnet compute` writes,
the numbers `Network.compute` gives; skips, warnings and errors as Kaldi's, nothing written on an error."""

from __future__ import annotations

import os
import warnings
from pathlib import Path

import kaldiio
import numpy as np
import pytest

from helpers.kaldi_models import AM_TEXT
from symnet import SymnetError
from symnet._src.app.cli import main
from symnet.kaldi import ComputeOptions, ComputeSummary, compute_table, parse_model, parse_network, write_model

rng = np.random.default_rng(3)

TDNN = """input-node name=input dim=4
component name=tdnn1 type=NaturalGradientAffineComponent input-dim=12 output-dim=6
component-node name=tdnn1 component=tdnn1 input=Append(Offset(input, -1), input, Offset(input, 2))
component name=relu type=RectifiedLinearComponent dim=6
component-node name=relu component=relu input=tdnn1
component name=final type=AffineComponent input-dim=18 output-dim=5
component-node name=final component=final input=Append(Offset(relu, -2), relu, Offset(relu, 1))
output-node name=output input=final objective=linear
"""

IVECTOR_NET = """input-node name=input dim=3
input-node name=ivector dim=2
component name=affine type=AffineComponent input-dim=5 output-dim=4
component-node name=affine component=affine input=Append(input, ReplaceIndex(ivector, t, 0))
output-node name=output input=affine objective=linear
"""


def _features(dim: int, lengths: tuple[int, ...] = (9, 14, 4)) -> dict[str, np.ndarray]:
    return {f"utt{i}": rng.standard_normal((n, dim)).astype(np.float32) for i, n in enumerate(lengths)}


def _read(path: Path) -> dict[str, np.ndarray]:
    with kaldiio.ReadHelper(f"ark:{path}") as reader:
        return dict(reader)


def test_the_output_is_the_networks_and_the_commands(tmp_path: Path) -> None:
    network = parse_network(TDNN, seed=2)
    feats = _features(4)
    kaldiio.save_ark(str(tmp_path / "feats.ark"), feats, scp=str(tmp_path / "feats.scp"))
    out, scp = tmp_path / "out.ark", tmp_path / "out.scp"
    summary = compute_table(
        network, f"scp:{tmp_path / 'feats.scp'}", f"ark,scp:{out},{scp}", ComputeOptions(frames_per_chunk=5)
    )
    assert summary == ComputeSummary(done=3, failed=0)
    got = _read(out)
    assert list(got) == list(feats) and list(dict(kaldiio.load_scp(str(scp)))) == list(feats)
    # computed another way: the whole utterances, edge frames repeated as nnet3-compute does
    expected = network.compute(list(feats.values()))
    for (utt, mat), want in zip(got.items(), expected, strict=True):
        np.testing.assert_allclose(mat, np.asarray(want), rtol=1e-5, atol=1e-5, err_msg=utt)
    # `symnet compute` on the same model and features writes the same bytes
    model = tmp_path / "tdnn.raw"
    write_model(model, network)
    argv = [
        "compute",
        "--frames-per-chunk=5",
        str(model),
        f"ark:{tmp_path / 'feats.ark'}",
        f"ark:{tmp_path / 'cli.ark'}",
    ]
    assert main(argv) == 0
    assert (tmp_path / "cli.ark").read_bytes() == out.read_bytes()


def test_priors_scale_and_exp_as_nnet3_compute(tmp_path: Path) -> None:
    model = parse_model(AM_TEXT.encode())
    feats = _features(3, (5, 6))
    kaldiio.save_ark(str(tmp_path / "feats.ark"), feats)
    options = ComputeOptions(acoustic_scale=0.5, apply_exp=True)
    spec = f"ark:{tmp_path / 'feats.ark'}"
    compute_table(model.network, spec, f"ark:{tmp_path / 'post.ark'}", options, priors=model.priors)
    compute_table(model.network, spec, f"ark:{tmp_path / 'plain.ark'}")
    got, plain = _read(tmp_path / "post.ark"), _read(tmp_path / "plain.ark")
    for utt in feats:
        np.testing.assert_allclose(got[utt], np.exp(0.5 * (plain[utt] - np.log([0.6, 0.4]))), rtol=1e-5)


def test_utterances_without_an_ivector_or_frames_are_skipped_with_warnings(tmp_path: Path) -> None:
    network = parse_network(IVECTOR_NET, seed=1)
    feats = _features(3, (4, 5, 3))
    feats["empty"] = np.zeros((0, 3), np.float32)
    kaldiio.save_ark(str(tmp_path / "feats.ark"), feats)
    ivectors = {"utt1": np.float32([0.5, -1.0]), "utt2": np.float32([1.0, 2.0]), "empty": np.float32([0, 0])}
    kaldiio.save_ark(str(tmp_path / "ivectors.ark"), ivectors)
    with warnings.catch_warnings(record=True) as caught:
        warnings.simplefilter("always")
        summary = compute_table(
            network,
            f"ark:{tmp_path / 'feats.ark'}",
            f"ark:{tmp_path / 'out.ark'}",
            ivectors=f"ark:{tmp_path / 'ivectors.ark'}",
        )
    assert summary == (2, 2)
    messages = [str(w.message) for w in caught]
    assert any("no i-vector for utterance utt0" in m for m in messages), messages
    assert any("zero-length utterance empty: skipped" in m for m in messages), messages
    assert list(_read(tmp_path / "out.ark")) == ["utt1", "utt2"]


def test_non_finite_values_are_named_in_warnings(tmp_path: Path) -> None:
    feats = _features(4, (6,))
    feats["utt0"][2, 1] = np.nan
    kaldiio.save_ark(str(tmp_path / "feats.ark"), feats)
    with warnings.catch_warnings(record=True) as caught:
        warnings.simplefilter("always")
        compute_table(parse_network(TDNN), f"ark:{tmp_path / 'feats.ark'}", f"ark:{tmp_path / 'out.ark'}")
    messages = [str(w.message) for w in caught]
    assert messages[0] == "utterance utt0: the input features have 1 non-finite values (first nan at frame 2, dim 1)"
    assert messages[1].startswith("utterance utt0: the output have ") and len(messages) == 2


def test_errors_name_the_utterance_and_leave_the_output_as_it_was(tmp_path: Path) -> None:
    network = parse_network(TDNN)
    feats = _features(4, (5, 6))
    feats["wide"] = rng.standard_normal((5, 7)).astype(np.float32)
    kaldiio.save_ark(str(tmp_path / "feats.ark"), feats)
    out = tmp_path / "out.ark"
    out.write_bytes(b"before")
    spec = f"ark:{tmp_path / 'feats.ark'}"
    with pytest.raises(SymnetError, match="utterance wide: the features have dim 7, but the network's input has dim 4"):
        compute_table(network, spec, f"ark:{out}")
    assert out.read_bytes() == b"before" and sorted(os.listdir(tmp_path)) == ["feats.ark", "out.ark"]
    kaldiio.save_ark(str(tmp_path / "empty.ark"), {"e": np.zeros((0, 4), np.float32)})
    with pytest.raises(SymnetError, match=r"no utterance was computed \(failed for 1\); nothing written"):
        with warnings.catch_warnings():
            warnings.simplefilter("ignore")
            compute_table(network, f"ark:{tmp_path / 'empty.ark'}", f"ark:{out}")
    assert out.read_bytes() == b"before"
    with pytest.raises(SymnetError, match="give --ivectors or --online-ivectors, not both"):
        compute_table(network, spec, f"ark:{out}", ivectors="ark:a.ark", online_ivectors="ark:b.ark")
    with pytest.raises(SymnetError, match="bad wspecifier"):
        compute_table(network, spec, "out.ark")
