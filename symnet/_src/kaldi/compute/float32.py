"""Kaldi's float32 products on every backend.

Kaldi multiplies in float32: BLAS on a CPU, cuBLAS's default math on a GPU
(cudamatrix/cu-device.h: `--cuda-use-tensor-cores` and `--cuda-use-tf32-compute`
are off unless given; `symnet compute` does not take them).
JAX's default precision for a float32 product lets a GPU use TensorFloat-32,
whose 10-bit mantissa moves outputs by about 1e-3 relative (W3's
log-probabilities by 4.9e-4 on an H200: `benchmarks/precision.py`). So
nnet3-compute's counterparts (`Nnet3Computer`, `symnet compute`) and exact
evaluation run their products at `jax.default_matmul_precision("highest")`,
unless the user chose a precision (`jax.default_matmul_precision`, the
`JAX_DEFAULT_MATMUL_PRECISION` variable): that choice is kept. On a CPU both
are float32 and nothing changes.
"""

from __future__ import annotations

import contextlib
import functools
from collections.abc import Callable
from typing import ParamSpec, TypeVar

import jax

__all__ = ["kaldi_float32", "with_kaldi_float32"]

P = ParamSpec("P")
R = TypeVar("R")


def kaldi_float32() -> contextlib.AbstractContextManager[object]:
    """Full float32 products inside the block, unless a precision was chosen already (then that one)."""
    if jax.config.jax_default_matmul_precision is not None:  # type: ignore[attr-defined]  # set by JAX at import
        return contextlib.nullcontext()
    return jax.default_matmul_precision("highest")


def with_kaldi_float32(fn: Callable[P, R]) -> Callable[P, R]:
    """`fn` run inside `kaldi_float32()`."""

    @functools.wraps(fn)
    def wrapped(*args: P.args, **kwargs: P.kwargs) -> R:
        with kaldi_float32():
            return fn(*args, **kwargs)

    return wrapped
