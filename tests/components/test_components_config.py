"""Kaldi components built from config options: defaults, initialisation, required and bad options."""

from __future__ import annotations

import math

import numpy as np
import pytest

import symnet
from symnet import Full
from symnet._src.core.initializers import Normal, Zeros
from symnet._src.kaldi.components import read_matrix_file
from symnet.components import ComponentConfigError, FixedWeight
from symnet.errors import SymnetError
from symnet.kaldi import COMPONENTS, build_component


def build(kaldi_type, options, name="c", **kwargs):
    return build_component(kaldi_type, name, options, symnet.Identity(), **kwargs)


def options_of(layer):
    return dict(layer.options)


# ----- defaults and initialisation --------------------------------------------------------------


def test_affine_defaults_follow_kaldi():
    layer = build("AffineComponent", {"input-dim": "16", "output-dim": "8"})
    assert layer.linear_params.init == Normal((8, 16), 0.25, 0.0)
    assert layer.bias_params.init == Normal((8,), 1.0, 0.0)
    assert layer.linear_params.name == "c.linear_params" and layer.bias_params.name == "c.bias_params"
    assert options_of(layer) == {
        "learning-rate": 0.001,
        "learning-rate-factor": 1.0,
        "max-change": 0.0,
        "l2-regularize": 0.0,
        "is-gradient": False,
        "orthonormal-constraint": 0.0,
    }
    assert layer.option("learning-rate") == 0.001 and layer.option("missing", 7) == 7
    # Built twice from the same config: equal (and equally hashed) trees, so compiled code is shared.
    again = build("AffineComponent", {"input-dim": 16, "output-dim": 8})
    assert again == layer and hash(again) == hash(layer)


def test_affine_explicit_options_and_metadata():
    layer = build(
        "AffineComponent",
        {
            "input-dim": 4,
            "output-dim": 2,
            "param-stddev": "0",
            "bias-stddev": "0",
            "learning-rate-factor": "0.5",
            "max-change": "0.75",
            "l2-regularize": "1e-4",
            "orthonormal-constraint": "-1",
        },
    )
    assert layer.linear_params.init == Zeros((2, 4)) and layer.bias_params.init == Zeros((2,))
    opts = options_of(layer)
    assert opts["learning-rate-factor"] == 0.5 and opts["max-change"] == 0.75 and opts["l2-regularize"] == 1e-4
    assert opts["orthonormal-constraint"] == -1.0
    net = symnet.Network(layer)
    assert np.all(np.asarray(net.values["c.linear_params"]) == 0.0)


def test_natural_gradient_affine_defaults():
    layer = build("NaturalGradientAffineComponent", {"input-dim": 100, "output-dim": 30, "bias-mean": 2.0})
    assert layer.bias_params.init == Normal((30,), 1.0, 2.0)
    assert layer.linear_params.init == Normal((30, 100), 0.1, 0.0)
    opts = options_of(layer)
    assert (opts["rank-in"], opts["rank-out"], opts["update-period"]) == (20, 15, 4)
    assert (opts["num-samples-history"], opts["alpha"]) == (2000.0, 4.0)
    big = build("NaturalGradientAffineComponent", {"input-dim": 10, "output-dim": 1000, "rank-in": 3})
    assert (big.option("rank-in"), big.option("rank-out")) == (3, 80)


def test_linear_defaults():
    layer = build("LinearComponent", {"input-dim": 9, "output-dim": 3})
    assert layer.params.init == Normal((3, 9), 1 / 3, 0.0) and layer.params.name == "c.params"
    opts = options_of(layer)
    assert opts["use-natural-gradient"] is True and (opts["rank-in"], opts["rank-out"]) == (5, 2)
    assert (
        build("LinearComponent", {"input-dim": 9, "output-dim": 3, "use-natural-gradient": "false"}).option(
            "use-natural-gradient"
        )
        is False
    )


