"""`repr(network)`: a line per named node, operands by name, shapes named, repeated blocks folded; `summary()`
names public classes."""

from __future__ import annotations

import numpy as np

from symnet import Input, Network, Node, ReLU
from symnet.layers import LSTM, Affine, BatchNorm, Bidirectional, MultiHeadAttention, TimeConv


def blstm() -> Network:
    h = Bidirectional(LSTM, "blstm1", Input("input", 40), cell=32)
    h = Bidirectional(LSTM, "blstm2", h, cell=32)
    return Network(Affine(h, 10), seed=0)


def tdnnf(layers: int, offsets: tuple[int, ...] = (-1, 0, 1)) -> Network:
    h = Node("tdnn1", BatchNorm(ReLU(TimeConv(Input("input", 40), 64, offsets=(-1, 0, 1)))))
    for i in range(2, layers + 2):
        h = Node(f"tdnnf{i}.affine", TimeConv(h, 64, offsets=offsets))
        h = Node(f"tdnnf{i}.batchnorm", BatchNorm(ReLU(h)))
    return Network(Affine(h, 10), seed=0)


def test_a_two_layer_blstm_prints_a_line_per_named_node_with_operands_by_name_and_shapes() -> None:
    net = blstm()
    lines = repr(net).splitlines()
    assert lines[0] == "Network(" and lines[-1] == ")" and len(lines) <= 22
    assert max(map(len, lines)) < 200
    w_all = next(line for line in lines if line.startswith("  blstm2.backward.W_all = "))
    # The operands are the earlier lines' names, the recurrence an Offset of one, the weights' shapes named.
    assert "Append(Append(blstm1.forward.m, blstm1.backward.m), IfDefined(Offset(blstm2.backward.m, 1)))" in w_all
    assert w_all.endswith("# bias_params f32[128], linear_params f32[128,96]")
    cell = next(line for line in lines if line.startswith("  blstm1.forward.lstm_nonlin = "))
    assert "'blstm1.forward.lstm_nonlin'" not in cell and "lstm_nonlin.params" not in cell.split("#")[0]
    total = sum(int(np.size(v)) for v in net.params.values())
    assert lines[-2] == f"  params: {total:,} in {len(net.params)} arrays"


def test_repeated_blocks_fold_into_one_line_and_different_ones_do_not() -> None:
    lines = repr(tdnnf(6)).splitlines()
    # tdnnf2 reads tdnn1, tdnnf3 reads tdnnf2.batchnorm: from tdnnf3 on the blocks repeat.
    assert "  tdnnf4 … tdnnf7: 4 blocks as tdnnf3" in lines
    assert any(line.startswith("  tdnnf3.affine = ") for line in lines)
    assert not any(line.startswith(("  tdnnf4.", "  tdnnf7.")) for line in lines)
    assert any(line.startswith("  tdnnf2.affine = TimeConv(tdnn1, 64, offsets=(-1, 0, 1))") for line in lines)
    assert any(line.startswith("  output = Affine(tdnnf7.batchnorm, 10") for line in lines)
    # Blocks that differ (here in their offsets) are all shown.
    h = Node("tdnnf2.affine", TimeConv(Input("input", 8), 8, offsets=(-1, 0)))
    h = Node("tdnnf3.affine", TimeConv(h, 8, offsets=(-3, 0)))
    h = Node("tdnnf4.affine", TimeConv(h, 8, offsets=(-3, 0)))
    assert sum(line.startswith("  tdnnf") for line in repr(Network(h, seed=0)).splitlines()) == 3


def test_repr_is_short_where_the_whole_expression_is_long() -> None:
    net = tdnnf(12)
    assert len(repr(net)) < len(repr(net.structure)) / 4
    assert len(repr(net).splitlines()) < 15


def test_summary_names_the_public_classes_a_typed_layer_is_made_of() -> None:
    kinds = {row.kind for row in blstm().summary().rows}
    assert "LstmNonlinearityComponent" in kinds
    attention = Network(MultiHeadAttention("att", Input("input", 8), heads=2, key_dim=2, window=(2, 2)), seed=0)
    kinds |= {row.kind for row in attention.summary().rows}
    assert "MultiHeadAttention" in kinds and not any(kind.startswith("_") for kind in kinds), kinds
    assert all(not line.endswith("#") for line in repr(attention).splitlines())  # no empty shape comment
