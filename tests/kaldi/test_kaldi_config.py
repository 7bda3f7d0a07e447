"""Kaldi nnet3 config files: lines, descriptors, Kaldi's normalisation, errors, writing, merging."""

from __future__ import annotations

import io
import random
import warnings

import pytest
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st

from symnet._src.core.descriptor import (
    Append,
    Const,
    IfDefined,
    Input,
    Offset,
    Ref,
    ReplaceIndex,
    Scale,
    Sum,
)
from symnet._src.core.elementwise import ReLU
from symnet._src.kaldi.text.descriptor_text import format_real, parse_int, parse_real, to_float32
from symnet.errors import ConfigError, DescriptorError, SymnetError
from symnet.kaldi import (
    ComponentLine,
    ComponentNode,
    DimRangeNode,
    InputNode,
    OutputNode,
    check_config,
    merge_config,
    normalize_descriptor,
    parse_config,
    parse_descriptor,
    parse_line,
    parse_network,
    read_config,
    write_config,
    write_descriptor,
)

# ----- example configs -------------------------------------------------------------------

# The example of Kaldi's nnet3 documentation (dnn3_code_data_types).
DOC_EXAMPLE = """\
# First the components
component name=affine1 type=NaturalGradientAffineComponent input-dim=48 output-dim=65
component name=relu1 type=RectifiedLinearComponent dim=65
component name=affine2 type=NaturalGradientAffineComponent input-dim=65 output-dim=115
component name=logsoftmax type=LogSoftmaxComponent dim=115
# Next the nodes
input-node name=input dim=12
component-node name=affine1_node component=affine1 input=Append(Offset(input, -1), Offset(input, 0), Offset(input, 1), Offset(input, 2))
component-node name=nonlin1 component=relu1 input=affine1_node
component-node name=affine2 component=affine2 input=nonlin1
component-node name=output_nonlin component=logsoftmax input=affine2
output-node name=output input=output_nonlin
"""

# A fragment of a chain TDNN-F final.config as Kaldi's xconfig writes it.
TDNNF = """\
input-node name=ivector dim=100
input-node name=input dim=40
component name=lda type=FixedAffineComponent matrix=exp/chain/tdnn1a/configs/lda.mat
component-node name=lda component=lda input=Append(Offset(input, -1), input, Offset(input, 1), ReplaceIndex(ivector, t, 0))
component name=tdnn1.affine type=NaturalGradientAffineComponent input-dim=220 output-dim=1536 max-change=0.75 l2-regularize=0.01
component-node name=tdnn1.affine component=tdnn1.affine input=lda
component name=tdnn1.relu type=RectifiedLinearComponent dim=1536 self-repair-scale=1e-05
component-node name=tdnn1.relu component=tdnn1.relu input=tdnn1.affine
component name=tdnn1.batchnorm type=BatchNormComponent dim=1536 target-rms=1.0
component-node name=tdnn1.batchnorm component=tdnn1.batchnorm input=tdnn1.relu
component name=tdnn1.dropout type=GeneralDropoutComponent dim=1536 dropout-proportion=0.0 continuous=true
component-node name=tdnn1.dropout component=tdnn1.dropout input=tdnn1.batchnorm
component name=tdnnf2.linear type=TdnnComponent input-dim=1536 output-dim=160 l2-regularize=0.01 max-change=0.75 use-bias=false time-offsets=-1,0 orthonormal-constraint=-1.0
component-node name=tdnnf2.linear component=tdnnf2.linear input=tdnn1.dropout
component name=tdnnf2.affine type=TdnnComponent input-dim=160 output-dim=1536 l2-regularize=0.01 max-change=0.75 time-offsets=0,1
component-node name=tdnnf2.affine component=tdnnf2.affine input=tdnnf2.linear
component name=tdnnf2.relu type=RectifiedLinearComponent dim=1536 self-repair-scale=1e-05
component-node name=tdnnf2.relu component=tdnnf2.relu input=tdnnf2.affine
component name=tdnnf2.batchnorm type=BatchNormComponent dim=1536
component-node name=tdnnf2.batchnorm component=tdnnf2.batchnorm input=tdnnf2.relu
component name=tdnnf2.dropout type=GeneralDropoutComponent dim=1536 dropout-proportion=0.0 continuous=true
component-node name=tdnnf2.dropout component=tdnnf2.dropout input=tdnnf2.batchnorm
component name=tdnnf2.noop type=NoOpComponent dim=1536
component-node name=tdnnf2.noop component=tdnnf2.noop input=Sum(Scale(0.66, tdnn1.dropout), tdnnf2.dropout)
component name=output.affine type=NaturalGradientAffineComponent input-dim=1536 output-dim=3456 param-stddev=0.0 bias-stddev=0.0
component-node name=output.affine component=output.affine input=tdnnf2.noop
output-node name=output input=output.affine objective=linear
"""

