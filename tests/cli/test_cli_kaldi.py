"""`symnet copy` and `symnet compute`: Kaldi model files and archives, as nnet3-copy and nnet3-compute."""

from __future__ import annotations

import os

import kaldiio
import numpy as np
import pytest

from helpers.kaldi_models import AM_NNET, AM_TEXT, NNET_TEXT
from symnet import save
from symnet._src.app.cli import main
from symnet._src.kaldi.compute.nnet3_compute import ComputeOptions, Nnet3Computer
from symnet.kaldi import (
    format_model,
    format_nnet,
    parse_model,
    parse_network,
    parse_nnet,
    read_model,
    write_model,
)

rng = np.random.default_rng(1)

TDNN = """
input-node name=input dim=4
component name=tdnn1.affine type=NaturalGradientAffineComponent input-dim=12 output-dim=8
component-node name=tdnn1.affine component=tdnn1.affine input=Append(Offset(input, -1), input, Offset(input, 1))
component name=tdnn1.relu type=RectifiedLinearComponent dim=8
component-node name=tdnn1.relu component=tdnn1.relu input=tdnn1.affine
component name=tdnn2 type=TdnnComponent input-dim=8 output-dim=8 time-offsets=-2,0,2
component-node name=tdnn2 component=tdnn2 input=tdnn1.relu
component name=tdnn2.relu type=RectifiedLinearComponent dim=8
component-node name=tdnn2.relu component=tdnn2.relu input=tdnn2
component name=output.affine type=AffineComponent input-dim=8 output-dim=5
component-node name=output.affine component=output.affine input=tdnn2.relu
component name=output.log-softmax type=LogSoftmaxComponent dim=5
component-node name=output.log-softmax component=output.log-softmax input=output.affine
output-node name=output input=output.log-softmax objective=linear
"""

IVECTOR_NET = """
input-node name=input dim=3
input-node name=ivector dim=2
component name=affine type=AffineComponent input-dim=5 output-dim=4
component-node name=affine component=affine input=Append(input, ReplaceIndex(ivector, t, 0))
output-node name=output input=affine objective=linear
"""


def run(argv, capsys):
    status = main(argv)
    out, err = capsys.readouterr()
    return status, out, err


def _features(dim, lengths=(7, 12, 3)):
    return {f"utt{i}": rng.standard_normal((n, dim)).astype(np.float32) for i, n in enumerate(lengths)}


def _listing(path):
    return sorted(os.listdir(path))


# ----- copy -----------------------------------------------------------------------------------------


def test_copy_text_to_binary_and_back_is_exact(tmp_path, capsys):
    text = tmp_path / "hand.txt"
    text.write_text(NNET_TEXT)
    binary = tmp_path / "hand.raw"
    status, out, err = run(["copy", str(text), str(binary)], capsys)
    assert status == 0 and err == "" and str(binary) in out
    assert binary.read_bytes() == format_nnet(parse_nnet(NNET_TEXT.encode()), binary=True)
    back = tmp_path / "back.txt"
    assert main(["copy", "--binary=false", str(binary), str(back)]) == 0
    assert back.read_bytes() == NNET_TEXT.encode()


def test_copy_of_an_acoustic_model_stays_one_unless_raw(tmp_path, capsys):
    am = tmp_path / "final.mdl"
    am.write_text(AM_TEXT)
    out_am = tmp_path / "copy.mdl"
    assert main(["copy", "--binary", str(am), str(out_am)]) == 0
    assert read_model(out_am).is_am
    assert format_model(read_model(out_am), binary=False) == AM_TEXT.encode()
    raw = tmp_path / "final.raw"
    assert main(["copy", "--raw=true", "--binary=false", str(am), str(raw)]) == 0
    assert raw.read_text() == AM_NNET


def test_copy_writes_configs_and_symnet_models_as_raw_nnet3(tmp_path, capsys):
    config = tmp_path / "tdnn.config"
    config.write_text(TDNN)
    kn = parse_network(TDNN, seed=3)
    symnet_model = tmp_path / "tdnn.npz"
    save(symnet_model, kn)
    for source in (config, symnet_model):
        out = tmp_path / (source.name + ".raw")
        assert main(["copy", str(source), str(out)]) == 0
        model = read_model(out)
        assert model.network.structure == kn.structure and not model.is_am
    for name, value in kn.params.items():
        np.testing.assert_array_equal(np.asarray(read_model(out).network.params[name]), np.asarray(value))


