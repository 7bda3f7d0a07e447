"""Kaldi xconfig files: the line syntax, the descriptor shorthands, every layer type, errors, the Python layer
functions and the command line.

The references are Kaldi's own: the expectations of its xconfig utils'
`test_library()`, the layer semantics documented in its xconfig modules, and
(for the IDCT) the orthonormality of the DCT; the corpus test
(test_xconfig_corpus.py) compares whole networks with Kaldi's output.
"""

from __future__ import annotations

import os
import warnings

import kaldiio
import numpy as np
import pytest

from helpers import EXAMPLES
from symnet import Append, Input, Network, Node, load
from symnet._src.app.cli import main
from symnet._src.core.walk import walk
from symnet._src.kaldi.compute.nnet3_compute import ComputeOptions, Nnet3Computer
from symnet._src.kaldi.text.config import ComponentLine, ComponentNode, DimRangeNode, OutputNode, parse_config
from symnet._src.kaldi.text.xconfig import (
    LAYER_TYPES,
    is_xconfig,
    parse_xconfig,
    parse_xconfig_network,
    read_xconfig,
    read_xconfig_network,
)
from symnet._src.kaldi.text.xconfig import layers as xl
from symnet._src.kaldi.text.xconfig.basic import idct_matrix
from symnet._src.kaldi.text.xconfig.syntax import parse_xconfig_line
from symnet.errors import ConfigError, SymnetError
from symnet.kaldi import parse_network, write_network

# ----- line syntax ---------------------------------------------------------------------------------


def test_line_options_with_spaces_quotes_and_comments():
    line = parse_xconfig_line('relu-layer  name=a input=Append(-1,  0, 1) ng-affine-options="a=1 b=2" dim=4 # c')
    assert line.type == "relu-layer"
    assert line.options == (
        ("name", "a"),
        ("input", "Append(-1, 0, 1)"),
        ("ng-affine-options", "a=1 b=2"),
        ("dim", "4"),
    )
    text = line.text
    assert text[line.value_column("input") - 1 :].startswith("Append(")
    assert text[line.key_column("dim") - 1 :].startswith("dim=4")
    assert parse_xconfig_line("   # only a comment") is None


@pytest.mark.parametrize(
    "text, message, column",
    [
        ("relu-layer name=a name=b", "option name given twice", 19),
        ("relu-layer junk name=a", "expected key=value, got 'junk'", 12),
        ("Relu-layer name=a", "expected a layer type", 1),
        ("relu-layer name=a dim='4'", 'character "\'" is not allowed', 23),
        ('relu-layer name=a opts="x=1', 'no closing "', 24),
        ("relu-layer name=a =3", "an option name must start with a letter", 19),
    ],
)
def test_line_errors_point_at_the_column(text, message, column):
    with pytest.raises(ConfigError) as info:
        parse_xconfig_line(text, file="net.xconfig", line=3)
    assert message in info.value.message
    assert (info.value.file, info.value.line, info.value.column) == ("net.xconfig", 3, column)


# ----- descriptors -----------------------------------------------------------------------------------

PREVIOUS = "input dim=4 name=last_but_one_layer\nrelu-layer name=prev_layer dim=4 input=last_but_one_layer\n"


@pytest.mark.parametrize(
    "written, expanded",
    [  # Kaldi's utils.py test_library()
        ("Sum(last_but_one_layer,prev_layer)", "Sum(last_but_one_layer, prev_layer)"),
        (
            "Append(last_but_one_layer@-3, last_but_one_layer@0, last_but_one_layer@3)",
            "Append(Offset(last_but_one_layer, -3), last_but_one_layer, Offset(last_but_one_layer, 3))",
        ),
        ("Append(-3,0,3)", "Append(Offset(prev_layer, -3), prev_layer, Offset(prev_layer, 3))"),
        ("[-1]", "prev_layer"),
        ("[-2]", "last_but_one_layer"),
        ("[-2]@3", "Offset(last_but_one_layer, 3)"),
        (
            "Failover(prev_layer, Offset(last_but_one_layer, -1))",
            "Failover(prev_layer, Offset(last_but_one_layer, -1))",
        ),
        ("IfDefined(Round(prev_layer, 3))", "IfDefined(Round(prev_layer, 3))"),
        ("Switch(prev_layer, Offset(prev_layer, 2))", "Switch(prev_layer, Offset(prev_layer, 2))"),
        ("IfDefined(ReplaceIndex(prev_layer, t, 0))", "IfDefined(ReplaceIndex(prev_layer, t, 0))"),
        ("Offset(prev_layer, 1, 2)", "Offset(prev_layer, 1, 2)"),
    ],
)
def test_descriptor_shorthands_as_kaldi_expands_them(written, expanded):
    x = parse_xconfig(PREVIOUS + f"no-op-component name=n input={written}\noutput name=output input=n")
    layer = x.layers[2]
    assert str(layer.input.descriptor) == expanded
    # in the config, each layer name becomes the layer's output node
    assert layer.input.text == expanded.replace("prev_layer", "prev_layer.relu")
    assert f"input={written}" in x.expanded(False) and f"input={expanded}" in x.expanded(True)


