"""symnet._src.engine.inspect, the engine names display reads: structure, dims, row reads of a planned Computation.

References are independent of the code under test: reachability by brute force
for strongly connected groups, graphlib for acyclicity, the shapes of the values
a compiled Computation actually produces for dims, and Kaldi's descriptor rules
written out by hand for which rows are read.
"""

from __future__ import annotations

import graphlib

import jax.numpy as jnp
import numpy as np
import pytest

from helpers import EXAMPLES, nets
from symnet import (
    Append,
    ComputationRequest,
    Failover,
    Identity,
    IfDefined,
    IndexSet,
    Input,
    Network,
    Node,
    Normal,
    Offset,
    Ref,
    ReplaceIndex,
    Round,
    ShapeError,
    Tanh,
    Weight,
    compile,
)
from symnet._src.core.index import decode
from symnet._src.engine.context import output_name
from symnet._src.engine.graph import Graph, shifts_time
from symnet._src.engine.inspect import (
    input_reads,
    node_dims,
    node_id,
    operand_reads,
    recurrent_edges,
    strongly_connected_groups,
    topological_order,
)
from symnet.errors import GraphError, PlanError
from symnet.kaldi import COMPONENTS, read_network


def tdnn():
    x = Input("input", 4)
    return nets.tdnn(
        x, hidden=8, out=5, second=(-2, 0, 2), names=("w1", "w2"), node="tdnn1", scale=0.3, log_softmax=True
    )


def rnn():
    return Network(nets.rnn(Input("input", 3), 3, 5, names=("wx", "wh"), scale=(0.3, 0.2)))


def bidirectional():
    x = Input("input", 2)
    fw = nets.rnn(x, 2, 3, lag=-1, name="fw", scale=(0.4, 0.3))
    bw = nets.rnn(x, 2, 3, lag=+1, name="bw", scale=(0.4, 0.3))
    return Network(Append(fw, bw))


def stats():
    x = Input("input", 3)
    ext = Node(
        "ext",
        COMPONENTS["StatisticsExtractionComponent"](
            "ext", {"input-dim": 3, "input-period": 1, "output-period": 3, "include-variance": True}, x
        ),
    )
    pool = Node(
        "pool",
        COMPONENTS["StatisticsPoolingComponent"](
            "pool",
            {
                "input-dim": 7,
                "input-period": 3,
                "left-context": 3,
                "right-context": 6,
                "num-log-count-features": 2,
                "output-stddevs": True,
            },
            ext,
        ),
    )
    return Network(pool)


def graph_of(net):
    return Graph(dict(net.structure.outputs))


def nid_of(graph, layer):
    return graph.ids[graph.key(graph.resolve(layer))]


def reaches(graph, a, b):
    """Whether there is a path of operand edges from node a to node b (brute force)."""
    seen, stack = set(), [a]
    while stack:
        n = stack.pop()
        for op in graph.operands[n]:
            if op == b:
                return True
            if op not in seen:
                seen.add(op)
                stack.append(op)
    return False


# ----- graph names made public ---------------------------------------------------------------------


def test_shifts_time():
    x = Identity()
    assert shifts_time(Offset(x, -1)) and shifts_time(Offset(x, 2))
    assert not shifts_time(Offset(x, 0)) and not shifts_time(Offset(x, 0, 1))
    assert shifts_time(Round(x, 2)) and not shifts_time(Round(x, 1))
    assert shifts_time(ReplaceIndex(x, "t", 0)) and not shifts_time(ReplaceIndex(x, "x", 0))
    assert not shifts_time(Append(x, x)) and not shifts_time(Tanh(x))


def test_graph_key_and_resolve():
    net = rnn()
    g = graph_of(net)
    h = g.named["h"]
    assert g.resolve(Ref("h")) is h
    assert g.key(Identity()) == g.key(Input("input", 7))  # inputs are keyed by name, not dim
    assert g.ids[g.key(Input("input", 3))] == g.inputs["input"]
    with pytest.raises(GraphError, match="Ref\\('nope'\\) names no node"):
        g.resolve(Ref("nope"))


