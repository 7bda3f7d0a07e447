"""docs/worked-examples.md: the TDNN-F and the BLSTM written in Python train with `fit`, save, load and evaluate;
the Conformer block trains and its loss goes down.

Each block runs as written (tests/docs/test_doc_blocks.py's runner); then its namespace is checked: the
loaded network equals the trained one, gives the same outputs, keeps the batch-norm state, and the
validation accuracy is far above chance (1/30) after the short training the page does.
"""

from __future__ import annotations

import pathlib

import numpy as np
import pytest

from helpers import REPO
from helpers.doc_blocks import python_blocks, run_block

PAGE = REPO / "docs" / "worked-examples.md"


def test_the_page_has_the_three_examples() -> None:
    blocks = python_blocks(PAGE)
    assert len(blocks) == 3 and "tdnnf(" in blocks[0] and "backward" in blocks[1] and "MultiHeadAttention" in blocks[2]


@pytest.mark.slow  # make test-all (with the docs' other examples)
def test_the_conformer_block_trains(tmp_path: pathlib.Path, monkeypatch: pytest.MonkeyPatch) -> None:
    """Three short epochs (about half a minute on a CPU): the training loss falls every epoch and the
    validation accuracy is far above chance (1/30)."""
    env = run_block(PAGE, 2, tmp_path, monkeypatch)
    losses = env["losses"]
    assert len(losses) == 3 and losses[0] > losses[1] > losses[2], losses
    assert env["conformer_accuracy"] > 0.35, env["conformer_accuracy"]


@pytest.mark.slow
@pytest.mark.parametrize(("k", "accuracy_name"), [(0, "tdnnf_accuracy"), (1, "blstm_accuracy")])
def test_worked_example_trains_saves_loads_and_evaluates(
    k: int, accuracy_name: str, tmp_path: pathlib.Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    env = run_block(PAGE, k, tmp_path, monkeypatch)
    trained, loaded, test = env["trained"], env["loaded"], env["test"]
    assert loaded.structure == trained.structure
    assert set(loaded.params) == set(trained.params) and set(loaded.state) == set(trained.state)
    for name, value in trained.values.items():
        np.testing.assert_array_equal(np.asarray(loaded.values[name]), np.asarray(value), err_msg=name)
    x = np.stack(test.features)[:3]
    np.testing.assert_array_equal(np.asarray(loaded.compute(x)), np.asarray(trained.compute(x)))
    if k == 0:  # batch-norm statistics: state, accumulated by fit, kept by the file
        assert trained.state and any(np.any(np.asarray(v) != 0) for v in loaded.state.values())
    history = env["result"].history
    assert len(history) == 2 and history[-1].valid_accuracy > history[0].valid_accuracy - 0.05
    assert env[accuracy_name] > 0.35, env[accuracy_name]