def test_auxiliary_outputs_and_their_nodes():
    x = parse_xconfig(
        "input name=input dim=6\nfast-lstm-layer name=lstm1 cell-dim=5\n"
        "output-layer name=output dim=3 input=Append([-1].c, lstm1)\n"
    )
    lines = x.config_lines()
    assert any(isinstance(line, DimRangeNode) and line.name == "lstm1.c" for line in lines)
    output = next(line for line in lines if line.name == "output.affine" and isinstance(line, ComponentLine))
    assert dict(output.options)["input-dim"] == "10"
    # without a reference to lstm1.c, Kaldi writes no lstm1.c node
    lines = parse_xconfig(
        "input name=input dim=6\nfast-lstm-layer name=lstm1 cell-dim=5\noutput-layer name=output dim=3\n"
    ).config_lines()
    assert not any(line.name == "lstm1.c" for line in lines)


@pytest.mark.parametrize(
    "text, message, column",
    [
        ("relu-layer name=a dim=4 input=Append([-5], 0)", "[-5] must be [-k] with 1 <= k <= 1", 38),
        (
            "relu-layer name=a dim=4 input=Append(inptu, 0)",
            "no layer named 'inptu' before this line; did you mean input?",
            38,
        ),
        ("relu-layer name=a dim=4 input=Sum(input, Append(input, input))", "have different dims: 4, 8", 31),
        ("relu-layer name=a dim=4 input=Failover(input)", "Failover() takes 2 arguments, got 1", 31),
        ("relu-layer name=a dim=4 input=Append(input, 0) junk", "unexpected 'junk'", 48),
        ("relu-layer name=a dim=4 input=input.c", "layer input (input) has no auxiliary output 'c'", 31),
    ],
)
def test_descriptor_errors_name_the_layer_and_column(text, message, column):
    with pytest.raises(ConfigError) as info:
        parse_xconfig(f"input name=input dim=4\n{text}\noutput name=output", file="x.xconfig")
    assert message in info.value.message and info.value.message.startswith("relu-layer a: ")
    assert (info.value.line, info.value.column) == (2, column)


# ----- errors ----------------------------------------------------------------------------------------


@pytest.mark.parametrize(
    "text, message",
    [
        (
            "relu-batchnrm-layer name=a dim=4",
            "unknown layer type relu-batchnrm-layer; did you mean relu-batchnorm-layer",
        ),
        ("relu-layer name=a dimm=4", "relu-layer a: unknown option dimm; did you mean dim?"),
        ("relu-layer dim=4", "relu-layer: the layer needs a name"),
        ("relu-layer name=input dim=4", "the name 'input' is used for more than one layer"),
        ("relu-layer name=a dim=four", "relu-layer a: dim=four: expected an integer"),
        ("relu-layer name=a dim=4 add-log-stddev=yes", "add-log-stddev=yes: expected true or false"),
        ("tdnnf-layer name=a dim=4 bottleneck-dim=2", "bypass-scale is nonzero but dim != input dim: 4 != 6"),
        (
            "output-layer name=o dim=3\nrelu-layer name=a dim=4",
            "output-layer o is an output; other layers cannot use it",
        ),
    ],
)
def test_layer_errors(text, message):
    with pytest.raises(ConfigError) as info:
        parse_xconfig(f"input name=input dim=6\n{text}\noutput name=output input=input", file="x.xconfig")
    assert message in info.value.message


def test_errors_found_by_the_network_builder_name_the_xconfig_line_and_layer():
    x = parse_xconfig(
        'input name=input dim=6\nrelu-layer name=tdnn1 dim=4 ng-affine-options="bogus=1"\n'
        "output-layer name=output dim=3\n",
        file="x.xconfig",
    )
    with pytest.raises(ConfigError) as info:
        x.network()
    e = info.value
    assert (e.file, e.line) == ("x.xconfig", 2)
    assert e.message.startswith("relu-layer tdnn1: component tdnn1.affine (NaturalGradientAffineComponent)")
    assert "unknown option bogus" in e.message


def test_an_xconfig_without_output_or_layers_is_an_error():
    with pytest.raises(ConfigError, match="no output"):
        parse_xconfig("input name=input dim=3\nrelu-layer name=a dim=2\n").config_lines()
    with pytest.raises(ConfigError, match="empty"):
        parse_xconfig("# nothing\n\n")


# ----- every layer type builds, with the dims its class gives --------------------------------------