def test_info_reads_kaldi_model_files(tmp_path, capsys):
    path = tmp_path / "hand.txt"
    path.write_text(NNET_TEXT)
    status, out, err = run(["info", str(path)], capsys)
    assert status == 0
    assert out.splitlines()[:3] == ["input-dim: 3", "ivector-dim: -1", "output-dim: 3"]


# ----- compute --------------------------------------------------------------------------------------


@pytest.fixture()
def tdnn_model(tmp_path):
    kn = parse_network(TDNN, seed=5)
    path = tmp_path / "tdnn.raw"
    write_model(path, kn)
    return path, kn


def test_compute_matches_nnet3_computer(tmp_path, capsys, tdnn_model):
    model_path, kn = tdnn_model
    feats = _features(4)
    kaldiio.save_ark(str(tmp_path / "feats.ark"), feats, scp=str(tmp_path / "feats.scp"))
    out_ark, out_scp = tmp_path / "out.ark", tmp_path / "out.scp"
    status, out, err = run(
        [
            "compute",
            "--frames-per-chunk=5",
            "--extra-left-context=2",
            str(model_path),
            f"scp:{tmp_path / 'feats.scp'}",
            f"ark,scp:{out_ark},{out_scp}",
        ],
        capsys,
    )
    assert status == 0, err
    assert "done 3 utterances, failed for 0" in out
    computer = Nnet3Computer(read_model(model_path).network, ComputeOptions(frames_per_chunk=5, extra_left_context=2))
    got = dict(kaldiio.load_scp(str(out_scp)))
    assert list(got) == list(feats)
    for utt, mat in feats.items():
        np.testing.assert_array_equal(got[utt], computer(mat))
    kaldiio.save_ark(str(tmp_path / "reference.ark"), got)  # kaldiio's bytes for the same matrices
    assert out_ark.read_bytes() == (tmp_path / "reference.ark").read_bytes()
    # the same through a text archive, read from the binary archive
    text_out = tmp_path / "out.txt"
    assert (
        main(
            [
                "compute",
                "--frames-per-chunk=5",
                "--extra-left-context=2",
                str(model_path),
                f"ark:{tmp_path / 'feats.ark'}",
                f"ark,t:{text_out}",
            ]
        )
        == 0
    )
    with kaldiio.ReadHelper(f"ark:{text_out}") as reader:
        for utt, mat in reader:
            np.testing.assert_allclose(mat, got[utt], rtol=1e-5, atol=1e-6)
    assert not [name for name in _listing(tmp_path) if name.endswith(".tmp")]


def test_compute_with_priors_of_an_acoustic_model(tmp_path, capsys):
    am = tmp_path / "final.mdl"
    write_model(am, parse_model(AM_TEXT.encode()))  # binary acoustic model
    feats = _features(3, lengths=(4, 6))
    kaldiio.save_ark(str(tmp_path / "feats.ark"), feats)
    out = tmp_path / "post.ark"
    status, _, err = run(
        [
            "compute",
            "--use-priors",
            "--apply-exp=true",
            "--acoustic-scale=0.5",
            "--use-gpu=no",
            str(am),
            f"ark:{tmp_path / 'feats.ark'}",
            f"ark:{out}",
        ],
        capsys,
    )
    assert status == 0, err
    model = read_model(am)
    computer = Nnet3Computer(model.network, ComputeOptions(acoustic_scale=0.5, apply_exp=True), priors=model.priors)
    plain = Nnet3Computer(model.network)
    with kaldiio.ReadHelper(f"ark:{out}") as reader:
        got = dict(reader)
    together = dict(zip(feats, computer.compute_many(list(feats.values())), strict=True))  # as the CLI batches
    for utt, mat in feats.items():
        np.testing.assert_array_equal(got[utt], together[utt])
        np.testing.assert_allclose(got[utt], computer(mat), rtol=1e-6)
        np.testing.assert_allclose(got[utt], np.exp(0.5 * (plain(mat) - np.log([0.6, 0.4]))), rtol=1e-5)


def test_use_priors_needs_an_acoustic_model(tmp_path, capsys, tdnn_model):
    model_path, _ = tdnn_model
    kaldiio.save_ark(str(tmp_path / "feats.ark"), _features(4))
    status, out, err = run(
        [
            "compute",
            "--use-priors=true",
            str(model_path),
            f"ark:{tmp_path / 'feats.ark'}",
            f"ark:{tmp_path / 'out.ark'}",
        ],
        capsys,
    )
    assert status == 1 and len(err.splitlines()) == 1
    assert "--use-priors=true needs an acoustic model" in err
    assert "out.ark" not in _listing(tmp_path)


