"""Kaldi model files as symnet networks (symnet._src.kaldi.models.model): exact rewrites, networks built in symnet
written in Kaldi's layout and read back equal, outputs kept, errors naming the component and token."""

from __future__ import annotations

import os

import attrs
import numpy as np
import pytest

from helpers import EXAMPLES
from helpers.kaldi_models import AM_NNET, AM_TEXT, NNET_TEXT
from symnet._src.components.base import Component
from symnet._src.core.descriptor import Input
from symnet._src.core.layer import Layer, child, layer_class
from symnet._src.core.walk import walk
from symnet._src.kaldi.compute.nnet3_compute import ComputeOptions, Nnet3Computer
from symnet.components import set_test_mode
from symnet.errors import ModelFormatError
from symnet.kaldi import (
    COMPONENTS,
    KaldiModel,
    ModelWriteError,
    component_line,
    format_model,
    format_nnet,
    model_to_nnet,
    nnet_component,
    output_dims,
    parse_model,
    parse_network,
    parse_nnet,
    read_model,
    read_network,
    write_model,
)

rng = np.random.default_rng(0)

# A TDNN with most of the writable component types (their default initialisers, so that the network
# read back is `==` to this one).
TDNN = """
input-node name=input dim=5
component name=lda type=FixedAffineComponent input-dim=15 output-dim=12
component-node name=lda component=lda input=Append(Offset(input, -1), input, Offset(input, 1))
component name=tdnn1.affine type=NaturalGradientAffineComponent input-dim=12 output-dim=16 max-change=0.75 l2-regularize=0.008 learning-rate-factor=0.5
component-node name=tdnn1.affine component=tdnn1.affine input=lda
component name=tdnn1.relu type=RectifiedLinearComponent dim=16 self-repair-scale=1e-05
component-node name=tdnn1.relu component=tdnn1.relu input=tdnn1.affine
component name=tdnn1.batchnorm type=BatchNormComponent dim=16 block-dim=8 target-rms=0.5
component-node name=tdnn1.batchnorm component=tdnn1.batchnorm input=tdnn1.relu
component name=tdnn1.dropout type=DropoutComponent dim=16 dropout-proportion=0.25
component-node name=tdnn1.dropout component=tdnn1.dropout input=tdnn1.batchnorm
component name=tdnnf2.linear type=TdnnComponent input-dim=16 output-dim=6 use-bias=false time-offsets=-2,0 orthonormal-constraint=-1.0 use-natural-gradient=false
component-node name=tdnnf2.linear component=tdnnf2.linear input=tdnn1.dropout
component name=tdnnf2.affine type=TdnnComponent input-dim=6 output-dim=16 time-offsets=0,2
component-node name=tdnnf2.affine component=tdnnf2.affine input=tdnnf2.linear
component name=tdnnf2.tanh type=TanhComponent dim=16
component-node name=tdnnf2.tanh component=tdnnf2.tanh input=tdnnf2.affine
component name=tdnnf2.dropout type=GeneralDropoutComponent dim=16 block-dim=4 dropout-proportion=0.1 continuous=true
component-node name=tdnnf2.dropout component=tdnnf2.dropout input=tdnnf2.tanh
component name=tdnnf2.noop type=NoOpComponent dim=16 backprop-scale=0.5
component-node name=tdnnf2.noop component=tdnnf2.noop input=Sum(Scale(0.66, tdnn1.dropout), tdnnf2.dropout)
component name=norm type=NormalizeComponent dim=16 block-dim=8 target-rms=2 add-log-stddev=true
component-node name=norm component=norm input=tdnnf2.noop
component name=scale-offset type=ScaleAndOffsetComponent dim=18 rank=10
component-node name=scale-offset component=scale-offset input=norm
component name=scale type=PerElementScaleComponent dim=18
component-node name=scale component=scale input=scale-offset
component name=offset type=PerElementOffsetComponent dim=18 block-dim=6
component-node name=offset component=offset input=scale
component name=sigmoid type=SigmoidComponent dim=18 block-dim=6
component-node name=sigmoid component=sigmoid input=offset
component name=prefinal type=LinearComponent input-dim=18 output-dim=8 orthonormal-constraint=-1.0 rank-in=4
component-node name=prefinal component=prefinal input=sigmoid
component name=output.affine type=AffineComponent input-dim=8 output-dim=7
component-node name=output.affine component=output.affine input=prefinal
component name=output.log-softmax type=LogSoftmaxComponent dim=7
component-node name=output.log-softmax component=output.log-softmax input=output.affine
component name=xent.affine type=NaturalGradientAffineComponent input-dim=8 output-dim=7
component-node name=xent.affine component=xent.affine input=prefinal
component name=xent.softmax type=SoftmaxComponent dim=7
component-node name=xent.softmax component=xent.softmax input=xent.affine
output-node name=output input=output.log-softmax objective=linear
output-node name=output-xent input=xent.softmax objective=quadratic
"""