LAYERS = {
    "relu-layer": "dim=8 input=Append(-1,0,1)",
    "relu-renorm-layer": "dim=8 add-log-stddev=true",
    "relu-batchnorm-dropout-layer": "dim=8 dropout-per-dim-continuous=true",
    "relu-dropout-layer": "dim=8 dropout-per-dim=true",
    "relu-batchnorm-layer": "dim=8 bottleneck-dim=4 l2-regularize=0.01 learning-rate-factor=0.5 bias-stddev=0.1",
    "relu-batchnorm-so-layer": "dim=8",
    "batchnorm-so-relu-layer": "dim=8",
    "batchnorm-layer": "dim=8",
    "sigmoid-layer": "dim=8",
    "tanh-layer": "",
    "fixed-affine-layer": "input=Append(-1,0,1) affine-transform-file=lda.mat",
    "idct-layer": "dim=12 affine-transform-file=idct.mat",
    "affine-layer": "dim=8",
    "lstm-layer": "cell-dim=8 delay=-2 decay-time=20",
    "lstmp-layer": "cell-dim=8 recurrent-projection-dim=2 non-recurrent-projection-dim=2 dropout-proportion=0.1",
    "lstmp-batchnorm-layer": "cell-dim=8",
    "fast-lstm-layer": "cell-dim=8 l2-regularize=0.01",
    "fast-lstm-batchnorm-layer": "cell-dim=8",
    "fast-lstmp-layer": "cell-dim=8",
    "fast-lstmp-batchnorm-layer": "cell-dim=8",
    "lstmb-layer": "cell-dim=8 bottleneck-dim=4",
    "stats-layer": "config=mean+stddev+count(-6:1:3:6)",
    "relu-conv-layer": "height-in=12 height-out=12 time-offsets=-1,0,1 height-offsets=-1,0,1 num-filters-out=2",
    "conv-layer": "height-in=12 height-out=12 time-offsets=0 height-offsets=-1,0,1 num-filters-out=2",
    "conv-relu-layer": "height-in=12 height-out=6 height-subsample-out=2 time-offsets=0 height-offsets=-1,0,1 "
    "num-filters-out=2",
    "conv-renorm-layer": "height-in=12 height-out=12 time-offsets=-1,0,1 height-offsets=-1,0,1 num-filters-out=1",
    "relu-conv-renorm-layer": "height-in=12 height-out=12 time-offsets=0 height-offsets=0 num-filters-out=1",
    "batchnorm-conv-layer": "height-in=12 height-out=12 time-offsets=0 height-offsets=0 num-filters-out=1",
    "conv-relu-renorm-layer": "height-in=12 height-out=12 time-offsets=0 height-offsets=0 num-filters-out=1",
    "batchnorm-conv-relu-layer": "height-in=12 height-out=12 time-offsets=0 height-offsets=0 num-filters-out=1",
    "relu-batchnorm-conv-layer": "height-in=12 height-out=12 time-offsets=0 height-offsets=0 num-filters-out=1",
    "relu-batchnorm-noconv-layer": "height-in=12 height-out=12 num-filters-out=1",
    "relu-noconv-layer": "height-in=12 height-out=12 num-filters-out=1",
    "conv-relu-batchnorm-layer": "height-in=12 height-out=12 time-offsets=-1,0,1 height-offsets=-1,0,1 "
    "num-filters-out=2",
    "conv-relu-batchnorm-so-layer": "height-in=12 height-out=12 time-offsets=0 height-offsets=0 num-filters-out=2",
    "conv-relu-batchnorm-dropout-layer": "height-in=12 height-out=12 time-offsets=0 height-offsets=0 num-filters-out=1",
    "conv-relu-dropout-layer": "height-in=12 height-out=12 time-offsets=0 height-offsets=0 num-filters-out=1",
    "res-block": "height=12 num-filters=1",
    "res2-block": "height-in=12 height-out=6 num-filters=2 time-period=2",
    "channel-average-layer": "dim=4",
    "attention-renorm-layer": "num-heads=2 value-dim=3 key-dim=2 num-left-inputs=2 num-right-inputs=1",
    "attention-relu-renorm-layer": "num-heads=2 value-dim=3 key-dim=2 num-left-inputs=2 num-right-inputs=1",
    "attention-relu-batchnorm-layer": "value-dim=3 key-dim=2 num-left-inputs=1 num-right-inputs=0",
    "relu-renorm-attention-layer": "value-dim=3 key-dim=2 num-left-inputs=1 num-right-inputs=1 output-context=false",
    "gru-layer": "cell-dim=8",
    "pgru-layer": "cell-dim=8",
    "opgru-layer": "cell-dim=8",
    "fast-gru-layer": "cell-dim=8",
    "fast-pgru-layer": "cell-dim=8",
    "norm-pgru-layer": "cell-dim=8 recurrent-projection-dim=3",
    "norm-opgru-layer": "cell-dim=8 dropout-proportion=0.1 l2-regularize=0.01",
    "fast-opgru-layer": "cell-dim=8 non-recurrent-projection-dim=4",
    "fast-norm-pgru-layer": "cell-dim=8 dropout-proportion=0.2",
    "fast-norm-opgru-layer": "cell-dim=8 dropout-proportion=0.2 dropout-per-frame=false",
    "tdnnf-layer": "dim=12 bottleneck-dim=4 time-stride=3 dropout-proportion=0.0",
    "prefinal-layer": "big-dim=16 small-dim=4",
    "spec-augment-layer": "",
    "renorm-component": "",
    "batchnorm-component": "",
    "no-op-component": "",
    "linear-component": "dim=5 orthonormal-constraint=-1",
    "affine-component": "dim=5",
    "scale-component": "",
    "offset-component": "",
    "dim-range-component": "dim=4 dim-offset=2",
    "combine-feature-maps-layer": "input=Append(pre, input) num-filters1=1 num-filters2=1 height=12",
    "delta-layer": "",
}


