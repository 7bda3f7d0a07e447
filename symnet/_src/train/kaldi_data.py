"""Training data from Kaldi archives and scripts (`scp:feats.scp`, `ark:ali.ark`, `ark,t:ali.txt`) via `kaldiio`.

    data = read_kaldi_data("scp:data/train/feats.scp", "ark,t:exp/ali/pdf.txt")
    fit(network, data, optax.adam(1e-3))

Features are matrices `[T, D]`; targets are what Kaldi's alignments are (one
integer label per frame: `ali-to-pdf` output, for the `linear` objective) or
matrices `[T, K]` (for `quadratic`). Features and targets are matched by
utterance id, in the order of the features' table. Errors are
`KaldiDataError` (a `SymnetError`) and name the specifier and the utterance.
Like Kaldi's nnet3-get-egs, `skip_missing=True` drops utterances that have no
targets instead of failing (their ids are kept in `KaldiData.skipped`);
targets for utterances that have no features are ignored.

Reading is safe on hostile files (`symnet._src.train.ark`): sizes are checked before
anything is read, pickles are never loaded, and an scp entry that is a shell
command (`utt-1 cat feats.ark |`) runs only with `allow_pipes=True` (the CLI's
`--allow-pipes`). A command in the rspecifier itself (`ark:gunzip -c x.gz |`)
is the user's own and runs as in Kaldi.
"""

from __future__ import annotations

import contextlib
from collections.abc import Iterable, Iterator, Mapping
from typing import Any, NamedTuple

import attrs
import numpy as np

from .ark import KaldiDataError, Posterior, _read_object, _read_posterior, iter_ark, iter_scp, open_spec, read_entry

__all__ = [
    "KaldiData",
    "KaldiDataError",
    "Posterior",
    "Utterance",
    "check_subsampling",
    "checked_utterance",
    "iter_table",
    "read_kaldi_data",
    "read_posteriors",
    "read_table",
]

_SHOW = 5  # ids shown in an error message


def _frozen_arrays(arrays: Any) -> tuple[np.ndarray, ...]:
    out = []
    for a in arrays:
        a = np.array(a)  # a private copy, made read-only
        a.setflags(write=False)
        out.append(a)
    return tuple(out)


def _str_tuple(values: Iterable[str]) -> tuple[str, ...]:
    return tuple(values)


@attrs.frozen(eq=False)
class KaldiData:
    """Utterances read from Kaldi tables: ids, features `[T_i, D]` and targets `[T_i]` or `[T_i, K]`.

    `fit` takes it as it is (it has `features` and `labels`, like `symnet.datasets.Dataset`).
    """

    utt_ids: tuple[str, ...] = attrs.field(converter=_str_tuple)
    features: tuple[np.ndarray, ...] = attrs.field(converter=_frozen_arrays, repr=False)
    targets: tuple[np.ndarray, ...] = attrs.field(converter=_frozen_arrays, repr=False)
    skipped: tuple[str, ...] = attrs.field(converter=_str_tuple, default=())

    def __attrs_post_init__(self) -> None:
        if not (len(self.utt_ids) == len(self.features) == len(self.targets)):
            raise KaldiDataError(
                f"{len(self.utt_ids)} utterance ids, {len(self.features)} feature matrices and "
                f"{len(self.targets)} targets: they must be as many"
            )

    @property
    def labels(self) -> tuple[np.ndarray, ...]:
        """The targets (the name `fit` and `symnet.datasets.Dataset` use)."""
        return self.targets

    @property
    def lengths(self) -> np.ndarray:
        """Frames per utterance, int64 `[N]`."""
        return np.array([len(f) for f in self.features], dtype=np.int64)

    @property
    def num_frames(self) -> int:
        return int(self.lengths.sum())

    @property
    def feat_dim(self) -> int | None:
        return self.features[0].shape[1] if self.features else None

    def __len__(self) -> int:
        return len(self.utt_ids)

    def __getitem__(self, utt_id: str) -> tuple[np.ndarray, np.ndarray]:
        """`(features, targets)` of one utterance by id."""
        try:
            i = self.utt_ids.index(utt_id)
        except ValueError:
            raise KeyError(utt_id) from None
        return self.features[i], self.targets[i]

    def split(self, fraction: float) -> tuple[KaldiData, KaldiData]:
        """`(train, held_out)`: the last `fraction` of the utterances by id held out (at least one; the same
        utterances every run, whatever order the tables had), the rest kept for training."""
        if not 0 < fraction < 1:
            raise KaldiDataError(f"the held-out fraction must be between 0 and 1, got {fraction!r}")
        if len(self) < 2:
            raise KaldiDataError(f"cannot hold out a fraction of {len(self)} utterance(s)")
        order = sorted(range(len(self)), key=lambda i: self.utt_ids[i])
        held = max(1, round(fraction * len(self)))
        keep, out = order[: len(self) - held], order[len(self) - held :]

        def subset(rows: list[int]) -> KaldiData:
            return KaldiData(
                [self.utt_ids[i] for i in rows], [self.features[i] for i in rows], [self.targets[i] for i in rows]
            )

        return subset(keep), subset(out)

    def __repr__(self) -> str:
        return f"KaldiData({len(self)} utterances, {self.num_frames} frames, dim {self.feat_dim})"


