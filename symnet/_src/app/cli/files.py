"""The files a `symnet` command reads and writes, and the refusal of an output that would replace one of them.

Every command names its inputs and outputs (`Files`) before any work; `check`
refuses (SymnetError, naming both and the options they came from) an output
that is one of the inputs, unless `--force`, and two outputs that are one file,
always (one would replace the other: nothing `--force` could mean). Files are
compared as the system sees them: the same inode (a hard link, a symlink, a
path spelled another way), or, for an output not yet there, the same resolved
path. Devices, FIFOs and `-` (stdout) are never compared.
"""

from __future__ import annotations

import io
import os
import re
import stat
from collections.abc import Iterable

from ...base.errors import SymnetError
from ...base.safe_read import open_regular
from ...base.text import is_digits

__all__ = ["config_files", "Files", "rspecifier_files", "wspecifier_files"]

#: Lines of an scp file whose archives are compared (a corpus's scp has one per utterance, a few archives).
MAX_SCP_LINES = 1_000_000
_MAX_SCP_LINE = 1 << 16
_RANGE = re.compile(r"\[[^\]]*\]$")


def _specifier(spec: str) -> dict[str, str | None] | None:
    """kaldiio's reading of an r/wspecifier (`ark,t:a`, `scp:s`, `ark,scp:a,s`), None where it is not one."""
    from kaldiio.utils import parse_specifier

    try:
        parsed = parse_specifier(spec)
    except ValueError:
        return None
    return {"ark": parsed.get("ark"), "scp": parsed.get("scp")}


_NAMED_FILE = re.compile(r"(?:^|\s)(?:matrix|vector)=(\S+)")
_MAX_CONFIG_BYTES = 1 << 20  # the CLI's limit on a config


def config_files(path: str) -> list[str]:
    """The files a Kaldi config's lines name (`matrix=lda.mat`, `vector=...`), which a command reading the
    config reads too; none for a file that is not a config (a model: its text holds no such option)."""
    try:
        f, _ = open_regular(path, SymnetError, "config")  # a FIFO or device is never opened blocking: not read here
        with f:
            text = f.read(_MAX_CONFIG_BYTES).decode("utf-8", errors="replace")
    except (OSError, SymnetError):
        return []  # the reader says what is wrong with it
    return list(dict.fromkeys(m.group(1) for m in _NAMED_FILE.finditer(text)))


def _scp_files(scp: str) -> list[str]:
    """The archives an scp file's lines name (`key file[:offset][[ranges]]`); commands are left out."""
    files: dict[str, None] = {}
    try:
        raw, _ = open_regular(scp, SymnetError, "scp")  # a FIFO or device is never opened blocking: not read here
        with io.TextIOWrapper(raw, encoding="utf-8", errors="replace") as f:
            for _ in range(MAX_SCP_LINES):
                line = f.readline(_MAX_SCP_LINE)
                if not line:
                    break
                fields = line.split(maxsplit=1)
                entry = _RANGE.sub("", fields[1].strip()) if len(fields) == 2 else ""
                name, _, tail = entry.rpartition(":")
                entry = name if name and is_digits(tail) else entry
                if entry and "|" not in entry:
                    files[entry] = None
    except (OSError, SymnetError):
        pass  # the reader says what is wrong with it
    return list(files)


def rspecifier_files(spec: str | None) -> list[str]:
    """The files an rspecifier (or a plain path) reads: the archive, or the scp and the archives it names."""
    if not spec:
        return []
    parsed = _specifier(spec) if ":" in spec else {"ark": spec, "scp": None}
    if parsed is None:
        return [spec]
    scp, ark = parsed["scp"], parsed["ark"]
    if scp:
        return [scp, *_scp_files(scp)]
    return [ark] if ark and ark != "-" and "|" not in ark else []


def wspecifier_files(spec: str) -> list[str]:
    """The files a wspecifier writes (`ark:a`, `ark,scp:a,s`); none for `ark:-` or one that is not a wspecifier."""
    parsed = _specifier(spec)
    if parsed is None:
        return []
    return [path for path in (parsed["ark"], parsed["scp"]) if path and path != "-" and "|" not in path]


def _identity(path: str) -> tuple[object, ...] | None:
    """What makes two paths one file: an existing regular file's inode, else the resolved path (None for a
    device, FIFO or folder, or a path that cannot be looked at)."""
    try:
        st = os.stat(path)
    except FileNotFoundError:
        try:
            return ("path", os.path.realpath(path))
        except (OSError, ValueError):
            return None
    except (OSError, ValueError):  # a NUL byte (ValueError), a loop, no permission: the reader or writer says
        return None
    return ("inode", st.st_dev, st.st_ino) if stat.S_ISREG(st.st_mode) else None


class Files:
    """A command's inputs and outputs, each with what it is (`--write-stats`, 'the features')."""

    def __init__(self) -> None:
        self.inputs: list[tuple[str, str]] = []
        self.outputs: list[tuple[str, str]] = []

    def read(self, what: str, paths: Iterable[str | None]) -> Files:
        self.inputs += [(what, p) for p in paths if p]
        return self

    def write(self, what: str, paths: Iterable[str | None]) -> Files:
        self.outputs += [(what, p) for p in paths if p and p != "-"]
        return self

    def check(self, force: bool = False) -> None:
        """SymnetError where an output is an input (unless `force`) or two outputs are one file."""
        for what, path in self.outputs:
            if "\0" in path:
                raise SymnetError(f"the output {path!r} ({what}) has a NUL byte, which no file name can hold")
        outputs = [(what, path, _identity(path)) for what, path in self.outputs]
        for i, (what, path, key) in enumerate(outputs):
            for other, other_path, other_key in outputs[:i]:
                if key is not None and key == other_key:
                    raise SymnetError(
                        f"the outputs {other_path} ({other}) and {path} ({what}) are one file: one would replace "
                        "the other; give two different paths"
                    )
        if force:
            return
        existing = {key: (what, path) for what, path, key in outputs if key is not None and key[0] == "inode"}
        if not existing:
            return
        for what, path in self.inputs:
            key = _identity(path)
            if key in existing:
                out_what, out = existing[key]
                raise SymnetError(
                    f"the output {out} ({out_what}) is also an input ({what}: {path}): writing it would replace "
                    "the input; give another output (or --force)"
                )