# A fast-lstmp layer as Kaldi's xconfig (lstm.py) writes it: recurrences through
# IfDefined(Offset(..., -3)) and dim-range-nodes.
LSTM = """\
input-node name=input dim=40
component name=lstm1.W_all type=NaturalGradientAffineComponent input-dim=296 output-dim=4096 max-change=1.5
component-node name=lstm1.W_all component=lstm1.W_all input=Append(input, IfDefined(Offset(lstm1.r_trunc, -3)))
component name=lstm1.lstm_nonlin type=LstmNonlinearityComponent cell-dim=1024 use-dropout=false max-change=0.75
component-node name=lstm1.lstm_nonlin component=lstm1.lstm_nonlin input=Append(lstm1.W_all, IfDefined(Offset(lstm1.c_trunc, -3)))
dim-range-node name=lstm1.m input-node=lstm1.lstm_nonlin dim-offset=1024 dim=1024
dim-range-node name=lstm1.c input-node=lstm1.lstm_nonlin dim-offset=0 dim=1024
component name=lstm1.W_rp type=NaturalGradientAffineComponent input-dim=1024 output-dim=512 max-change=1.5
component-node name=lstm1.rp component=lstm1.W_rp input=lstm1.m
dim-range-node name=lstm1.r input-node=lstm1.rp dim-offset=0 dim=256
component name=lstm1.cr_trunc type=BackpropTruncationComponent dim=1280 clipping-threshold=30.0 zeroing-threshold=15.0 zeroing-interval=20 recurrence-interval=3 scale=1.0
component-node name=lstm1.cr_trunc component=lstm1.cr_trunc input=Append(lstm1.c, lstm1.r)
dim-range-node name=lstm1.c_trunc input-node=lstm1.cr_trunc dim-offset=0 dim=1024
dim-range-node name=lstm1.r_trunc input-node=lstm1.cr_trunc dim-offset=1024 dim=256
component name=output.affine type=NaturalGradientAffineComponent input-dim=512 output-dim=3000
component-node name=output.affine component=output.affine input=lstm1.rp
component name=output.log-softmax type=LogSoftmaxComponent dim=3000
component-node name=output.log-softmax component=output.log-softmax input=output.affine
output-node name=output input=Offset(output.log-softmax, 5) objective=linear
"""

EXAMPLES = [DOC_EXAMPLE, TDNNF, LSTM]


def d(text: str):
    return parse_descriptor(text)


# ----- the example configs ----------------------------------------------------------------


def test_doc_example_lines():
    lines = parse_config(DOC_EXAMPLE, file="nnet.config")
    assert [line.kind for line in lines] == ["component"] * 4 + ["input-node"] + ["component-node"] * 4 + [
        "output-node"
    ]
    assert lines[0] == ComponentLine(
        name="affine1", type="NaturalGradientAffineComponent", options=[("input-dim", "48"), ("output-dim", "65")]
    )
    assert lines[4] == InputNode(name="input", dim=12)
    x = Ref("input")
    assert lines[5].descriptor == Append(Offset(x, -1), x, Offset(x, 1), Offset(x, 2))
    assert lines[5].component == "affine1"
    assert lines[-1] == OutputNode(name="output", descriptor=Ref("output_nonlin"), objective="linear")
    check_config(lines)
    # Kaldi writes Offset(input, 0) as input, and adds objective=linear.
    text = write_config(lines)
    assert (
        "component-node name=affine1_node component=affine1 "
        "input=Append(Offset(input, -1), input, Offset(input, 1), Offset(input, 2))\n"
    ) in text
    assert "output-node name=output input=output_nonlin objective=linear\n" in text
    assert parse_config(text) == lines


def test_doc_example_sources_and_where():
    lines = parse_config(DOC_EXAMPLE, file="nnet.config")
    node = lines[5]
    assert node.source.file == "nnet.config" and node.source.line == 8
    column = node.source.value_column("input")
    assert node.source.text[column - 1 :].startswith("Append(")
    first_offset = node.descriptor.parts[0]
    assert first_offset.where == f"nnet.config:8:{column + len('Append(')}"


def test_tdnnf_fragment():
    lines = parse_config(TDNNF)
    check_config(lines)
    by_name = {(line.kind, line.name): line for line in lines}
    lda = by_name["component-node", "lda"].descriptor
    x = Ref("input")
    assert lda == Append(Offset(x, -1), x, Offset(x, 1), ReplaceIndex(Ref("ivector"), "t", 0))
    noop = by_name["component-node", "tdnnf2.noop"].descriptor
    assert noop == Sum(Scale(to_float32(0.66), Ref("tdnn1.dropout")), Ref("tdnnf2.dropout"))
    assert write_descriptor(noop) == "Sum(Scale(0.66, tdnn1.dropout), tdnnf2.dropout)"
    linear = by_name["component", "tdnnf2.linear"].reader()
    assert linear.get_ints("time-offsets") == (-1, 0)
    assert linear.get_bool("use-bias") is False
    assert linear.get_float("orthonormal-constraint") == -1.0
    assert linear.get_int("output-dim") == 160
    assert by_name["component", "lda"].reader().get_str("matrix") == "exp/chain/tdnn1a/configs/lda.mat"
    assert parse_config(write_config(lines)) == lines