def _ids(ids: list[str]) -> str:
    shown = ", ".join(repr(i) for i in ids[:_SHOW])
    return shown + (f" and {len(ids) - _SHOW} more" if len(ids) > _SHOW else "")


class Utterance(NamedTuple):
    """The first utterance of a table, that every other must agree with: its key, feature dim, target shape."""

    key: str
    dim: int
    target_shape: tuple[int, ...]


def check_subsampling(frame_subsampling_factor: object) -> None:
    """A KaldiDataError unless `frame_subsampling_factor` is an integer >= 1."""
    factor = frame_subsampling_factor
    if isinstance(factor, bool) or not isinstance(factor, int) or factor < 1:
        raise KaldiDataError(f"frame_subsampling_factor must be an integer >= 1, got {factor!r}")


def checked_utterance(
    key: str,
    f: np.ndarray,
    t: np.ndarray,
    features: str,
    targets: str,
    first: Utterance | None,
    frame_subsampling_factor: int = 1,
) -> tuple[np.ndarray, np.ndarray]:
    """One utterance's `(features float32 [T, D], targets int32 [T] or float32 [T, K])`, checked against itself
    and the `first` (None: this is the first); a KaldiDataError naming the tables and the utterance says what is
    wrong. A subsampled alignment (`ceil(T / k)` labels for `frame_subsampling_factor=k`) is held for its k
    frames."""
    if f.ndim != 2:
        raise KaldiDataError(
            f"features {features!r}: utterance {key!r} has shape {f.shape}, not a matrix [frames, dim]"
        )
    if len(f) == 0:
        raise KaldiDataError(f"features {features!r}: utterance {key!r} has no frames")
    if first is not None and f.shape[1] != first.dim:
        raise KaldiDataError(
            f"features {features!r}: utterance {key!r} has dim {f.shape[1]}, but {first.key!r} has dim {first.dim}"
        )
    if not np.isfinite(f).all():
        row, col = (int(i) for i in np.argwhere(~np.isfinite(f))[0])
        raise KaldiDataError(f"features {features!r}: utterance {key!r} has {f[row, col]} at frame {row}, dim {col}")
    if t.ndim not in (1, 2):
        raise KaldiDataError(
            f"targets {targets!r}: utterance {key!r} has shape {t.shape}; "
            "expected one label per frame [T] or a matrix [T, K]"
        )
    if first is not None and t.shape[1:] != first.target_shape:
        raise KaldiDataError(
            f"targets {targets!r}: utterance {key!r} has shape {t.shape}, but utterance "
            f"{first.key!r} has shape (frames,) + {first.target_shape}"
        )
    k = frame_subsampling_factor
    if k > 1 and t.ndim == 1 and len(t) == -(-len(f) // k):
        # a subsampled alignment (label of frame k*i at i): each label held for its k frames, so that fit's
        # frame_subsampling_factor=k, which trains frames 0, k, 2k, ..., reads the alignment's labels back
        t = np.repeat(t, k)[: len(f)]
    if len(t) != len(f):
        raise KaldiDataError(
            f"utterance {key!r}: {len(f)} frames of features but {len(t)} targets in {targets!r} "
            "(an alignment has one label per frame, or ceil(frames / k) with frame_subsampling_factor=k; was it "
            "made with frame subsampling, or for other features?)"
        )
    if t.ndim == 1 and not np.issubdtype(t.dtype, np.integer):
        raise KaldiDataError(
            f"targets {targets!r}: utterance {key!r} is a {t.dtype} vector, not integer labels (an alignment)"
        )
    if t.ndim == 1 and len(t) and t.min() < 0:
        raise KaldiDataError(
            f"targets {targets!r}: utterance {key!r} has label {int(t.min())}; labels are pdf-ids >= 0"
        )
    return np.asarray(f, dtype=np.float32), (t.astype(np.int32) if t.ndim == 1 else np.asarray(t, dtype=np.float32))


def _parse(spec: Any, what: str) -> tuple[str, str]:
    """`('ark' | 'scp', path)` of a Kaldi rspecifier, or a KaldiDataError saying what is wrong."""
    import kaldiio

    if not isinstance(spec, str):
        raise KaldiDataError(
            f"{what}: expected a Kaldi rspecifier such as 'scp:feats.scp' or 'ark:ali.ark', "
            f"got {spec!r} ({type(spec).__name__})"
        )
    if ":" not in spec:
        raise KaldiDataError(
            f"{what} {spec!r} is not a Kaldi rspecifier: it has no 'scp:' or 'ark:' prefix; "
            "write e.g. 'scp:feats.scp', 'ark:ali.ark' or 'ark,t:ali.txt'"
        )
    try:
        parsed = kaldiio.parse_specifier(spec)
    except ValueError as e:
        raise KaldiDataError(
            f"{what} {spec!r} is not a Kaldi rspecifier ({e}); "
            "write e.g. 'scp:feats.scp', 'ark:ali.ark' or 'ark,t:ali.txt'"
        ) from None
    if parsed["ark"] is not None and parsed["scp"] is not None:
        raise KaldiDataError(f"{what} {spec!r}: an rspecifier for reading names either an ark or an scp, not both")
    kind = "scp" if parsed["scp"] is not None else "ark"
    path = parsed[kind]
    if not path:
        raise KaldiDataError(f"{what} {spec!r}: no file name after the ':'")
    return kind, path


@contextlib.contextmanager
def _reading(spec: str, what: str) -> Iterator[None]:
    """Turn the OS's and kaldiio's errors while opening or reading `spec` into KaldiDataErrors."""
    try:
        yield
    except KaldiDataError as e:
        raise KaldiDataError(f"{what} {spec!r}: cannot read it: {e}") from None
    except Exception as e:  # kaldiio and the OS signal bad files with many types
        raise KaldiDataError(f"{what} {spec!r}: cannot read it: {type(e).__name__}: {e}") from None


def _scp_entries(path: str, spec: str, what: str, allow_pipes: bool) -> dict[str, str]:
    entries: dict[str, str] = {}
    with _reading(spec, what), open_spec(path, "r") as f:
        for key, entry in iter_scp(f, path, allow_pipes):
            entries[key] = entry  # a later line wins, as in kaldiio
    return entries


def iter_table(spec: str, what: str = "table", *, allow_pipes: bool = False) -> Iterator[tuple[str, np.ndarray]]:
    """`(utterance id, array)` for every entry of a Kaldi rspecifier, in order, reading one at a time."""
    return _iter_table(spec, what, allow_pipes, False)


def _iter_table(spec: str, what: str, allow_pipes: bool, posterior: bool) -> Iterator[tuple[str, Any]]:
    kind, path = _parse(spec, what)
    if kind == "scp":
        for key, entry in _scp_entries(path, spec, what, allow_pipes).items():
            with _reading(spec, what):
                value = read_entry(entry, path, key, allow_pipes, posterior=posterior)
            yield key, value
        return
    with _reading(spec, what), open_spec(path, "rb") as f:
        yield from iter_ark(f, path, _read_posterior if posterior else _read_object)


class _Table(Mapping[str, Any]):
    """A Kaldi table as an ordered mapping id -> array (or `Posterior`); scp tables read an entry when it is
    asked for."""

    def __init__(self, spec: str, what: str, allow_pipes: bool = False, posterior: bool = False):
        self.spec, self.what, self.allow_pipes, self.posterior = spec, what, allow_pipes, posterior
        kind, self.path = _parse(spec, what)
        self._values: dict[str, Any] = {}
        self._scp: dict[str, str] | None = None
        if kind == "scp":
            self._scp = _scp_entries(self.path, spec, what, allow_pipes)
            self._keys = list(self._scp)
        else:
            for key, value in _iter_table(spec, what, allow_pipes, posterior):
                if key in self._values:
                    raise KaldiDataError(f"{what} {spec!r}: utterance {key!r} appears twice")
                self._values[key] = value
            self._keys = list(self._values)

    def __getitem__(self, key: str) -> Any:
        if self._scp is None:
            return self._values[key]
        if key not in self._scp:
            raise KeyError(key)
        with _reading(self.spec, self.what):
            return read_entry(self._scp[key], self.path, key, self.allow_pipes, posterior=self.posterior)

    def __contains__(self, key: object) -> bool:
        return key in (self._scp if self._scp is not None else self._values)

    def __iter__(self) -> Iterator[str]:
        return iter(self._keys)

    def __len__(self) -> int:
        return len(self._keys)


def read_table(spec: str, what: str = "table", *, allow_pipes: bool = False) -> Mapping[str, np.ndarray]:
    """A Kaldi table (`scp:...`, `ark:...`, `ark,t:...`, `ark:cmd |`) as an ordered mapping utterance id -> array.

    scp tables are read lazily, one entry when it is asked for; an scp entry that is a
    command runs only with `allow_pipes` (see the module doc).
    """
    return _Table(spec, what, allow_pipes)


def read_posteriors(spec: str, what: str = "posteriors", *, allow_pipes: bool = False) -> Mapping[str, Posterior]:
    """A table of Kaldi posteriors (`ali-to-post` output, binary or text `[ pdf weight ... ] ...`) as an
    ordered mapping utterance id -> `Posterior` (scp tables read lazily, as `read_table`)."""
    return _Table(spec, what, allow_pipes, posterior=True)


def read_kaldi_data(
    features: str,
    targets: str,
    *,
    skip_missing: bool = False,
    allow_pipes: bool = False,
    frame_subsampling_factor: int = 1,
) -> KaldiData:
    """Features and targets from two Kaldi rspecifiers, matched by utterance id.

    `features`: matrices `[T, D]` (e.g. `scp:data/train/feats.scp`).
    `targets`: per-frame integer labels `[T]` (alignments, e.g. `ark:gunzip -c ali.1.gz | ali-to-pdf ... ark:- |`
    written out first, or `ark,t:pdf_ali.txt`) or matrices `[T, K]`; one per feature frame.
    Utterances come in the order of the features' table. An utterance without targets is an
    error unless `skip_missing` (then it is left out and listed in `.skipped`). An scp entry
    that is a shell command runs only with `allow_pipes` (see the module doc).
    With `frame_subsampling_factor=k` an alignment of `ceil(T / k)` labels (made at the subsampled rate, as a
    chain model's) is also taken: each label is repeated for its k frames, so that `fit(...,
    frame_subsampling_factor=k)` trains output frame `k * i` on label `i`. Full-length alignments are taken too.
    """
    check_subsampling(frame_subsampling_factor)
    feats = _Table(features, "features", allow_pipes)
    if not len(feats):
        raise KaldiDataError(f"features {features!r}: no utterances in it")
    tgts = _Table(targets, "targets", allow_pipes)
    if not len(tgts):
        raise KaldiDataError(f"targets {targets!r}: no utterances in it")
    missing = [key for key in feats if key not in tgts]
    if missing and (not skip_missing or len(missing) == len(feats)):
        common = "" if len(missing) < len(feats) else " (no utterance id in common)"
        raise KaldiDataError(
            f"targets {targets!r} have no entry for {len(missing)} of the {len(feats)} utterances of "
            f"features {features!r}{common}: {_ids(missing)}"
            + ("" if skip_missing or common else "; pass skip_missing=True to leave them out")
        )
    ids: list[str] = []
    feature_list: list[np.ndarray] = []
    target_list: list[np.ndarray] = []
    first: Utterance | None = None
    for key in feats:
        if key not in tgts:
            continue
        f, t = checked_utterance(key, feats[key], tgts[key], features, targets, first, frame_subsampling_factor)
        first = first or Utterance(key, f.shape[1], t.shape[1:])
        ids.append(key)
        feature_list.append(f)
        target_list.append(t)
    return KaldiData(ids, feature_list, target_list, skipped=missing)
