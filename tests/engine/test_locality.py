"""`chunking_dependence`: which networks' outputs cannot depend on how sequences are cut into chunks."""

from __future__ import annotations

import pytest

from symnet import (
    Append,
    Descriptor,
    Failover,
    IfDefined,
    Input,
    Layer,
    Normal,
    Offset,
    Ref,
    ReplaceIndex,
    Round,
    Tanh,
    Weight,
    child,
    layer_class,
)
from symnet._src.components.statistics import StatisticsExtractionComponent
from symnet._src.core.descriptor import Node, Switch
from symnet._src.engine.graph import Graph
from symnet._src.engine.locality import chunking_dependence
from symnet.extend import Combine, decode, encode

x = Input("input", 2)


def test_offsets_rounds_and_switches_are_local_in_time():
    out = Append(Offset(x, -3), Round(x, 2), Switch(x, Offset(x, 1), x), ReplaceIndex(x, "x", 0)) @ Weight(
        Normal((8, 3), 1.0)
    )
    assert chunking_dependence(Graph({"output": out})) is None


@pytest.mark.parametrize(
    "out,reason",
    [
        (Node("h", Tanh(x @ Weight(Normal((2, 2), 1.0)) + IfDefined(Offset(Ref("h"), -1)))), "recurrence"),
        (Append(x, IfDefined(Offset(x, 2))), "computable"),
        (Failover(Offset(x, -1), x), "computable"),
        (Append(x, ReplaceIndex(x, "t", 0)), "other than by a fixed offset"),
        (StatisticsExtractionComponent(name="stats", input=x, in_dim=2, output_period=2), "set of frames"),
    ],
)
def test_what_makes_chunks_matter_is_named(out, reason):
    assert reason in chunking_dependence(Graph({"output": out}))


@layer_class
class _PairSwap(Descriptor):
    """`(n, t xor 1, x)`: periodic in t (period 2), one frame of reach."""

    arg: Layer = child()
    combine = Combine.FORWARD

    def map_keys(self, keys):
        n, t, i = decode(keys)
        return encode(n, t ^ 1, i)

    def time_reach(self) -> int:
        return 1

    def time_modulus(self) -> int:
        return 2


@layer_class
class _Doubled(Descriptor):
    """`(n, 2 t, x)`: neither a fixed offset nor periodic."""

    arg: Layer = child()
    combine = Combine.FORWARD

    def map_keys(self, keys):
        n, t, i = decode(keys)
        return encode(n, 2 * t, i)


def test_a_users_descriptor_is_asked_not_switched_on():
    """The rule asks a descriptor defined outside symnet for its time offset and period."""
    assert chunking_dependence(Graph({"output": Append(x, _PairSwap(x))})) is None
    assert "_Doubled" in chunking_dependence(Graph({"output": Append(x, _Doubled(x))}))