def test_lstm_recurrences_and_dim_ranges():
    lines = parse_config(LSTM)
    check_config(lines)
    by_name = {(line.kind, line.name): line for line in lines}
    w_all = by_name["component-node", "lstm1.W_all"].descriptor
    assert w_all == Append(Ref("input"), IfDefined(Offset(Ref("lstm1.r_trunc"), -3)))
    assert by_name["dim-range-node", "lstm1.r_trunc"] == DimRangeNode(
        name="lstm1.r_trunc", input_node="lstm1.cr_trunc", dim_offset=1024, dim=256
    )
    text = write_config(lines)
    assert "input=Append(input, IfDefined(Offset(lstm1.r_trunc, -3)))" in text
    assert "dim-range-node name=lstm1.c input-node=lstm1.lstm_nonlin dim-offset=0 dim=1024\n" in text
    assert "output-node name=output input=Offset(output.log-softmax, 5) objective=linear\n" in text
    assert parse_config(text) == lines


def test_read_config_from_path_and_file(tmp_path):
    path = tmp_path / "final.config"
    path.write_text(LSTM)
    assert read_config(path) == parse_config(LSTM)
    assert read_config(str(path))[0].source.file == str(path)
    assert read_config(io.StringIO(LSTM), file="x.config")[0].source.file == "x.config"


def test_comments_blanks_spacing_and_option_order():
    text = (
        "   # a comment line\n\n"
        "\tinput-node   dim=12 name=input   # trailing comment\n"
        "component-node input=Append( Offset( input , -1 ) ,input ) name=a component=c\r\n"
        "component name=c type=X   key='a b'  other=\"it's\" empty= last=1\n"
    )
    lines = parse_config(text)
    assert lines[0] == InputNode(name="input", dim=12)
    assert lines[0].source.line == 3
    assert lines[1].descriptor == Append(Offset(Ref("input"), -1), Ref("input"))
    assert lines[2].options == (("key", "a b"), ("other", "it's"), ("empty", ""), ("last", "1"))
    written = write_config(lines)
    assert "component name=c type=X key='a b' other=\"it's\" empty='' last=1\n" in written
    assert parse_config(written) == lines


def test_output_node_objective():
    assert parse_line("output-node name=o input=x").objective == "linear"
    assert parse_line("output-node name=o input=x objective=quadratic").objective == "quadratic"
    assert OutputNode(name="o", descriptor=Ref("x")).to_text() == "output-node name=o input=x objective=linear"


def test_line_objects_built_in_python_are_normalised():
    line = ComponentNode(name="a", component="c", descriptor=Offset(Append(Ref("x"), Input("y", 3)), 0))
    assert line.descriptor == Append(Ref("x"), Input("y", 3))
    assert line.to_text() == "component-node name=a component=c input=Append(x, y)"
    assert parse_line(line.to_text()) == ComponentNode(name="a", component="c", descriptor=Append(Ref("x"), Ref("y")))
    with pytest.raises(ConfigError):
        InputNode(name="bad name", dim=3)
    with pytest.raises(ConfigError):
        InputNode(name="a", dim=0)
    with pytest.raises(DescriptorError):
        ComponentNode(name="a", component="c", descriptor=ReLU(Ref("x")))


# ----- Kaldi's normalisations (GeneralDescriptor::NormalizeAppend / Normalize) ----------------


