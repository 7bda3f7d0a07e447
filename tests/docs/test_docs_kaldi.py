"""docs/kaldi.md stays true to the code: every registered component is listed with its model-file support, and
every Kaldi xconfig layer type with its support."""

import re

from helpers import REPO
from symnet._src.kaldi.text.xconfig import KALDI_LAYER_TYPES, LAYER_TYPES, UNSUPPORTED_LAYER_TYPES
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


def test_every_kaldi_xconfig_layer_type_is_in_the_table_with_its_support():
    rows = re.findall(r"^\| `([a-z0-9-]+)` \| [a-z_]+\.py \| ([^|]+) \|$", DOC.read_text(), flags=re.M)
    assert [layer_type for layer_type, _ in rows] == list(KALDI_LAYER_TYPES)
    for layer_type, support in rows:
        want = "supported" if layer_type in LAYER_TYPES else f"not supported: {UNSUPPORTED_LAYER_TYPES[layer_type]}"
        assert support.strip() == want, layer_type
