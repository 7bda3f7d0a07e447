"""The files an xconfig's layers write (an idct-layer's matrix at its `affine-transform-file`), kept inside the
output folder.

The option's path is read as xconfig_to_configs.py reads it, from the working
folder (final.config names it so: `matrix=exp/tdnn/configs/idct.mat`), and it
must lie inside the folder symnet writes to (`--config-dir`, or the folder of
`-o`): no absolute path, no `..`, no symbolic link below that folder, nothing
there but a regular file. Anything else is a ConfigError naming the option and
the xconfig line, before any file is written. `AtomicFile(inside=...)` then
writes it without following a link, so a link planted after the check is
refused too.
"""

from __future__ import annotations

import os
import stat
from collections.abc import Iterable, Sequence
from typing import NamedTuple

import numpy as np

from ....base.text import clip
from .base import XLayer

__all__ = ["LayerFile", "kaldi_matrix_text", "layer_files"]


class LayerFile(NamedTuple):
    """A file a layer writes: its contents and what names it (`affine-transform-file of idct-layer idct,
    net.xconfig:2`)."""

    data: bytes
    what: str


def kaldi_matrix_text(matrix: np.ndarray) -> str:
    """A matrix in Kaldi's text format (`[ a b\\n c d ]`), as Kaldi's scripts write it."""
    rows = [" ".join(repr(float(v)) for v in row) for row in np.asarray(matrix, dtype=np.float64)]
    return "[ " + "\n".join(rows) + " ]"


def layer_files(
    layers: Sequence[XLayer], folder: str | os.PathLike[str], taken: Iterable[str] = ()
) -> dict[str, LayerFile]:
    """The files `layers` write, by the paths their options give, each checked to lie inside `folder` and to be
    none of `taken` (the files symnet writes there itself: final.config, vars, ...) nor another layer's."""
    folder = os.fspath(folder) or "."
    out: dict[str, LayerFile] = {}
    seen = {os.path.abspath(path): f"symnet ({os.path.basename(path)})" for path in taken}
    for layer in layers:
        matrices = layer.matrices()
        for key in layer.writes:
            path = str(layer.config[key])
            where = os.path.abspath(_inside(path, folder, layer, key))
            if where in seen:
                raise layer.error(f"{key}={clip(path)}: {seen[where]} writes that file too", key)
            seen[where] = f"{key} of {layer.what} ({layer.source.where})"
            out[path] = LayerFile(kaldi_matrix_text(matrices[path]).encode("utf-8"), seen[where])
    return out


def _inside(path: str, folder: str, layer: XLayer, key: str) -> str:
    """`path`, if it lies inside `folder` with no link on the way; a ConfigError at `key` of `layer` otherwise."""

    def refuse(why: str) -> Exception:
        return layer.error(
            f"{key}={clip(path)}: {why}; symnet writes the files an xconfig names only inside the output folder "
            f"{clip(folder)} (a relative path such as {os.path.join(folder, 'idct.mat')})",
            key,
        )

    if "\0" in path:
        raise refuse("the path has a NUL byte")
    if os.path.isabs(path):
        raise refuse("an absolute path")
    if os.pardir in path.replace("\\", "/").split("/"):
        raise refuse("the path goes up a folder ('..')")
    rel = os.path.relpath(os.path.abspath(path), os.path.abspath(folder))
    if rel == os.curdir or rel.split(os.sep)[0] == os.pardir:
        raise refuse("the path is outside the output folder")
    at = folder
    parts = rel.split(os.sep)
    for i, part in enumerate(parts):
        at = os.path.join(at, part)
        try:
            st = os.lstat(at)
        except FileNotFoundError:
            break
        except OSError as e:
            raise refuse(f"{clip(at)} cannot be looked at ({e.strerror})") from None
        if stat.S_ISLNK(st.st_mode):
            raise refuse(f"{clip(at)} is a symbolic link")
        if i == len(parts) - 1 and not stat.S_ISREG(st.st_mode):
            raise refuse(f"{clip(at)} is not a regular file")
    return path
