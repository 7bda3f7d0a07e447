"""Comparing two `fit` runs: the same parameters bit for bit and the same losses, step for step."""

from __future__ import annotations

from typing import Any

import numpy as np


def params(result: Any) -> dict[str, np.ndarray]:
    """A FitResult's trained parameters as numpy arrays."""
    return {k: np.asarray(v) for k, v in result.network.params.items()}


def assert_same(a: Any, b: Any) -> None:
    """Two FitResults trained the same: equal parameters (bit for bit) and equal training losses."""
    pa, pb = params(a), params(b)
    assert pa.keys() == pb.keys()
    for k in pa:
        np.testing.assert_array_equal(pa[k], pb[k], err_msg=k)
    assert [h.train_loss for h in a.history] == [h.train_loss for h in b.history]