@pytest.mark.parametrize(
    "text, normal",
    [
        # Offset: x, 0 -> x; nested offsets add (t and x); an x-offset is kept.
        ("Offset(x, 0)", "x"),
        ("Offset(x, 0, 0)", "x"),
        ("Offset(Offset(x, 2), -1)", "Offset(x, 1)"),
        ("Offset(Offset(x, 1, 2), -1, -2)", "x"),
        ("Offset(x, 0, 3)", "Offset(x, 0, 3)"),
        ("Offset(x, -1, 0)", "Offset(x, -1)"),
        # Append moves to the top and flattens, through every other expression.
        ("Offset(Append(a, b), 2)", "Append(Offset(a, 2), Offset(b, 2))"),
        ("Append(a, Append(b, c))", "Append(a, b, c)"),
        ("Append(a)", "a"),
        ("Sum(Append(a, b), Append(c, d))", "Append(Sum(a, c), Sum(b, d))"),
        ("IfDefined(Append(a, Offset(b, -1)))", "Append(IfDefined(a), IfDefined(Offset(b, -1)))"),
        ("Switch(Append(a, b), Append(c, d))", "Append(Switch(a, c), Switch(b, d))"),
        ("Append(Const(1, 3), x)", "Append(Const(1, 3), x)"),
        # Forwarding expressions move inside Sum, Failover and IfDefined.
        ("Offset(Sum(a, b), 1)", "Sum(Offset(a, 1), Offset(b, 1))"),
        ("Offset(IfDefined(x), -1)", "IfDefined(Offset(x, -1))"),
        ("Round(Failover(a, b), 3)", "Failover(Round(a, 3), Round(b, 3))"),
        ("ReplaceIndex(IfDefined(iv), t, 0)", "IfDefined(ReplaceIndex(iv, t, 0))"),
        ("Switch(IfDefined(a))", "IfDefined(Switch(a))"),
        ("Offset(Offset(Sum(a, b), 1), 1)", "Sum(Offset(a, 2), Offset(b, 2))"),
        # Kaldi's Sum is binary: more arguments nest to the right; Sum(x) is x.
        ("Sum(a)", "a"),
        ("Sum(a, b, c)", "Sum(a, Sum(b, c))"),
        ("Sum(a, b, c, d)", "Sum(a, Sum(b, Sum(c, d)))"),
        ("Sum(Sum(a, b), c)", "Sum(Sum(a, b), c)"),
        # Scale goes inside Offset/Round/ReplaceIndex, distributes over Sum and Append, multiplies.
        ("Scale(2, Offset(x, 1))", "Offset(Scale(2, x), 1)"),
        ("Scale(2, Round(x, 3))", "Round(Scale(2, x), 3)"),
        ("Scale(2, ReplaceIndex(x, x, 1))", "ReplaceIndex(Scale(2, x), x, 1)"),
        ("Scale(2, Sum(a, b))", "Sum(Scale(2, a), Scale(2, b))"),
        ("Scale(0.5, Append(a, Offset(b, 1)))", "Append(Scale(0.5, a), Offset(Scale(0.5, b), 1))"),
        ("Scale(2, Scale(3, x))", "Scale(6, x)"),
        ("Scale(2, Scale(0.5, x))", "x"),
        ("Scale(1.0, x)", "x"),
        ("Scale(2, Offset(Sum(a, b), 1))", "Sum(Offset(Scale(2, a), 1), Offset(Scale(2, b), 1))"),
        ("Scale(-1, Offset(Offset(x, 1), -1))", "Scale(-1, x)"),
        # Allowed combinations kept as they are.
        ("Failover(Offset(x, -1), Const(0, 10))", "Failover(Offset(x, -1), Const(0, 10))"),
        ("Sum(Scale(-1.0, tdnn2), Const(1.0, 512))", "Sum(Scale(-1, tdnn2), Const(1, 512))"),
        ("IfDefined(Sum(x, Const(0, 4)))", "IfDefined(Sum(x, Const(0, 4)))"),
        ("Sum(Offset(x, -1), Offset(x, 1))", "Sum(Offset(x, -1), Offset(x, 1))"),
        ("Switch(Scale(2, a), b)", "Switch(Scale(2, a), b)"),
        ("Round(Offset(x, 1), 3)", "Round(Offset(x, 1), 3)"),
        ("Offset(Round(x, 3), 1)", "Offset(Round(x, 3), 1)"),
        ("IfDefined(IfDefined(x))", "IfDefined(IfDefined(x))"),
        ("Switch(a)", "Switch(a)"),
    ],
)
def test_normalisation(text, normal):
    layer = d(text)
    assert write_descriptor(layer) == normal
    assert d(normal) == layer
    assert normalize_descriptor(layer) == layer


def test_scales_and_consts_are_float32_and_print_like_cpp():
    layer = d("Scale(0.1, x)")
    assert layer.scale == to_float32(0.1) != 0.1
    assert write_descriptor(layer) == "Scale(0.1, x)"
    assert write_descriptor(d("Const(1e-05, 3)")) == "Const(1e-05, 3)"
    assert write_descriptor(d("Const(1e6, 3)")) == "Const(1e+06, 3)"
    # more than six digits: Kaldi would print 0.123457; symnet keeps the float32 value.
    assert d(write_descriptor(d("Scale(0.1234567, x)"))) == d("Scale(0.1234567, x)")
    assert format_real(to_float32(0.1234567)) == "0.1234567"  # Kaldi: 0.123457, another float32


def test_component_values_are_quoted_when_needed():
    line = ComponentLine(name="c", type="T", options={"a": "x=y", "b": "it's", "c": "", "d": "p q"})
    assert line.to_text() == "component name=c type=T a='x=y' b=\"it's\" c='' d='p q'"
    assert parse_line(line.to_text()) == line
    for impossible in ("a#b", "'\""):
        with pytest.raises(ConfigError):
            ComponentLine(name="c", type="T", options={"a": impossible}).to_text()


