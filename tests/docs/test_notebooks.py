"""Every notebook in notebooks/ runs top to bottom without an error, in a kernel of this interpreter.

Notebooks are committed without outputs; this test executes them in memory
(nothing is written back) with nbclient, in the notebooks folder as the
working directory, as a reader running them in Jupyter would.
"""

from __future__ import annotations

import json
import os
import sys
import time

import nbformat
import pytest

from helpers import REPO

NOTEBOOKS = REPO / "notebooks"
PATHS = sorted(NOTEBOOKS.glob("*.ipynb"))
KERNEL = "symnet-test-python"


def test_there_are_notebooks():
    names = [p.name for p in PATHS]
    for expected in (
        "01-expressions-and-tape.ipynb",
        "02-descriptors.ipynb",
        "03-kaldi.ipynb",
        "04-recurrence.ipynb",
        "05-training.ipynb",
        "06-xconfig.ipynb",
        "07-cnn.ipynb",
    ):
        assert expected in names


@pytest.mark.parametrize("path", PATHS, ids=[p.stem for p in PATHS])
def test_notebook_is_committed_without_outputs(path):
    nb = nbformat.read(str(path), as_version=4)
    nbformat.validate(nb)
    for cell in nb.cells:
        if cell.cell_type == "code":
            assert cell.outputs == [] and cell.execution_count is None, f"{path.name}: strip the outputs"


@pytest.fixture(scope="module")
def kernel_dir(tmp_path_factory):
    """A kernelspec that runs this very interpreter (so the venv's symnet and ipykernel), found via JUPYTER_PATH."""
    root = tmp_path_factory.mktemp("jupyter")
    spec = root / "kernels" / KERNEL
    spec.mkdir(parents=True)
    (spec / "kernel.json").write_text(
        json.dumps(
            {
                "argv": [sys.executable, "-m", "ipykernel_launcher", "-f", "{connection_file}"],
                "display_name": "symnet tests",
                "language": "python",
                "env": {"MPLBACKEND": "module://matplotlib_inline.backend_inline"},
            }
        )
    )
    return root


@pytest.mark.slow
@pytest.mark.parametrize("path", PATHS, ids=[p.stem for p in PATHS])
def test_notebook_runs(path, kernel_dir, monkeypatch):
    import ipykernel  # noqa: F401  (the dev extra, which make test-all installs; make test's test extra has neither)
    import nbclient

    monkeypatch.setenv("JUPYTER_PATH", os.pathsep.join([str(kernel_dir), os.environ.get("JUPYTER_PATH", "")]))
    nb = nbformat.read(str(path), as_version=4)
    client = nbclient.NotebookClient(
        nb,
        kernel_name=KERNEL,
        timeout=300,
        startup_timeout=120,
        resources={"metadata": {"path": str(NOTEBOOKS)}},
    )
    started = time.perf_counter()
    client.execute()  # raises CellExecutionError, naming the cell, on any error
    elapsed = time.perf_counter() - started
    errors = [o for c in nb.cells if c.cell_type == "code" for o in c.outputs if o.get("output_type") == "error"]
    assert not errors, errors
    print(f"{path.name}: {elapsed:.1f} s")
