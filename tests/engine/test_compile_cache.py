"""symnet._src.engine.compile_cache: where the cache lives, off switches, and an unusable folder."""

from __future__ import annotations

from pathlib import Path
from typing import Any

import jax
import pytest

from symnet._src.engine.compile_cache import ENV, cache_dir, default_cache_dir, enable_compile_cache


def setting(name: str) -> Any:
    """A jax.config value by name."""
    return getattr(jax.config, name)


def test_the_default_folder_follows_xdg_cache_home(monkeypatch: pytest.MonkeyPatch, tmp_path: Path) -> None:
    monkeypatch.setenv("XDG_CACHE_HOME", str(tmp_path))
    assert default_cache_dir() == tmp_path / "symnet" / "xla"
    monkeypatch.setenv("XDG_CACHE_HOME", "")
    monkeypatch.setenv("HOME", str(tmp_path / "home"))
    assert default_cache_dir() == tmp_path / "home" / ".cache" / "symnet" / "xla"


def test_a_given_path_wins_over_the_environment_then_the_default(
    monkeypatch: pytest.MonkeyPatch, tmp_path: Path
) -> None:
    monkeypatch.setenv("XDG_CACHE_HOME", str(tmp_path / "xdg"))
    monkeypatch.delenv(ENV, raising=False)
    assert cache_dir() == tmp_path / "xdg" / "symnet" / "xla"
    monkeypatch.setenv(ENV, str(tmp_path / "env"))
    assert cache_dir() == tmp_path / "env"
    assert cache_dir(tmp_path / "given") == tmp_path / "given"


@pytest.mark.parametrize("word", ["off", "OFF", "none", "0", "false", "no", ""])
def test_off_words_turn_the_cache_off(monkeypatch: pytest.MonkeyPatch, word: str) -> None:
    assert cache_dir(word) is None
    monkeypatch.setenv(ENV, word)
    assert cache_dir() is None
    assert enable_compile_cache() is None


def test_an_unusable_folder_warns_and_leaves_jax_alone(tmp_path: Path) -> None:
    (tmp_path / "file").write_text("x")
    before = setting("jax_compilation_cache_dir")
    with pytest.warns(UserWarning, match="compile cache .* is not usable"):
        assert enable_compile_cache(tmp_path / "file" / "cache") is None
    assert setting("jax_compilation_cache_dir") == before
    with pytest.warns(UserWarning, match=r"is not usable \(it is a file, not a folder\)"):  # was "(File exists)"
        assert enable_compile_cache(tmp_path / "file") is None


def test_enabling_sets_jax_to_cache_every_program(tmp_path: Path) -> None:
    names = (
        "jax_compilation_cache_dir",
        "jax_persistent_cache_min_compile_time_secs",
        "jax_persistent_cache_min_entry_size_bytes",
    )
    before = {name: setting(name) for name in names}
    try:
        folder = enable_compile_cache(tmp_path / "new" / "cache")
        assert folder == Path(tmp_path / "new" / "cache") and folder.is_dir()
        assert setting("jax_compilation_cache_dir") == str(folder)
        assert setting("jax_persistent_cache_min_compile_time_secs") == 0.0
        assert setting("jax_persistent_cache_min_entry_size_bytes") == -1
    finally:  # before anything compiles: JAX opens its cache at the first compilation
        for name, value in before.items():
            jax.config.update(name, value)