def test_python_built_descriptors():
    x, y = Input("x", 4), Ref("y")
    layer = Sum(Offset(Append(x, y), 1), Append(Scale(2.0, y), Const(1.0, 4)), Append(x, y))
    assert write_descriptor(layer) == (
        "Append(Sum(Offset(x, 1), Sum(Scale(2, y), x)), Sum(Offset(y, 1), Sum(Const(1, 4), y)))"
    )
    normal = normalize_descriptor(layer)
    assert normal.parts[0].parts[1].parts[1] is x  # leaves are kept as they were
    for bad in (
        ReLU(y),
        Scale(2.0, IfDefined(y)),
        Ref("Sum"),
        Offset(Const(1.0, 2), 1),
        Sum(Append(x, y), x),
        Scale(float("inf"), y),
    ):
        with pytest.raises(DescriptorError):
            write_descriptor(bad)


# ----- what Kaldi rejects ---------------------------------------------------------------------


@pytest.mark.parametrize(
    "text, column, fragment",
    [
        ("Scale(2, IfDefined(x))", 1, "Scale() of IfDefined()"),
        ("Scale(2, Failover(a, b))", 1, "Scale() of Failover()"),
        ("Scale(2, Switch(a, b))", 1, "Scale() of Switch()"),
        ("Scale(2, Const(1, 3))", 1, "Scale() of Const()"),
        ("Failover(Const(1, 3), x)", 1, "Failover()"),
        ("IfDefined(Const(1, 3))", 1, "IfDefined()"),
        ("Offset(Const(1, 3), 1)", 8, "Const() cannot appear inside Offset()"),
        ("Switch(Const(1, 3), a)", 8, "Const() cannot appear inside Switch()"),
        ("Switch(Sum(b, c), a)", 8, "inside Switch()"),
        ("Switch(a, IfDefined(b))", 11, "IfDefined() inside Switch()"),
        ("Sum(Append(a, b), c)", 1, "different numbers of Append() terms"),
        ("Round(x, 0)", 10, "positive t-modulus"),
        ("Const(1, 0)", 10, "positive dimension"),
        ("Const(inf, 3)", 7, "finite"),
        ("Scale(nan, x)", 7, "finite"),
    ],
)
def test_rejected_descriptors(text, column, fragment):
    with pytest.raises(ConfigError) as info:
        d(text)
    assert info.value.column == column
    assert fragment in info.value.message


@pytest.mark.parametrize(
    "text",
    [
        "Sum(a, Scale(2, a))",
        "Sum(Offset(a, -1), Offset(Scale(0.5, a), 1))",
        "Switch(a, Scale(2, a))",
        "Switch(a, a, Offset(Scale(3, a), -1))",
    ],
)
def test_a_node_with_two_scales_reads_but_does_not_compute(text):
    """nnet3-init and nnet3-info take such a descriptor; Kaldi's compiler refuses it (GetScaleForNode: 'got two
    different scales'), and so does symnet's nnet3-compute (the corpus's rejected/b10_switch)."""
    from symnet._src.kaldi.compute.nnet3_compute import Nnet3Computer
    from symnet._src.kaldi.text.scales import check_descriptor_scales

    net = parse_network(
        f"input-node name=a dim=2\ninput-node name=b dim=2\noutput-node name=output input=Append(b, {text})\n",
        file="two-scales.config",
    )
    assert net.context("output") is not None
    with pytest.raises(SymnetError, match=r"output-node output: .* node 'a' with two different scales") as info:
        check_descriptor_scales(net)
    assert "two-scales.config:3" in str(info.value)
    with pytest.raises(SymnetError, match="two different scales"):
        Nnet3Computer(net)
    check_descriptor_scales(
        parse_network(
            "input-node name=a dim=2\noutput-node name=output input="
            "Append(a, Scale(2, a), Switch(Scale(3, a), Offset(Scale(3, a), 1)))\n"
        )
    )


# ----- errors with columns and carets -------------------------------------------------------------


def caret_column(error: ConfigError) -> int:
    """The column the caret in str(error) points at (1-based), read back from the message text."""
    lines = str(error).split("\n")
    return lines[2].index("^") - 4 + 1


