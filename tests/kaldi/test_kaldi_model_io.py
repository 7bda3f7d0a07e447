"""Kaldi nnet3 model files at the token level: text and binary, raw nnets and acoustic models, bad input.

The models here (and in helpers/kaldi_models.py) are written by hand in the exact layout Kaldi
writes (kaldi-asr/kaldi src/nnet3/*.cc, the Write functions):
tokens end in one space, float vectors are `` [ 1 2 ]\\n``, matrices `` [\\n  1 2 \\n  3 4 ]\\n``,
integer vectors ``[ 1 2 ]\\n``, and every component ends with ``</Type> \\n``.
"""

from __future__ import annotations

import os
import struct

import numpy as np
import pytest
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st

from helpers.kaldi_models import AM_TEXT, CONFIG, NNET_TEXT, TM_TEXT
from symnet._src.kaldi.components import TOKEN_KINDS
from symnet._src.kaldi.models.nnet_file import (
    NnetComponent,
    NnetFile,
    field_to_token,
    format_nnet,
    parse_nnet,
    read_kaldi_array,
    read_nnet,
    token_to_field,
    write_nnet,
)
from symnet._src.kaldi.models.transition_model import HmmState, TopologyEntry, TransitionModel
from symnet.errors import ModelFormatError

# One component of each type in Kaldi's text layout (as its Write functions produce it), with concrete values.
ALL_TYPES = [
    "<ComponentName> a1 <AffineComponent> <LearningRate> 0.001 <LinearParams>  [\n"
    "  -0.6892052 1.051089 -0.148153 \n  -0.09875429 0.4479962 0.02101658 ]\n"
    "<BiasParams>  [ 0.4790476 0.08052722 ]\n</AffineComponent> \n",
    "<ComponentName> c <BackpropTruncationComponent> <Dim> 40 <Scale> 1 <ClippingThreshold> 8 "
    "<ZeroingThreshold> 5 <ZeroingInterval> 10 <RecurrenceInterval> 1 <NumElementsClipped> 0 "
    "<NumElementsZeroed> 0 <NumElementsProcessed> 0 <NumZeroingBoundaries> 0 </BackpropTruncationComponent> \n",
    "<ComponentName> cnn1.batchnorm <BatchNormComponent> <Dim> 160 <BlockDim> 4 <Epsilon> 0.001 <TargetRms> 1 "
    "<TestMode> F <Count> 1 <StatsMean>  [ 1.169083 -0.331427 0.19743 0.073261 ]\n"
    "<StatsVar>  [ 1.712123 1.537947 1.422028 0.789239 ]\n</BatchNormComponent> \n",
    "<ComponentName> c1 <BlockAffineComponent> <LearningRate> 0.001 <NumBlocks> 2 <LinearParams>  [\n"
    "  -0.533856 0.8141698 \n  0.01627938 0.5297719 ]\n<BiasParams>  [ 0.4790476 0.08052722 ]\n"
    "</BlockAffineComponent> \n",
    "<ComponentName> c2 <ClipGradientComponent> <Dim> 47 <ClippingThreshold> 40 <NormBasedClipping> F "
    "<SelfRepairClippedProportionThreshold> 0.01 <SelfRepairTarget> 0 <SelfRepairScale> 1 "
    "<NumElementsClipped> 0 <NumElementsProcessed> 0 <NumSelfRepaired> 0 <NumBackpropped> 0 "
    "</ClipGradientComponent> \n",
    "<ComponentName> c3 <CompositeComponent> <LearningRate> 0.001 <MaxRowsProcess> 13 <NumComponents> 1 "
    "<RectifiedLinearComponent> <Dim> 29 <ValueAvg>  [ ]\n<DerivAvg>  [ ]\n<Count> 0 <OderivRms>  [ ]\n"
    "<OderivCount> 0 <NumDimsSelfRepaired> 0 <NumDimsProcessed> 0 </RectifiedLinearComponent> "
    "</CompositeComponent> \n",
    "<ComponentName> c0 <ConstantComponent> <LearningRate> 0.001 <Output>  [ 0 0 0 0 ]\n"
    "<IsUpdatable> T <UseNaturalGradient> T </ConstantComponent> \n",
    "<ComponentName> c4 <ConstantFunctionComponent> <LearningRate> 0.086 <InputDim> 38 <Output>  [ 0 0 0 ]\n"
    "<IsUpdatable> T <UseNaturalGradient> F </ConstantFunctionComponent> \n",
    "<ComponentName> c5 <ConvolutionComponent> <LearningRate> 0.086 <InputXDim> 15 <InputYDim> 7 <InputZDim> 4 "
    "<FiltXDim> 1 <FiltYDim> 7 <FiltXStep> 1 <FiltYStep> 6 <InputVectorization> 1 <FilterParams>  [\n"
    "  -0.2255954 0.3440495 \n  -0.2629526 -0.02559574 ]\n<BiasParams>  [ 0.4790476 0.08052722 ]\n"
    "<IsGradient> F </ConvolutionComponent> \n",
    "<ComponentName> distribute <DistributeComponent> <InputDim> 50 <OutputDim> 10 </DistributeComponent> \n",
    "<ComponentName> c6 <DropoutComponent> <Dim> 105 <DropoutProportion> 0.41229 <DropoutPerFrame> F "
    "<TestMode> F </DropoutComponent> \n",
    "<ComponentName> m <ElementwiseProductComponent> <InputDim> 80 <OutputDim> 40 </ElementwiseProductComponent> \n",
    "<ComponentName> c7 <FixedAffineComponent> <LinearParams>  [\n  -1.193738 1.820539 \n  2.852789 0.2631108 ]\n"
    "<BiasParams>  [ 0.2192917 -0.3739421 ]\n</FixedAffineComponent> \n",
    "<ComponentName> c8 <FixedBiasComponent> <Bias>  [ -1.193738 1.820539 ]\n</FixedBiasComponent> \n",
    "<ComponentName> c9 <FixedScaleComponent> <Scales>  [ -1.193738 1.820539 ]\n</FixedScaleComponent> \n",
    "<ComponentName> tdnnf2.dropout <GeneralDropoutComponent> <Dim> 64 <BlockDim> 64 <TimePeriod> 0 "
    "<DropoutProportion> 0.1 <Continuous> </GeneralDropoutComponent> \n",
    "<ComponentName> c10 <GruNonlinearityComponent> <LearningRate> 0.001 <CellDim> 2 <RecurrentDim> 2 "
    "<w_h>  [\n  -0.3446026 0.5255443 \n  -0.5139239 -0.4274063 ]\n<ValueAvg>  [ 0 0 ]\n<DerivAvg>  [ 0 0 ]\n"
    "<SelfRepairTotal> 0 <Count> 0 <SelfRepairThreshold> 0.2 <SelfRepairScale> 1e-05 <Alpha> 4 "
    "<RankInOut> 20 80 <UpdatePeriod> 4 </GruNonlinearityComponent> \n",
    "<ComponentName> c11 <LinearComponent> <LearningRate> 0.021 <Params>  [\n  -0.8441005 1.287315 \n"
    "  -0.1814497 -0.6164482 ]\n<UseNaturalGradient> T <RankInOut> 1 19 <Alpha> 4 <NumSamplesHistory> 2000 "
    "<UpdatePeriod> 4 </LinearComponent> \n",
    "<ComponentName> sm2 <LogSoftmaxComponent> <Dim> 6 <ValueAvg>  [ ]\n<DerivAvg>  [ ]\n<Count> 0 "
    "<OderivRms>  [ ]\n<OderivCount> 0 <NumDimsSelfRepaired> 0 <NumDimsProcessed> 0 </LogSoftmaxComponent> \n",
    "<ComponentName> blstm1-forward.lstm_nonlin <LstmNonlinearityComponent> <MaxChange> 0.75 <LearningRate> 0.001 "
    "<Params>  [\n  -1.670642 -1.095184 \n  0.4908811 0.3053171 \n  0.6245387 -2.168711 ]\n"
    "<ValueAvg>  [\n  0 0 \n  0 0 \n  0 0 \n  0 0 \n  0 0 ]\n<DerivAvg>  [\n  0 0 \n  0 0 \n  0 0 \n  0 0 \n  0 0 ]\n"
    "<SelfRepairConfig>  [ 0.05 0.05 0.2 0.05 0.2 1e-05 1e-05 1e-05 1e-05 1e-05 ]\n"
    "<SelfRepairProb>  [ 0 0 0 0 0 ]\n<Count> 0 </LstmNonlinearityComponent> \n",
    "<ComponentName> c12 <MaxpoolingComponent> <InputXDim> 6 <InputYDim> 10 <InputZDim> 7 <PoolXSize> 3 "
    "<PoolYSize> 1 <PoolZSize> 1 <PoolXStep> 3 <PoolYStep> 1 <PoolZStep> 1 </MaxpoolingComponent> \n",
    "<ComponentName> c13 <NaturalGradientAffineComponent> <LearningRate> 0.095 <LinearParams>  [\n"
    "  -0.533856 0.8141698 -0.1147588 \n  0.01627938 0.5297719 -0.2010417 ]\n"
    "<BiasParams>  [ 0.4790476 0.08052722 ]\n<RankIn> 3 <RankOut> 4 <UpdatePeriod> 4 <NumSamplesHistory> 2000 "
    "<Alpha> 4 </NaturalGradientAffineComponent> \n",
    "<ComponentName> c14 <NaturalGradientPerElementScaleComponent> <LearningRate> 0.028 "
    "<Params>  [ 1 1 1 1 1 1 1 ]\n<IsGradient> F <Rank> 8 <UpdatePeriod> 10 <NumSamplesHistory> 2000 <Alpha> 4 "
    "</NaturalGradientPerElementScaleComponent> \n",
    "<ComponentName> c15 <NaturalGradientRepeatedAffineComponent> <LearningRate> 0.001 <NumRepeats> 29 "
    "<LinearParams>  [\n  -1.193738 \n  -0.2566086 ]\n<BiasParams>  [ 0 0 ]\n"
    "</NaturalGradientRepeatedAffineComponent> \n",
    "<ComponentName> c16 <NoOpComponent> <Dim> 15 <BackpropScale> 1 </NoOpComponent> \n",
    "<ComponentName> l1.renorm <NormalizeComponent> <InputDim> 24 <TargetRms> 1 <AddLogStddev> F "
    "</NormalizeComponent> \n",
    "<ComponentName> c17 <OutputGruNonlinearityComponent> <LearningRate> 0.064 <CellDim> 3 "
    "<w_h>  [ -1.193738 1.820539 -0.2566086 ]\n<ValueAvg>  [ 0 0 0 ]\n<DerivAvg>  [ 0 0 0 ]\n"
    "<SelfRepairTotal> 0 <Count> 0 <SelfRepairThreshold> 0.2 <SelfRepairScale> 1e-05 <Alpha> 4 <Rank> 8 "
    "<UpdatePeriod> 10 </OutputGruNonlinearityComponent> \n",
    "<ComponentName> c18 <PerElementOffsetComponent> <LearningRate> 0.074 <Offsets>  [ 0 0 0 ]\n"
    "<Dim> 10 <UseNaturalGradient> T </PerElementOffsetComponent> \n",
    "<ComponentName> Wic <PerElementScaleComponent> <LearningRate> 0.001 <Params>  [ 1 1 1 ]\n"
    "</PerElementScaleComponent> \n",
    "<ComponentName> c19 <PermuteComponent> <ColumnMap> [ 2 0 1 ]\n</PermuteComponent> \n",
    "<ComponentName> c20 <PnormComponent> <InputDim> 540 <OutputDim> 36 </PnormComponent> \n",
    "<ComponentName> r1 <RectifiedLinearComponent> <Dim> 5 <ValueAvg>  [ ]\n<DerivAvg>  [ ]\n<Count> 0 "
    "<OderivRms>  [ ]\n<OderivCount> 0 <NumDimsSelfRepaired> 0 <NumDimsProcessed> 0 "
    "</RectifiedLinearComponent> \n",
    "<ComponentName> c21 <RepeatedAffineComponent> <LearningRate> 0.001 <NumRepeats> 21 <LinearParams>  [\n"
    "  -0.31904 0.4865595 \n  0.3195225 0.383552 ]\n<BiasParams>  [ 0 0 ]\n</RepeatedAffineComponent> \n",
    "<ComponentName> attention <RestrictedAttentionComponent> <NumHeads> 1 <KeyDim> 25 <ValueDim> 28 "
    "<NumLeftInputs> 2 <NumRightInputs> 2 <TimeStride> 2 <NumLeftInputsRequired> 0 <NumRightInputsRequired> 2 "
    "<OutputContext> F <KeyScale> 1 <StatsCount> 0 <EntropyStats>  [ ]\n<PosteriorStats>  [ ]\n"
    "</RestrictedAttentionComponent> \n",
    "<ComponentName> c22 <ScaleAndOffsetComponent> <LearningRate> 0.001 <Dim> 12 <Scales>  [ 1 1 1 ]\n"
    "<Offsets>  [ 0 0 0 ]\n<UseNaturalGradient> T <Rank> 20 </ScaleAndOffsetComponent> \n",
    "<ComponentName> i <SigmoidComponent> <Dim> 51 <ValueAvg>  [ ]\n<DerivAvg>  [ ]\n<Count> 0 "
    "<OderivRms>  [ ]\n<OderivCount> 0 <NumDimsSelfRepaired> 0 <NumDimsProcessed> 0 </SigmoidComponent> \n",
    "<ComponentName> c23 <SoftmaxComponent> <Dim> 9 <ValueAvg>  [ ]\n<DerivAvg>  [ ]\n<Count> 0 "
    "<OderivRms>  [ ]\n<OderivCount> 0 <NumDimsSelfRepaired> 0 <NumDimsProcessed> 0 </SoftmaxComponent> \n",
    "<ComponentName> spec-augment.time-mask <SpecAugmentTimeMaskComponent> <Dim> 39 <ZeroedProportion> 0.2 "
    "<TimeMaskMaxFrames> 5 </SpecAugmentTimeMaskComponent> \n",
    "<ComponentName> stats-extraction-0-6 <StatisticsExtractionComponent> <InputDim> 48 <InputPeriod> 1 "
    "<OutputPeriod> 1 <IncludeVarinance> T </StatisticsExtractionComponent> \n",
    "<ComponentName> stats-pooling-0-6 <StatisticsPoolingComponent> <InputDim> 97 <InputPeriod> 1 "
    "<LeftContext> 0 <RightContext> 6 <NumLogCountFeatures> 0 <OutputStddevs> T <VarianceFloor> 1e-10 "
    "</StatisticsPoolingComponent> \n",
    "<ComponentName> c24 <SumBlockComponent> <InputDim> 2 <OutputDim> 1 <Scale> 0.5 </SumBlockComponent> \n",
    "<ComponentName> c25 <SumGroupComponent> <Sizes> [ 6 6 6 ]\n</SumGroupComponent> \n",
    "<ComponentName> t1 <TanhComponent> <Dim> 5 <ValueAvg>  [ ]\n<DerivAvg>  [ ]\n<Count> 0 <OderivRms>  [ ]\n"
    "<OderivCount> 0 <NumDimsSelfRepaired> 0 <NumDimsProcessed> 0 </TanhComponent> \n",
    "<ComponentName> c26 <TdnnComponent> <LearningRate> 0.014 <TimeOffsets> [ -1 0 1 ]\n"
    "<LinearParams>  [\n  -0.266928 0.4070849 -0.05737942 ]\n<BiasParams>  [ ]\n<OrthonormalConstraint> 0 "
    "<UseNaturalGradient> T <NumSamplesHistory> 2000 <AlphaInOut> 4 4 <RankInOut> 10 1 </TdnnComponent> \n",
    "<ComponentName> layer2-conv <TimeHeightConvolutionComponent> <LearningRate> 0.001 <Model> <ConvolutionModel> "
    "<NumFiltersIn> 1 <NumFiltersOut> 1 <HeightIn> 3 <HeightOut> 3 <HeightSubsampleOut> 1 "
    "<Offsets> [ -2,-1 -2,0 -2,1 0,-1 0,0 0,1 2,-1 2,0 2,1 ]\n<RequiredTimeOffsets> [ -2 0 2 ]\n"
    "</ConvolutionModel> <LinearParams>  [\n  0.1092962 0.3243649 0.1286274 ]\n<BiasParams>  [ 0 ]\n"
    "<MaxMemoryMb> 200 <UseNaturalGradient> F <NumMinibatchesHistory> 4 <AlphaInOut> 4 4 <RankInOut> 4 4 "
    "</TimeHeightConvolutionComponent> \n",
]
ALL_TYPES_TEXT = (
    "<Nnet3> \ninput-node name=input dim=3\noutput-node name=output input=input objective=linear\n\n"
    f"<NumComponents> {len(ALL_TYPES)} \n" + "".join(ALL_TYPES) + "</Nnet3> "
)