def test_use_gpu_is_accepted_and_ignored(tmp_path, capsys, tdnn_model):
    model_path, _ = tdnn_model
    kaldiio.save_ark(str(tmp_path / "feats.ark"), _features(4, lengths=(5,)))
    status, _, err = run(
        ["compute", "--use-gpu=yes", str(model_path), f"ark:{tmp_path / 'feats.ark'}", f"ark:{tmp_path / 'out.ark'}"],
        capsys,
    )
    assert status == 0 and "--use-gpu=yes is ignored" in err


def test_features_of_the_wrong_dim_are_a_one_line_error_and_nothing_is_written(tmp_path, capsys, tdnn_model):
    model_path, _ = tdnn_model
    feats = _features(4, lengths=(5, 6))
    feats["utt9"] = rng.standard_normal((5, 6)).astype(np.float32)
    kaldiio.save_ark(str(tmp_path / "feats.ark"), feats)
    before = _listing(tmp_path)
    status, out, err = run(
        [
            "compute",
            str(model_path),
            f"ark:{tmp_path / 'feats.ark'}",
            f"ark,scp:{tmp_path / 'out.ark'},{tmp_path / 'out.scp'}",
        ],
        capsys,
    )
    assert status == 1
    assert err.splitlines() == [
        "symnet compute: utterance utt9: the features have dim 6, but the network's input has dim 4"
    ]
    assert _listing(tmp_path) == before


def test_a_missing_ivector_skips_the_utterance_with_a_warning(tmp_path, capsys):
    model_path = tmp_path / "ivector.raw"
    kn = parse_network(IVECTOR_NET, seed=1)
    write_model(model_path, kn)
    feats = _features(3, lengths=(4, 5))
    kaldiio.save_ark(str(tmp_path / "feats.ark"), feats)
    ivectors = {"utt1": np.float32([0.5, -1.0])}
    kaldiio.save_ark(str(tmp_path / "ivectors.ark"), ivectors, scp=str(tmp_path / "ivectors.scp"))
    out = tmp_path / "out.ark"
    status, stdout, err = run(
        [
            "compute",
            f"--ivectors=scp:{tmp_path / 'ivectors.scp'}",
            str(model_path),
            f"ark:{tmp_path / 'feats.ark'}",
            f"ark:{out}",
        ],
        capsys,
    )
    assert status == 0
    assert "no i-vector for utterance utt0" in err and "done 1 utterances, failed for 1" in stdout
    with kaldiio.ReadHelper(f"ark:{out}") as reader:
        got = dict(reader)
    assert list(got) == ["utt1"]
    expected = Nnet3Computer(kn)(feats["utt1"], ivector=ivectors["utt1"])
    np.testing.assert_array_equal(got["utt1"], expected)
    # none computed: status 1 and no output
    only0 = {"utt0": feats["utt0"]}
    kaldiio.save_ark(str(tmp_path / "only0.ark"), only0)
    status, _, err = run(
        [
            "compute",
            f"--ivectors=ark:{tmp_path / 'ivectors.ark'}",
            str(model_path),
            f"ark:{tmp_path / 'only0.ark'}",
            f"ark:{tmp_path / 'none.ark'}",
        ],
        capsys,
    )
    assert status == 1 and "no utterance was computed" in err.splitlines()[-1]
    assert "none.ark" not in _listing(tmp_path)


