"""symnet._src.engine.compile_cache: where the cache lives, off switches, and an unusable folder."""

from __future__ import annotations

import os
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import jax
import pytest

from symnet._src.engine import cache_folder
from symnet._src.engine.compile_cache import ENV, cache_dir, default_cache_dir, enable_compile_cache, wrap_entry


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
        assert os.path.samefile(setting("jax_compilation_cache_dir"), folder)  # the folder, held open
        assert setting("jax_persistent_cache_min_compile_time_secs") == 0.0
        assert setting("jax_persistent_cache_min_entry_size_bytes") == -1
    finally:  # before anything compiles: JAX opens its cache at the first compilation
        for name, value in before.items():
            jax.config.update(name, value)


CACHE_SETTINGS = (
    "jax_compilation_cache_dir",
    "jax_persistent_cache_min_compile_time_secs",
    "jax_persistent_cache_min_entry_size_bytes",
)


@pytest.fixture()
def jax_settings() -> Iterator[None]:
    """JAX's cache settings put back after the test (nothing compiles in these tests, so JAX never opens it)."""
    before = {name: setting(name) for name in CACHE_SETTINGS}
    try:
        yield
    finally:
        for name, value in before.items():
            jax.config.update(name, value)


@pytest.mark.usefixtures("jax_settings")
def test_a_parent_others_may_write_without_the_sticky_bit_is_refused(tmp_path: Path) -> None:
    """Before: only the last folder was checked, so a neighbour who could write a parent could rename the 0700
    cache aside and put their own folder (and entries) in its place."""
    shared = tmp_path / "shared"
    (shared / "me").mkdir(parents=True)
    shared.chmod(0o777)
    before = setting("jax_compilation_cache_dir")
    with pytest.warns(UserWarning, match=rf"the folder {shared} on the way to it may be written by others without the"):
        assert enable_compile_cache(shared / "me" / "cache") is None
    assert setting("jax_compilation_cache_dir") == before
    shared.chmod(0o775)  # group-writable: refused as well
    with pytest.warns(UserWarning, match=r"is not usable .*mode 775"):
        assert enable_compile_cache(shared / "me" / "cache") is None


@pytest.mark.usefixtures("jax_settings")
def test_a_sticky_parent_such_as_tmp_is_fine(tmp_path: Path) -> None:
    sticky = tmp_path / "sticky"
    sticky.mkdir()
    sticky.chmod(0o1777)
    folder = enable_compile_cache(sticky / "mine")
    assert folder is not None and os.path.samefile(setting("jax_compilation_cache_dir"), sticky / "mine")
    assert (sticky / "mine").stat().st_mode & 0o777 == 0o700


@pytest.mark.usefixtures("jax_settings")
def test_a_link_of_this_user_is_followed_and_one_of_another_user_refused(tmp_path: Path) -> None:
    (tmp_path / "real").mkdir(mode=0o700)
    (tmp_path / "link").symlink_to("real")
    assert enable_compile_cache(tmp_path / "link" / "cache") is not None
    assert (tmp_path / "real" / "cache").is_dir()
    if os.geteuid() != 0:
        pytest.skip("giving a link to another user needs root")
    os.lchown(tmp_path / "link", 12345, 12345)  # before: accepted as the cache path
    with pytest.warns(UserWarning, match=rf"the symbolic link {tmp_path / 'link'} belongs to user id 12345"):
        assert enable_compile_cache(tmp_path / "link" / "cache") is None
    (tmp_path / "dir-link").symlink_to(tmp_path / "real" / "cache")
    os.lchown(tmp_path / "dir-link", 12345, 12345)
    with pytest.warns(UserWarning, match="belongs to user id 12345"):
        assert enable_compile_cache(tmp_path / "dir-link") is None


def checked_cache() -> Any:
    """The cache JAX would open for the folder `enable_compile_cache` set (JAX's own call, symnet's wrapper)."""
    from jax._src import compilation_cache

    cache, _ = compilation_cache.get_file_cache(setting("jax_compilation_cache_dir"))
    return cache


def swap(folder: Path, key: str, planted: bytes) -> None:
    """What a neighbour who can rename `folder` does: move it aside, put a folder of their own with an entry
    wrapped with the right key, version and digest in its place."""
    folder.rename(folder.parent / "aside")
    folder.mkdir(mode=0o700)
    (folder / f"{key}-cache").write_bytes(wrap_entry(key, planted))


@pytest.mark.usefixtures("jax_settings")
def test_a_folder_swapped_mid_run_is_not_read(tmp_path: Path) -> None:
    """Before: JAX looked the path up again for every entry, so the neighbour's entry ran."""
    folder = tmp_path / "p" / "cache"
    assert enable_compile_cache(folder) is not None
    cache = checked_cache()
    cache.put("jit_f-123", b"ours")
    assert cache.get("jit_f-123") == b"ours"
    swap(folder, "jit_f-123", b"theirs")
    with pytest.warns(UserWarning, match=rf"{folder} is no longer the folder symnet checked"):
        assert cache.get("jit_f-123") == b"ours"  # read from the folder that was checked
    cache.put("jit_g-456", b"new")
    assert (tmp_path / "p" / "aside" / "jit_g-456-cache").exists() and not (folder / "jit_g-456-cache").exists()


@pytest.mark.usefixtures("jax_settings")
def test_without_proc_a_swapped_folder_turns_the_cache_off(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setattr(cache_folder.Folder, "proc_path", property(lambda self: None))
    folder = tmp_path / "p" / "cache"
    assert enable_compile_cache(folder) is not None
    assert setting("jax_compilation_cache_dir") == str(folder)
    cache = checked_cache()
    cache.put("jit_f-123", b"ours")
    assert cache.get("jit_f-123") == b"ours"
    swap(folder, "jit_f-123", b"theirs")
    with pytest.warns(UserWarning, match="no longer the folder symnet checked.*compiling without it from now on"):
        assert cache.get("jit_f-123") is None
    cache.put("jit_g-456", b"new")
    assert not (folder / "jit_g-456-cache").exists()