def test_block_and_repeated_affine_defaults():
    block = build("BlockAffineComponent", {"input-dim": 8, "output-dim": 6, "num-blocks": 2})
    assert block.linear_params.init == Normal((6, 4), 0.5, 0.0) and block.bias_params.init == Normal((6,), 1.0, 0.0)
    assert block.num_blocks == 2
    rep = build("RepeatedAffineComponent", {"input-dim": 8, "output-dim": 6, "num-repeats": 2})
    assert rep.linear_params.init == Normal((3, 4), 0.5, 0.0)
    assert rep.bias_params.init == Zeros((3,))  # Kaldi's bias-stddev default is 0 here
    rep = build(
        "NaturalGradientRepeatedAffineComponent", {"input-dim": 8, "output-dim": 6, "num-repeats": 2, "bias-mean": 1}
    )
    assert rep.bias_params.init == Full((3,), 1.0)


def test_fixed_affine_random_init_and_fixed_weights():
    layer = build("FixedAffineComponent", {"input-dim": 3, "output-dim": 2})
    assert isinstance(layer.linear_params, FixedWeight) and isinstance(layer.bias_params, FixedWeight)
    assert layer.linear_params.init == Normal((2, 3), 1.0, 0.0)
    assert layer.options == ()


def test_matrix_files(tmp_path):
    path = tmp_path / "lda.mat"
    path.write_text(" [\n  1 2 3 0.5\n  4 5 6 -0.5 ]\n")
    fixed = build("FixedAffineComponent", {"matrix": str(path)})
    net = symnet.Network(fixed)
    np.testing.assert_array_equal(np.asarray(net.values["c.linear_params"]), [[1, 2, 3], [4, 5, 6]])
    np.testing.assert_array_equal(np.asarray(net.values["c.bias_params"]), [0.5, -0.5])
    assert (fixed.input_dim, fixed.output_dim) == (3, 2)
    np.testing.assert_allclose(np.asarray(net(np.ones((1, 3), np.float32))), [[6.5, 14.5]])
    affine = build("AffineComponent", {"matrix": str(path), "input-dim": 3, "learning-rate": 0.01})
    assert affine.input_dim == 3 and affine.option("learning-rate") == 0.01
    with pytest.raises(ComponentConfigError, match="input-dim=4 does not match") as info:
        build("AffineComponent", {"matrix": str(path), "input-dim": 4})
    assert info.value.option == "input-dim"
    with pytest.raises(ComponentConfigError, match="no other option") as info:
        build("FixedAffineComponent", {"matrix": str(path), "input-dim": 3})
    with pytest.raises(ComponentConfigError, match="cannot read matrix"):
        build("FixedAffineComponent", {"matrix": str(tmp_path / "missing.mat")})
    # A reader from symnet's Kaldi I/O can be passed in (binary files, archives...).
    seen = []

    def reader(name):
        seen.append(name)
        return np.eye(2, 3)

    linear = build("LinearComponent", {"matrix": "exp/x.mat"}, read_matrix=reader)
    assert seen == ["exp/x.mat"] and (linear.input_dim, linear.output_dim) == (3, 2)
    vec = tmp_path / "v.vec"
    vec.write_text(" [ 1 2 3 ]\n")
    np.testing.assert_array_equal(read_matrix_file(str(vec)), [1, 2, 3])
    scale = build("FixedScaleComponent", {"scales": str(vec)})
    assert scale.input_dim == 3
    offset = build("PerElementOffsetComponent", {"vector": str(vec), "dim": 6})
    assert (offset.input_dim, offset.offsets.shape) == (6, (3,))
    with pytest.raises(ComponentConfigError, match="not a non-empty vector"):
        build("FixedBiasComponent", {"bias": str(path)})