def text(nnet: NnetFile) -> str:
    return format_nnet(nnet, binary=False).decode()


@pytest.fixture(scope="module")
def nnet() -> NnetFile:
    return parse_nnet(NNET_TEXT.encode(), file="small.txt")


# ----- text -------------------------------------------------------------------------------------


def test_text_round_trip_is_byte_identical(nnet):
    assert text(nnet) == NNET_TEXT
    assert nnet.config == CONFIG
    assert nnet.config_lines[0] == "input-node name=input dim=3"
    assert [c.name for c in nnet.components] == ["affine1", "relu1", "bn1", "affine2", "lstm1", "affine3", "logsm"]
    assert not nnet.is_am and nnet.priors is None


def test_values_have_kaldi_types(nnet):
    affine = nnet.component("affine1")
    assert affine.type == "NaturalGradientAffineComponent"
    assert affine.tokens == (
        "MaxChange",
        "LearningRate",
        "LinearParams",
        "BiasParams",
        "RankIn",
        "RankOut",
        "UpdatePeriod",
        "NumSamplesHistory",
        "Alpha",
    )
    w = affine["LinearParams"]
    assert w.dtype == np.float32 and w.shape == (4, 3) and not w.flags.writeable
    np.testing.assert_array_equal(w[3], np.float32([1, -1.1, 1.2]))
    assert affine["BiasParams"].shape == (4,)
    assert affine["RankIn"] == 2 and type(affine["RankIn"]) is int
    assert type(affine["LearningRate"]) is np.float32 and affine["LearningRate"] == np.float32(0.001)
    relu = nnet.component("relu1")
    assert type(relu["Count"]) is np.float64  # NonlinearComponent's count_ is a double
    assert relu["ValueAvg"].shape == (0,) and relu["ValueAvg"].dtype == np.float32
    bn = nnet.component("bn1")
    assert bn["TestMode"] is False and type(bn["Count"]) is np.float64 and bn["Count"] == 12
    lstm = nnet.component("lstm1")
    assert lstm["ValueAvg"].shape == (5, 2) and lstm["Params"].shape == (3, 2)
    assert lstm["SelfRepairConfig"][5] == np.float32(1e-5)
    assert nnet.component("affine3")["OrthonormalConstraint"] == -1
    assert affine.parameters.keys() == {"linear_params", "bias_params"}


