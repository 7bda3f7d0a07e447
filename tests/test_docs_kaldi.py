"""docs/kaldi.md stays true to the code: every registered component is listed with its model-file support."""

import os
import re

from symnet.kaldi import COMPONENTS, READABLE_TYPES, WRITABLE_TYPES

DOC = os.path.join(os.path.dirname(__file__), "..", "docs", "kaldi.md")


def test_every_component_is_in_the_table_with_its_model_support():
    rows = dict(re.findall(r"^\| [^|]+ \| `(\w+)` \| ([^|]+) \|$", open(DOC).read(), flags=re.M))
    assert set(rows) == set(COMPONENTS)
    for kaldi_type, support in rows.items():
        want = ("read and write" if kaldi_type in WRITABLE_TYPES and kaldi_type in READABLE_TYPES
                else "read" if kaldi_type in READABLE_TYPES else "config only")
        assert support.strip() == want, kaldi_type