def test_a_matrix_file_is_untrusted_its_contents_never_echoed_and_its_header_checked(tmp_path):
    """Before: `matrix=secret.txt` quoted the file's first word in the error (`matrix=/proc/self/environ`
    printed the environment), and a .npy header claiming 2^33 values was allocated before anything was read."""
    secret = tmp_path / "secret.txt"
    secret.write_text("hunter2 is the password\n")
    for path in (str(secret), "/proc/self/environ"):
        with pytest.raises(ComponentConfigError, match="not a Kaldi matrix or vector") as info:
            build("FixedAffineComponent", {"matrix": path})
        assert "hunter2" not in str(info.value) and "PATH=" not in str(info.value) and path in str(info.value)
    header = "{'descr': '<f4', 'fortran_order': False, 'shape': (8589934592,), }"
    big = tmp_path / "big.npy"
    big.write_bytes(
        b"\x93NUMPY\x01\x00" + len(header + "\n").to_bytes(2, "little") + (header + "\n").encode() + bytes(16)
    )
    with pytest.raises(
        ComponentConfigError, match=r"shape \(8589934592,\) of float32 is 34359738368 bytes, but the file"
    ):
        build("FixedAffineComponent", {"matrix": str(big)})
    good = tmp_path / "good.npy"
    np.save(good, np.arange(6.0).reshape(2, 3))
    np.testing.assert_array_equal(read_matrix_file(str(good)), np.arange(6.0).reshape(2, 3))
    np.save(good, np.asfortranarray(np.arange(6.0).reshape(2, 3)))
    np.testing.assert_array_equal(read_matrix_file(str(good)), np.arange(6.0).reshape(2, 3))


def test_nonlinear_defaults():
    for kaldi_type in (
        "RectifiedLinearComponent",
        "SigmoidComponent",
        "TanhComponent",
        "SoftmaxComponent",
        "LogSoftmaxComponent",
    ):
        layer = build(kaldi_type, {"dim": 12, "self-repair-scale": "1e-5"})
        assert (layer.input_dim, layer.output_dim) == (12, 12)
        assert options_of(layer) == {
            "block-dim": 12,
            "self-repair-lower-threshold": -1000.0,
            "self-repair-upper-threshold": -1000.0,
            "self-repair-scale": 1e-5,
        }
    with pytest.raises(ComponentConfigError, match="block-dim=5"):
        build("RectifiedLinearComponent", {"dim": 12, "block-dim": 5})


def test_normalize_and_batchnorm_defaults():
    norm = build("NormalizeComponent", {"dim": 10})
    assert (norm.block_dim, norm.target_rms, norm.add_log_stddev) == (10, 1.0, False)
    norm = build("NormalizeComponent", {"input-dim": 10, "add-log-stddev": "T", "block-dim": 5})
    assert norm.output_dim == 12
    with pytest.raises(ComponentConfigError, match="unknown option input-dim"):
        build("NormalizeComponent", {"dim": 10, "input-dim": 10})
    bn = build("BatchNormComponent", {"dim": 8})
    assert (bn.block_dim, bn.epsilon, bn.target_rms, bn.test_mode) == (8, 1e-3, 1.0, False)
    assert all(isinstance(w, FixedWeight) for w in bn.parameters.values())
    assert [w.name for w in bn.parameters.values()] == ["c.stats_mean", "c.stats_var", "c.count"]
    net = symnet.Network(bn)
    assert float(net.values["c.count"]) == 0.0 and np.all(np.asarray(net.values["c.stats_var"]) == 0.0)
    with pytest.raises(ComponentConfigError, match="epsilon"):
        build("BatchNormComponent", {"dim": 8, "epsilon": 0})


def test_scale_offset_family_defaults():
    sao = build("ScaleAndOffsetComponent", {"dim": 6, "block-dim": 2})
    assert sao.scales.init == Full((2,), 1.0) and sao.offsets.init == Zeros((2,))
    assert sao.option("rank") == 20 and sao.option("use-natural-gradient") is True
    pes = build("PerElementScaleComponent", {"dim": 4, "param-stddev": 0.1})
    assert pes.params.init == Normal((4,), 0.1, 1.0)
    ng = build("NaturalGradientPerElementScaleComponent", {"dim": 4})
    assert ng.params.init == Full((4,), 1.0)
    assert (ng.option("rank"), ng.option("update-period"), ng.option("num-samples-history")) == (8, 10, 2000.0)
    peo = build("PerElementOffsetComponent", {"dim": 4})
    assert peo.offsets.init == Zeros((4,)) and peo.option("use-natural-gradient") is True
    fixed = build("FixedScaleComponent", {"dim": 3})
    assert fixed.scales.init == Normal((3,), 1.0, 0.0) and isinstance(fixed.scales, FixedWeight)
    const = build("ConstantFunctionComponent", {"input-dim": 2, "output-dim": 3, "is-updatable": "false"})
    assert isinstance(const.output, FixedWeight) and const.output.init == Zeros((3,))
    assert (const.input_dim, const.output_dim, const.is_updatable) == (2, 3, False)