def test_every_layer_type_is_exercised():
    assert set(LAYERS) | {"input", "output", "output-layer"} == set(LAYER_TYPES)


@pytest.mark.parametrize("layer_type", sorted(LAYERS))
def test_every_layer_type_builds_a_network_of_its_dims(layer_type, tmp_path):
    np.savetxt(tmp_path / "lda.txt", np.zeros(1))
    (tmp_path / "lda.mat").write_text("[ " + "\n".join(" ".join("0.5" for _ in range(37)) for _ in range(36)) + " ]")
    text = (
        f"input name=input dim=12\nrelu-layer name=pre dim=12\n{layer_type} name=L {LAYERS[layer_type]}\n"
        f"output name=output input=L\n"
    )
    text = text.replace("lda.mat", str(tmp_path / "lda.mat"))
    x = parse_xconfig(text)
    layer = x.layers[2]
    net = x.network()
    out_dims = {line.name: line for line in x.config_lines()}
    assert isinstance(out_dims["output"], OutputNode)
    computed = Nnet3Computer(net, ComputeOptions(frames_per_chunk=20))(
        np.random.default_rng(0).standard_normal((9, 12)).astype(np.float32)
    )
    assert computed.shape[1] == layer.output_dim()


def test_fast_lstmp_with_dropout_builds():
    x = parse_xconfig(
        "input name=input dim=6\nfast-lstmp-layer name=l cell-dim=8 dropout-proportion=0.1\noutput name=output input=l"
    )
    assert "DropoutMaskComponent" in x.config_text("final")
    from symnet._src.core.index import IndexSet
    from symnet.components import set_test_mode
    from symnet.engine import ComputationRequest, compile

    net = set_test_mode(x.network())
    frames = IndexSet.range(n=2, t=(0, 5))
    request = ComputationRequest(inputs={"input": frames}, outputs={"output": frames, "l.dropout_mask": frames})
    out = compile(net, request)(net, {"input": np.ones((10, 6), np.float32)})
    # Kaldi's test mode: every dropout scale is 1 - p (nnet-general-component.cc, DropoutMaskComponent)
    np.testing.assert_allclose(out["l.dropout_mask"], np.full((10, 3), 0.9), rtol=1e-6)
    assert np.isfinite(np.asarray(out["output"])).all()


def test_tdnnf_time_offsets_and_bypass():
    def offsets(options: str) -> list[str]:
        x = parse_xconfig(
            f"input name=input dim=8\ntdnnf-layer name=f dim=8 bottleneck-dim=2 {options}\noutput name=output input=f"
        )
        return [
            dict(line.options)["time-offsets"]
            for line in x.config_lines()
            if isinstance(line, ComponentLine) and line.type == "TdnnComponent"
        ]

    assert offsets("time-stride=3") == ["-3,0", "0,3"]
    assert offsets("time-stride=3 context=left-only") == ["-3,0", "0"]
    assert offsets("time-stride=3 context=shift-left") == ["-3,0", "-3,0"]
    assert offsets("time-stride=0") == ["0", "0"] == offsets("time-stride=2 context=none")
    x = parse_xconfig(
        "input name=input dim=8\ntdnnf-layer name=f dim=8 bottleneck-dim=2 bypass-scale=0\noutput name=output input=f"
    )
    assert not any("noop" in line.name for line in x.config_lines())
    assert x.layers[1].output_name() == "f.batchnorm"


def test_stats_layer_as_kaldi_documents_it():
    x = parse_xconfig(
        "input name=input dim=5\nstats-layer name=s config=mean+stddev(-99:3:9:99)\noutput name=output input=s"
    )
    assert x.layers[1].output_name() == "Round(s-pooling-99-99, 9)" and x.layers[1].output_dim() == 10
    pooling = next(
        line for line in x.config_lines() if line.name == "s-pooling-99-99" and isinstance(line, ComponentLine)
    )
    assert dict(pooling.options)["input-dim"] == "11"  # a count and the sums of x and x^2


def test_combine_feature_maps_interleaves_the_filters():
    x = parse_xconfig(
        "input name=a dim=2\ninput name=b dim=4\ncombine-feature-maps-layer name=c "
        "input=Append(a, b) num-filters1=1 num-filters2=2 height=2\noutput name=output input=c"
    )
    line = next(line for line in x.config_lines() if isinstance(line, ComponentLine))
    assert dict(line.options)["column-map"] == "0,2,3,1,4,5"  # height 0: a0 b0 b1, height 1: a1 b2 b3