@pytest.mark.parametrize(
    "line, token",
    [
        ("input-node name=input dim=x12", "x12"),
        ("input-node name=input dim=0", "0"),
        ("input-node name=input dim=12 foo=bar", "foo"),
        ("input-node name=2input dim=12", "2input"),
        ("inputnode name=input dim=12", "inputnode"),
        ("component-node name=a component=b input=Append(x, Offset(y, 1.5))", "1.5"),
        ("component-node name=a component=b input=Append(x, y", "<end>"),
        ("component-node name=a component=b input=Append(x y)", "y)"),
        ("component-node name=a component=b input=Offset(x, -1) junk", "junk"),
        ("component-node name=a component=b input=Offset x, -1)", "x,"),
        ("component-node name=a component=b input=Append(x, $y)", "$y"),
        ("component-node name=a component=b input=ReplaceIndex(x, n, 0)", "n,"),
        ("component-node name=a component=b input=Append(x, , y)", ", y"),
        ("component-node name=a component=b input=Append()", ")"),
        ("output-node name=out input=x objective=softmax", "softmax"),
        ("output-node name=out input=x dim=3", "dim"),
        ("dim-range-node name=r input-node=x dim-offset=-1 dim=3", "-1"),
        ("component name=c type='Affine", "Affine"),
        ("component name=c type=Affine dim", "dim"),
        ("component name=c junk type=Affine", "junk"),
        ("component-node name=a component=b input=Sum(Offset(x, 99999999999), y)", "99999999999"),
    ],
)
def test_error_columns(line, token):
    with pytest.raises(ConfigError) as info:
        parse_config("# header\n" + line + "  # comment\n", file="bad.config")
    error = info.value
    assert error.file == "bad.config" and error.line == 2 and error.text == line + "  # comment"
    expected = len(line) + 1 if token == "<end>" else line.rindex(token) + 1
    if token == "Affine":  # the error is at the opening quote
        expected -= 1
    assert error.column == expected, str(error)
    assert caret_column(error) == expected


def test_missing_options_point_at_end_of_line():
    for line in (
        "input-node name=input",
        "component-node name=a input=x",
        "component type=X",
        "dim-range-node name=r input-node=x dim=3",
        "output-node name=o",
    ):
        with pytest.raises(ConfigError) as info:
            parse_line(line + "   # c")
        assert info.value.column == len(line) + 1
        assert "missing option" in info.value.message


# ----- typed options ---------------------------------------------------------------------------


def test_option_reader_kaldi_rules():
    line = parse_line(
        "component name=c type=T a=12 b=-3 f=1e-3 g=inf t=True u=false v=yes l=1,-2:3,,4 e= s=hello w=1_0"
    )
    r = line.reader()
    assert r.get_int("a") == 12 and r.get_int("b") == -3
    assert r.get_float("f") == 1e-3 and r.get_float("g") == float("inf")
    assert r.get_bool("t") is True and r.get_bool("u") is False
    assert r.get_ints("l") == (1, -2, 3, 4) and r.get_ints("e") == ()
    assert r.get_str("s") == "hello"
    assert r.get_int("missing", 7) == 7 and r.get_float("missing", None) is None
    with pytest.raises(ConfigError) as info:
        r.get_bool("v")
    assert info.value.column == line.source.value_column("v")
    with pytest.raises(ConfigError):
        r.get_int("w")  # Python's int() would take 1_0; Kaldi's strtoll does not
    with pytest.raises(ConfigError) as info:
        r.get_int("nope")
    assert "missing option nope" in info.value.message
    with pytest.raises(ConfigError) as info:
        r.finish()
    assert info.value.message.startswith("Could not process these elements in initializer: v=yes")
    assert info.value.column == line.source.key_column("v")


@pytest.mark.parametrize(
    "value, ok",
    [
        ("12", 12),
        (" 12 ", 12),
        ("+3", 3),
        ("2147483647", 2**31 - 1),
        ("2147483648", None),
        ("1.0", None),
        ("0x10", None),
        ("", None),
    ],
)
def test_parse_int(value, ok):
    assert parse_int(value) == ok


@pytest.mark.parametrize(
    "value, ok",
    [
        ("1", 1.0),
        (".5", 0.5),
        ("5.", 5.0),
        ("-1e-3", -1e-3),
        ("INF", float("inf")),
        ("-Infinity", float("-inf")),
        ("1e39", None),
        ("1e", None),
        ("0x1p3", None),
        ("1.5abc", None),
        ("", None),
    ],
)
def test_parse_real(value, ok):
    assert parse_real(value) == ok


def test_int_vector_error_points_at_item():
    line = parse_line("component name=c type=T time-offsets=-1,x,1")
    with pytest.raises(ConfigError) as info:
        line.reader().get_ints("time-offsets")
    assert info.value.column == line.source.text.index("x,1") + 1


# ----- merging and checking ---------------------------------------------------------------------


