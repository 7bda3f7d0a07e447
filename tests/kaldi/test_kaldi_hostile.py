"""Kaldi-side inputs that once blew up memory or the stack: each is now a symnet error naming what is at fault."""

from __future__ import annotations

import os
from pathlib import Path

import numpy as np
import pytest

from symnet._src.kaldi.text.build import parse_network
from symnet._src.kaldi.text.xconfig.descriptor import parse_xdescriptor
from symnet.errors import ConfigError, SymnetError

AFFINE = "input-node name=input dim=3\ncomponent name=a type=AffineComponent input-dim=3 output-dim={dim}\n"
AFFINE += "component-node name=a component=a input=input\noutput-node name=output input=a\n"
FIXED = "input-node name=input dim=3\ncomponent name=f type=FixedAffineComponent matrix={path}\n"
FIXED += "component-node name=f component=f input=input\noutput-node name=output input=f\n"


def test_a_huge_output_dim_is_refused_before_initialising() -> None:
    """Before: `output-dim=1000000000` initialised 3e9 parameters until memory ran out."""
    with pytest.raises(SymnetError, match="beyond 268435456 values"):
        parse_network(AFFINE.format(dim=10**9))
    assert parse_network(AFFINE.format(dim=5)).params["a.linear_params"].shape == (5, 3)


@pytest.mark.parametrize("kind", ["/dev/zero", "fifo", "folder"])
def test_matrix_files_are_read_only_from_regular_files(kind: str, tmp_path: Path) -> None:
    """Before: `matrix=/dev/zero` read until memory ran out; a FIFO blocked."""
    path = {"/dev/zero": "/dev/zero", "fifo": str(tmp_path / "fifo"), "folder": str(tmp_path)}[kind]
    if kind == "fifo":
        os.mkfifo(path)
    with pytest.raises(ConfigError, match="not a regular file") as e:
        parse_network(FIXED.format(path=path))
    assert path in str(e.value) and "matrix=" in str(e.value)


def test_a_regular_matrix_file_still_loads(tmp_path: Path) -> None:
    matrix = np.arange(8, dtype=np.float32).reshape(2, 4)
    np.save(tmp_path / "m.npy", matrix)
    net = parse_network(FIXED.format(path=tmp_path / "m.npy"))
    np.testing.assert_array_equal(np.asarray(net.values["f.linear_params"]), matrix[:, :3])  # Kaldi's [A b]
    np.testing.assert_array_equal(np.asarray(net.values["f.bias_params"]), matrix[:, 3])


def test_deeply_nested_xconfig_descriptors_are_a_config_error() -> None:
    """Before: 1000 nested Append( recursed into a RecursionError."""

    def fail(message: str, position: int) -> ConfigError:
        return ConfigError(f"{message} at {position}")

    with pytest.raises(ConfigError, match="nested more than 64 levels"):
        parse_xdescriptor("Append(" * 1000 + "a" + ")" * 1000, ["a"], fail=fail)
    assert str(parse_xdescriptor("Append(" * 60 + "a" + ")" * 60, ["a"], fail=fail)).count("Append(") == 60