def test_idct_matrix_is_the_inverse_of_the_orthonormal_dct():
    m = idct_matrix(13, 13, 0.0)
    assert m.shape == (13, 14) and np.all(m[:, -1] == 0.0)
    np.testing.assert_allclose(m[:, :-1].T @ m[:, :-1], np.eye(13), atol=1e-12)
    lifted = idct_matrix(13, 23, 22.0)
    lifter = 1.0 + 11.0 * np.sin(np.pi * np.arange(13) / 22.0)
    np.testing.assert_allclose(lifted[:, :-1] * lifter, idct_matrix(13, 23, 0.0)[:, :-1], atol=1e-12)


def test_idct_layer_uses_the_matrix_it_writes(tmp_path):
    x = parse_xconfig(
        "input name=input dim=13\nidct-layer name=idct dim=23 affine-transform-file=idct.mat\n"
        "output name=output input=idct"
    )
    net = x.network()
    e = np.zeros((1, 13), np.float32)
    e[0, 2] = 1.0
    got = Nnet3Computer(net, ComputeOptions())(e)
    np.testing.assert_allclose(got[0], x.matrices["idct.mat"][:, 2], rtol=1e-6, atol=1e-7)


def test_fixed_affine_layer_configs_for_lda(tmp_path):
    x = parse_xconfig(
        "input name=ivector dim=3\ninput name=input dim=4\nfixed-affine-layer name=lda "
        "input=Append(-1,0,1,ReplaceIndex(ivector, t, 0)) affine-transform-file=lda.mat\n"
        "relu-layer name=t dim=5\noutput-layer name=output dim=2\n"
    )
    init, ref, final = (parse_config(x.config_text(which)) for which in ("init", "ref", "final"))
    assert [line.to_text() for line in init] == [
        "input-node name=ivector dim=3",
        "input-node name=input dim=4",
        "output-node name=output input=Append(Offset(input, -1), input, Offset(input, 1), "
        "ReplaceIndex(ivector, t, 0)) objective=linear",
    ]
    assert dict(next(line for line in ref if line.name == "lda" and isinstance(line, ComponentLine)).options) == {
        "input-dim": "15",
        "output-dim": "15",
    }
    assert dict(next(line for line in final if line.name == "lda" and isinstance(line, ComponentLine)).options) == {
        "matrix": "lda.mat"
    }
    assert parse_xconfig("input name=input dim=4\noutput-layer name=output dim=2\n").config_text("init") is None


def test_write_config_dir_writes_what_xconfig_to_configs_writes(tmp_path, monkeypatch):
    monkeypatch.chdir(tmp_path)
    x = parse_xconfig(  # the matrix path as final.config reads it, from the working folder: inside configs
        "input name=input dim=13\nidct-layer name=idct dim=13 affine-transform-file=configs/idct.mat\n"
        "relu-layer name=t dim=5 input=Append(-1,0,1)\noutput-layer name=output dim=2\n"
    )
    written = x.write_config_dir("configs")
    assert sorted(os.path.basename(p) for p in written) == [
        "final.config",
        "idct.mat",
        "ref.config",
        "vars",
        "xconfig.expanded.1",
        "xconfig.expanded.2",
    ]
    assert open("configs/vars").read() == "model_left_context=1\nmodel_right_context=1\n"
    assert parse_config(open("configs/final.config").read()) == x.config_lines()
    from symnet.kaldi import read_kaldi_array

    np.testing.assert_allclose(read_kaldi_array("configs/idct.mat"), x.matrices["configs/idct.mat"], rtol=1e-6)
    assert "relu-layer name=t " in open("configs/xconfig.expanded.2").read()
    assert "input=Append(Offset(idct, -1), idct, Offset(idct, 1))" in open("configs/xconfig.expanded.2").read()


def test_is_xconfig_tells_xconfigs_from_configs(tmp_path):
    (tmp_path / "a").write_text("# a comment\n\ninput dim=3 name=input\noutput name=output\n")
    (tmp_path / "b").write_text("input-node name=input dim=3\noutput-node name=output input=input\n")
    assert is_xconfig(tmp_path / "a") and not is_xconfig(tmp_path / "b") and not is_xconfig(tmp_path / "none")
    # an xconfig given to the nnet3 config reader gets a hint
    with pytest.raises(ConfigError, match="looks like a Kaldi xconfig line"):
        parse_network((tmp_path / "a").read_text())


def test_the_example_xconfig_reads():
    path = EXAMPLES / "tdnnf.xconfig"
    assert is_xconfig(path)
    assert read_xconfig_network(path).context("output") == (5, 5)


# ----- the Python layer functions ------------------------------------------------------------------

TDNNF_XCONFIG = """input dim=20 name=input
relu-batchnorm-dropout-layer name=tdnn1 input=Append(-1,0,1) dim=32 dropout-proportion=0.1
tdnnf-layer name=tdnnf2 dim=32 bottleneck-dim=8 time-stride=1 dropout-proportion=0.1
tdnnf-layer name=tdnnf3 dim=32 bottleneck-dim=8 time-stride=3
linear-component name=prefinal-l dim=16 orthonormal-constraint=-1.0
prefinal-layer name=prefinal-chain input=prefinal-l small-dim=16 big-dim=32
output-layer name=output include-log-softmax=false dim=10
prefinal-layer name=prefinal-xent input=prefinal-l small-dim=16 big-dim=32
output-layer name=output-xent dim=10 learning-rate-factor=5.0
"""


