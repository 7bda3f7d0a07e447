"""docs/kaldi.md stays true to the code: every registered component is listed with its model-file support."""

import re

from helpers import REPO
from symnet.kaldi import COMPONENTS, READABLE_TYPES, WRITABLE_TYPES

DOC = REPO / "docs" / "kaldi.md"


def test_every_component_is_in_the_table_with_its_model_support():
    rows = dict(re.findall(r"^\| [^|]+ \| `(\w+)` \| ([^|]+) \|$", DOC.read_text(), flags=re.M))
    assert set(rows) == set(COMPONENTS)
    for kaldi_type, support in rows.items():
        want = (
            "read and write"
            if kaldi_type in WRITABLE_TYPES and kaldi_type in READABLE_TYPES
            else "read"
            if kaldi_type in READABLE_TYPES
            else "config only"
        )
        assert support.strip() == want, kaldi_type