def test_all_text_format_types_round_trip_in_both_formats():
    nnet = parse_nnet(ALL_TYPES_TEXT.encode())
    assert len(nnet.components) == 45
    assert {c.type for c in nnet.components} <= set(TOKEN_KINDS)
    assert text(nnet) == ALL_TYPES_TEXT
    binary = format_nnet(nnet, binary=True)
    again = parse_nnet(binary)
    assert again == nnet
    assert text(again) == ALL_TYPES_TEXT
    assert format_nnet(again, binary=True) == binary
    composite = nnet.component("c3")
    inner = composite["RectifiedLinearComponent"]
    assert isinstance(inner, NnetComponent) and inner.name == "" and inner["Dim"] == 29
    dropout = nnet.component("tdnnf2.dropout")
    assert dropout["Continuous"] is None and "TestMode" not in dropout
    tdnn = nnet.component("c26")
    assert tdnn["TimeOffsets"].tolist() == [-1, 0, 1] and tdnn["TimeOffsets"].dtype == np.int32
    assert tdnn["RankInOut"] == (10, 1) and tdnn["AlphaInOut"] == (np.float32(4), np.float32(4))
    assert tdnn["LinearParams"].shape == (1, 3) and tdnn["BiasParams"].shape == (0,)
    model = nnet.component("layer2-conv")["ConvolutionModel"]
    assert model["Offsets"].shape == (9, 2) and model["Offsets"][0].tolist() == [-2, -1]
    assert nnet.component("layer2-conv")["Model"] is None
    attention = nnet.component("attention")
    assert attention["PosteriorStats"].dtype == np.float64 and attention["PosteriorStats"].shape == (0, 0)
    assert b"<PosteriorStats> DM \x04\x00\x00\x00\x00\x04\x00\x00\x00\x00" in binary