def test_python_layer_functions_build_the_xconfig_network():
    x = Input("input", 20)
    h = xl.relu_batchnorm_dropout(xl.splice(x, -1, 0, 1), name="tdnn1", dim=32, dropout_proportion=0.1)
    h = xl.tdnnf(h, name="tdnnf2", dim=32, bottleneck_dim=8, time_stride=1, dropout_proportion=0.1)
    h = xl.tdnnf(h, name="tdnnf3", dim=32, bottleneck_dim=8, time_stride=3)
    linear = xl.linear_component(h, name="prefinal-l", dim=16, orthonormal_constraint=-1.0)
    chain = xl.output_layer(
        xl.prefinal(linear, name="prefinal-chain", small_dim=16, big_dim=32),
        name="output",
        include_log_softmax=False,
        dim=10,
    )
    xent = xl.output_layer(
        xl.prefinal(linear, name="prefinal-xent", small_dim=16, big_dim=32),
        name="output-xent",
        dim=10,
        learning_rate_factor=5.0,
    )
    net = Network({"output": chain, "output-xent": xent}, seed=3)
    want = parse_xconfig_network(TDNNF_XCONFIG, seed=3)
    assert net.structure == want.structure
    assert write_network(net) == write_network(want)
    assert all(np.array_equal(net.params[k], want.params[k]) for k in want.params)


def test_python_recurrent_layers_build_the_xconfig_network():
    x = Input("input", 12)
    forward = xl.fast_lstmp(
        xl.splice(x, -1, 0, 1),
        name="f",
        cell_dim=16,
        recurrent_projection_dim=4,
        non_recurrent_projection_dim=4,
        delay=-3,
    )
    backward = xl.fast_lstmp(
        xl.splice(x, -1, 0, 1),
        name="b",
        cell_dim=16,
        recurrent_projection_dim=4,
        non_recurrent_projection_dim=4,
        delay=3,
    )
    gru = xl.gru(Append(forward, backward), name="g", cell_dim=8)
    net = Network({"output": xl.output_layer(gru, name="output", dim=5)})
    want = parse_xconfig_network(
        "input name=input dim=12\n"
        "fast-lstmp-layer name=f input=Append(-1,0,1) cell-dim=16 recurrent-projection-dim=4 "
        "non-recurrent-projection-dim=4 delay=-3\n"
        "fast-lstmp-layer name=b input=Append(input@-1,input,input@1) cell-dim=16 "
        "recurrent-projection-dim=4 non-recurrent-projection-dim=4 delay=3\n"
        "gru-layer name=g input=Append(f, b) cell-dim=8\n"
        "output-layer name=output dim=5\n"
    )
    assert net.structure == want.structure


def test_python_layer_functions_are_named_documented_and_checked():
    for layer_type in LAYER_TYPES:
        if layer_type in ("input", "output"):
            continue
        function = getattr(xl, xl.function_name(layer_type))
        assert function.__name__ == xl.function_name(layer_type) and f"`{layer_type}`" in function.__doc__
    assert xl.function_name("tdnnf-layer") == "tdnnf" and xl.function_name("res-block") == "res_block"
    with pytest.raises(ConfigError, match="unknown option bottleneck; did you mean bottleneck-dim"):
        xl.tdnnf(Input("input", 8), name="t", dim=8, bottleneck=2)
    with pytest.raises(SymnetError, match="dim is not known"):
        xl.relu(Node("n", Input("input", 3) * 2.0), name="r", dim=2)


# ----- the command line ---------------------------------------------------------------------------


@pytest.fixture
def xconfig_file(tmp_path):
    path = tmp_path / "net.xconfig"
    path.write_text(
        "input dim=16 name=input\nrelu-batchnorm-layer name=tdnn1 dim=12 input=Append(-1,0,1)\n"
        "tdnnf-layer name=tdnnf2 dim=12 bottleneck-dim=4 time-stride=1\n"
        "output-layer name=output dim=30\n"
    )
    return path


def test_cli_xconfig_prints_writes_and_fills_a_config_dir(xconfig_file, tmp_path, capsys):
    assert main(["xconfig", str(xconfig_file)]) == 0
    printed = capsys.readouterr().out
    assert parse_config(printed) == read_xconfig(xconfig_file).config_lines()
    assert main(["xconfig", "-o", str(tmp_path / "final.config"), str(xconfig_file)]) == 0
    assert (tmp_path / "final.config").read_text() == printed
    assert main(["xconfig", "--config-dir", str(tmp_path / "configs"), str(xconfig_file)]) == 0
    assert sorted(os.listdir(tmp_path / "configs")) == [
        "final.config",
        "ref.config",
        "vars",
        "xconfig",
        "xconfig.expanded.1",
        "xconfig.expanded.2",
    ]
    copy = (tmp_path / "configs" / "xconfig").read_text()
    assert copy.splitlines()[3:] == [line.strip() for line in xconfig_file.read_text().splitlines()]


