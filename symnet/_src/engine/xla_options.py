"""The XLA options symnet's programs are compiled with: on a CPU, YNNPACK for matrix products only.

jaxlib 0.10's XLA:CPU also hands element-wise and reduction fusions to YNNPACK
(`xla_cpu_experimental_ynn_fusion_type`). In the digits recipe's chain TDNN-F training step on random stand-in
data they made the step 1.2-1.5 times slower than with YNNPACK's products alone (2-core AMD EPYC, Zen 3:
`benchmarks/chain_step.py`; on the recipe's own corpus about 5%, at 13 s more compilation:
`benchmarks/chain_options.py`), and a YNNPACK reduction of a batch-norm's backward took 25 ms where XLA's own
takes 1. So
the programs `fit` runs (the training step, evaluation, the preconditioners' update) ask XLA for YNNPACK's
products only (`jit`). Only a top-level `jax.jit` takes compiler options: a Computation's own programs, which
run inside the user's `jax.jit` as often as alone, keep XLA's defaults.

The user's choice wins: a process whose `XLA_FLAGS` names `xla_cpu_experimental_ynn_fusion_type` keeps it, and
`SYMNET_XLA_OPTIONS=default` leaves XLA's defaults (`symnet`, or unset: symnet's; anything else is an error). On
another backend, or a jaxlib without the option, there is nothing to set.
"""

from __future__ import annotations

import functools
import os
from collections.abc import Callable
from typing import Any

import jax
import jax.numpy as jnp

from ..base.errors import SymnetError

__all__ = ["compiler_options", "jit", "OPTION", "PRODUCTS_ONLY"]

OPTION = "xla_cpu_experimental_ynn_fusion_type"
#: YNNPACK's fusions of matrix products (and of one product or convolution alone), none of element-wise work.
PRODUCTS_ONLY = ",".join(f"LIBRARY_FUSION_TYPE_{kind}" for kind in ("DOT", "INDIVIDUAL_DOT", "INDIVIDUAL_CONVOLUTION"))


@functools.cache
def compiler_options() -> dict[str, str]:
    """The options symnet compiles with in this process (empty: XLA's defaults)."""
    choice = os.environ.get("SYMNET_XLA_OPTIONS", "").strip().lower()
    if choice not in ("", "symnet", "default"):
        raise SymnetError(f"SYMNET_XLA_OPTIONS is {choice!r}: it takes 'symnet' (the default) or 'default' (XLA's)")
    if choice == "default":
        return {}
    if OPTION in os.environ.get("XLA_FLAGS", "") or jax.default_backend() != "cpu":
        return {}
    options = {OPTION: PRODUCTS_ONLY}
    try:  # a jaxlib whose XLA lacks the option refuses it
        jax.jit(jnp.negative, compiler_options=options).lower(jnp.zeros(2)).compile()
    except Exception:  # any refusal: the option is not this XLA's
        return {}
    return options


def jit(fun: Callable[..., Any], **kwargs: Any) -> Callable[..., Any]:
    """`jax.jit(fun, **kwargs)` compiled with symnet's options (`compiler_options`)."""
    return jax.jit(fun, compiler_options=compiler_options() or None, **kwargs)
