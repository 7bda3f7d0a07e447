"""The `symnet` command line: info and init, one-line errors, atomic model files."""

from __future__ import annotations

import os

import numpy as np
import pytest

from helpers import EXAMPLES
from symnet import load
from symnet._src.app.cli import main
from symnet.kaldi import read_network

DOC = EXAMPLES / "kaldi-doc-example.config"
LSTM = EXAMPLES / "lstm.config"


def test_info_on_a_config(capsys):
    assert main(["info", str(DOC)]) == 0
    out, err = capsys.readouterr()
    lines = out.splitlines()
    assert err == ""
    assert lines[:7] == [
        "input-dim: 12",
        "ivector-dim: -1",
        "output-dim: 115",
        "left-context: 1",
        "right-context: 2",
        "num-parameters: 10775",
        "modulus: 1",
    ]
    assert (
        "component-node name=affine1_node component=affine1 input=Append(Offset(input, -1), input, "
        "Offset(input, 1), Offset(input, 2)) input-dim=48 output-dim=65"
    ) in lines
    assert "output-node name=output input=output_nonlin dim=115 objective=linear" in lines
    assert (
        "component name=affine1 type=NaturalGradientAffineComponent input-dim=48 output-dim=65 "
        "num-parameters=3185 linear_params=[65,48] bias_params=[65]"
    ) in lines
    assert "component name=relu1 type=RectifiedLinearComponent input-dim=65 output-dim=65" in lines


def test_init_then_info_on_the_model(tmp_path, capsys):
    out_path = tmp_path / "lstm.mdl"
    assert main(["init", "--seed", "7", str(LSTM), str(out_path)]) == 0
    out, err = capsys.readouterr()
    assert str(out_path) in out and err == ""
    model = load(out_path)
    expected = read_network(LSTM, seed=7)
    assert model.structure == expected.structure
    for name, value in expected.params.items():
        np.testing.assert_array_equal(np.asarray(model.params[name]), np.asarray(value))
    assert main(["info", str(out_path)]) == 0
    out, _ = capsys.readouterr()
    assert "left-context: 0" in out and "right-context: 0" in out
    assert "dim-range-node name=lstm1.m input-node=lstm1.lstm_nonlin dim-offset=8 dim=8" in out
    assert (
        "component name=lstm1.lstm_nonlin type=LstmNonlinearityComponent input-dim=40 output-dim=16 "
        "num-parameters=24 params=[3,8]"
    ) in out


def test_init_with_an_existing_model(tmp_path, capsys):
    first = tmp_path / "first.mdl"
    assert main(["init", str(DOC), str(first)]) == 0
    more = tmp_path / "more.config"
    more.write_text("output-node name=aux input=nonlin1 objective=quadratic\n")
    second = tmp_path / "second.mdl"
    assert main(["init", str(first), str(more), str(second)]) == 0
    model = load(second)
    assert dict(model.objectives) == {"output": "linear", "aux": "quadratic"}
    np.testing.assert_array_equal(
        np.asarray(model.params["affine1.linear_params"]),
        np.asarray(load(first).params["affine1.linear_params"]),
    )


def test_config_error_is_one_line_and_leaves_no_output(tmp_path, capsys):
    config = tmp_path / "bad.config"
    config.write_text(DOC.read_text().replace("input-dim=48", "input-dim=47"))
    out_path = tmp_path / "out.mdl"
    assert main(["init", str(config), str(out_path)]) == 1
    out, err = capsys.readouterr()
    assert out == ""
    assert err.count("\n") == 1
    assert err.startswith(f"symnet init: {config}:10:58: component-node affine1_node: ")
    assert "input has dim 48, but component affine1" in err
    assert sorted(os.listdir(tmp_path)) == ["bad.config"]


def test_failed_write_leaves_no_output(tmp_path, capsys, monkeypatch):
    def broken(file, array, **options):
        file.write(b"half a model")
        raise OSError(28, "No space left on device")

    monkeypatch.setattr(np.lib.format, "write_array", broken)
    out_path = tmp_path / "out.mdl"
    assert main(["init", str(DOC), str(out_path)]) == 1
    _, err = capsys.readouterr()
    assert err == f"symnet init: cannot write {out_path}: No space left on device\n"  # the user's path
    assert os.listdir(tmp_path) == []


def test_errors_on_missing_and_damaged_files(tmp_path, capsys):
    assert main(["info", str(tmp_path / "missing.config")]) == 1
    _, err = capsys.readouterr()
    assert err.startswith("symnet info: No such file or directory") and err.count("\n") == 1
    damaged = tmp_path / "damaged.mdl"
    damaged.write_bytes(b"PK\x05\x06" + b"\0" * 18)  # an empty zip archive
    assert main(["info", str(damaged)]) == 1
    _, err = capsys.readouterr()
    assert "not a symnet network file" in err and err.count("\n") == 1


def test_usage_errors(capsys):
    with pytest.raises(SystemExit) as info:
        main(["frobnicate"])
    assert info.value.code == 2
    assert main(["init", "only-one"]) == 2
