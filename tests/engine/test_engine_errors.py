"""Bad input to the Index engine: every mistake raises a symnet error that names what is at fault.

Where a layer is at fault, the message must also point at the line of this
file that built it (`next_line()` gives the `file:line` of the line after the
call, where the test builds the layer).
"""

from __future__ import annotations

import os
import sys

import numpy as np
import pytest

import symnet
from symnet import Weight
from symnet._src.core.descriptor import (
    Append,
    Const,
    DimRange,
    Failover,
    IfDefined,
    Input,
    Node,
    Offset,
    Ref,
    ReplaceIndex,
    Round,
    Sum,
    Switch,
)
from symnet._src.core.index import IndexSet
from symnet.engine import ComputationRequest, compile
from symnet.errors import DescriptorError, GraphError, PlanError, ShapeError, SymnetError

x = Input("input", 2)
THIS_FILE = os.path.basename(__file__)


def next_line() -> str:
    """`file:line` of the line after the caller's: where the test builds the layer at fault."""
    frame = sys._getframe(1)
    return f"{frame.f_code.co_filename}:{frame.f_lineno + 1}"


def frames(n=2, t=(0, 4)) -> IndexSet:
    return IndexSet.range(n=n, t=t)


def plan(expr, inputs=None, outputs=None):
    net = expr if isinstance(expr, symnet.Network) else symnet.Network(expr)
    inputs = {"input": frames()} if inputs is None else inputs
    outputs = {"output": frames()} if outputs is None else outputs
    return net, compile(net, ComputationRequest(inputs=inputs, outputs=outputs))


def run(expr, inputs=None, outputs=None, values=None):
    net, comp = plan(expr, inputs, outputs)
    values = {"input": np.zeros((8, 2))} if values is None else values
    return comp(net, values)


# ----- inputs: names ------------------------------------------------------------------------------


def test_request_provides_an_input_the_network_lacks():
    with pytest.raises(PlanError) as err:
        plan(Offset(x, 1), inputs={"input": frames(), "speaker": frames()}, outputs={"output": frames(t=(0, 3))})
    assert "'speaker'" in str(err.value)
    assert "'input'" in str(err.value)  # what the network has


def test_network_reads_an_input_the_request_lacks():
    iv = Input("ivector", 3)
    with pytest.raises(PlanError) as err:
        plan(Append(x, ReplaceIndex(iv, "t", 0)))
    msg = str(err.value)
    assert "'output'" in msg
    assert "'ivector'" in msg
    assert "(0, 0)" in msg  # the missing ivector Index


def test_identity_and_input_are_one_input():
    # Identity() is the input 'input' without a dim: no conflict.
    out = run(Append(x, symnet.Identity()))
    assert out["output"].shape == (8, 4)


def test_input_declared_with_two_dims():
    where = next_line()
    other = Input("input", 3)
    with pytest.raises(GraphError) as err:
        plan(Append(x, other))
    assert "'input'" in str(err.value)
    assert where in str(err.value)


# ----- descriptors built with bad arguments ---------------------------------------------------------


@pytest.mark.parametrize("modulus", [0, -3])
def test_round_modulus_must_be_positive(modulus):
    with pytest.raises(DescriptorError) as err:
        where = next_line()
        Round(x, modulus)
    assert "Round" in str(err.value) and str(modulus) in str(err.value)
    assert where in str(err.value)


def test_switch_needs_a_part():
    with pytest.raises(DescriptorError) as err:
        where = next_line()
        Switch()
    assert "Switch" in str(err.value)
    assert where in str(err.value)


@pytest.mark.parametrize("what", [Append, Sum])
def test_append_and_sum_need_a_part(what):
    with pytest.raises(DescriptorError) as err:
        where = next_line()
        what()
    assert what.__name__ in str(err.value)
    assert where in str(err.value)


@pytest.mark.parametrize("variable", ["n", "y", "T"])
def test_replace_index_replaces_only_t_or_x(variable):
    with pytest.raises(DescriptorError) as err:
        where = next_line()
        ReplaceIndex(x, variable, 0)
    assert repr(variable) in str(err.value)
    assert where in str(err.value)