def test_unknown_types_are_read_by_the_generic_grammar_in_text():
    body = (
        "<ComponentName> foo <FooComponent> <Dim> 3 <Scale> 0.5 <Vals>  [ 1 2.5 ]\n<Ints> [ 1 -2 ]\n"
        "<Mat>  [\n  1 2 \n  3 4 ]\n<Flag> <Word> abc <Pair> 1 2 <On> T </FooComponent> \n"
    )
    source = "<Nnet3> \ninput-node name=input dim=3\n\n<NumComponents> 1 \n" + body + "</Nnet3> "
    nnet = parse_nnet(source.encode())
    foo = nnet.component("foo")
    assert foo["Dim"] == 3 and type(foo["Dim"]) is int
    assert foo["Scale"] == np.float32(0.5)
    assert foo["Vals"].dtype == np.float32 and foo["Ints"].dtype == np.int32
    assert foo["Mat"].shape == (2, 2) and foo["Flag"] is None and foo["Word"] == "abc"
    assert foo["Pair"] == (1, 2) and foo["On"] is True
    assert text(nnet) == source
    # In binary an int32 and a float look alike: an unknown token is refused, naming it and its offset.
    binary = format_nnet(nnet, binary=True)
    with pytest.raises(ModelFormatError, match=r"byte \d+: .*<Dim>.*FooComponent") as info:
        parse_nnet(binary, file="foo.raw")
    assert info.value.offset == binary.index(b"<Dim> ") + len(b"<Dim> ")


