"""Rich display (symnet.display): well-formed, self-contained HTML/SVG that shows what it claims."""

from __future__ import annotations

import html
import re
from html.parser import HTMLParser

import jax.numpy as jnp
import numpy as np

from helpers import EXAMPLES, nets
from symnet import (
    Append,
    ComputationRequest,
    Failover,
    Identity,
    IfDefined,
    IndexSet,
    Input,
    Literal,
    Network,
    Node,
    Normal,
    Offset,
    Ref,
    ReLU,
    Tanh,
    Weight,
    compile,
    display,
)

VOID = {"br", "hr", "img", "input", "meta", "link", "col", "wbr", "source", "area", "base", "embed", "param", "track"}


class _Balance(HTMLParser):
    """Checks that every tag is closed, in order; records tags and attributes."""

    def __init__(self):
        super().__init__(convert_charrefs=True)
        self.stack: list[str] = []
        self.errors: list[str] = []
        self.tags: list[tuple[str, dict]] = []
        self.text: list[str] = []

    def handle_starttag(self, tag, attrs):
        self.tags.append((tag, dict(attrs)))
        if tag not in VOID:
            self.stack.append(tag)

    def handle_startendtag(self, tag, attrs):
        self.tags.append((tag, dict(attrs)))

    def handle_endtag(self, tag):
        if tag in VOID:
            return
        if not self.stack or self.stack[-1] != tag:
            self.errors.append(f"</{tag}> closes <{self.stack[-1] if self.stack else None}>")
        else:
            self.stack.pop()

    def handle_data(self, data):
        self.text.append(data)


def check_html(text: str) -> _Balance:
    """Parse; assert balanced tags, no scripts, no URLs other than the SVG namespace, no external CSS."""
    assert isinstance(text, str) and text
    parser = _Balance()
    parser.feed(text)
    parser.close()
    assert not parser.errors, parser.errors[:5]
    assert not parser.stack, f"unclosed tags: {parser.stack}"
    assert "<script" not in text.lower()
    assert "<link" not in text.lower() and "@import" not in text
    urls = re.findall(r"https?://[^\s\"'<>]+", text)
    assert set(urls) <= {"http://www.w3.org/2000/svg"}, urls
    return parser


def visible_text(text: str) -> str:
    return " ".join(check_html(text).text)


def tdnn():
    x = Input("input", 4)
    return nets.tdnn(
        x, hidden=8, out=5, second=(-2, 0, 2), names=("w1", "w2"), node="tdnn1", scale=0.3, log_softmax=True
    )


def rnn():
    return Network(nets.rnn(Input("input", 3), 3, 5, names=("wx", "wh"), scale=(0.3, 0.2)))


# ----- layers -----------------------------------------------------------------------------------


def test_layer_html_shows_the_tree():
    x = Identity()
    expr = (1.0 + x) * Weight(2.0, name="w")
    page = expr._repr_html_()
    check_html(page)
    text = visible_text(page)
    for part in ("Times", "Plus", "Literal 1.0", "Weight 'w'", "x (input)"):
        assert part in text, part
    assert page.count("<details") == 2  # Times and Plus fold; leaves do not
    assert repr(expr) == "(1.0 + x) * Weight(2.0, name='w')"  # the plain-text form is unchanged


def test_layer_html_shows_shared_subtrees_once():
    h = Identity()
    for _ in range(40):  # 2^40 paths
        h = h + h
    page = display.layer_html(h)
    check_html(page)
    assert page.count("(shared: #") == 40
    assert len(page) < 200_000


def test_layer_html_escapes():
    x = Input('a<b>&"c', 2)
    page = display.layer_html(Offset(x, -1))
    check_html(page)
    assert "<b>&" not in page.replace("<b>&amp;", "")
    assert "a&lt;b&gt;&amp;" in page


# ----- networks ---------------------------------------------------------------------------------


def test_network_html_nodes_parameters_dims_context():
    net = tdnn()
    page = net._repr_html_()
    check_html(page)
    text = visible_text(page)
    for part in (
        "w1",
        "w2",
        "(12, 8)",
        "(24, 5)",
        "96",
        "120",
        "216",
        "Node 'tdnn1'",
        "Input 'input' dim 4",
        "Offset t-2",
        "left 3, right 3",
    ):
        assert part in text, part
    # dims where known: the input (4), the Append (12 then 24), the output (5)
    rows = re.findall(r"<tr>(.*?)</tr>", page)
    append_rows = [r for r in rows if ">Append<" in r]
    assert any(">12<" in r for r in append_rows) and any(">24<" in r for r in append_rows)


