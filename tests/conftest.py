"""Settings shared by the whole suite: Hypothesis profiles.

Property tests are reproducible by default: the `ci` profile derandomizes
Hypothesis (each test's examples follow from the test itself, so two runs of the
same code test the same inputs, and a CI failure reproduces locally) and keeps
no example database. Locally, draw fresh examples with the `random` profile:

    SYMNET_HYPOTHESIS_PROFILE=random make test

Hypothesis's own `--hypothesis-profile=random` option selects it as well. Tests
that pass their own `@settings(...)` keep those values and inherit the rest.
"""

from __future__ import annotations

import os

from hypothesis import settings

PROFILE_VARIABLE = "SYMNET_HYPOTHESIS_PROFILE"

settings.register_profile("ci", derandomize=True, database=None, print_blob=True)
settings.register_profile("random", derandomize=False)
settings.load_profile(os.environ.get(PROFILE_VARIABLE, "ci"))
