"""Where the user built something: the `file:line` of the innermost frame outside symnet.

Every layer records it (`Layer.where`) so that an error about a node points at
the user's line, not at symnet's internals. In a notebook, where code lives in
temporary files, the location is IPython's cell label (`In [3], line 2`).
"""

from __future__ import annotations

import os
import sys
import types

__all__ = ["user_line"]

_PACKAGE_DIR = os.path.dirname(os.path.dirname(os.path.abspath(__file__)))


def user_line() -> str | None:
    """The `file:line` of the innermost caller outside symnet (and attrs' generated code)."""
    frame: types.FrameType | None = sys._getframe(1)
    while frame is not None:
        filename = frame.f_code.co_filename
        if not (filename.startswith(_PACKAGE_DIR) or filename.startswith("<attrs")):
            return _cell_label(filename, frame.f_lineno) or f"{filename}:{frame.f_lineno}"
        frame = frame.f_back
    return None


def _cell_label(filename: str, line: int) -> str | None:
    """`In [n], line k` for code run in an IPython cell (its file is a temporary one), else None."""
    if "ipykernel_" not in filename and not filename.startswith("<ipython-input-"):
        return None
    ipython = sys.modules.get("IPython")
    shell = ipython.get_ipython() if ipython is not None and hasattr(ipython, "get_ipython") else None
    number = getattr(getattr(shell, "compile", None), "_filename_map", {}).get(filename)
    return f"In [{number}], line {line}" if isinstance(number, int) else f"a notebook cell, line {line}"