def test_output_name():
    assert output_name(tdnn(), None) == "output"
    net = Network({"a": Identity() * 2.0})
    assert output_name(net, None) == "a"
    two = Network({"a": Identity() * 2.0, "b": Identity() * 3.0})
    assert output_name(two, "b") == "b"
    with pytest.raises(PlanError, match="name the one you want"):
        output_name(two, None)
    with pytest.raises(PlanError, match="no output 'c'"):
        output_name(two, "c")


# ----- graph structure ---------------------------------------------------------------------------


@pytest.mark.parametrize("make", [tdnn, rnn, bidirectional])
def test_strongly_connected_groups_match_reachability(make):
    g = graph_of(make())
    groups = strongly_connected_groups(g)
    assert sorted(n for group in groups for n in group) == list(range(len(g.layers)))
    group_of = {n: i for i, group in enumerate(groups) for n in group}
    for a in range(len(g.layers)):
        for b in range(len(g.layers)):
            mutual = a == b or (reaches(g, a, b) and reaches(g, b, a))
            assert (group_of[a] == group_of[b]) == mutual, (a, b)
    position = {i: k for k, group in enumerate(groups) for i in group}
    for a, ops in enumerate(g.operands):  # operands' groups come first
        for op in ops:
            assert position[op] <= position[a]


def test_recurrent_edges():
    assert recurrent_edges(graph_of(tdnn())) == set()
    g = graph_of(rnn())
    h = g.ids[g.named["h"]]
    back = nid_of(g, Offset(Ref("h"), -1))
    assert recurrent_edges(g) == {(back, h)}
    g = graph_of(bidirectional())
    edges = recurrent_edges(g)
    assert edges == {
        (nid_of(g, Offset(Ref("fw"), -1)), g.ids[g.named["fw"]]),
        (nid_of(g, Offset(Ref("bw"), 1)), g.ids[g.named["bw"]]),
    }


@pytest.mark.parametrize("make", [tdnn, rnn, bidirectional])
def test_topological_order_without_recurrent_edges(make):
    g = graph_of(make())
    back = recurrent_edges(g)
    sorter = graphlib.TopologicalSorter(
        {n: [op for op in ops if (n, op) not in back] for n, ops in enumerate(g.operands)}
    )
    sorter.prepare()  # raises CycleError if the recurrent edges did not break every cycle
    order = topological_order(g)
    assert sorted(order) == list(range(len(g.layers)))
    place = {n: i for i, n in enumerate(order)}
    for n, ops in enumerate(g.operands):
        for op in ops:
            if (n, op) not in back:
                assert place[op] < place[n]
    assert topological_order(graph_of(make())) == order  # the same for an equal graph


# ----- dims --------------------------------------------------------------------------------------


def run_shapes(net, request):
    """The shape of every value a compiled run produces, by node id: the reference for node_dims."""
    computation = compile(net, request)
    g = computation.graph
    rng = np.random.default_rng(0)
    values = {
        name: jnp.asarray(rng.standard_normal((len(s), g.input_dims[name])), jnp.float32)
        for name, s in request.inputs.items()
    }
    shapes = {}
    for tape in computation.forward(net, values).values():
        for node in tape.nodes():
            key = g.key(node.layer)
            if key in g.ids:
                shapes[g.ids[key]] = tuple(node.value.shape)
    return g, shapes


@pytest.mark.parametrize(
    "make,t_out",
    [
        (tdnn, (0, 4)),
        (rnn, (0, 4)),
        (bidirectional, (0, 4)),
        (stats, range(0, 9, 3)),
        (lambda: read_network(EXAMPLES / "tdnnf.config"), (0, 4)),
        (lambda: read_network(EXAMPLES / "lstm.config"), (0, 4)),
        (lambda: read_network(EXAMPLES / "kaldi-doc-example.config"), (0, 4)),
    ],
)
def test_node_dims_equal_the_dims_of_a_run(make, t_out):
    net = make()
    g0 = graph_of(net)
    request = ComputationRequest(
        inputs={k: IndexSet.range(n=2, t=(-20, 30)) for k in g0.inputs},
        outputs={"output": IndexSet.range(n=2, t=t_out)},
    )
    g, shapes = run_shapes(net, request)
    dims = node_dims(g)
    assert len(shapes) > 3
    for nid, shape in shapes.items():
        assert dims[nid] == (shape[-1] if g.indexed[nid] else shape), (nid, g.describe(nid))


