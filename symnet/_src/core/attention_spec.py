"""What a layer that is attention over a window of frames promises the engine (`attention_spec()`).

A layer whose input is its source's rows at every context position of a window appended
(`Append(source at t + o * stride for o = -left .. right)`, the optional positions read through
`IfDefined`) and whose value is Kaldi's restricted attention over them (components/attention.py)
answers `attention_spec()` with an `AttentionSpec`; the engine may then compute it from the
source's rows directly (`symnet._src.engine.attention`) instead of appending the window.
"""

from __future__ import annotations

from typing import NamedTuple

__all__ = ["AttentionSpec"]


class AttentionSpec(NamedTuple):
    """The arithmetic of restricted attention (components/attention.py): per head `2 * key_dim + value_dim +
    left + 1 + right` columns of each source row (key, value, query, a position bias per context position);
    `masked`: absent positions take no weight (symnet's `MultiHeadAttention`; each appended row then ends with a
    flag column, `Append(source, Const(1.0, 1))`), else their key and value are zeros (Kaldi's);
    `output_context`: each head's weights per context position follow its value (Kaldi's output-context)."""

    num_heads: int
    key_dim: int
    value_dim: int
    left: int
    right: int
    key_scale: float
    output_context: bool
    masked: bool

    @property
    def context(self) -> int:
        """The number of context positions, `left + 1 + right`."""
        return self.left + 1 + self.right

    @property
    def head_dim(self) -> int:
        """Each head's columns of a source row."""
        return 2 * self.key_dim + self.value_dim + self.context