def _np(x):
    return np.asarray(x)


def _rounded(kn):
    """The network with parameters that text models keep exactly (multiples of 1/64 within +-8: 7 digits)."""
    values = {}
    for name, value in kn.values.items():
        v = np.clip(np.round(_np(value) * 64) / 64, -8, 8)
        if name.endswith("stats_var"):
            v = np.abs(v) + 0.5
        values[name] = v.astype(np.float32)
    return kn.assign(values)


def _assert_same_params(a, b):
    assert set(a) == set(b)
    for name in a:
        np.testing.assert_array_equal(_np(a[name]), _np(b[name]), err_msg=name)


def _components(net):
    return {layer.name: layer for layer in walk([x for _, x in net.structure.outputs]) if isinstance(layer, Component)}


# ----- models read from files: exact rewrites -------------------------------------------------------


def test_a_hand_written_text_model_is_rewritten_byte_identically():
    model = parse_model(NNET_TEXT.encode(), file="hand.raw")
    assert format_model(model, binary=False) == NNET_TEXT.encode()
    binary = format_model(model, binary=True)
    assert binary == format_nnet(parse_nnet(NNET_TEXT.encode()), binary=True)  # as nnet3-copy --binary=true
    again = parse_model(binary, file="hand.bin")
    assert format_model(again, binary=True) == binary
    assert format_model(again, binary=False) == NNET_TEXT.encode()
    assert again.network.structure == model.network.structure
    _assert_same_params(again.values, model.values)


def test_parameters_and_options_come_from_the_fields():
    model = parse_model(NNET_TEXT.encode())
    params = model.network.values
    np.testing.assert_array_equal(_np(params["affine1.linear_params"])[3], np.float32([1, -1.1, 1.2]))
    np.testing.assert_array_equal(_np(params["bn1.stats_mean"]), [0.5, -0.25, 0.125, 1.5])
    assert float(params["bn1.count"]) == 12.0
    assert _np(params["lstm1.params"]).shape == (3, 2)
    comps = _components(model.network)
    assert comps["affine1"].option("max-change") == 0.75 and comps["affine1"].option("learning-rate") == 0.001
    assert comps["affine1"].option("rank-in") == 2 and comps["affine1"].option("alpha") == 4.0
    assert comps["affine3"].option("orthonormal-constraint") == -1.0
    assert comps["lstm1"].cell_dim == 2 and comps["lstm1"].option("self-repair-config")[2] == 0.2
    assert comps["bn1"].block_dim == 4 and comps["bn1"].epsilon == 0.001
    assert dict(model.network.objectives) == {"output": "linear"}
    assert output_dims(model) == {"output": 3}
    line = component_line(model.source.component("affine2"))
    assert line.to_text() == "component name=affine2 type=AffineComponent input-dim=4 output-dim=10 learning-rate=0.001"


def test_an_acoustic_model_keeps_its_transition_model_and_priors(tmp_path):
    model = parse_model(AM_TEXT.encode(), file="final.mdl")
    assert model.is_am
    np.testing.assert_array_equal(model.priors, np.float32([0.6, 0.4]))
    assert model.transition_model.num_pdfs == 2
    assert format_model(model, binary=False) == AM_TEXT.encode()
    binary = tmp_path / "final.mdl"
    write_model(binary, model)
    again = read_model(binary)
    assert again.is_am and format_model(again, binary=False) == AM_TEXT.encode()
    assert format_model(model, binary=False, raw=True) == AM_NNET.encode()
    # new priors are written; the rest stays
    changed = model.replace(priors=[0.25, 0.75])
    text = format_model(changed, binary=False).decode()
    assert text.endswith("<Priors>  [ 0.25 0.75 ]\n") and text.startswith(AM_TEXT[:200])


def test_changed_parameters_are_written_and_untouched_ones_keep_their_bits():
    model = parse_model(NNET_TEXT.encode())
    values = {"affine2.bias_params": np.arange(10, dtype=np.float32) / 4, "bn1.count": np.float32(13.0)}
    changed = model.replace(network=model.network.assign(values))
    nnet = model_to_nnet(changed)
    np.testing.assert_array_equal(nnet.component("affine2")["BiasParams"], np.arange(10) / 4)
    assert nnet.component("bn1")["Count"] == 13.0 and nnet.component("bn1")["Count"].dtype == np.float64
    assert nnet.component("affine1") == model.source.component("affine1")
    assert nnet.component("affine2")["LinearParams"] is model.source.component("affine2")["LinearParams"]
    assert format_model(changed, binary=False) != NNET_TEXT.encode()
    again = parse_model(format_model(changed))
    _assert_same_params(again.values, changed.values)


