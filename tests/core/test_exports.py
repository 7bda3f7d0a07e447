"""symnet._src.base.exports: a public module's names are its stub's `from M import X as X` lines, imported on first
use."""

from __future__ import annotations

import subprocess
import sys
import types

import pytest

from symnet._src.base.exports import attach, stub_exports


def _module(tmp_path, monkeypatch, name: str, stub: str) -> types.ModuleType:
    (tmp_path / f"{name}.py").write_text("")
    (tmp_path / f"{name}.pyi").write_text(stub)
    module = types.ModuleType(name)
    module.__file__ = str(tmp_path / f"{name}.py")
    monkeypatch.setitem(sys.modules, name, module)
    return module


def test_a_stub_gives_the_names_and_each_is_imported_on_first_use(tmp_path, monkeypatch) -> None:
    m = _module(tmp_path, monkeypatch, "fake_public", "from json import dumps as dumps\nfrom os import path as path\n")
    getattr_, dir_, names = attach("fake_public", m.__file__)
    assert names == ["dumps", "path"]
    assert "dumps" not in vars(m)  # nothing imported yet
    import json
    import os

    assert getattr_("dumps") is json.dumps and vars(m)["dumps"] is json.dumps  # kept: found directly next time
    assert getattr_("path") is os.path
    assert {"dumps", "path"} <= set(dir_())
    with pytest.raises(AttributeError, match="fake_public.*'missing'"):
        getattr_("missing")


def test_eager_imports_every_name_at_once_and_deprecated_names_warn(tmp_path, monkeypatch) -> None:
    m = _module(tmp_path, monkeypatch, "fake_eager", "from json import loads as loads\n")
    getattr_, _, names = attach("fake_eager", m.__file__, eager=True, deprecated={"old": ("json", "dumps", "gone")})
    import json

    assert vars(m)["loads"] is json.loads and names == ["loads"]
    with pytest.warns(DeprecationWarning, match="gone"):
        assert getattr_("old") is json.dumps


@pytest.mark.parametrize(
    ("stub", "message"),
    [
        ("from json import dumps as to_text\n", "dumps as dumps"),  # PEP 484: only `X as X` re-exports
        ("from json import dumps\n", "dumps as dumps"),
        ("x = 1\n", "only `from M import X as X` lines, M absolute"),
        ("from .json import dumps as dumps\n", "M absolute"),  # the stub says where each name lives
        ("from json import dumps as dumps\nfrom pickle import dumps as dumps\n", "exported twice"),
    ],
)
def test_a_stub_that_is_not_a_plain_list_is_refused_naming_its_line(tmp_path, monkeypatch, stub, message) -> None:
    m = _module(tmp_path, monkeypatch, "fake_bad", stub)
    with pytest.raises(ImportError, match=message) as e:
        stub_exports(m.__file__)
    assert "fake_bad.pyi:" in str(e.value)


def test_import_symnet_and_its_lazy_modules_import_no_jax() -> None:
    code = (
        "import sys, symnet, symnet.train, symnet.kaldi; "
        "assert 'jax' not in sys.modules and 'numpy' not in sys.modules, sorted(sys.modules); "
        "symnet.Network; assert 'jax' in sys.modules"
    )
    subprocess.run([sys.executable, "-c", code], check=True)