def test_misc_defaults():
    noop = build("NoOpComponent", {"dim": 3})
    assert noop.backprop_scale == 1.0
    clip = build("ClipGradientComponent", {"dim": 3})
    assert (clip.clipping_threshold, clip.norm_based_clipping) == (15.0, False)
    assert options_of(clip) == {
        "self-repair-clipped-proportion-threshold": 0.01,
        "self-repair-target": 0.0,
        "self-repair-scale": 1.0,
    }
    trunc = build("BackpropTruncationComponent", {"dim": 3})
    assert (
        trunc.scale,
        trunc.clipping_threshold,
        trunc.zeroing_threshold,
        trunc.zeroing_interval,
        trunc.recurrence_interval,
    ) == (1.0, 30.0, 15.0, 20, 1)
    drop = build("DropoutComponent", {"dim": 3, "dropout-proportion": 0.1})
    assert (drop.dropout_per_frame, drop.test_mode) == (False, False)
    gdrop = build("GeneralDropoutComponent", {"dim": 4})
    assert (gdrop.block_dim, gdrop.time_period, gdrop.dropout_proportion, gdrop.continuous) == (4, 0, 0.5, False)
    sb = build("SumBlockComponent", {"input-dim": 4, "output-dim": 2})
    assert sb.scale == 1.0


def test_recurrent_defaults():
    lstm = build("LstmNonlinearityComponent", {"cell-dim": 4})
    assert lstm.params.init == Normal((3, 4), 1.0, 0.0) and lstm.use_dropout is False
    assert lstm.option("self-repair-config") == (0.05, 0.05, 0.2, 0.05, 0.2) + (1e-5,) * 5
    gru = build("GruNonlinearityComponent", {"cell-dim": 16, "recurrent-dim": 4})
    assert gru.w_h.init == Normal((16, 4), 0.25, 0.0) and gru.input_dim == 56
    assert (gru.option("rank-in"), gru.option("rank-out"), gru.option("self-repair-threshold")) == (20, 80, 0.2)
    ogru = build("OutputGruNonlinearityComponent", {"cell-dim": 5})
    assert ogru.w_h.init == Normal((5,), 1.0, 0.0)
    assert (ogru.option("rank"), ogru.option("update-period")) == (8, 10)


# ----- errors ------------------------------------------------------------------------------