def test_a_changed_component_is_written_afresh_and_the_others_as_read():
    model = parse_model(NNET_TEXT.encode())
    tested = model.replace(network=set_test_mode(model.network, True))
    nnet = model_to_nnet(tested)
    assert nnet.config == model.source.config
    assert nnet.component("bn1")["TestMode"] is True and nnet.component("bn1")["Count"] == 12.0
    for name in ("affine1", "relu1", "affine2", "lstm1", "affine3", "logsm"):
        assert nnet.component(name) == model.source.component(name)


def test_read_compute_write_read_gives_the_same_outputs(tmp_path):
    model = parse_model(NNET_TEXT.encode())
    feats = rng.standard_normal((11, 3)).astype(np.float32)
    options = ComputeOptions(frames_per_chunk=5)
    before = Nnet3Computer(model.network, options)(feats)
    path = tmp_path / "copy.raw"
    write_model(path, model, binary=False)
    assert path.read_bytes() == NNET_TEXT.encode()
    after = Nnet3Computer(read_model(path).network, options)(feats)
    np.testing.assert_array_equal(before, after)


def test_a_model_read_from_a_file_computes_as_docs_kaldi_md_shows(tmp_path):
    """`read_model(path).network.compute(...)` and `.context()` are the Network's (docs/kaldi.md)."""
    path = tmp_path / "final.raw"
    write_model(path, read_network(EXAMPLES / "kaldi-doc-example.config"))
    model = read_model(path)
    features = rng.standard_normal((1, 30, 12)).astype(np.float32)
    out = model.network.compute(features)
    assert out.shape == (1, 30, 115) and model.network.context() == (1, 2)
    np.testing.assert_array_equal(out, model.network.compute(features))


# ----- networks built in symnet --------------------------------------------------------------------


def test_the_hand_written_model_is_what_symnet_writes_for_its_network():
    model = parse_model(NNET_TEXT.encode())
    fresh = KaldiModel(model.network)  # no source file: every component synthesised
    assert fresh.source is None
    assert format_model(fresh, binary=False) == NNET_TEXT.encode()
    assert format_model(model.network, binary=True) == format_nnet(parse_nnet(NNET_TEXT.encode()), binary=True)


@pytest.mark.parametrize("binary", [True, False])
def test_a_tdnn_built_from_a_config_is_read_back_equal(tmp_path, binary):
    kn = _rounded(parse_network(TDNN, seed=4))
    path = tmp_path / ("tdnn.raw" if binary else "tdnn.txt")
    write_model(path, kn, binary=binary)
    model = read_model(path)
    assert model.network.structure == kn.structure
    assert dict(model.network.objectives) == {"output": "linear", "output-xent": "quadratic"}
    _assert_same_params(model.network.params, kn.params)
    assert format_model(model, binary=binary) == path.read_bytes()
    assert format_model(model, binary=not binary) == format_model(kn, binary=not binary)


