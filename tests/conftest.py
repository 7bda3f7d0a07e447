"""Settings shared by the whole suite: Hypothesis profiles, and no compile cache.

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
"""

from __future__ import annotations

import os

from hypothesis import settings

PROFILE_VARIABLE = "SYMNET_HYPOTHESIS_PROFILE"
os.environ.setdefault("SYMNET_COMPILE_CACHE", "off")

settings.register_profile("ci", derandomize=True, database=None, print_blob=True)
settings.register_profile("random", derandomize=False)
settings.load_profile(os.environ.get(PROFILE_VARIABLE, "ci"))