@pytest.mark.parametrize(
    "build",
    [
        lambda: Offset(x, 1.5),
        lambda: Offset(x, 1, "2"),
        lambda: Input("input", 0),
        lambda: Const(1.0, 0),
        lambda: Const("a", 2),
        lambda: DimRange(x, -1, 1),
        lambda: DimRange(x, 0, 0),
        lambda: ReplaceIndex(x, "t", 0.5),
        lambda: Round(x, True),
        lambda: Node("", x),
        lambda: Ref(3),
    ],
    ids=[
        "offset-float",
        "offset-x-str",
        "input-dim0",
        "const-dim0",
        "const-str",
        "dimrange-neg",
        "dimrange-0",
        "replace-float",
        "round-bool",
        "node-empty-name",
        "ref-int",
    ],
)
def test_bad_descriptor_arguments(build):
    with pytest.raises(DescriptorError) as err:
        build()
    assert THIS_FILE in str(err.value)  # the lambda's line, in this file


# ----- input matrices ---------------------------------------------------------------------------------


@pytest.mark.parametrize("shape", [(7, 2), (9, 2), (8, 3), (8, 1), (8,), (8, 2, 1)])
def test_input_matrix_of_the_wrong_shape(shape):
    with pytest.raises(ShapeError) as err:
        run(Offset(x, 1), outputs={"output": frames(t=(0, 3))}, values={"input": np.zeros(shape)})
    msg = str(err.value)
    assert "'input'" in msg
    assert str(tuple(shape)) in msg and "(8, 2)" in msg


def test_input_matrix_missing():
    with pytest.raises(PlanError) as err:
        run(Offset(x, 1), outputs={"output": frames(t=(0, 3))}, values={})
    assert "'input'" in str(err.value)


def test_input_matrix_not_in_the_request():
    with pytest.raises(PlanError) as err:
        run(
            Offset(x, 1),
            outputs={"output": frames(t=(0, 3))},
            values={"input": np.zeros((8, 2)), "speaker": np.zeros((8, 2))},
        )
    assert "'speaker'" in str(err.value)


# ----- outputs ---------------------------------------------------------------------------------------


def test_request_for_an_output_the_network_lacks():
    net = symnet.Network({"scores": Offset(x, 1)})
    with pytest.raises(PlanError) as err:
        plan(net, outputs={"output": frames(t=(0, 3))})
    assert "'output'" in str(err.value)
    assert "'scores'" in str(err.value)  # what the network has


def test_uncomputable_output_names_output_and_inputs():
    with pytest.raises(PlanError) as err:
        plan(Append(Offset(x, -1), x))
    msg = str(err.value)
    assert "'output'" in msg and "(0, 0)" in msg and "(0, -1)" in msg


# ----- graphs: references and cycles -----------------------------------------------------------------


def test_ref_to_an_unknown_node():
    where = next_line()
    bad = Ref("nope")
    with pytest.raises(GraphError) as err:
        plan(Append(Node("h", x), bad))
    msg = str(err.value)
    assert "'nope'" in msg
    assert "h" in msg  # the nodes there are
    assert where in msg


def test_cycle_with_no_time_offset():
    where = next_line()
    body = x + Ref("h")
    with pytest.raises(GraphError) as err:
        plan(Node("h", body))
    msg = str(err.value)
    assert "cycle" in msg and "h" in msg
    assert where in msg


@pytest.mark.parametrize(
    "build",
    [
        lambda: Node("h", Append(x, Offset(Ref("h"), 0))),
        lambda: Node("h", Sum(x, IfDefined(Round(Ref("h"), 1)))),
        lambda: Node("h", Sum(x, Offset(Ref("h"), 0, 1))),
        lambda: Append(Node("h", Sum(x, Ref("g"))), Node("g", Sum(x, Ref("h")))),
    ],
    ids=["offset-0", "round-1", "x-offset-only", "two-nodes"],
)
def test_cycles_that_keep_t(build):
    with pytest.raises(GraphError) as err:
        plan(build())
    msg = str(err.value)
    assert "cycle" in msg and "h" in msg
    assert THIS_FILE in msg


def test_node_referring_to_itself_is_a_cycle():
    with pytest.raises(GraphError) as err:
        plan(Node("h", Ref("h")))
    assert "h" in str(err.value)


def test_node_referring_to_itself_names_its_line():
    where = next_line()
    h = Node("h", Ref("h"))
    with pytest.raises(GraphError) as err:
        plan(h)
    assert where in str(err.value)


