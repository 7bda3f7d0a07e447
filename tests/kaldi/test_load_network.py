"""`symnet.load_network`: any network file, its format told by its first bytes, each the network its own
reader gives; a file of no known format is an error naming the file."""

from __future__ import annotations

from pathlib import Path

import numpy as np
import pytest

import symnet
from helpers import EXAMPLES
from helpers.kaldi_models import AM_TEXT
from symnet import ConfigError, ModelFormatError, SymnetError
from symnet._src.loading import load_model, load_structure
from symnet.errors import ArgumentTypeError
from symnet.kaldi import parse_model, parse_network, read_model, read_network, write_model
from symnet.kaldi.xconfig import read_xconfig

CONFIG = """input-node name=input dim=3
component name=a type=NaturalGradientAffineComponent input-dim=6 output-dim=4
component-node name=a component=a input=Append(Offset(input, -1), input)
output-node name=output input=a objective=quadratic
"""


def _same(a: symnet.Network, b: symnet.Network) -> None:
    assert a.structure == b.structure and a.objectives == b.objectives
    assert sorted(a.values) == sorted(b.values)
    for name in a.values:
        np.testing.assert_array_equal(np.asarray(a.values[name]), np.asarray(b.values[name]))


def test_it_is_public() -> None:
    from symnet._src.loading import load_network

    assert symnet.load_network is load_network and "load_network" in symnet.__all__


def test_a_config_is_built_with_the_seed(tmp_path: Path) -> None:
    path = tmp_path / "net.config"
    path.write_text(CONFIG)
    _same(symnet.load_network(path, seed=3), read_network(path, seed=3))
    a, b = symnet.load_network(str(path), seed=1), symnet.load_network(path, seed=2)
    assert not np.array_equal(np.asarray(a.values["a.linear_params"]), np.asarray(b.values["a.linear_params"]))
    assert symnet.load_network(path).objectives == {"output": "quadratic"}


def test_an_xconfig_is_expanded() -> None:
    path = EXAMPLES / "tdnnf.xconfig"
    _same(symnet.load_network(path, seed=4), read_xconfig(str(path)).network(seed=4))


@pytest.mark.parametrize("binary", [True, False])
def test_kaldi_models_text_and_binary_raw_and_acoustic(tmp_path: Path, binary: bool) -> None:
    raw, am = tmp_path / "net.raw", tmp_path / "final.mdl"
    write_model(raw, parse_network(CONFIG, seed=5), binary=binary)
    write_model(am, parse_model(AM_TEXT.encode()), binary=binary)
    for path in (raw, am):
        _same(symnet.load_network(path, seed=9), read_model(path).network)  # the stored values: no seed used
    model = load_model(am)
    assert model.is_am and np.allclose(model.priors, [0.6, 0.4])
    assert not load_model(raw).is_am


def test_a_symnet_file_gives_its_network(tmp_path: Path) -> None:
    network = parse_network(CONFIG, seed=6)
    symnet.save(tmp_path / "net.npz", network)
    _same(symnet.load_network(tmp_path / "net.npz"), network)
    symnet.save(tmp_path / "state.npz", {"net": network, "step": 3})
    with pytest.raises(ModelFormatError, match=r"state\.npz is a symnet file of a dict, not of one network"):
        symnet.load_network(tmp_path / "state.npz")


def test_the_structure_is_read_without_a_network(tmp_path: Path) -> None:
    network = parse_network(CONFIG, seed=6)
    config, model, saved = tmp_path / "net.config", tmp_path / "net.raw", tmp_path / "net.npz"
    config.write_text(CONFIG)
    write_model(model, network)
    symnet.save(saved, network)
    for path in (config, model, saved):
        assert load_structure(path) == (network.structure, {"output": "quadratic"})


@pytest.mark.parametrize(
    "data, why",
    [
        (b"\x89PNG\r\n\x1a\n\0\0\0\rIHDR", "is binary"),
        (b"", "is empty"),
        (b"  \n\n", "is empty"),
    ],
)
def test_a_file_of_no_known_format_is_an_error_naming_it(tmp_path: Path, data: bytes, why: str) -> None:
    path = tmp_path / "picture.png"
    path.write_bytes(data)
    for read in (symnet.load_network, load_model, load_structure):
        with pytest.raises(ModelFormatError, match=rf"picture\.png {why}: not a network file symnet reads"):
            read(path)


def test_text_that_is_no_config_is_the_config_readers_error(tmp_path: Path) -> None:
    path = tmp_path / "notes.txt"
    path.write_text("hello world\n")
    with pytest.raises(ConfigError, match=r"notes\.txt:1:1: expected a line type"):
        symnet.load_network(path)


def test_no_file_a_folder_or_no_path(tmp_path: Path) -> None:
    with pytest.raises(FileNotFoundError):
        symnet.load_network(tmp_path / "missing.config")
    with pytest.raises(SymnetError, match="is a folder, not a regular file"):
        symnet.load_network(tmp_path)
    with pytest.raises(ArgumentTypeError, match="symnet.load_network takes a file path"):
        symnet.load_network(5)  # type: ignore[arg-type]