def test_network_html_plain_expression_has_no_context():
    net = Network((1.0 + Identity()) * Weight(2.0, name="w"))
    page = display.network_html(net)
    check_html(page)
    assert "context" not in visible_text(page)
    assert "'w'" in visible_text(page) or "w" in visible_text(page)


def test_network_html_tolerates_planning_errors():
    x = Input("input", 2)
    h = Node("h", Tanh(x + Offset(Ref("h"), -1)))  # no IfDefined: nothing is computable
    page = display.network_html(Network(h))
    check_html(page)
    assert "PlanError" in visible_text(page)


def test_network_html_shows_the_objectives_of_a_network_read_from_kaldi():
    from symnet.kaldi import read_network

    net = read_network(EXAMPLES / "kaldi-doc-example.config")
    page = display.network_html(net)
    check_html(page)
    text = visible_text(page)
    for part in ("affine1.linear_params", "(65, 48)", "linear", "left 1, right 2", "affine1_node"):
        assert part in text, part


# ----- tapes ------------------------------------------------------------------------------------


def test_tape_html_values_and_deltas():
    x = Identity()
    expr = (1.0 + x) * Weight(2.0, name="w")
    tape = expr.forward(Literal(3.0))
    page = display.tape_html(tape, deltas=tape.backward_deltas(1.0))
    check_html(page)
    text = visible_text(page)
    assert "δ mean" in text
    rows = [r for r in re.findall(r"<tr>(.*?)</tr>", page) if "<td" in r]
    assert len(rows) == len(tape.nodes()) == 5
    times = next(r for r in rows if "Times" in r)
    cells = re.findall(r"<td[^>]*>(.*?)</td>", times)
    assert cells[-6:] == ["8", "8", "8", "1", "1", "1"]  # value 8, delta 1
    weight = next(r for r in rows if "Weight" in r)
    assert re.findall(r"<td[^>]*>(.*?)</td>", weight)[-1] == "4"  # d/dw = 1 + 3
    assert tape._repr_html_().count("<tr>") == 6


def test_tape_html_engine_rows_and_dict_of_tapes():
    net = tdnn()
    request = ComputationRequest(
        inputs={"input": IndexSet.range(n=2, t=(-3, 5))}, outputs={"output": IndexSet.range(n=2, t=2)}
    )
    computation = compile(net, request)
    x = jnp.asarray(np.random.default_rng(0).standard_normal((16, 4)), jnp.float32)
    tapes = computation.forward(net, {"input": x})
    page = display.tape_html(tapes)
    check_html(page)
    text = visible_text(page)
    assert "→ output" in text
    assert "(0, -3:4) (1, -3:4)" in text  # the input's Indexes
    assert "Node 'tdnn1'" in text


def test_tape_html_inside_jit_says_traced():
    import jax

    seen = {}

    @jax.jit
    def f(v):
        tape = Network(Identity() * 2.0).forward(v)
        seen["page"] = display.tape_html(tape)
        return tape.value

    f(jnp.ones(3))
    check_html(seen["page"])
    assert "traced" in seen["page"]


def test_tape_html_non_finite_values():
    tape = Network(jnp.log(1.0) + Identity()).forward(jnp.array([1.0, np.nan, np.inf]))
    page = display.tape_html(tape)
    check_html(page)
    assert "1 NaN, 1 Inf" in page


# ----- computations -------------------------------------------------------------------------------


def test_computation_html_index_ranges():
    net = tdnn()
    request = ComputationRequest(
        inputs={"input": IndexSet.range(n=1, t=(-3, 5))}, outputs={"output": IndexSet.range(n=1, t=2)}
    )
    computation = compile(net, request)
    page = computation._repr_html_()
    check_html(page)
    text = visible_text(page)
    assert "(0, -3:4)" in text  # the input
    assert "(0, -2:3)" in text  # tdnn1 for output frames 0..1 (offsets -2..2)
    assert "(0, 0:1)" in text  # the output
    assert "Node 'tdnn1'" in text and "regular" in text


def test_computation_html_scans():
    net = rnn()
    request = ComputationRequest(
        inputs={"input": IndexSet.range(n=1, t=4)}, outputs={"output": IndexSet.range(n=1, t=4)}
    )
    page = display.computation_html(compile(net, request))
    check_html(page)
    assert "scan 1" in page and "1 scan(s)" in page