def test_config_section_layout():
    # Kaldi requires a newline straight after "<Nnet3> " and a blank line after the config lines.
    with pytest.raises(ModelFormatError, match="newline after <Nnet3>"):
        parse_nnet(NNET_TEXT.replace("<Nnet3> \n", "<Nnet3> input-node name=x dim=1\n").encode())
    no_blank = NNET_TEXT.replace(CONFIG + "\n", CONFIG)
    with pytest.raises(ModelFormatError, match="blank line that ends the config lines before <NumComponents>"):
        parse_nnet(no_blank.encode())
    crlf = NNET_TEXT.replace(CONFIG + "\n", CONFIG.replace("\n", "\r\n") + "\r\n")
    assert parse_nnet(crlf.encode()).config == CONFIG


# ----- binary -----------------------------------------------------------------------------------


def test_binary_round_trips(nnet, tmp_path):
    binary = format_nnet(nnet, binary=True)
    assert binary.startswith(b"\0B<Nnet3> \n" + CONFIG.encode() + b"\n<NumComponents> \x04\x07\x00\x00\x00")
    assert binary.endswith(b"</Nnet3> ")
    again = parse_nnet(binary)
    assert again == nnet and hash(again) == hash(nnet)
    assert text(again) == NNET_TEXT  # binary -> text gives the original text back
    assert format_nnet(parse_nnet(format_nnet(again, binary=False)), binary=True) == binary  # bin -> text -> bin
    path = tmp_path / "final.raw"
    write_nnet(path, nnet, binary=True)
    assert path.read_bytes() == binary
    assert read_nnet(path) == nnet
    write_nnet(path, nnet, binary=False)
    assert path.read_text() == NNET_TEXT


