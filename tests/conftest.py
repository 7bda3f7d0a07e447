"""Settings shared by the whole suite: Hypothesis profiles, no compile cache, quick XLA compilation.

Property tests are reproducible by default: the `ci` profile derandomizes
Hypothesis (each test's examples follow from the test itself, so two runs of the
same code test the same inputs, and a CI failure reproduces locally) and keeps
no example database. Locally, draw fresh examples with the `random` profile:

    SYMNET_HYPOTHESIS_PROFILE=random make test

Hypothesis's own `--hypothesis-profile=random` option selects it as well. Tests
that pass their own `@settings(...)` keep those values and inherit the rest.

`symnet compute` keeps compiled programs in the user's cache folder
(`symnet.engine.compile_cache`); the suite turns that off (`SYMNET_COMPILE_CACHE=off`,
also for the commands it starts) so it writes nothing outside its temporary folders.

Most of the suite's time is XLA compiling small programs once each, so `make test`
runs with LLVM's cheap code generation (`QUICK_XLA_FLAGS`, set before JAX starts,
inherited by child processes): the same HLO programs, compiled in about 0.6 of the
time. A run with `XLA_FLAGS` already set keeps it: `make test-all` sets it empty,
so CI runs the whole suite on XLA's optimised code as well.
"""

from __future__ import annotations

import os

from hypothesis import settings

PROFILE_VARIABLE = "SYMNET_HYPOTHESIS_PROFILE"
os.environ.setdefault("SYMNET_COMPILE_CACHE", "off")
QUICK_XLA_FLAGS = "--xla_backend_optimization_level=0 --xla_llvm_disable_expensive_passes=true"
os.environ.setdefault("XLA_FLAGS", QUICK_XLA_FLAGS)

settings.register_profile("ci", derandomize=True, database=None, print_blob=True)
settings.register_profile("random", derandomize=False)
settings.load_profile(os.environ.get(PROFILE_VARIABLE, "ci"))