@pytest.mark.parametrize(
    "kaldi_type,options,option,message",
    [
        ("AffineComponent", {"input-dim": 4}, "output-dim", "option output-dim is required"),
        ("AffineComponent", {"input-dim": "four", "output-dim": 2}, "input-dim", "is not an integer"),
        ("AffineComponent", {"input-dim": "4.0", "output-dim": 2}, "input-dim", "is not an integer"),
        ("AffineComponent", {"input-dim": 0, "output-dim": 2}, "input-dim", "must be positive"),
        ("AffineComponent", {"input-dim": 4, "output-dim": 2, "param-stddev": "x"}, "param-stddev", "not a number"),
        ("AffineComponent", {"input-dim": 4, "output-dim": 2, "param-stddev": -1}, "param-stddev", "negative"),
        ("AffineComponent", {"input-dim": 4, "output-dim": 2, "bias-mean": 1}, "bias-mean", "unknown option"),
        ("AffineComponent", {"input-dim": 4, "output-dim": 2, "learning-rate": -1}, "learning-rate", "negative"),
        ("AffineComponent", {"input-dim": 4, "output-dim": 2, "colour": "red"}, "colour", "unknown option colour"),
        ("BlockAffineComponent", {"input-dim": 6, "output-dim": 4, "num-blocks": 4}, "num-blocks", "must divide"),
        ("RepeatedAffineComponent", {"input-dim": 6, "output-dim": 4}, "num-repeats", "required"),
        ("PnormComponent", {"input-dim": 7, "output-dim": 2}, "output-dim", "must divide"),
        ("DropoutComponent", {"dim": 3}, "dropout-proportion", "required"),
        ("DropoutComponent", {"dim": 3, "dropout-proportion": 1.5}, "dropout-proportion", "in [0, 1]"),
        ("DropoutComponent", {"dim": 3, "dropout-proportion": 0.5, "test-mode": "maybe"}, "test-mode", "boolean"),
        ("PermuteComponent", {"column-map": "0,2,2"}, "column-map", "not a permutation"),
        ("PermuteComponent", {"column-map": "0,a"}, "column-map", "list of integers"),
        ("SumGroupComponent", {"sizes": "2,0"}, "sizes", "must be positive"),
        ("ElementwiseProductComponent", {"input-dim": 4, "output-dim": 4}, "input-dim", "larger"),
        ("LstmNonlinearityComponent", {}, "cell-dim", "required"),
        (
            "LstmNonlinearityComponent",
            {"cell-dim": 4, "sigmoid-self-repair-threshold": 0.5},
            "sigmoid-self-repair-threshold",
            "[0, 0.25]",
        ),
        ("GruNonlinearityComponent", {"cell-dim": 4, "recurrent-dim": 5}, "recurrent-dim", "1..cell-dim"),
        ("BackpropTruncationComponent", {"dim": 4, "zeroing-interval": 0}, "zeroing-interval", "positive"),
        ("ClipGradientComponent", {"dim": 4, "clipping-threshold": -1}, "clipping-threshold", "negative"),
        ("ScaleAndOffsetComponent", {"dim": 6, "block-dim": 4}, "block-dim", "divide"),
        ("FixedScaleComponent", {}, "dim", "required"),
        ("NaturalGradientPerElementScaleComponent", {"scales": "x.vec", "dim": 3}, "dim", "no other option"),
    ],
)
def test_bad_options(kaldi_type, options, option, message):
    with pytest.raises(ComponentConfigError) as info:
        build(kaldi_type, options, name="layer7")
    error = info.value
    assert isinstance(error, SymnetError)
    assert error.option == option and error.component == "layer7" and error.type == kaldi_type
    assert message in str(error) and "layer7" in str(error)


def test_unknown_type_and_ignored_keys():
    with pytest.raises(ComponentConfigError, match="unknown component type 'FooComponent'"):
        build("FooComponent", {})
    # The config line's own name= and type= keys may be passed along.
    layer = build("TanhComponent", {"name": "c", "type": "TanhComponent", "dim": "3"})
    assert layer.dim == 3


def test_booleans_and_numbers_like_kaldi():
    for text, value in (("true", True), ("True", True), ("T", True), ("false", False), ("F", False)):
        assert build("NormalizeComponent", {"dim": 2, "add-log-stddev": text}).add_log_stddev is value
    layer = build("NormalizeComponent", {"dim": 2, "target-rms": "1e-1"})
    assert layer.target_rms == pytest.approx(0.1)
    with pytest.raises(ComponentConfigError, match="is not a number"):
        build("NormalizeComponent", {"dim": 2, "target-rms": "nan"})


def test_registry_signature():
    for kaldi_type, builder in COMPONENTS.items():
        assert builder.__doc__, kaldi_type
    layer = COMPONENTS["AffineComponent"]("a", {"input-dim": "3", "output-dim": "2"}, symnet.Identity())
    assert layer.kaldi_type == "AffineComponent" == type(layer).__name__
    assert math.isclose(layer.linear_params.init.stddev, 1 / math.sqrt(3))