def test_binary_layout_follows_kaldi(nnet):
    binary = format_nnet(nnet, binary=True)
    # tokens end in a space; int32: size byte 4 + little-endian; float: size byte 4 + IEEE; double: size byte 8
    assert b"<RankIn> \x04" + struct.pack("<i", 2) + b"<RankOut> " in binary
    assert b"<LearningRate> \x04" + struct.pack("<f", 0.001) in binary
    assert b"<Count> \x08" + struct.pack("<d", 12.0) + b"<StatsMean> FV \x04" + struct.pack("<i", 4) in binary
    # matrices: FM, rows, cols, row-major float32 data
    w = nnet.component("affine1")["LinearParams"]
    assert b"<LinearParams> FM \x04\x04\x00\x00\x00\x04\x03\x00\x00\x00" + w.astype("<f4").tobytes() in binary
    # booleans are one byte in binary, with no space after
    assert b"<TestMode> F<Count> " in binary
    assert b"<ValueAvg> FV \x04\x00\x00\x00\x00<DerivAvg> " in binary


def test_values_built_in_python_compare_equal_to_read_ones(nnet):
    affine = nnet.component("affine1")
    built = NnetComponent(
        "affine1",
        "NaturalGradientAffineComponent",
        [
            ("MaxChange", 0.75),
            ("LearningRate", 0.001),
            ("LinearParams", [[0.1, -0.2, 0.3], [0.4, 0.5, -0.6], [-0.7, 0.8, 0.9], [1, -1.1, 1.2]]),
            ("BiasParams", [0.1, 0.2, -0.3, 0.4]),
            ("RankIn", 2),
            ("RankOut", 2),
            ("UpdatePeriod", 4),
            ("NumSamplesHistory", 2000),
            ("Alpha", 4),
        ],
    )
    assert built == affine and hash(built) == hash(affine)
    assert built.replace(RankIn=3) != affine and built.replace(RankIn=3)["RankIn"] == 3
    file = NnetFile(CONFIG.splitlines(), [built] + list(nnet.components[1:]))
    assert file == nnet and text(file) == NNET_TEXT
    assert nnet.replace_components([built.replace(Alpha=2)]).component("affine1")["Alpha"] == 2
    with pytest.raises(ModelFormatError, match="int32"):
        NnetComponent("a", "NaturalGradientAffineComponent", [("LinearParams", [[1.0]]), ("RankIn", 0.5)])
    with pytest.raises(ModelFormatError, match="matrix"):
        NnetComponent("a", "AffineComponent", [("LinearParams", [1.0, 2.0])])
    with pytest.raises(ModelFormatError, match="twice"):
        NnetFile(CONFIG, [built, built])
    with pytest.raises(ModelFormatError, match="blank line"):
        NnetFile("input-node name=input dim=3\n\noutput-node name=output input=input\n", [])


def test_token_field_names():
    assert token_to_field("LinearParams") == "linear_params"
    assert token_to_field("BiasParams") == "bias_params"
    assert token_to_field("StatsMean") == "stats_mean"
    assert token_to_field("w_h") == "w_h" and field_to_token("w_h") == "w_h"
    for token in ("LinearParams", "BiasParams", "Params", "Offsets", "Scales", "StatsVar", "Count", "Output"):
        assert field_to_token(token_to_field(token)) == token


def test_read_kaldi_array(tmp_path):
    (tmp_path / "m.txt").write_text(" [\n  1 2 \n  3 4 ]\n")
    (tmp_path / "v.txt").write_text(" [ 1 2 3 ]\n")
    (tmp_path / "m.bin").write_bytes(b"\0BFM \x04\x01\x00\x00\x00\x04\x02\x00\x00\x00" + np.float32([5, 6]).tobytes())
    (tmp_path / "v.bin").write_bytes(b"\0BDV \x04\x02\x00\x00\x00" + np.float64([7, 8]).tobytes())
    assert read_kaldi_array(tmp_path / "m.txt").tolist() == [[1, 2], [3, 4]]
    assert read_kaldi_array(tmp_path / "v.txt").tolist() == [1, 2, 3]
    assert read_kaldi_array(tmp_path / "m.bin").tolist() == [[5, 6]]
    v = read_kaldi_array(tmp_path / "v.bin")
    assert v.dtype == np.float64 and v.tolist() == [7, 8]
    (tmp_path / "bad.bin").write_bytes(b"\0BFM \x04\x01\x00\x00\x00\x04\x02\x00\x00\x00\x00")
    with pytest.raises(ModelFormatError, match="unexpected end of file"):
        read_kaldi_array(tmp_path / "bad.bin")


# ----- acoustic models ---------------------------------------------------------------------------


def test_acoustic_model_text_round_trip_and_priors():
    am = parse_nnet(AM_TEXT.encode(), file="final.mdl")
    assert am.is_am
    np.testing.assert_array_equal(am.priors, np.float32([0.6, 0.4]))
    assert am.priors.dtype == np.float32 and am.left_context == 0 and am.right_context == 0
    tm = am.transition_model
    assert tm.is_hmm and tm.num_pdfs == 2
    assert tm.topology == (TopologyEntry([1, 2], [HmmState(0, 0, [(0, 0.75), (1, 0.25)]), HmmState(-1, -1)]),)
    assert tm.tuples == ((1, 0, 0, 0), (2, 0, 1, 1))
    assert tm.log_probs.shape == (5,) and tm.raw == TM_TEXT.encode()
    assert text(am) == AM_TEXT
    assert am.config.startswith("input-node name=input dim=3\n")