def test_tokens_symnet_writes_follow_kaldis_write_functions():
    kn = parse_network(TDNN, seed=4)
    text = format_model(kn, binary=False).decode()
    assert (
        "<ComponentName> tdnn1.affine <NaturalGradientAffineComponent> <LearningRateFactor> 0.5 <MaxChange> 0.75 "
        "<L2Regularize> 0.008 <LearningRate> 0.001 <LinearParams>  ["
    ) in text
    assert "<RankIn> 6 <RankOut> 8 <UpdatePeriod> 4 <NumSamplesHistory> 2000 <Alpha> 4 </NaturalGradientAffine" in text
    assert (
        "<ComponentName> tdnn1.relu <RectifiedLinearComponent> <Dim> 16 <ValueAvg>  [ ]\n<DerivAvg>  [ ]\n"
        "<Count> 0 <OderivRms>  [ ]\n<OderivCount> 0 <NumDimsSelfRepaired> 0 <NumDimsProcessed> 0 "
        "<SelfRepairScale> 1e-05 </RectifiedLinearComponent>"
    ) in text
    assert (
        "<BatchNormComponent> <Dim> 16 <BlockDim> 8 <Epsilon> 0.001 <TargetRms> 0.5 <TestMode> F <Count> 0 "
        "<StatsMean>  [ 0 0 0 0 0 0 0 0 ]\n<StatsVar>  [ 0 0 0 0 0 0 0 0 ]\n</BatchNormComponent>"
    ) in text
    assert (
        "<DropoutComponent> <Dim> 16 <DropoutProportion> 0.25 <DropoutPerFrame> F <TestMode> F </DropoutComponent>"
    ) in text
    assert "<TdnnComponent> <LearningRate> 0.001 <TimeOffsets> [ -2 0 ]\n<LinearParams>  [" in text
    assert (
        "<BiasParams>  [ ]\n<OrthonormalConstraint> -1 <UseNaturalGradient> F <NumSamplesHistory> 2000 "
        "<AlphaInOut> 4 4 <RankInOut> 16 3 </TdnnComponent>"
    ) in text
    assert (
        "<GeneralDropoutComponent> <Dim> 16 <BlockDim> 4 <TimePeriod> 0 <DropoutProportion> 0.1 <Continuous> "
        "</GeneralDropoutComponent>"
    ) in text
    assert "<NoOpComponent> <Dim> 16 <BackpropScale> 0.5 </NoOpComponent>" in text
    assert (
        "<NormalizeComponent> <InputDim> 16 <BlockDim> 8 <TargetRms> 2 <AddLogStddev> T </NormalizeComponent>"
    ) in text
    assert "<ScaleAndOffsetComponent> <LearningRate> 0.001 <Dim> 18 <Scales>  [ 1 1 1" in text
    assert "<UseNaturalGradient> T <Rank> 10 </ScaleAndOffsetComponent>" in text
    assert "<PerElementOffsetComponent> <LearningRate> 0.001 <Offsets>  [ 0 0 0 0 0 0 ]\n<Dim> 18 " in text
    assert "<SigmoidComponent> <Dim> 18 <BlockDim> 6 <ValueAvg>" in text
    assert (
        "<UseNaturalGradient> T <RankInOut> 4 4 <Alpha> 4 <NumSamplesHistory> 2000 <UpdatePeriod> 4 </LinearComponent>"
    ) in text
    assert "<ComponentName> lda <FixedAffineComponent> <LinearParams>  [" in text
    assert "output-node name=output-xent input=xent.softmax objective=quadratic\n" in text
    # the config lines are Kaldi's node lines: no component lines
    header = text.split("\n\n<NumComponents>")[0]
    assert "component name=" not in header
    assert (
        "component-node name=tdnnf2.noop component=tdnnf2.noop input=Sum(Scale(0.66, tdnn1.dropout), tdnnf2.dropout)"
    ) in header


@pytest.mark.parametrize("config", ["lstm.config", "kaldi-doc-example.config", "tdnnf.config"])
def test_example_configs_round_trip(config):
    kn = read_network(EXAMPLES / config, seed=2)
    model = parse_model(format_model(kn))
    _assert_same_params(model.network.params, kn.params)
    # Kaldi files hold values, not initialisers: tdnnf's output.affine (param-stddev=0) comes back with the
    # default initialiser; every other component is equal.
    ours, theirs = _components(kn), _components(model.network)
    assert set(ours) == set(theirs)
    differ = [name for name in ours if _bare(ours[name]) != _bare(theirs[name])]
    assert differ == (["output.affine"] if config == "tdnnf.config" else [])
    if not differ:
        assert model.network.structure == kn.structure
    feats = rng.standard_normal((9, _input_dim(kn))).astype(np.float32)
    a = Nnet3Computer(kn, ComputeOptions(frames_per_chunk=4))(feats)
    b = Nnet3Computer(model.network, ComputeOptions(frames_per_chunk=4))(feats)
    np.testing.assert_array_equal(a, b)


def _bare(component):
    return attrs.evolve(component, input=Input("x", component.input_dim))


def _input_dim(kn):
    return next(layer.dim for layer in walk([x for _, x in kn.structure.outputs]) if isinstance(layer, Input))


def test_statistics_components_round_trip():
    if "StatisticsPoolingComponent" not in COMPONENTS:
        pytest.skip("statistics components not registered")
    kn = parse_network(
        "input-node name=input dim=3\n"
        "component name=stats-extraction type=StatisticsExtractionComponent input-dim=3 output-period=2\n"
        "component-node name=stats-extraction component=stats-extraction input=input\n"
        "component name=stats-pooling type=StatisticsPoolingComponent input-dim=7 input-period=2 left-context=4 "
        "right-context=2 output-stddevs=true num-log-count-features=1\n"
        "component-node name=stats-pooling component=stats-pooling input=stats-extraction\n"
        "output-node name=output input=Round(stats-pooling, 2)\n"
    )
    text = format_model(kn, binary=False).decode()
    assert (
        "<StatisticsExtractionComponent> <InputDim> 3 <InputPeriod> 1 <OutputPeriod> 2 <IncludeVarinance> T "
        "</StatisticsExtractionComponent>"
    ) in text
    assert (
        "<StatisticsPoolingComponent> <InputDim> 7 <InputPeriod> 2 <LeftContext> 4 <RightContext> 2 "
        "<NumLogCountFeatures> 1 <OutputStddevs> T <VarianceFloor> 1e-10 </StatisticsPoolingComponent>"
    ) in text
    assert parse_model(text.encode()).network.structure == kn.structure