def test_merge_config_kaldi_rules():
    existing = parse_config(DOC_EXAMPLE)
    new = parse_config(
        "component name=relu1 type=SigmoidComponent dim=65\n"
        "component name=extra type=RectifiedLinearComponent dim=115\n"
        "component-node name=extra component=extra input=affine2\n"
        "output-node name=output input=extra objective=quadratic\n"
    )
    merged = merge_config(existing, new)
    names = [(line.kind, line.name) for line in merged]
    assert names[:4] == [
        ("component", "affine1"),
        ("component", "relu1"),
        ("component", "affine2"),
        ("component", "logsoftmax"),
    ]
    assert merged[1].type == "SigmoidComponent"  # replaced where it stood
    assert names[-3:] == [("component", "extra"), ("component-node", "extra"), ("output-node", "output")]
    assert names.count(("output-node", "output")) == 1 and merged[-1].objective == "quadratic"
    check_config(merged)
    for twice in (
        "component name=a type=X\ncomponent name=a type=Y\n",
        "input-node name=a dim=3\noutput-node name=a input=x\n",
    ):
        with pytest.raises(ConfigError) as info:
            merge_config(existing, parse_config(twice))
        assert info.value.line == 2 and "appears twice" in info.value.message


@pytest.mark.parametrize(
    "extra, fragment",
    [
        ("component-node name=bad component=nothere input=input\n", "no component named nothere"),
        ("component-node name=bad component=relu1 input=Append(input, output)\n", "output, which is an output-node"),
        ("component-node name=bad component=relu1 input=Offset(nowhere, 1)\n", "nowhere, which is no"),
        ("component-node name=bad component=relu1 input=affine2_input\n", "affine2_input, which is no"),
        ("input-node name=nonlin1_input dim=3\n", "hidden input node"),
        ("dim-range-node name=r input-node=output dim-offset=0 dim=1\n", "input-node output is not"),
        ("input-node name=input dim=3\n", "node name input is defined twice"),
        ("component name=relu1 type=X\n", "component name relu1 is defined twice"),
    ],
)
def test_check_config_errors(extra, fragment):
    lines = parse_config(DOC_EXAMPLE + extra)
    with pytest.raises(ConfigError) as info:
        check_config(lines)
    assert fragment in info.value.message
    assert info.value.line == DOC_EXAMPLE.count("\n") + 1


def test_check_config_points_at_the_reference():
    lines = parse_config(DOC_EXAMPLE + "component-node name=bad component=relu1 input=Sum(input, Offset(nowhere, 1))\n")
    with pytest.raises(ConfigError) as info:
        check_config(lines)
    assert info.value.column == lines[-1].source.text.index("nowhere") + 1


def test_check_config_needs_inputs_and_outputs():
    with pytest.raises(ConfigError, match="no output-node"):
        check_config(parse_config("input-node name=input dim=3\n"))
    with pytest.raises(ConfigError, match="no input-node"):
        check_config([OutputNode(name="o", descriptor=Ref("x"))])


# ----- properties: round trips and robustness -------------------------------------------------------

_NAMES = st.sampled_from(["input", "x", "lstm1.c", "tdnn_2", "ivector"])
_INTS = st.integers(-5, 5)


def _descriptor_texts() -> st.SearchStrategy[str]:
    """Descriptor text from Kaldi's grammar, including combinations Kaldi rejects."""
    leaf = st.one_of(
        _NAMES, st.builds("Const({}, {})".format, st.sampled_from(["0", "1", "-2.5", "0.1"]), st.integers(1, 4))
    )

    def extend(inner):
        args = st.lists(inner, min_size=1, max_size=3).map(", ".join)
        return st.one_of(
            st.builds("Append({})".format, args),
            st.builds("Sum({})".format, args),
            st.builds("Switch({})".format, args),
            st.builds("IfDefined({})".format, inner),
            st.builds("Failover({}, {})".format, inner, inner),
            st.builds("Offset({}, {})".format, inner, _INTS),
            st.builds("Offset({}, {}, {})".format, inner, _INTS, _INTS),
            st.builds("Round({}, {})".format, inner, st.integers(1, 4)),
            st.builds("ReplaceIndex({}, {}, {})".format, inner, st.sampled_from("tx"), _INTS),
            st.builds("Scale({}, {})".format, st.sampled_from(["2", "0.5", "-1", "0.66", "1"]), inner),
        )

    return st.recursive(leaf, extend, max_leaves=8)


@settings(max_examples=400, deadline=None, suppress_health_check=[HealthCheck.too_slow])
@given(_descriptor_texts())
def test_descriptor_round_trip(text):
    try:
        layer = d(text)
    except ConfigError:
        return
    written = write_descriptor(layer)
    assert d(written) == layer
    assert write_descriptor(d(written)) == written
    assert normalize_descriptor(layer) == layer
    line = f"component-node name=n component=c input={text}"
    parsed = parse_config(line)
    assert parse_config(write_config(parsed)) == parsed