def test_acoustic_model_binary_keeps_and_converts_the_transition_model(tmp_path):
    am = parse_nnet(AM_TEXT.encode())
    binary = format_nnet(am, binary=True)
    # transition-model.cc / hmm-topology.cc binary layout: phones, phone2idx, entries, then the triples
    expected_tm = (
        b"\0B<TransitionModel> <Topology> "
        b"\x04\x02\x00\x00\x00"
        + struct.pack("<2i", 1, 2)  # phones_ (WriteIntegerVector)
        + b"\x04\x03\x00\x00\x00"
        + struct.pack("<3i", -1, 0, 0)  # phone2idx_
        + b"\x04"
        + struct.pack("<i", 1)  # one entry
        + b"\x04"
        + struct.pack("<i", 2)  # two states
        + b"\x04"
        + struct.pack("<i", 0)
        + b"\x04"
        + struct.pack("<i", 2)  # pdf class 0, 2 transitions
        + b"\x04"
        + struct.pack("<i", 0)
        + b"\x04"
        + struct.pack("<f", 0.75)
        + b"\x04"
        + struct.pack("<i", 1)
        + b"\x04"
        + struct.pack("<f", 0.25)
        + b"\x04"
        + struct.pack("<i", -1)
        + b"\x04"
        + struct.pack("<i", 0)  # final state
        + b"</Topology> <Triples> \x04"
        + struct.pack("<i", 2)
    )
    assert binary.startswith(expected_tm)
    assert binary.endswith(
        b"</Nnet3> <LeftContext> \x04\x00\x00\x00\x00<RightContext> \x04\x00\x00\x00\x00"
        b"<Priors> FV \x04\x02\x00\x00\x00" + np.float32([0.6, 0.4]).tobytes()
    )
    again = parse_nnet(binary)
    assert again == am
    assert again.transition_model.raw_binary is True
    assert format_nnet(again, binary=True) == binary  # the raw bytes are written back
    assert text(again) == AM_TEXT  # and the parsed form converts back to Kaldi's text
    # a transition model changed after reading is written from its parsed form, not from stale raw bytes
    import attrs

    changed = attrs.evolve(again.transition_model, log_probs=np.float32([0, -1, -2, -3, -4]))
    rewritten = parse_nnet(format_nnet(attrs.evolve(again, transition_model=changed), binary=True))
    assert rewritten.transition_model == changed
    path = tmp_path / "final.mdl"
    write_nnet(path, again, binary=True)
    assert read_nnet(path).priors.tolist() == am.priors.tolist()


def test_non_hmm_transition_model_uses_tuples():
    tm = TransitionModel(
        [TopologyEntry([3], [HmmState(0, 1, [(0, 0.5), (1, 0.5)]), HmmState(-1, -1)])],
        [(3, 0, 0, 1)],
        [0, -0.693147, -0.693147],
    )
    am = parse_nnet(AM_TEXT.encode())
    am2 = NnetFile(am.config, am.components, transition_model=tm, left_context=1, right_context=2, priors=[0.5, 0.5])
    source = text(am2)
    assert "<ForwardPdfClass> 0 <SelfLoopPdfClass> 1 <Transition>" in source
    assert "<Tuples> 1 \n3 0 0 1 \n</Tuples> \n" in source
    for binary in (False, True):
        back = parse_nnet(format_nnet(am2, binary=binary))
        assert back == am2 and not back.transition_model.is_hmm
    assert b"<Topology> \x04\x01\x00\x00\x00" in format_nnet(am2, binary=True)


# ----- bad input ----------------------------------------------------------------------------------


def test_errors_name_the_expected_token_and_place(nnet):
    binary = format_nnet(nnet, binary=True)
    cut = binary.index(b"<LinearParams> FM ") + 40
    with pytest.raises(ModelFormatError, match=r"small\.raw: byte \d+: unexpected end of file.*<LinearParams>"):
        parse_nnet(binary[:cut], file="small.raw")
    bad = NNET_TEXT.replace("<RankOut> 2 <UpdatePeriod>", "<RankOut> 2.5 <UpdatePeriod>", 1)
    with pytest.raises(ModelFormatError, match=r"small\.txt:\d+:\d+: expected an int32 for <RankOut>") as info:
        parse_nnet(bad.encode(), file="small.txt")
    line = bad.splitlines()[info.value.line - 1]
    assert line[info.value.column - 1 :].startswith("2.5")
    bad = NNET_TEXT.replace("</BatchNormComponent>", "</BatchNorm>")
    with pytest.raises(ModelFormatError, match="</BatchNormComponent>"):
        parse_nnet(bad.encode())
    with pytest.raises(ModelFormatError, match="expected <Nnet3>"):
        parse_nnet(b"<Nnet> \n")
    with pytest.raises(ModelFormatError, match="empty file"):
        parse_nnet(b"")
    with pytest.raises(ModelFormatError, match="after </Nnet3>"):
        parse_nnet((NNET_TEXT + "junk ").encode())
    with pytest.raises(ModelFormatError, match=r"\\0B"):
        parse_nnet(b"\0X" + binary[2:])
    with pytest.raises(ModelFormatError, match="UTF-8"):
        parse_nnet(NNET_TEXT.encode().replace(b"relu1 <Rect", b"rel\xff1 <Rect"))
    with pytest.raises(ModelFormatError, match="compressed matrix"):
        parse_nnet(binary.replace(b"<LinearParams> FM ", b"<LinearParams> CM ", 1))