def test_node_dims_through_a_recurrence_and_without_a_run():
    net = rnn()
    g = graph_of(net)
    dims = node_dims(g)
    h_group = next(group for group in strongly_connected_groups(g) if len(group) > 1)
    assert all(dims[m] == 5 for m in h_group)  # inside the scan: no tape to read them from
    assert dims[g.inputs["input"]] == 3
    assert dims[nid_of(g, Weight(Normal((5, 5), 0.2), name="wh"))] == (5, 5)
    # unindexed nodes have shapes; an input of unknown dim leaves its users unknown unless a matrix fixes them
    w = Weight(Normal((3, 4), 0.3), name="a")
    net = Network(Identity() @ Tanh(w * 2.0) + Weight(Normal((4,), 0.1), name="b"))
    g = graph_of(net)
    dims = node_dims(g)
    assert dims[g.inputs["input"]] is None
    assert dims[nid_of(g, Tanh(w * 2.0))] == (3, 4)
    assert dims[g.outputs["output"]] == 4


def test_node_dims_unknown_where_shapes_do_not_fit():
    """The views of an expression that does not fit (a Network refuses to be built of it, naming the layer)."""
    x = Input("input", 3)
    product = x @ Weight(Normal((4, 2), 0.1), name="w")  # 3 columns times 4 rows
    g = Graph({"output": Tanh(product)})
    assert node_dims(g)[nid_of(g, product)] is None
    with pytest.raises(ShapeError, match="dim 3, the matrix has 4 rows"):
        Network(Tanh(product))
    g = Graph({"output": Tanh(x @ Weight(Normal((3, 2), 0.1), name="w")) + Offset(x, 1)})
    dims = node_dims(g)
    assert dims[nid_of(g, Offset(x, 1))] == 3
    assert dims[g.operands[g.outputs["output"]][0]] == 2
    assert dims[g.outputs["output"]] is None  # 2 plus 3 columns


# ----- node ids ----------------------------------------------------------------------------------


def test_node_id():
    net = tdnn()
    g = graph_of(net)
    x = Input("input", 4)
    assert node_id(g, "output") == g.outputs["output"]
    assert node_id(g, "input") == g.inputs["input"]
    assert node_id(g, "tdnn1") == g.ids[g.named["tdnn1"]]
    assert node_id(g, np.int64(2)) == 2
    assert g.layers[node_id(g, Offset(x, -1))] == Offset(x, -1)
    assert node_id(g, Identity()) == g.inputs["input"]
    with pytest.raises(PlanError, match="no node #99"):
        node_id(g, 99)
    with pytest.raises(PlanError, match="no output, input or Node named 'nope'"):
        node_id(g, "nope")
    with pytest.raises(PlanError, match=r"Offset\(Input\('input', 4\), 5\) is not a node"):
        node_id(g, Offset(x, 5))
    with pytest.raises(PlanError, match="3.5 is not a node"):
        node_id(g, 3.5)


# ----- rows read ---------------------------------------------------------------------------------


def keys_of(computation, nid, positions):
    return [tuple(int(v) for v in i) for i in zip(*decode(computation.rows[nid].keys[positions]), strict=True)]