def _mutate(text: str, rng: random.Random) -> str:
    """A random edit of the kind a person makes: characters, tokens, parentheses, commas."""
    chars = list(text)
    for _ in range(rng.randint(1, 4)):
        kind = rng.randrange(7)
        i = rng.randrange(len(chars) + 1)
        if kind == 0 and chars:  # delete a character
            del chars[min(i, len(chars) - 1)]
        elif kind == 1:  # insert a character
            chars.insert(i, rng.choice("(),=#' \t\"-.0123456789abcxtAppendSumOffset_\n\r\x00é"))
        elif kind == 2 and chars:  # replace a character
            chars[min(i, len(chars) - 1)] = rng.choice("(),= x1-.'")
        elif kind == 3:  # duplicate a parenthesis or comma
            spots = [j for j, c in enumerate(chars) if c in "(),"]
            if spots:
                j = rng.choice(spots)
                chars.insert(j, chars[j])
        elif kind == 4:  # drop a whitespace-separated token
            words = "".join(chars).split(" ")
            if len(words) > 1:
                del words[rng.randrange(len(words))]
            chars = list(" ".join(words))
        elif kind == 5:  # insert a keyword or number
            word = rng.choice(
                [
                    "Append(",
                    "Sum(",
                    "Offset(",
                    "IfDefined(",
                    "Scale(2, ",
                    "Const(1, 3)",
                    "Switch(",
                    "Round(",
                    "ReplaceIndex(",
                    ", -1)",
                    "Failover(",
                    "9999999999",
                    "1e40",
                    "nan",
                    "==",
                ]
            )
            chars[i:i] = word
        else:  # swap two characters
            if len(chars) > 1:
                j = rng.randrange(len(chars))
                chars[i - 1 if i else 0], chars[j] = chars[j], chars[i - 1 if i else 0]
    return "".join(chars)


@settings(max_examples=600, deadline=None, suppress_health_check=[HealthCheck.too_slow])
@given(st.sampled_from(EXAMPLES), st.integers(0, 2**32 - 1))
def test_mutated_configs_parse_or_raise_config_error(text, seed):
    rng = random.Random(seed)
    lines = text.split("\n")
    k = rng.randrange(len(lines))
    lines[k] = _mutate(lines[k], rng)
    mutated = "\n".join(lines)
    try:
        parsed = parse_config(mutated)
    except ConfigError as e:
        assert 1 <= e.line <= len(mutated.split("\n")) and e.column >= 1
        str(e)
        return
    assert parse_config(write_config(parsed)) == parsed
    try:
        check_config(parsed)
    except ConfigError:
        pass


@settings(max_examples=300, deadline=None)
@given(st.text(alphabet="(),= \t#'\"-.0123456789xtAppendSumOffsetIfDefinedScaleConstRound_", max_size=60))
def test_random_descriptor_text_parses_or_raises_config_error(text):
    try:
        layer = d(text)
    except ConfigError:
        return
    assert d(write_descriptor(layer)) == layer


def test_deep_nesting_is_a_config_error_not_recursion_error():
    deep = "Offset(" * 500 + "x" + ", 1)" * 500
    with pytest.raises(ConfigError, match="nested"):
        d(deep)
    wide = "Sum(" + ", ".join(["x"] * 400) + ")"
    with pytest.raises(ConfigError, match="nested"):
        d(wide)
    assert write_descriptor(d("Sum(" + ", ".join(["x"] * 50) + ")")).count("Sum(") == 49


def test_an_option_given_twice_keeps_its_first_value_as_kaldi_does():
    """Kaldi's ConfigLine keeps the first value (its xconfig writes max-change twice for a bottleneck output)."""
    with pytest.warns(UserWarning, match=r"bad.config:2:30: option dim is given twice; as Kaldi, the first value 12"):
        lines = parse_config("# header\ninput-node name=input dim=12 dim=13\n", file="bad.config")
    assert lines[0].dim == 12


def test_a_line_repeating_an_option_many_times_warns_once():
    """A crafted line with a key repeated 100,000 times: one warning that counts them, read in linear time."""
    line = "input-node name=input dim=3 " + "dim=4 " * 100_000 + "\n"
    with warnings.catch_warnings(record=True) as caught:
        warnings.simplefilter("always")
        lines = parse_config(line, file="big.config")
    assert lines[0].dim == 3
    assert len(caught) == 1
    assert "option dim is given twice" in str(caught[0].message)
    assert "(and 99999 more repeated options)" in str(caught[0].message)


def test_a_dim_beyond_int32_says_the_range_and_no_made_up_place():
    """Before: `<config>:0:0: dim=2147483648 must be an integer >= 1` for a line built in Python."""
    with pytest.raises(ConfigError) as e:
        InputNode(name="input", dim=2**31)
    assert str(e.value) == "dim=2147483648 must be an integer from 1 to 2147483647 (Kaldi's int32)"
    with pytest.raises(ConfigError, match=r"^big.config:1:\d+: option dim='2147483648' is beyond Kaldi's int32"):
        parse_config("input-node name=input dim=2147483648\n", file="big.config")