def _outcome(data: bytes, original: NnetFile) -> None:
    """Reading `data` either fails with ModelFormatError or succeeds; nothing else may come out."""
    try:
        result = parse_nnet(data, file="fuzz")
    except ModelFormatError as e:
        assert str(e).startswith("fuzz")
        return
    assert isinstance(result, NnetFile)
    format_nnet(result, binary=True)  # whatever was read can be written
    format_nnet(result, binary=False)


@pytest.fixture(scope="module")
def samples(nnet) -> list[tuple[bytes, NnetFile]]:
    am = parse_nnet(AM_TEXT.encode())
    return [
        (format_nnet(nnet, binary=True), nnet),
        (NNET_TEXT.encode(), nnet),
        (format_nnet(am, binary=True), am),
        (AM_TEXT.encode(), am),
    ]


def test_every_truncation_fails_cleanly(samples):
    for data, original in samples:
        for n in range(len(data)):
            prefix = data[:n]
            try:
                result = parse_nnet(prefix)
            except ModelFormatError:
                continue
            # only dropping trailing whitespace after the last value may still read
            assert data[n:].strip() == b"" and result == original, n


def test_flipped_bytes_fail_cleanly(samples):
    rng = np.random.default_rng(0)
    for data, original in samples:
        for position in range(0, len(data), 3):
            flipped = bytearray(data)
            flipped[position] ^= int(rng.integers(1, 256))
            _outcome(bytes(flipped), original)


@settings(max_examples=150, deadline=None, suppress_health_check=[HealthCheck.function_scoped_fixture])
@given(data=st.data())
def test_random_corruption_gives_model_format_error_or_success(samples, data):
    source, original = samples[data.draw(st.integers(0, len(samples) - 1))]
    corrupted = bytearray(source)
    for _ in range(data.draw(st.integers(1, 4))):
        action = data.draw(st.sampled_from(["flip", "cut", "delete", "insert"]))
        if not corrupted:
            break
        i = data.draw(st.integers(0, len(corrupted) - 1))
        if action == "flip":
            corrupted[i] ^= data.draw(st.integers(1, 255))
        elif action == "cut":
            del corrupted[i:]
        elif action == "delete":
            del corrupted[i : i + data.draw(st.integers(1, 8))]
        else:
            corrupted[i:i] = data.draw(st.binary(min_size=1, max_size=8))
    _outcome(bytes(corrupted), original)


def test_huge_sizes_in_corrupt_binary_are_errors_not_allocations(nnet):
    binary = format_nnet(nnet, binary=True)
    i = binary.index(b"<LinearParams> FM \x04") + len(b"<LinearParams> FM \x04")
    huge = binary[:i] + struct.pack("<i", 2**31 - 1) + binary[i + 4 :]
    with pytest.raises(ModelFormatError, match="unexpected end of file"):
        parse_nnet(huge)
    negative = binary[:i] + struct.pack("<i", -5) + binary[i + 4 :]
    with pytest.raises(ModelFormatError, match="negative size"):
        parse_nnet(negative)
    nested = (
        "<Nnet3> \ninput-node name=input dim=3\n\n<NumComponents> 1 \n<ComponentName> c <AComponent> "
        + "<AComponent> " * 50
    )
    with pytest.raises(ModelFormatError, match="nested"):
        parse_nnet(nested.encode())


# ----- writing is atomic -------------------------------------------------------------------------


def test_failed_write_leaves_the_existing_file(nnet, tmp_path, monkeypatch):
    path = tmp_path / "final.raw"
    path.write_bytes(b"old contents")

    def boom(*args, **kwargs):
        raise OSError("disk full")

    monkeypatch.setattr(os, "replace", boom)
    with pytest.raises(OSError, match="disk full"):
        write_nnet(path, nnet, binary=True)
    assert path.read_bytes() == b"old contents"
    assert os.listdir(tmp_path) == ["final.raw"]  # no temporary file left behind
    monkeypatch.undo()
    with pytest.raises(TypeError):
        write_nnet(path, "not an nnet")  # type: ignore[arg-type]
    assert path.read_bytes() == b"old contents"
    write_nnet(path, nnet, binary=False)
    assert path.read_text() == NNET_TEXT
