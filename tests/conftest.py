"""Settings shared by the whole suite: Hypothesis profiles, no compile cache, quick XLA compilation.

Property tests are reproducible by default: the `ci` profile derandomizes
Hypothesis (each test's examples follow from the test itself, so two runs of the
same code test the same inputs, and a CI failure reproduces locally) and keeps
no example database. Locally, draw fresh examples with the `random` profile:

    SYMNET_HYPOTHESIS_PROFILE=random make test

Hypothesis's own `--hypothesis-profile=random` option selects it as well. Tests
that pass their own `@settings(...)` keep those values and inherit the rest.

`symnet compute` keeps compiled programs in the user's cache folder
(`symnet._src.engine.compile_cache`); the suite turns that off (`SYMNET_COMPILE_CACHE=off`,
also for the commands it starts) so it writes nothing outside its temporary folders.

`fit` and the command line have glibc keep freed memory (`symnet.tune_host_memory`): a
training process's heap stays at its peak, which is what a long training run wants. A test
worker runs thousands of unrelated tests, and kept its peak of each (4 GB a worker a quarter
of the way through `make test-all`), so the suite leaves malloc as it is
(`SYMNET_HOST_MEMORY=system`, inherited by the commands it starts);
tests/core/test_host_memory.py checks the tuning in fresh processes of its own.

Each test module's compiled programs are let go when it ends (`symnet.clear_caches()` and
`jax.clear_caches()`). XLA on CPU maps each program's code into memory (about three mappings a
program), and Linux allows a process 65,530 (`vm.max_map_count`). Twice, near the end of
`make test-all`, a worker died of a segmentation fault inside XLA's compiler, with nothing else
in common; 400 tests into tests/train and tests/engine in one process, the suite held 10,943
mappings and 3.0 GB, and growing. Letting each module's programs go, the same tests held 1,177
mappings and 1.5 GB.

Most of the suite's time is XLA compiling small programs once each, so `make test`
runs with XLA's quick code generation (`QUICK_XLA_FLAGS`, set before JAX starts,
inherited by child processes, and left off with a warning where this jaxlib does
not know them): the same HLO programs, compiled much faster
(`benchmarks/quick_compile.py` measures it). A run with `XLA_FLAGS` already set
keeps it: `make test-all` sets it empty, so CI runs the whole suite on XLA's
optimised code as well.
"""

from __future__ import annotations

import gc
import os
import subprocess
import sys
import warnings
from collections.abc import Iterator

import pytest
from hypothesis import settings

PROFILE_VARIABLE = "SYMNET_HYPOTHESIS_PROFILE"
os.environ.setdefault("SYMNET_COMPILE_CACHE", "off")
os.environ.setdefault("SYMNET_HOST_MEMORY", "system")
QUICK_XLA_FLAGS = " ".join(
    [
        "--xla_backend_optimization_level=0",  # LLVM's -O0
        "--xla_llvm_disable_expensive_passes=true",
        "--xla_cpu_use_fusion_emitters=false",  # XLA's older emitters: same HLO, far quicker to compile at -O0
        "--xla_cpu_enable_concurrency_optimized_scheduler=false",
    ]
)


def _quick_flags_work() -> bool:
    """Whether this jaxlib's XLA takes QUICK_XLA_FLAGS (an unknown flag aborts the process that reads it)."""
    probe = subprocess.run(
        [sys.executable, "-c", "import jax.numpy as jnp; jnp.zeros(1).block_until_ready()"],
        env={**os.environ, "XLA_FLAGS": QUICK_XLA_FLAGS, "JAX_PLATFORMS": "cpu"},
        capture_output=True,
        timeout=300,
    )
    if probe.returncode:
        warnings.warn(f"XLA does not take the suite's quick flags, so they are off: {QUICK_XLA_FLAGS}", stacklevel=1)
    return probe.returncode == 0


# Decided once, by the process pytest starts; pytest-xdist's workers inherit the variable.
if "XLA_FLAGS" not in os.environ:
    os.environ["XLA_FLAGS"] = QUICK_XLA_FLAGS if _quick_flags_work() else ""

settings.register_profile("ci", derandomize=True, database=None, print_blob=True)
settings.register_profile("random", derandomize=False)
settings.load_profile(os.environ.get(PROFILE_VARIABLE, "ci"))


@pytest.fixture(autouse=True, scope="module")
def _let_compiled_programs_go() -> Iterator[None]:
    """After each test module, forget its compiled programs (see the module docstring: the mappings limit)."""
    yield
    if "jax" in sys.modules:
        import jax

        import symnet

        symnet.clear_caches()
        jax.clear_caches()
        gc.collect()
