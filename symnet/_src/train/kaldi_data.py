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

Reading is safe on hostile files (`symnet._src.kaldi_io.ark`, `symnet._src.kaldi_io.tables`): sizes are checked before
anything is read, pickles are never loaded, and an scp entry that is a shell
command (`utt-1 cat feats.ark |`) runs only with `allow_pipes=True` (the CLI's
`--allow-pipes`). A command in the rspecifier itself (`ark:gunzip -c x.gz |`)
is the user's own and runs as in Kaldi.
"""

from __future__ import annotations

from collections.abc import Iterable
from typing import Any, NamedTuple

import attrs
import numpy as np

from ..base.errors import KaldiDataError
from ..kaldi_io.tables import Table

__all__ = [
    "KaldiData",
    "KaldiDataError",
    "Utterance",
    "check_subsampling",
    "checked_utterance",
    "read_kaldi_data",
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
    feats = Table(features, "features", allow_pipes)
    if not len(feats):
        raise KaldiDataError(f"features {features!r}: no utterances in it")
    tgts = Table(targets, "targets", allow_pipes)
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