def test_index_map_html():
    x = Input("input", 1)
    net = Network(Append(IfDefined(Offset(x, -1)), Failover(Offset(x, 1), x)))
    request = ComputationRequest(
        inputs={"input": IndexSet.range(n=1, t=3)}, outputs={"output": IndexSet.range(n=1, t=3)}
    )
    computation = compile(net, request)
    page = display.index_map_html(computation, "output")
    check_html(page)
    cells = [re.findall(r"<td[^>]*>(.*?)</td>", r) for r in re.findall(r"<tr>(.*?)</tr>", page) if "<td" in r]
    assert [c[1] for c in cells] == ["(0, 0)", "(0, 1)", "(0, 2)"]

    def last_column(page):
        check_html(page)
        return [re.findall(r"<td[^>]*>(.*?)</td>", r)[-1] for r in re.findall(r"<tr>(.*?)</tr>", page) if "<td" in r]

    # IfDefined(Offset(x, -1)): zeros at t=0 (frame -1 is missing), else the input one frame back
    assert last_column(display.index_map_html(computation, 1)) == ["0", "(0, 0)", "(0, 1)"]
    # node by node: the IfDefined reads the Offset node's row of the same Index
    assert last_column(display.index_map_html(computation, 1, through=False)) == ["0", "(0, 1)", "(0, 2)"]
    # the Offset node computes t=1,2 only, reading the input one frame back
    assert last_column(display.index_map_html(computation, Offset(x, -1))) == ["(0, 0)", "(0, 1)"]
    # Failover(Offset(x, 1), x): the next frame where it exists, the input itself at the last frame
    failover = display.index_map_html(computation, 4)
    check_html(failover)
    assert "via Offset t+1" in failover
    rows = [re.findall(r"<td[^>]*>(.*?)</td>", r) for r in re.findall(r"<tr>(.*?)</tr>", failover) if "<td" in r]
    assert [r[2:] for r in rows] == [["(0, 1)", "-"], ["(0, 2)", "-"], ["-", "(0, 2)"]]


# ----- pictures -----------------------------------------------------------------------------------


def test_graph_svg_one_element_per_node():
    from symnet._src.engine.graph import Graph

    x = Input("input", 3)
    net = Network(ReLU(Append(Offset(x, -2), x, Offset(x, 2)) @ Weight(Normal((9, 4), 0.1), name="w")))
    svg = display.graph_svg(net)
    check_html(svg)
    graph = Graph(dict(net.structure.outputs))
    assert svg.count('class="node"') == len(graph.layers) == 7
    assert svg.count('class="edge"') == sum(len(ops) for ops in graph.operands)
    for name in ("Append", "Offset t-2", "Offset t+2", "Input &#x27;input&#x27; dim 3", "ReLU"):
        assert name in svg, name
    assert svg._repr_svg_() == str(svg)
    assert display.graph_svg(net, weights=False).count('class="node"') == 6


def test_graph_svg_recurrence_and_merged_nodes():
    svg = display.graph_svg(rnn())
    check_html(svg)
    assert 'class="edge back"' in svg  # h -> Offset(h, -1), drawn back
    assert svg.count('class="node"') == 9  # Node h and its Tanh are one box
    assert display.graph_svg(rnn(), merge=False).count('class="node"') == 10
    from symnet.kaldi import read_network

    kaldi = read_network(EXAMPLES / "kaldi-doc-example.config")
    svg = display.graph_svg(kaldi)
    check_html(svg)
    assert "affine1_node: Affine" in svg  # a component-node and its component: one box
    assert svg.count('class="node"') == 13
    assert display.graph_svg(kaldi, merge=False).count('class="node"') == 17


def test_receptive_field_append_offsets():
    x = Input("input", 3)
    net = Network(Append(Offset(x, -2), x, Offset(x, 2)) @ Weight(Normal((9, 4), 0.1), name="w"))
    rf = display.receptive_field(net)
    assert rf.window == (-2, 2)
    assert rf.input_frames == {"input": [-2, 0, 2]}
    svg = rf._repr_svg_()
    check_html(svg)
    frames = re.findall(r'<text class="frame"[^>]*>(-?\d+)</text>', svg)
    assert frames == ["-2", "-1", "0", "1", "2"]
    assert "#.#.#" in repr(rf)


def test_receptive_field_tdnn_and_recurrence():
    rf = display.receptive_field(tdnn())
    assert rf.window == (-3, 3)
    assert rf.frames["tdnn1"] == [-2, 0, 2]
    assert rf.frames["input"] == [-3, -2, -1, 0, 1, 2, 3]
    rf = display.receptive_field(rnn(), t=0)
    assert rf.window == (-8, 8)
    assert rf.frames["h"] == list(range(-8, 1))
    assert rf.frames["input"] == list(range(-8, 1))
    rf = display.receptive_field(rnn(), t=2, window=(0, 5))
    assert rf.frames["h"] == [0, 1, 2]
    check_html(rf.svg())


# ----- names of the values inside Nodes (the summary's rows) -------------------------------------


