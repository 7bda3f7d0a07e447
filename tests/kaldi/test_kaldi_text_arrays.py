"""Text matrices and vectors of Kaldi model files: the bulk path for plain decimals, word by word otherwise."""

from __future__ import annotations

import re

import numpy as np
import pytest

from symnet._src.kaldi_io.binary import TextReader
from symnet.errors import ModelFormatError

rng = np.random.default_rng(7)


def reference(words: list[str], double: bool = False) -> np.ndarray:
    """Each word as Python's float, then rounded to float32 (as the word-by-word reader always did)."""
    with np.errstate(over="ignore"):  # 1e39 is inf in float32, as in Kaldi's readers
        return np.array([float(w) for w in words], dtype=np.float64).astype(np.float64 if double else np.float32)


def matrix_text(rows: list[list[str]]) -> str:
    return " [\n" + "\n".join("  " + " ".join(row) for row in rows) + " ]\n"


def spellings(values: np.ndarray) -> list[str]:
    """The values written every way a Kaldi text file may hold a number."""
    forms = [repr, lambda v: f"{v:g}", lambda v: f"{v:.9g}", lambda v: f"{v:.3e}", lambda v: f"{v:+.2E}"]
    return [forms[i % len(forms)](float(v)) for i, v in enumerate(values)]


@pytest.mark.parametrize("double", [False, True])
def test_plain_decimal_matrices_parse_as_each_word_does(double: bool) -> None:
    values = rng.standard_normal(60) * 10.0 ** rng.integers(-8, 8, 60)
    words = spellings(values) + ["1.", ".5", "+3", "-0", "007", "1e-400", "3e38", "1e39"]
    rows = [words[i : i + 4] for i in range(0, len(words), 4)]
    got = TextReader(matrix_text(rows), 0, "m.txt").read_matrix("the matrix", double=double)
    want = reference(words, double).reshape(len(rows), 4)
    assert got.dtype == want.dtype
    np.testing.assert_array_equal(got, want)
    assert np.signbit(got[list(np.ndindex(got.shape))[words.index("-0")]])  # -0 stays negative zero


def test_the_bulk_and_word_by_word_paths_agree() -> None:
    words = spellings(rng.standard_normal(30))
    plain = TextReader(matrix_text([words[:15], words[15:]]), 0, "m.txt").read_matrix("m")
    # an "inf" sends the whole matrix down the word-by-word path
    other = TextReader(matrix_text([words[:15], words[15:29] + ["inf"]]), 0, "m.txt").read_matrix("m")
    np.testing.assert_array_equal(plain.reshape(-1)[:29], other.reshape(-1)[:29])
    assert other[1, 14] == np.inf
    vector = TextReader(" [ " + " ".join(words) + " ]\n", 0, "v.txt").read_vector("v")
    np.testing.assert_array_equal(vector, plain.reshape(-1))


@pytest.mark.parametrize("bad", ["1e", "1.2.3", "--1", "1+2", ".", "e5", "+"])
def test_a_plain_decimal_word_that_is_no_number_is_named(bad: str) -> None:
    rows = [["1", "2", "3"], ["4", bad, "6"]]
    with pytest.raises(ModelFormatError, match=re.escape(f"expected a number in the matrix, got {bad!r}")):
        TextReader(matrix_text(rows), 0, "m.txt").read_matrix("the matrix")
    with pytest.raises(ModelFormatError, match=re.escape(f"expected a number in the vector, got {bad!r}")):
        TextReader(f" [ 1 2 {bad} 4 ]\n", 0, "v.txt").read_vector("the vector")


def test_a_bad_number_is_named_before_a_short_row() -> None:
    with pytest.raises(ModelFormatError, match="got '1e'"):
        TextReader(matrix_text([["1", "2", "3"], ["1e"]]), 0, "m.txt").read_matrix("the matrix")
    with pytest.raises(ModelFormatError, match="row 2 has 1 numbers, row 1 has 3"):
        TextReader(matrix_text([["1", "2", "3"], ["4"]]), 0, "m.txt").read_matrix("the matrix")
