"""Index keys never wrap around: every value that enters a packed key is checked, offsets included, and the
error names the layer or config line; IndexSets are sized before they are allocated."""

from __future__ import annotations

import time

import numpy as np
import pytest

from symnet import Index, IndexSet, Input, Network, Normal, Offset, PlanError, ShapeError
from symnet._src.core.index import INDEX_LIMIT, MAX_INDEXES, decode, encode, shift
from symnet.kaldi import parse_network


def frames(n: int = 1, t: int = 10, d: int = 2) -> np.ndarray:
    return np.arange(n * t * d, dtype=np.float32).reshape(n, t, d)


@pytest.mark.parametrize("offset", [2**22, 2**22 + 1, 2**21, -(2**22), 2**40, 2**63 - 1, -(2**63)])
def test_offsets_beyond_the_index_range_are_an_error_naming_the_layer(offset):
    """Before: Offset(x, 2^22) computed as Offset(x, 0), and 2^22 + 1 as 1 (the keys overflowed)."""
    x = Input("input", 2)
    with pytest.raises(PlanError, match=rf"Offset\(Input\('input', 2\), {offset}\) \(built at .*test_index_ranges"):
        Network(Offset(x, offset)).compute(frames())


def test_an_offset_that_reaches_past_the_range_from_some_frames_is_an_error():
    x = Input("input", 2)
    with pytest.raises(PlanError, match="reaches t=1048"):
        Network(Offset(x, INDEX_LIMIT - 5)).compute(frames())


def test_offsets_inside_the_range_still_work():
    x = Input("input", 2)
    y = Network(Offset(x, 3)).compute(frames(t=10), mode="valid")
    np.testing.assert_array_equal(y, frames(t=10)[:, 3:])


def test_a_tdnn_with_a_huge_time_offset_names_its_config_line():
    config = (
        "input-node name=input dim=3\n"
        "component name=t type=TdnnComponent input-dim=3 output-dim=2 time-offsets=0,2147483647\n"
        "component-node name=t component=t input=input\n"
        "output-node name=output input=t\n"
    )
    network = parse_network(config, file="big.config")
    with pytest.raises(PlanError, match=r"built at big.config:2:1\): an offset of \(2147483647, 0\)"):
        network.compute(frames(d=3))


def test_shift_checks_t_and_x_in_both_directions():
    keys = encode(np.zeros(3), np.array([-2, 0, 5]), np.array([0, 1, -1]))
    n, t, x = decode(shift(keys, 4, -3))
    assert t.tolist() == [2, 4, 9] and x.tolist() == [-3, -2, -4] and n.tolist() == [0, 0, 0]
    for t_off, x_off in [(INDEX_LIMIT - 5, 0), (-INDEX_LIMIT, 0), (0, INDEX_LIMIT), (0, -INDEX_LIMIT + 1), (2**64, 0)]:
        with pytest.raises(PlanError, match="out of"):
            shift(keys, t_off, x_off)
    assert shift(keys[:0], 2**40).size == 0  # nothing to move


def test_encode_refuses_values_beyond_int64_and_the_most_negative_one():
    """np.abs(-2**63) is negative: the old range check let it through."""
    for t in (-(2**63), 2**63, 2**70):
        with pytest.raises(PlanError, match="Index out of range"):
            encode([0], [t], [0])


@pytest.mark.parametrize(
    "build",
    [
        lambda: IndexSet([Index(0, 2**63)]),
        lambda: IndexSet([Index(0, 1)]),  # Indexes given where keys are meant
        lambda: IndexSet(np.array([1.5, 2.5])),
        lambda: IndexSet("abc"),
        lambda: IndexSet.of([Index(0, 2**63)]),
        lambda: IndexSet.of([(0, 1.5)]),
        lambda: IndexSet.of([(0, True)]),
        lambda: IndexSet.of([(0, INDEX_LIMIT)]),
        lambda: IndexSet.of([(-1, 0)]),
        lambda: IndexSet.of(5),
        lambda: IndexSet.of([(0, 1, 2, 3)]),
    ],
)
def test_index_sets_of_values_that_are_not_indexes_are_plan_errors(build):
    with pytest.raises(PlanError):
        build()


@pytest.mark.parametrize(
    "args,message",
    [
        ({"t": (0, 2**40)}, "frames must be in"),
        ({"n": 2**30}, "sequences must be in"),
        ({"n": 5000, "t": 20000}, f"more than {MAX_INDEXES} Indexes"),
        ({"t": (0, 1.5)}, "must be an int"),
        ({"n": True}, "must be an int"),
        ({"x": 2**21}, "x=2097152"),
    ],
)
def test_index_set_ranges_are_checked_before_anything_is_allocated(args, message):
    started = time.perf_counter()
    with pytest.raises(PlanError, match=message):
        IndexSet.range(**args)
    assert time.perf_counter() - started < 0.5  # refused at once, not after building 2^40 keys


def test_index_set_ranges_in_both_directions():
    assert [i.t for i in IndexSet.range(t=range(3, 0, -1))] == [3, 2, 1]
    assert len(IndexSet.range(n=3, t=(-2, 4))) == 18


def test_normal_with_a_fractional_dim_is_a_shape_error():
    with pytest.raises(ShapeError, match=r"\(4, 2.5\)"):
        Normal((4, 2.5))


def test_more_frames_than_an_index_can_name_is_a_plan_error_before_any_computation():
    """The issue's `net.compute` of 2^27 frames ended in a raw MemoryError; beyond 2^20 frames it is refused."""
    x = Input("input", 2)
    with pytest.raises(PlanError, match=r"frames must be in \(-1048576, 1048576\)"):
        Network(Offset(x, -1)).compute(np.zeros((1, 2**21, 2), np.float32))
