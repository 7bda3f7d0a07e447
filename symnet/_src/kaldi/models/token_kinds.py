"""The kinds of value a token of a Kaldi model file holds, as Kaldi's Read/Write functions have them.

Binary data does not say whether the 4 bytes after a size byte 4 are an int32
or a float, so each component type records the kind of each of its tokens
(`KaldiComponentType.token_kinds` in `symnet._src.kaldi.components`; the table of
all of them is `symnet._src.kaldi.components.TOKEN_KINDS`).

Kinds: ``"int"`` (int32), ``"float"`` (BaseFloat), ``"double"``, ``"bool"``,
``"vector"``/``"matrix"`` (float32, FV/FM in binary), ``"dvector"``/``"dmatrix"``
(float64, DV/DM), ``"ints"`` (an integer vector, WriteIntegerVector),
``"pairs"`` (an integer-pair vector), ``"flag"`` (a token with no value), or a
tuple of scalar kinds for a token followed by several values
(``<RankInOut> 20 80``).
"""

from __future__ import annotations

__all__ = [
    "ARRAYS",
    "BOOL",
    "DMATRIX",
    "DOUBLE",
    "DVECTOR",
    "FLAG",
    "FLOAT",
    "INT",
    "INTS",
    "Kind",
    "MATRIX",
    "PAIRS",
    "VECTOR",
]

INT, FLOAT, DOUBLE, BOOL = "int", "float", "double", "bool"
VECTOR, MATRIX, INTS, PAIRS, FLAG = "vector", "matrix", "ints", "pairs", "flag"
DVECTOR, DMATRIX = "dvector", "dmatrix"  # Vector<double> / Matrix<double>: DV / DM in binary
#: The kinds whose values are arrays.
ARRAYS = (VECTOR, MATRIX, DVECTOR, DMATRIX, INTS, PAIRS)
Kind = str | tuple