LDA_RECIPE = """input dim=100 name=ivector
input dim=40 name=input
fixed-affine-layer name=lda input=Append(-1,0,1,ReplaceIndex(ivector, t, 0)) affine-transform-file=exp/tdnn/configs/lda.mat
relu-batchnorm-layer name=tdnn1 dim=64
relu-batchnorm-layer name=tdnn2 dim=64 input=Append(-1,0,1)
output-layer name=output dim=30 max-change=1.5
"""


def test_a_recipes_config_dir_is_written_before_its_lda_mat_exists(tmp_path, capsys, monkeypatch):
    """As a recipe runs xconfig_to_configs.py: the LDA's matrix is estimated later, from init.config's network,
    so writing the configs reads no matrix (ref.config has a random one of the same dims)."""
    monkeypatch.chdir(tmp_path)
    (tmp_path / "network.xconfig").write_text(LDA_RECIPE)
    assert main(["xconfig", "--config-dir", "exp/tdnn/configs", "network.xconfig"]) == 0
    configs = tmp_path / "exp" / "tdnn" / "configs"
    assert not (configs / "lda.mat").exists()
    init = (configs / "init.config").read_text()
    assert (
        "output-node name=output input=Append(Offset(input, -1), input, Offset(input, 1), ReplaceIndex(ivector, t, 0))"
        in init
    )
    ref = (configs / "ref.config").read_text()
    assert "component name=lda type=FixedAffineComponent input-dim=220 output-dim=220" in ref
    final = (configs / "final.config").read_text()
    assert "component name=lda type=FixedAffineComponent matrix=exp/tdnn/configs/lda.mat" in final
    assert (configs / "vars").read_text() == "model_left_context=2\nmodel_right_context=2\n"
    capsys.readouterr()
    assert main(["xconfig", "network.xconfig"]) == 0  # printing final.config reads no matrix either
    assert capsys.readouterr().out.count("matrix=exp/tdnn/configs/lda.mat") == 1


def test_a_failed_config_dir_leaves_the_folder_as_it_was(tmp_path, monkeypatch, capsys):
    """The set is written as a whole: when one file cannot be written, none of the others changes."""
    from symnet._src.base import atomic

    monkeypatch.chdir(tmp_path)
    (tmp_path / "network.xconfig").write_text(LDA_RECIPE)
    configs = tmp_path / "configs"
    configs.mkdir()
    (configs / "final.config").write_text("the old final.config")
    real = atomic.AtomicFile.prepare

    def full_disk(self):
        if self.path.endswith("vars"):
            raise atomic._error(self.path, OSError(28, "No space left on device"))
        return real(self)

    monkeypatch.setattr(atomic.AtomicFile, "prepare", full_disk)
    assert main(["xconfig", "--config-dir", "configs", "network.xconfig"]) == 1
    err = capsys.readouterr().err
    assert "configs/vars" in err and "No space left on device" in err  # the message names the file
    assert os.listdir(configs) == ["final.config"]
    assert (configs / "final.config").read_text() == "the old final.config"


def test_scale_and_const_in_xconfig_descriptors():
    """wsj tdnn_1i, swbd tdnn_7r: `input=Append(delta, Scale(1.0, ReplaceIndex(ivector, t, 0)))`."""
    x = parse_xconfig(
        "input name=ivector dim=10\ninput name=input dim=4\n"
        "relu-layer name=a input=Append(-1,0,Scale(0.5, ReplaceIndex(ivector, t, 0))) dim=8\n"
        "relu-layer name=b input=Sum(a, Const(2, 8), Scale(-1e-3,a@-1)) dim=8\noutput-layer name=output dim=3\n"
    )
    final = x.config_text("final")
    assert "input=Append(Offset(input, -1), input, Scale(0.5, ReplaceIndex(ivector, t, 0)))" in final
    assert "input-dim=18 output-dim=8" in final
    assert "input=Sum(a.relu, Const(2.0, 8), Scale(-0.001, Offset(a.relu, -1)))" in final
    assert " input=Sum(a, Const(2.0, 8), Scale(-0.001, Offset(a, -1))) " in x.expanded(True)
    x.network()
    with pytest.raises(ConfigError, match=r"parsing Scale\(\), expected a number but got 'a'"):
        parse_xconfig("input name=input dim=4\nrelu-layer name=a input=Scale(a, input) dim=3\n")
    with pytest.raises(ConfigError, match=r"Const\(\) needs a positive dim"):
        parse_xconfig("input name=input dim=4\nrelu-layer name=a input=Append(input, Const(1.0, 0)) dim=3\n")