def test_operand_reads_of_descriptors():
    x = Input("input", 1)
    net = Network(Append(IfDefined(Offset(x, -1)), Failover(Offset(x, 1), x)))
    c = compile(
        net,
        ComputationRequest(inputs={"input": IndexSet.range(n=1, t=3)}, outputs={"output": IndexSet.range(n=1, t=3)}),
    )
    g = c.graph
    offset_back, ifdefined = nid_of(g, Offset(x, -1)), nid_of(g, IfDefined(Offset(x, -1)))
    failover, offset_fwd = nid_of(g, Failover(Offset(x, 1), x)), nid_of(g, Offset(x, 1))
    # Offset(x, -1) computes t = 1, 2 and reads x at t - 1
    (r,) = operand_reads(c, offset_back)
    assert keys_of(c, offset_back, r.rows) == [(0, 1, 0), (0, 2, 0)]
    assert keys_of(c, r.operand, r.sources) == [(0, 0, 0), (0, 1, 0)]
    # IfDefined reads its operand where it exists (t = 1, 2), nothing (zeros) at t = 0
    (r,) = operand_reads(c, ifdefined)
    assert r.operand == offset_back
    assert keys_of(c, ifdefined, r.rows) == [(0, 1, 0), (0, 2, 0)]
    assert keys_of(c, offset_back, r.sources) == [(0, 1, 0), (0, 2, 0)]
    # Failover: the first branch where it is computable (t = 0, 1), else the second (t = 2)
    first, second = operand_reads(c, failover)
    assert (first.operand, second.operand) == (offset_fwd, g.inputs["input"])
    assert keys_of(c, failover, first.rows) == [(0, 0, 0), (0, 1, 0)]
    assert keys_of(c, failover, second.rows) == [(0, 2, 0)]
    assert keys_of(c, second.operand, second.sources) == [(0, 2, 0)]
    assert operand_reads(c, g.inputs["input"]) == []
    (read,) = input_reads(c).items()
    assert read[0] == g.inputs["input"] and np.array_equal(read[1], c.rows[g.inputs["input"]].keys)


def test_operand_reads_inside_a_scan():
    net = rnn()
    c = compile(
        net,
        ComputationRequest(inputs={"input": IndexSet.range(n=2, t=4)}, outputs={"output": IndexSet.range(n=2, t=4)}),
    )
    g = c.graph
    back = nid_of(g, Offset(Ref("h"), -1))
    (r,) = operand_reads(c, back)  # a member of the scanned group
    assert r.operand == g.ids[g.named["h"]]
    assert keys_of(c, back, r.rows) == [(0, t, 0) for t in (1, 2, 3)]
    assert keys_of(c, r.operand, r.sources) == [(0, t, 0) for t in (0, 1, 2)]


def test_operand_reads_of_an_indexed_layer_follow_kaldi_pooling():
    net = stats()
    c = compile(
        net,
        ComputationRequest(
            inputs={"input": IndexSet.range(n=1, t=(-3, 12))}, outputs={"output": IndexSet.range(n=1, t=range(0, 9, 3))}
        ),
    )
    g = c.graph
    pool = g.operands[g.outputs["output"]][0]
    (r,) = operand_reads(c, pool)
    ext = r.operand
    ext_frames = set(decode(c.rows[ext].keys)[1].tolist())
    for row, t in enumerate(decode(c.rows[pool].keys)[1].tolist()):
        # Kaldi: pooling output t reads t + o for o = -left .. right in steps of input-period, where computable
        want = [u for u in range(t - 3, t + 6 + 1, 3) if u in ext_frames]
        got = sorted(decode(c.rows[ext].keys[r.sources[r.rows == row]])[1].tolist())
        assert got == want, t


def test_input_reads_are_the_frames_used_not_offered():
    x = Input("input", 3)
    net = Network(Append(Offset(x, -2), x, Offset(x, 2)) @ Weight(Normal((9, 4), 0.1), name="w"))
    c = compile(
        net,
        ComputationRequest(
            inputs={"input": IndexSet.range(n=1, t=(-2, 3))}, outputs={"output": IndexSet.range(n=1, t=1)}
        ),
    )
    read = input_reads(c)
    assert list(read) == [c.graph.inputs["input"]]
    assert decode(read[c.graph.inputs["input"]])[1].tolist() == [-2, 0, 2]
    assert len(c.rows[c.graph.inputs["input"]]) == 5  # offered: -2 .. 2
    c = compile(
        tdnn(),
        ComputationRequest(
            inputs={"input": IndexSet.range(n=1, t=(-5, 6))}, outputs={"output": IndexSet.range(n=1, t=1)}
        ),
    )
    assert decode(input_reads(c)[c.graph.inputs["input"]])[1].tolist() == list(range(-3, 4))
