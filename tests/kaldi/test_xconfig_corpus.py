"""Every xconfig case of the Kaldi corpus: symnet's expansion is Kaldi's final.config, and computes Kaldi's outputs.

Each case has the xconfig, the final.config Kaldi's xconfig_to_configs.py
wrote from it (`net.config`), the model nnet3-init made of that config (with
weights, `model.txt`) and nnet3-compute's outputs. Two edits of the corpus
are undone before comparing (its README and notes.txt): output-layer affines
lost their zero initialisation (`param-stddev=0.0 bias-stddev=0.0`), and file
names given to `affine-transform-file` became the relative names the case
folder holds.

The config comparison is semantic where only formatting may differ (option
order, number formatting, descriptor spelling) and exact in the order of the
lines, names, types, dims and option values. The compute comparison builds the
network from the xconfig, takes the weights of Kaldi's model.txt (the same
parameter names and shapes), and runs symnet's nnet3-compute.
"""

from __future__ import annotations

import os
import re

import kaldiio
import numpy as np
import pytest

from helpers.kaldi_oracle import case_names, corpus_dir
from symnet import Network
from symnet._src.kaldi.compute.nnet3_compute import ComputeOptions, Nnet3Computer
from symnet._src.kaldi.text.config import ComponentLine, parse_config, read_config
from symnet._src.kaldi.text.xconfig import parse_xconfig
from symnet.kaldi import read_kaldi_array, read_model

CASES = case_names("xconfig")


def _case(case: str) -> str:
    return str(corpus_dir() / "cases" / case)


def _xconfig(case: str):
    """The case's xconfig with the corpus's file names for affine-transform-file (read from net.config)."""
    folder = _case(case)
    kaldi = {
        line.name: dict(line.options)
        for line in read_config(os.path.join(folder, "net.config"))
        if isinstance(line, ComponentLine)
    }
    lines = open(os.path.join(folder, "xconfig")).read().split("\n")
    for layer in parse_xconfig("\n".join(lines), file="xconfig").layers:
        if "affine-transform-file" in layer.config and layer.name in kaldi:
            i = layer.source.line - 1
            lines[i] = re.sub(
                r"affine-transform-file=\S+", f"affine-transform-file={kaldi[layer.name]['matrix']}", lines[i]
            )
    return parse_xconfig("\n".join(lines), file=os.path.join(folder, "xconfig"))


def _without_zero_init(line, output_layers):
    """The corpus's edit: an output-layer's affine without `param-stddev=0.0 bias-stddev=0.0`."""
    if not (
        isinstance(line, ComponentLine)
        and line.name.endswith(".affine")
        and line.name[: -len(".affine")] in output_layers
    ):
        return line
    kept = [(k, v) for k, v in line.options if not (k in ("param-stddev", "bias-stddev") and float(v) == 0.0)]
    return ComponentLine(name=line.name, type=line.type, options=kept)


def _value(text: str):
    try:
        return float(text)
    except ValueError:
        return text


def _same_line(ours, kaldis) -> bool:
    if isinstance(ours, ComponentLine) and isinstance(kaldis, ComponentLine):
        a = {k: _value(v) for k, v in ours.options}
        b = {k: _value(v) for k, v in kaldis.options}
        return (ours.name, ours.type, a) == (kaldis.name, kaldis.type, b)
    return ours == kaldis  # node lines: names, dims and descriptors in Kaldi's normal form


@pytest.mark.parametrize("case", CASES)
def test_expansion_is_kaldis_final_config(case):
    xconfig = _xconfig(case)
    output_layers = {layer.name for layer in xconfig.layers if layer.layer_type == "output-layer"}
    ours = [_without_zero_init(line, output_layers) for line in xconfig.config_lines("final")]
    kaldis = read_config(os.path.join(_case(case), "net.config"))
    assert [(line.kind, line.name) for line in ours] == [(line.kind, line.name) for line in kaldis]
    assert [(a.to_text(), b.to_text()) for a, b in zip(ours, kaldis, strict=True) if not _same_line(a, b)] == []
    # The text symnet writes reads back to the same lines.
    assert parse_config(xconfig.config_text("final")) == xconfig.config_lines("final")


@pytest.mark.parametrize("case", CASES)
def test_written_matrices_are_the_corpus_files(case):
    """The matrices the layers write (idct-layer) equal the files Kaldi's script wrote."""
    xconfig = _xconfig(case)
    for name, matrix in xconfig.matrices.items():
        np.testing.assert_allclose(matrix, read_kaldi_array(os.path.join(_case(case), name)), rtol=1e-6, atol=1e-7)


def _outputs(folder: str, name: str) -> dict[str, np.ndarray]:
    return {key: np.asarray(value) for key, value in kaldiio.load_ark(os.path.join(folder, name))}


@pytest.mark.parametrize("case", CASES)
def test_symnet_compute_gives_kaldis_outputs(case):
    folder = _case(case)
    xconfig = _xconfig(case)
    network = xconfig.network(read_matrix=lambda path: read_kaldi_array(os.path.join(folder, path)))
    kaldi = read_model(os.path.join(folder, "model.txt")).network
    values = network.values
    assert {k: np.shape(v) for k, v in values.items()} == {k: np.shape(kaldi.values[k]) for k in values}
    network = network.assign({k: kaldi.values[k] for k in values})
    ivectors = _outputs(folder, "ivectors.txt") if os.path.exists(os.path.join(folder, "ivectors.txt")) else None
    feats = _outputs(folder, "input.txt")
    runs = [("output.txt", "output", ComputeOptions(frames_per_chunk=840))]
    if os.path.exists(os.path.join(folder, "output_fpc8.txt")):
        runs.append(("output_fpc8.txt", "output", ComputeOptions(frames_per_chunk=8)))
    if os.path.exists(os.path.join(folder, "output_fsf3.txt")):
        runs.append(("output_fsf3.txt", "output", ComputeOptions(frames_per_chunk=840, frame_subsampling_factor=3)))
    for name in network.outputs:
        if name != "output" and os.path.exists(os.path.join(folder, f"output_{name}.txt")):
            runs.append((f"output_{name}.txt", name, ComputeOptions(frames_per_chunk=840)))
    for file, output, options in runs:
        net = network if output == "output" else _renamed(network, output)
        computer = Nnet3Computer(net, options)
        for utt, want in _outputs(folder, file).items():
            extra = {"ivector": ivectors[utt].reshape(-1)} if ivectors is not None else {}
            got = computer(feats[utt], **extra)
            np.testing.assert_allclose(got, want, rtol=1e-5, atol=3e-5, err_msg=f"{case} {file} {utt}")


def _renamed(network: Network, output: str) -> Network:
    """The network with `output` as its output named 'output' (as the corpus ran nnet3-copy --edits=rename-node)."""
    renamed = Network({"output": network.outputs[output]})
    return renamed.assign({k: network.values[k] for k in renamed.values})