def test_an_output_layer_with_a_bottleneck_builds_as_kaldi_reads_it():
    """Kaldi's xconfig writes max-change twice on the bottleneck's line; its ConfigLine keeps the first value."""
    x = parse_xconfig(
        "input name=input dim=4\nrelu-layer name=a dim=8\noutput-layer name=output dim=5 bottleneck-dim=3\n"
    )
    final = x.config_text("final")
    assert "max-change=0.75  max-change=1.5" in final
    network = x.network()  # Kaldi's own repeat: no warning (the next test)
    linear = next(layer for layer in walk([network.output]) if getattr(layer, "name", None) == "output.linear")
    assert dict(linear.options)["max-change"] == 0.75


def test_cli_xconfig_error_names_the_line(tmp_path, capsys):
    bad = tmp_path / "bad.xconfig"
    bad.write_text("input dim=4 name=input\nrelu-batchnorm-layer name=tdnn1 dimm=8\noutput-layer name=output dim=3\n")
    assert main(["xconfig", str(bad)]) == 1
    err = capsys.readouterr().err
    assert f"{bad}:2:33: relu-batchnorm-layer tdnn1: unknown option dimm; did you mean dim?" in err


def test_cli_info_init_and_compute_take_an_xconfig(xconfig_file, tmp_path, capsys):
    assert main(["info", str(xconfig_file)]) == 0
    info = capsys.readouterr().out
    assert "input-dim: 16" in info and "output-dim: 30" in info and "left-context: 2" in info
    model = tmp_path / "model.mdl"
    assert main(["init", "--seed", "4", str(xconfig_file), str(model)]) == 0
    loaded = load(model)
    assert loaded.structure == read_xconfig_network(xconfig_file, seed=4).structure
    feats = {"utt1": np.random.default_rng(2).standard_normal((6, 16)).astype(np.float32)}
    kaldiio.save_ark(str(tmp_path / "feats.ark"), feats)
    out = tmp_path / "out.ark"
    assert main(["compute", str(xconfig_file), f"ark:{tmp_path / 'feats.ark'}", f"ark:{out}"]) == 0
    got = dict(kaldiio.load_ark(str(out)))["utt1"]
    want = Nnet3Computer(read_xconfig_network(xconfig_file), ComputeOptions())(feats["utt1"])
    np.testing.assert_allclose(got, want, rtol=1e-6)


def test_cli_init_adds_an_xconfig_to_an_existing_model(xconfig_file, tmp_path, capsys):
    base = tmp_path / "base.mdl"
    assert main(["init", str(xconfig_file), str(base)]) == 0
    more = tmp_path / "more.xconfig"
    more.write_text("relu-layer name=extra dim=7 input=tdnnf2.noop\noutput-layer name=output2 dim=3\n")
    out = tmp_path / "more.mdl"
    assert main(["init", str(base), str(more), str(out)]) == 0, capsys.readouterr().err
    net = load(out)
    assert set(net.outputs) == {"output", "output2"}
    base_params = load(base).params
    assert all(np.array_equal(net.params[k], v) for k, v in base_params.items())


def test_cli_train_takes_an_xconfig(xconfig_file, tmp_path, capsys):
    out = tmp_path / "trained.mdl"
    assert (
        main(
            [
                "train",
                str(xconfig_file),
                "--data",
                "builtin:hmm:8",
                "--epochs",
                "1",
                "--batch-size",
                "4",
                "--quiet",
                "--out",
                str(out),
            ]
        )
        == 0
    ), capsys.readouterr().err
    assert load(out).structure == read_xconfig_network(xconfig_file).structure


def test_the_xconfig_network_is_a_kaldi_config_network():
    x = parse_xconfig(TDNNF_XCONFIG)
    with warnings.catch_warnings():
        warnings.simplefilter("error")
        net = x.network(seed=1)
    config_net = parse_network(x.config_text("final"), seed=1)
    assert net.structure == config_net.structure
    assert net.objectives == config_net.objectives == {"output": "linear", "output-xent": "linear"}
    assert isinstance(
        next(line for line in x.config_lines() if line.name == "tdnnf2.noop" and isinstance(line, ComponentNode)),
        ComponentNode,
    )


def test_a_key_kaldis_own_layer_writes_twice_is_no_warning_but_an_ignored_option_of_the_user_is(recwarn):
    """Kaldi's output-layer with bottleneck-dim writes max-change=0.75 and then the options' max-change=1.5 on its
    linear component (nnet3 keeps the first, without a word), as recipes do (swbd tdnn_7m25l, wsj tdnn_lstm_1b):
    nothing to warn of. A max-change the xconfig line gives that is so ignored warns, at its column."""
    x = parse_xconfig("input name=input dim=10\noutput-layer name=output dim=5 bottleneck-dim=4\n", file="a.xconfig")
    assert "output-dim=4 max-change=0.75  max-change=1.5" in x.config_text("final")
    x.network(which="ref")
    assert not [w for w in recwarn if "given twice" in str(w.message)]
    text = "input name=input dim=10\noutput-layer name=output dim=5 bottleneck-dim=4 max-change=2.0\n"
    with pytest.warns(UserWarning, match=r"b\.xconfig:2:49: option max-change is given twice; as Kaldi, the first "):
        parse_xconfig(text, file="b.xconfig").network(which="ref")