def test_two_different_nodes_with_one_name():
    first = next_line()
    a = Node("h", x)
    second = next_line()
    b = Node("h", Offset(x, 1))
    with pytest.raises(GraphError) as err:
        plan(Append(a, b), outputs={"output": frames(t=(0, 3))})
    msg = str(err.value)
    assert "'h'" in msg and first in msg and second in msg


# ----- shapes -------------------------------------------------------------------------------------------


@pytest.mark.parametrize("what", [Sum, Failover, Switch])
def test_parts_of_different_dims(what):
    # Offset(x, 1) is missing at the last frame, so Failover reads both parts too.
    where = next_line()
    bad = what(Offset(x, 1), Const(1.0, 3)) if what is Failover else what(x, Const(1.0, 3))
    with pytest.raises(ShapeError) as err:
        run(bad)
    assert what.__name__ in str(err.value)
    assert where in str(err.value)


def test_dot_of_the_wrong_shape():
    where = next_line()
    bad = x @ Weight(np.ones((3, 2)))
    with pytest.raises(ShapeError) as err:
        run(bad)
    assert "Dot" in str(err.value)
    assert where in str(err.value)


def test_dim_range_beyond_the_dim():
    where = next_line()
    bad = DimRange(x, 1, 2)
    with pytest.raises(ShapeError) as err:
        run(bad)
    assert "DimRange" in str(err.value)
    assert where in str(err.value)


# ----- recurrences --------------------------------------------------------------------------------------


def _rec(body_of_h):
    return Node("h", body_of_h(IfDefined(Offset(Ref("h"), -1))))


@pytest.mark.parametrize("kind", ["dot", "sum", "times"])
def test_shape_error_inside_a_recurrence(kind):
    bad = {
        "dot": lambda p: Sum(x, p @ Weight(np.ones((3, 2)))),
        "sum": lambda p: Sum(x, Append(p, x)),
        "times": lambda p: x + p * Weight(np.ones(3)),
    }[kind]
    where = f"{bad.__code__.co_filename}:{bad.__code__.co_firstlineno}"  # the line its layers are built on
    with pytest.raises(ShapeError) as err:
        run(_rec(bad))
    assert where in str(err.value)


def test_dim_range_beyond_the_dim_inside_a_recurrence():
    where = next_line()
    bad = _rec(lambda p: Sum(x, DimRange(p, 1, 2)))
    with pytest.raises(ShapeError) as err:
        run(bad)
    assert where in str(err.value)


def test_recurrence_that_never_starts():
    # h[t] = x[t] + h[t-1] with nothing to start it: no frame is computable (and planning must not recurse
    # once per frame into a RecursionError).
    with pytest.raises(PlanError) as err:
        plan(
            Node("h", Sum(x, Offset(Ref("h"), -1))),
            inputs={"input": frames(t=(0, 3000))},
            outputs={"output": frames(t=(0, 3000))},
        )
    assert "'output'" in str(err.value)
    assert "h" in str(err.value)


def test_recurrence_needs_a_regular_request():
    with pytest.raises(PlanError) as err:
        run(_rec(lambda p: Sum(x, p)), outputs={"output": [(0, 1), (1, 3)]})
    assert "h" in str(err.value)


# ----- requests -------------------------------------------------------------------------------------------


@pytest.mark.parametrize(
    "build",
    [
        lambda: ComputationRequest(inputs={"input": frames()}, outputs={}),
        lambda: ComputationRequest(inputs={"input": frames()}, outputs={"output": []}),
        lambda: ComputationRequest(inputs={"input": frames()}, outputs={"output": [(0, 1), (0, 1)]}),
        lambda: ComputationRequest(inputs={"input": [(0, 1, 2, 3)]}, outputs={"output": frames()}),
        lambda: ComputationRequest(inputs={"input": [(-1, 0)]}, outputs={"output": frames()}),
        lambda: ComputationRequest(inputs={"input": "abc"}, outputs={"output": frames()}),
        lambda: ComputationRequest(inputs={"input": frames()}, outputs={"output": [(0, 1 << 22)]}),
    ],
    ids=["no-outputs", "empty-set", "duplicate", "four-numbers", "negative-n", "string", "t-too-large"],
)
def test_bad_requests(build):
    with pytest.raises(PlanError):
        build()


def test_every_error_is_a_symnet_error():
    for cls in (DescriptorError, GraphError, PlanError, ShapeError):
        assert issubclass(cls, SymnetError)
