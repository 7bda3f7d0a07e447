"""The documentation site builds with `mkdocs build --strict` (what `make docs` runs), offline.

Strict mode turns every warning into a failure: a broken link between pages,
a page missing from the navigation, an API reference (`::: symnet.x`) that
does not resolve.
"""

from __future__ import annotations

import os
import re
import subprocess
import sys

import pytest

from helpers import REPO


@pytest.mark.slow
def test_docs_build_strict(tmp_path):
    site = tmp_path / "site"
    env = {**os.environ, "NO_MKDOCS_2_WARNING": "1"}
    result = subprocess.run(
        [
            sys.executable,
            "-m",
            "mkdocs",
            "build",
            "--strict",
            "--config-file",
            str(REPO / "mkdocs.yml"),
            "--site-dir",
            str(site),
        ],
        cwd=REPO,
        capture_output=True,
        text=True,
        timeout=300,
        env=env,
    )
    assert result.returncode == 0, result.stdout + result.stderr
    assert "WARNING" not in result.stderr, result.stderr

    pages = {p.relative_to(site).as_posix() for p in site.rglob("index.html")}
    for page in (
        "index.html",
        "concepts/layers-and-tape/index.html",
        "concepts/indexes-and-descriptors/index.html",
        "concepts/recurrence/index.html",
        "kaldi/index.html",
        "training/index.html",
        "performance/index.html",
        "design/index.html",
        "notebooks/index.html",
        "api/index.html",
    ):
        assert page in pages, page

    api = (site / "api" / "index.html").read_text()
    for name in (
        "symnet.Weight",
        "symnet.Tape",
        "symnet.Network",
        "symnet.Offset",
        "symnet.IndexSet",
        "symnet.compile",
        "symnet.engine.Stream",
        "symnet.kaldi.read_network",
        "symnet.kaldi.xconfig.read_xconfig",
        "symnet.kaldi.xconfig.layers.splice",
        "symnet.train.fit",
        "symnet.train.FitOptions",
        "symnet.datasets.HmmTask",
        "symnet.display.receptive_field",
        "symnet.extend.Combine",
    ):
        assert f'id="{name}"' in api, name
    assert not re.search(r'id="symnet\._src', api)  # no private path is documented as API

    # offline: no web fonts, scripts or style sheets from elsewhere
    for page in site.rglob("*.html"):
        text = page.read_text()
        assert "fonts.googleapis" not in text and "fonts.gstatic" not in text, page
        assert not re.search(r"<script[^>]+src=\"https?://", text), page
        assert not re.search(r"<link[^>]+href=\"https?://[^\"]+\.css", text), page