def _lstm(x, dim: int, cells: int, name: str, direction: int):
    """One LSTM direction as docs/worked-examples.md writes it."""
    from symnet import DimRange, Sigmoid, Zeros

    h_prev = IfDefined(Offset(Ref(f"{name}.h"), -direction))
    c_prev = IfDefined(Offset(Ref(f"{name}.c"), -direction))
    gates = (
        x @ Weight(Normal((dim, 4 * cells), 0.2))
        + h_prev @ Weight(Normal((cells, 4 * cells), 0.2))
        + Weight(Zeros(4 * cells))
    )
    i, f = Sigmoid(DimRange(gates, 0, cells)), Sigmoid(DimRange(gates, cells, cells) + 1.0)
    g, o = Tanh(DimRange(gates, 2 * cells, cells)), Sigmoid(DimRange(gates, 3 * cells, cells))
    c = Node(f"{name}.c", f * c_prev + i * g)
    return Node(f"{name}.h", o * Tanh(c))


def _blstm() -> Network:
    from symnet import LogSoftmax, Zeros

    x = Input("input", 3)
    both = Append(_lstm(x, 3, 2, "fw", 1), _lstm(x, 3, 2, "bw", -1))
    return Network(LogSoftmax(both @ Weight(Normal((4, 5), 0.2)) + Weight(Zeros(5))))


def _direction_rows(d: str, t: int) -> list[str]:
    """A direction's rows, by the naming rule of symnet._src.core.roles, operands first as the network was built."""
    return [
        f"{d}.linear",  # x @ W: read by the Nodes {d}.c and {d}.h, so scoped by their common prefix
        f"Offset({d}.h, {t})",  # descriptors are named by their expressions
        f"IfDefined(Offset({d}.h, {t}))",
        f"{d}.linear_2",
        f"{d}.sum",
        f"{d}.gates",  # read only through DimRange slices
        f"{d}.gates[6:8]",
        f"{d}.h.sigmoid",  # the output gate: read by {d}.h alone
        f"{d}.gates[2:4]",
        f"{d}.c.sum",  # + 1.0 (a Literal operand is no bias)
        f"{d}.c.sigmoid",
        f"Offset({d}.c, {t})",
        f"IfDefined(Offset({d}.c, {t}))",
        f"{d}.c.product",
        f"{d}.gates[0:2]",
        f"{d}.c.sigmoid_2",
        f"{d}.gates[4:6]",
        f"{d}.c.tanh",
        f"{d}.c.product_2",
        f"{d}.c",
        f"{d}.h.tanh",
        f"{d}.h",
    ]


def test_summary_rows_of_a_blstm_are_named_by_node_and_role():
    net = _blstm()
    summary = net.summary()
    expected = [
        "input",
        *_direction_rows("fw", -1),
        *_direction_rows("bw", 1),
        "Append(fw.h, bw.h)",  # between Nodes that share no prefix: its expression
        "output.linear",
        "output.affine",
        "output",
    ]
    assert [r.node for r in summary.rows] == expected
    head, cells = summary.table()
    assert head == ["#", "node", "kind", "dim", "params", "state", "context"]
    assert [r.kind for r in summary.rows][5:8] == ["Plus", "Plus", "DimRange"]
    assert summary.rows[6].dim == 8 and summary.rows[7].dim == 2 and summary.rows[2].context == (1, 0)
    assert summary.params == 2 * (3 * 8 + 2 * 8 + 8) + 4 * 5 + 5
    # the notebook views show the same names: the summary's table and the network's node table
    page = summary._repr_html_()
    check_html(page)
    rows = [re.findall(r"<td[^>]*>(.*?)</td>", row) for row in re.findall(r"<tr[^>]*>(.*?)</tr>", page)]
    assert [html.unescape(row[1]) for row in rows if row] == expected


def test_network_html_names_nodes_as_the_summary_does():
    net = _blstm()
    names = [r.node for r in net.summary().rows]
    text = visible_text(net._repr_html_())
    for name in names:
        if not name.startswith(("Offset", "IfDefined", "Append")):
            assert name in text, name
    tree_text = visible_text(display.layer_html(net.output))  # the expression tree of a layer names them too
    assert re.search(r"fw\.gates\[0:2\]: +DimRange 0:2", tree_text) and re.search(
        r"bw\.c\.product_2: +Times", tree_text
    )


def test_summary_of_an_xconfig_lstm_names_every_row():
    from symnet._src.kaldi.text.xconfig import parse_xconfig_network

    text = "input dim=5 name=input\nfast-lstm-layer name=lstm1 cell-dim=4 delay=-1\noutput-layer name=output dim=3\n"
    rows = [r.node for r in parse_xconfig_network(text).summary().rows]
    assert not any("#" in r for r in rows), rows
    assert {"lstm1.W_all", "lstm1.lstm_nonlin", "lstm1.m", "Offset(lstm1.m_trunc, -1)"} <= set(rows)