@pytest.mark.parametrize("damage", ["truncated", "corrupted", "garbage"])
def test_damaged_model_files_are_one_line_errors(tmp_path, capsys, tdnn_model, damage):
    model_path, _ = tdnn_model
    data = model_path.read_bytes()
    if damage == "truncated":
        data = data[: len(data) // 2]
    elif damage == "corrupted":
        at = data.index(b"<NumComponents>") + len(b"<NumComponents> ") + 1
        data = data[:at] + b"\xff\xff\xff\x7f" + data[at + 4 :]
    else:
        data = b"\0B<Nnet3> garbage"
    bad = tmp_path / "bad.raw"
    bad.write_bytes(data)
    kaldiio.save_ark(str(tmp_path / "feats.ark"), _features(4))
    before = _listing(tmp_path)
    for argv in (
        ["copy", str(bad), str(tmp_path / "copy.raw")],
        ["compute", str(bad), f"ark:{tmp_path / 'feats.ark'}", f"ark:{tmp_path / 'out.ark'}"],
    ):
        status, out, err = run(argv, capsys)
        assert status == 1, err
        assert len(err.splitlines()) == 1 and "bad.raw" in err
        assert _listing(tmp_path) == before


def test_truncated_text_model_via_copy(tmp_path, capsys):
    bad = tmp_path / "bad.txt"
    bad.write_text(NNET_TEXT[: len(NNET_TEXT) - 300])
    status, _, err = run(["copy", "--binary=false", str(bad), str(tmp_path / "out.txt")], capsys)
    assert status == 1 and len(err.splitlines()) == 1 and "bad.txt:" in err
    assert _listing(tmp_path) == ["bad.txt"]


def test_bad_specifiers_are_one_line_errors(tmp_path, capsys, tdnn_model):
    model_path, _ = tdnn_model
    status, _, err = run(
        ["compute", str(model_path), f"ark:{tmp_path / 'missing.ark'}", f"ark:{tmp_path / 'o.ark'}"], capsys
    )
    assert status == 1 and len(err.splitlines()) == 1 and "missing.ark" in err
    status, _, err = run(["compute", str(model_path), f"ark:{tmp_path / 'missing.ark'}", "o.ark"], capsys)
    assert status == 1 and len(err.splitlines()) == 1 and "wspecifier" in err
    assert "o.ark" not in _listing(tmp_path)


# Kaldi's rm recipe local/chain/tuning/run_tdnn_wsj_rm_1a.sh (commit f4007661): new layers on a wsj model's tdnn6,
# written by xconfig_to_configs.py --existing-model and joined by nnet3-init.
WSJ_LIKE = """input dim=13 name=input
relu-renorm-layer name=tdnn1 input=Append(-1,0,1) dim=16
relu-renorm-layer name=tdnn6 input=Append(-3,0,3) dim=16
output-layer name=output include-log-softmax=false dim=7
"""
RM_TRANSFER = """relu-renorm-layer name=tdnn-target input=Append(tdnn6.renorm@-3,tdnn6.renorm) dim=12
relu-renorm-layer name=prefinal-chain input=tdnn-target dim=12 target-rms=0.5
output-layer name=output include-log-softmax=false dim=5 max-change=1.5
relu-renorm-layer name=prefinal-xent input=tdnn-target dim=12 target-rms=0.5
output-layer name=output-xent dim=5 learning-rate-factor=5.0 max-change=1.5
"""


def test_xconfig_with_an_existing_model_as_a_transfer_recipe_uses_it(tmp_path, capsys):
    """`symnet xconfig --existing-model`: the xconfig's layers read the existing model's nodes (tdnn6.renorm), the
    configs hold the new layers only, and `symnet init MODEL final.config OUT` joins them (the recipe's nnet3-init);
    the joined network keeps the existing parameters and computes the new outputs. Without the model the node is
    unknown, as before."""
    from symnet import load

    (tmp_path / "wsj.xconfig").write_text(WSJ_LIKE)
    (tmp_path / "rm.xconfig").write_text(RM_TRANSFER)
    base, configs = tmp_path / "wsj.mdl", tmp_path / "configs"
    assert main(["xconfig", "-o", str(tmp_path / "wsj.config"), str(tmp_path / "wsj.xconfig")]) == 0
    assert main(["init", str(tmp_path / "wsj.config"), str(base)]) == 0
    assert (
        main(["xconfig", "--existing-model", str(base), "--config-dir", str(configs), str(tmp_path / "rm.xconfig")])
        == 0
    )
    final = (configs / "final.config").read_text()
    assert "input=Append(Offset(tdnn6.renorm, -3), tdnn6.renorm)" in final and "tdnn1" not in final
    # Kaldi's xconfig_to_configs.py --existing-model writes these for the same model and xconfig
    assert (configs / "vars").read_text() == "model_left_context=7\nmodel_right_context=4\n"
    joined = tmp_path / "input.mdl"
    assert main(["init", str(base), str(configs / "final.config"), str(joined)]) == 0
    before, after = load(str(base)), load(str(joined))
    for name, value in before.params.items():
        if name.startswith("tdnn"):
            np.testing.assert_array_equal(np.asarray(after.params[name]), np.asarray(value))
    assert {"tdnn-target.affine.linear_params", "output-xent.affine.linear_params"} <= set(after.params)
    out = after.compute(np.random.default_rng(0).normal(size=(1, 30, 13)).astype(np.float32), output="output-xent")
    assert np.asarray(out).shape == (1, 30, 5)
    capsys.readouterr()
    assert main(["xconfig", "-o", str(tmp_path / "x.config"), str(tmp_path / "rm.xconfig")]) == 1
    assert "tdnn6" in capsys.readouterr().err