def test_write_model_is_atomic(tmp_path, monkeypatch):
    from symnet._src.base import atomic

    path = tmp_path / "model.raw"
    path.write_bytes(b"old")

    def broken(fd):
        raise OSError("disk full")

    monkeypatch.setattr(atomic.os, "fsync", broken)  # fails after the data went to the temporary file
    with pytest.raises(OSError, match="disk full"):
        write_model(path, parse_model(NNET_TEXT.encode()))
    assert path.read_bytes() == b"old"
    assert os.listdir(tmp_path) == ["model.raw"]


# ----- errors ---------------------------------------------------------------------------------------


def test_stored_dims_that_disagree_with_the_config_lines_name_the_component_and_token():
    bad = NNET_TEXT.replace("input-node name=input dim=3", "input-node name=input dim=5")
    with pytest.raises(
        ModelFormatError,
        match=r"bad.raw: component 'affine1' \(NaturalGradientAffineComponent\): "
        r"<LinearParams> has 3 columns.*input=input of dim 5",
    ):
        parse_model(bad.encode(), file="bad.raw")
    bad = NNET_TEXT.replace("<StatsMean>  [ 0.5 -0.25 0.125 1.5 ]", "<StatsMean>  [ 0.5 -0.25 0.125 ]")
    with pytest.raises(ModelFormatError, match=r"component 'bn1' \(BatchNormComponent\) <StatsMean>: has shape \(3,\)"):
        parse_model(bad.encode())
    bad = NNET_TEXT.replace(
        "<LstmNonlinearityComponent> <MaxChange> 0.75 <LearningRate> 0.001 <Params>  [\n  -1.670642 -1.095184 \n",
        "<LstmNonlinearityComponent> <MaxChange> 0.75 <LearningRate> 0.001 <Params>  [\n",
    )
    with pytest.raises(
        ModelFormatError,
        match=r"component 'lstm1' \(LstmNonlinearityComponent\) <Params>: "
        r"expected 3 rows",
    ):
        parse_model(bad.encode())


def test_missing_tokens_unknown_types_and_missing_components():
    bad = NNET_TEXT.replace("<BiasParams>  [ 0 1 -1 0.5 -0.5 0.25 -0.25 2 -2 0.1 ]\n", "")
    with pytest.raises(ModelFormatError, match=r"component 'affine2' \(AffineComponent\) <BiasParams>: missing"):
        parse_model(bad.encode())
    bad = NNET_TEXT.replace("<RectifiedLinearComponent>", "<FancyComponent>").replace(
        "</RectifiedLinearComponent>", "</FancyComponent>"
    )
    with pytest.raises(
        ModelFormatError,
        match=r"component 'relu1' \(FancyComponent\): symnet cannot build a "
        r"FancyComponent",
    ):
        parse_model(bad.encode())
    bad = NNET_TEXT.replace("component=relu1", "component=relu9")
    with pytest.raises(ModelFormatError, match="uses component 'relu9', which the file does not have"):
        parse_model(bad.encode())
    bad = NNET_TEXT.replace("input=affine3\n", "input=Append(affine3, nowhere)\n")
    with pytest.raises(ModelFormatError, match="config lines do not build a network"):
        parse_model(bad.encode())


def test_components_symnet_cannot_write_are_named():
    @layer_class
    class Mystery(Component):
        input: Layer = child()
        kaldi_type = "MysteryComponent"

        @property
        def input_dim(self):
            return 3

        @property
        def output_dim(self):
            return 3

        def apply(self, x):
            return x

    with pytest.raises(ModelWriteError, match="symnet cannot write a MysteryComponent"):
        nnet_component(Mystery("m", Input("input", 3)), {})


def test_priors_without_a_transition_model_are_refused():
    model = KaldiModel(parse_model(NNET_TEXT.encode()).network, priors=[0.5, 0.25, 0.25])
    with pytest.raises(ModelWriteError, match="priors but no transition model"):
        format_model(model)
    assert format_model(model, raw=True, binary=False) == NNET_TEXT.encode()
