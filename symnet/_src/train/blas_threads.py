"""One BLAS thread for the LAPACK calls of symnet's training steps.

On a CPU, XLA runs a step's LAPACK calls (`jnp.linalg`: natural gradient's eigendecompositions, and its QR,
Cholesky and triangular solves when it re-orthogonalises) on its own threads, and jaxlib hands them to the
OpenBLAS that scipy ships. OpenBLAS then wakes threads of its own for each of these small matrices, which fight
XLA's threads for the cores: on a 2-core AMD EPYC a chain TDNN-F step that updates its 48 preconditioners took
1.22 s with OpenBLAS's default threads and 0.88 s with one (`benchmarks/blas_threads.py`). `fit` trains
inside `one_blas_thread()`, which limits every BLAS library the process has loaded (through threadpoolctl) to
one thread while it is entered and restores them after; a training loop of one's own (a jitted step inside
`natural_gradient.Preconditioning`) can enter it too.
"""

from __future__ import annotations

import contextlib
from collections.abc import Iterator

__all__ = ["one_blas_thread"]


@contextlib.contextmanager
def one_blas_thread() -> Iterator[None]:
    """While entered: one thread for every BLAS library loaded, scipy's (the one jaxlib's LAPACK calls) included."""
    import scipy.linalg.cython_lapack  # noqa: F401  (loads scipy's BLAS now, so that the limit reaches it)
    from threadpoolctl import threadpool_limits

    with threadpool_limits(limits=1, user_api="blas"):
        yield
