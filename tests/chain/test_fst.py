"""The FST readers: OpenFst's binary VectorFst (checked byte by byte against Kaldi's den.fst) and the text
form of Kaldi's text archives; bad input is a ChainError naming what is wrong."""

from __future__ import annotations

import struct
from pathlib import Path

import numpy as np
import pytest

from symnet.chain import denominator_graph, numerator_graph, parse_fst_binary, parse_fst_text
from symnet.errors import ChainError

DEN = (Path(__file__).resolve().parents[1] / "data" / "chain" / "den.fst").read_bytes()


def test_binary_layout_matches_an_independent_walk_of_the_bytes():
    fst = parse_fst_binary(DEN)
    # the header: magic, "vector", "standard", version, flags, properties, start, states, arcs
    assert struct.unpack_from("<i", DEN)[0] == 2125659606
    pos = 4 + 4 + 6 + 4 + 8 + 4 + 4 + 8
    start, num_states = struct.unpack_from("<qq", DEN, pos)
    pos += 24
    arcs = []
    for s in range(num_states):
        final, n = struct.unpack_from("<fq", DEN, pos)
        pos += 12
        assert fst.final[s] == np.float32(final)
        for _ in range(n):
            arcs.append((s, *struct.unpack_from("<iifi", DEN, pos)))
            pos += 16
    assert pos == len(DEN) and fst.start == start
    got = list(zip(fst.src, fst.ilabel, fst.olabel, fst.weight, fst.dst, strict=True))
    assert [(a[0], a[1], a[2], np.float32(a[3]), a[4]) for a in arcs] == got


@pytest.mark.parametrize(
    "data, message",
    [
        (b"\x00" * 8, "not an OpenFst binary file"),
        (DEN[:100], "16 states cannot fit"),
        (DEN[:400], "state [0-9]+ claims [0-9]+ arcs|truncated"),
        (DEN + b"\x00", "1 bytes after the last state"),
        (DEN[:4] + struct.pack("<i", 1000) + DEN[8:], "length 1000"),
        (DEN[:50] + struct.pack("<q", 1 << 40) + DEN[58:], "cannot fit"),
        (DEN[:42] + struct.pack("<q", 99) + DEN[50:], "start state 99"),
    ],
)
def test_bad_binary_fst_is_a_chain_error(data, message):
    with pytest.raises(ChainError, match=message):
        parse_fst_binary(data)


def test_text_form_as_kaldi_writes_it():
    fst = parse_fst_text("0\t1\t2\t2\t0.5\n0\t2\t1\t1\n1\t2\t3\t3\n2\t1.25\n1\n")
    assert fst.start == 0 and fst.num_states == 3
    np.testing.assert_array_equal(fst.dst, [1, 2, 2])
    np.testing.assert_allclose(fst.weight, [0.5, 0.0, 0.0])
    np.testing.assert_allclose(fst.final, [np.inf, 0.0, 1.25])
    num = numerator_graph(fst, 3)
    np.testing.assert_array_equal(num.pdf, [1, 0, 2])
    np.testing.assert_allclose(num.initial, [1, 0, 0])
    np.testing.assert_allclose(num.final, [0, 1, np.exp(-1.25)], rtol=1e-6)


@pytest.mark.parametrize(
    "text, message",
    [
        ("", "no lines"),
        ("0 1 2\n", "3 fields"),
        ("0 1 x 1\n", "'x' is not a int"),
        ("0 1 1 1 nan\n", "NaN"),
        ("0 2000000 1 1\n", "far beyond"),
    ],
)
def test_bad_text_fst_is_a_chain_error(text, message):
    with pytest.raises(ChainError, match=message):
        parse_fst_text(text)


def test_labels_that_are_not_pdfs_are_errors():
    with pytest.raises(ChainError, match="label 0 is not a pdf-id"):
        denominator_graph(parse_fst_text("0 1 0 0\n1\n"), 3)
    with pytest.raises(ChainError, match="label 4 is not a pdf-id"):
        numerator_graph(parse_fst_text("0 1 4 4\n1\n"), 3)
