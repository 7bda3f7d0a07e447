"""The implementation behind `symnet.datasets` (private: import its names from `symnet.datasets`, whose docstring
says what they are)."""

from __future__ import annotations

import numbers
from collections.abc import Callable, Iterable, Iterator, Sequence
from typing import Any

import attrs
import numpy as np
import numpy.typing as npt

from .base.errors import ShapeError
from .base.levenshtein import edit_distance

__all__ = ["accuracy", "Dataset", "HmmTask", "MAX_SAMPLE_VALUES", "phone_error_rate"]


def _array_key(a: np.ndarray) -> tuple[tuple[int, ...], str, bytes]:
    return (a.shape, a.dtype.str, a.tobytes())


def _readonly(dtype: npt.DTypeLike) -> Callable[[Any], np.ndarray]:
    def convert(value: Any) -> np.ndarray:
        if isinstance(value, np.ndarray) and value.dtype == dtype and value.flags.owndata and not value.flags.writeable:
            return value  # already one of ours: share it (split, evolve)
        array = np.array(value, dtype=dtype)  # a private copy
        array.setflags(write=False)
        return array

    return convert


def _array_field(dtype: npt.DTypeLike = np.float64) -> Any:
    return attrs.field(converter=_readonly(dtype), eq=_array_key, repr=False)


def _logsumexp(x: np.ndarray, axis: int) -> np.ndarray:
    """log(sum(exp(x))) along `axis`, exact for -inf entries and all--inf slices."""
    m = np.max(x, axis=axis, keepdims=True)
    m = np.where(np.isfinite(m), m, 0.0)
    with np.errstate(divide="ignore"):
        return np.log(np.sum(np.exp(x - m), axis=axis)) + np.squeeze(m, axis=axis)


def _log(p: np.ndarray) -> np.ndarray:
    with np.errstate(divide="ignore"):
        return np.log(p)


def _float_arrays(fs: Iterable[Any]) -> tuple[np.ndarray, ...]:
    return tuple(_readonly(np.float32)(f) for f in fs)


def _int_arrays(ls: Iterable[Any]) -> tuple[np.ndarray, ...]:
    return tuple(_readonly(np.int32)(lab) for lab in ls)


def _arrays_key(arrays: tuple[np.ndarray, ...]) -> tuple[tuple[tuple[int, ...], str, bytes], ...]:
    return tuple(map(_array_key, arrays))


@attrs.frozen
class Dataset:
    """Sequences of features `[T_i, D]` (float32) and their state labels `[T_i]` (int32)."""

    features: tuple[np.ndarray, ...] = attrs.field(converter=_float_arrays, eq=_arrays_key, repr=False)
    labels: tuple[np.ndarray, ...] = attrs.field(converter=_int_arrays, eq=_arrays_key, repr=False)

    def __attrs_post_init__(self) -> None:
        if len(self.features) != len(self.labels):
            raise ShapeError(f"{len(self.features)} feature arrays but {len(self.labels)} label arrays")
        for i, (f, lab) in enumerate(zip(self.features, self.labels)):
            if f.ndim != 2 or lab.ndim != 1 or f.shape[0] != lab.shape[0] or f.shape[0] == 0:
                raise ShapeError(
                    f"sequence {i}: features of shape {f.shape} and labels of shape {lab.shape}; "
                    "want [T, D] and [T] with T >= 1"
                )
        dims = {f.shape[1] for f in self.features}
        if len(dims) > 1:
            raise ShapeError(f"sequences differ in feature dim: {sorted(dims)}")

    def __len__(self) -> int:
        return len(self.features)

    def __repr__(self) -> str:
        return f"Dataset({len(self)} sequences, {self.num_frames} frames, dim {self.feat_dim})"

    @property
    def lengths(self) -> np.ndarray:
        """Frames per sequence, int64 `[N]`."""
        return np.array([f.shape[0] for f in self.features], dtype=np.int64)

    @property
    def num_frames(self) -> int:
        return int(self.lengths.sum())

    @property
    def feat_dim(self) -> int | None:
        return self.features[0].shape[1] if self.features else None

    def split(self, fraction: float) -> tuple[Dataset, Dataset]:
        """The first `round(fraction * N)` sequences and the rest (sequences are already i.i.d.)."""
        if not 0.0 < fraction < 1.0:
            raise ShapeError(f"split fraction {fraction!r} is not strictly between 0 and 1")
        if len(self) < 2:
            raise ShapeError(f"cannot split a dataset of {len(self)} sequence(s) in two")
        k = min(max(int(round(fraction * len(self))), 1), len(self) - 1)
        return (Dataset(self.features[:k], self.labels[:k]), Dataset(self.features[k:], self.labels[k:]))

    def padded(self, pad_label: int = -1) -> tuple[np.ndarray, np.ndarray, np.ndarray]:
        """Features `[N, T_max, D]` (zero padded), labels `[N, T_max]` (`pad_label` padded), mask `[N, T_max]`."""
        _check_nonempty(self)
        n, t_max, dim = len(self), int(self.lengths.max()), self.features[0].shape[1]
        x = np.zeros((n, t_max, dim), np.float32)
        y = np.full((n, t_max), pad_label, np.int32)
        mask = np.zeros((n, t_max), bool)
        for i, (f, lab) in enumerate(zip(self.features, self.labels)):
            x[i, : len(lab)], y[i, : len(lab)], mask[i, : len(lab)] = f, lab, True
        return x, y, mask


def _check_nonempty(dataset: Dataset) -> None:
    if len(dataset) == 0:
        raise ShapeError("dataset is empty (0 sequences)")


#: The most feature values `HmmTask.sample` draws in one call (float64, with as many again for the noise).
MAX_SAMPLE_VALUES = 1 << 28


@attrs.frozen
class HmmTask:
    """The generative model: an HMM over `num_phones * states_per_phone` states with diagonal Gaussians.

    State `s` is position `s % states_per_phone` of phone `s // states_per_phone`.
    `init[s]` and `trans[s, s2]` are probabilities; `means`, `variances` are
    `[num_states, feat_dim]`. Build one with `HmmTask.create`.
    """

    states_per_phone: int
    min_length: int
    max_length: int
    init: np.ndarray = _array_field()
    trans: np.ndarray = _array_field()
    means: np.ndarray = _array_field()
    variances: np.ndarray = _array_field()

    def __attrs_post_init__(self) -> None:
        s, d = self.means.shape if self.means.ndim == 2 else (None, None)
        if s is None or self.variances.shape != (s, d) or self.init.shape != (s,) or self.trans.shape != (s, s):
            raise ShapeError(
                f"inconsistent shapes: init {self.init.shape}, trans {self.trans.shape}, "
                f"means {self.means.shape}, variances {self.variances.shape}"
            )
        if not 1 <= self.min_length <= self.max_length:
            raise ShapeError(f"lengths [{self.min_length}, {self.max_length}] are not 1 <= min <= max")
        if not np.all(self.variances > 0):
            raise ShapeError(f"variances must be positive; smallest is {self.variances.min()}")
        if s % self.states_per_phone:
            raise ShapeError(f"{s} states are not a whole number of phones of {self.states_per_phone} states")
        for name, p in (("init", self.init), ("trans", self.trans)):
            if np.any(p < 0) or not np.allclose(p.sum(-1), 1.0):
                raise ShapeError(f"{name} is not a probability distribution (row sums {np.round(p.sum(-1), 6)})")

    @classmethod
    def create(
        cls,
        seed: int = 0,
        *,
        num_phones: int = 10,
        states_per_phone: int = 3,
        feat_dim: int = 16,
        successors: int = 3,
        self_loop: tuple[float, float] = (0.5, 0.8),
        phone_scale: float = 0.6,
        state_scale: float = 0.3,
        variance_range: tuple[float, float] = (0.6, 1.4),
        min_length: int = 100,
        max_length: int = 300,
    ) -> HmmTask:
        """A random task: left-to-right phones with self-loop probabilities drawn from `self_loop`,
        each phone followed by one of `successors` other phones (Dirichlet(1) weights), state means a phone
        mean ~ N(0, phone_scale^2) plus a state offset ~ N(0, state_scale^2) per dim, and variances uniform
        in `variance_range`. The first state of every phone is an equally likely start."""
        if num_phones < 2 or states_per_phone < 1 or feat_dim < 1:
            raise ShapeError(
                f"need num_phones >= 2, states_per_phone >= 1, feat_dim >= 1; got "
                f"{num_phones}, {states_per_phone}, {feat_dim}"
            )
        if not 1 <= successors <= num_phones - 1:
            raise ShapeError(f"successors={successors} not in [1, num_phones - 1 = {num_phones - 1}]")
        if not 0.0 <= self_loop[0] <= self_loop[1] < 1.0:
            raise ShapeError(f"self_loop range {self_loop} is not within [0, 1)")
        rng = np.random.default_rng(seed)
        p, k = num_phones, states_per_phone
        s = p * k
        bigram = np.zeros((p, p))
        for a in range(p):
            others = np.delete(np.arange(p), a)
            nxt = rng.choice(others, size=successors, replace=False)
            bigram[a, nxt] = rng.dirichlet(np.ones(successors))
        loops = rng.uniform(*self_loop, size=s)
        trans = np.zeros((s, s))
        for state in range(s):
            phone, pos = divmod(state, k)
            trans[state, state] = loops[state]
            if pos < k - 1:
                trans[state, state + 1] = 1.0 - loops[state]
            else:
                trans[state, np.arange(p) * k] = (1.0 - loops[state]) * bigram[phone]
        init = np.zeros(s)
        init[np.arange(p) * k] = 1.0 / p
        phone_means = rng.normal(0.0, phone_scale, size=(p, 1, feat_dim))
        means = (phone_means + rng.normal(0.0, state_scale, size=(p, k, feat_dim))).reshape(s, feat_dim)
        variances = rng.uniform(*variance_range, size=(s, feat_dim))
        return cls(k, min_length, max_length, init, trans, means, variances)

    @property
    def num_states(self) -> int:
        return self.means.shape[0]

    @property
    def feat_dim(self) -> int:
        return self.means.shape[1]

    def __repr__(self) -> str:
        return (
            f"HmmTask(num_states={self.num_states}, states_per_phone={self.states_per_phone}, "
            f"feat_dim={self.feat_dim}, lengths=[{self.min_length}, {self.max_length}])"
        )

    # -- sampling -------------------------------------------------------------------------------------

    def sample(self, num_sequences: int, seed: int) -> Dataset:
        """`num_sequences` i.i.d. sequences, lengths uniform in [min_length, max_length]; pure in `seed`.

        At most MAX_SAMPLE_VALUES feature values are drawn in one call (a ShapeError beyond, before anything
        is allocated): draw more in several calls with other seeds."""
        if isinstance(num_sequences, bool) or not isinstance(num_sequences, numbers.Integral) or num_sequences < 1:
            raise ShapeError(f"num_sequences={num_sequences!r} must be an integer >= 1")
        values = int(num_sequences) * self.max_length * self.feat_dim
        if values > MAX_SAMPLE_VALUES:
            raise ShapeError(
                f"num_sequences={num_sequences}: up to {values} feature values ({num_sequences} sequences of up "
                f"to {self.max_length} frames of {self.feat_dim}), more than the {MAX_SAMPLE_VALUES} one call "
                f"draws (at most {MAX_SAMPLE_VALUES // (self.max_length * self.feat_dim)} sequences)"
            )
        rng = np.random.default_rng(seed)
        lengths = rng.integers(self.min_length, self.max_length + 1, size=num_sequences)
        t_max = int(lengths.max())
        cum_init, cum_trans = np.cumsum(self.init), np.cumsum(self.trans, axis=1)
        u = rng.random((t_max, num_sequences))
        states = np.empty((t_max, num_sequences), np.int64)
        states[0] = np.minimum((u[0][:, None] >= cum_init).sum(1), self.num_states - 1)
        for t in range(1, t_max):  # all sequences in step; rows past a sequence's end are dropped
            states[t] = np.minimum((u[t][:, None] >= cum_trans[states[t - 1]]).sum(1), self.num_states - 1)
        noise = rng.standard_normal((t_max, num_sequences, self.feat_dim))
        feats = self.means[states] + np.sqrt(self.variances[states]) * noise
        return Dataset([feats[:n, i] for i, n in enumerate(lengths)], [states[:n, i] for i, n in enumerate(lengths)])

    # -- exact inference -------------------------------------------------------------------------------

    def _check_features(self, features: np.ndarray, where: str = "features") -> np.ndarray:
        x = np.asarray(features, dtype=np.float64)
        if x.ndim != 2 or x.shape[1] != self.feat_dim or x.shape[0] == 0:
            raise ShapeError(f"{where} of shape {x.shape}; want [T >= 1, {self.feat_dim}]")
        if not np.all(np.isfinite(x)):
            raise ShapeError(f"{where} contain non-finite values (first at frame {np.argwhere(~np.isfinite(x))[0, 0]})")
        return x

    def _check_dataset(self, dataset: Dataset) -> None:
        _check_nonempty(dataset)
        if dataset.feat_dim != self.feat_dim:
            raise ShapeError(f"dataset feature dim {dataset.feat_dim} != task feature dim {self.feat_dim}")
        for i, lab in enumerate(dataset.labels):
            if lab.min() < 0 or lab.max() >= self.num_states:
                raise ShapeError(f"sequence {i}: labels in [{lab.min()}, {lab.max()}], outside [0, {self.num_states})")

    def log_likelihoods(self, features: np.ndarray) -> np.ndarray:
        """log N(x_t | state s) for every frame and state, `[T, S]` float64."""
        x = self._check_features(features)
        return self._loglik(x)

    def _loglik(self, x: np.ndarray) -> np.ndarray:
        diff = x[..., None, :] - self.means
        return -0.5 * (np.sum(diff * diff / self.variances, -1) + np.sum(np.log(2 * np.pi * self.variances), -1))

    def _log_posteriors_batch(self, ll: np.ndarray, lengths: np.ndarray) -> np.ndarray:
        """Forward-backward in log space over a padded batch `ll [N, T_max, S]`; returns log posteriors."""
        n, t_max, s = ll.shape
        log_a = _log(self.trans)
        alpha = np.empty_like(ll)
        alpha[:, 0] = _log(self.init) + ll[:, 0]
        for t in range(1, t_max):
            alpha[:, t] = _logsumexp(alpha[:, t - 1, :, None] + log_a, axis=1) + ll[:, t]
        beta = np.zeros_like(ll)
        for t in range(t_max - 2, -1, -1):
            step = _logsumexp(log_a + (ll[:, t + 1] + beta[:, t + 1])[:, None, :], axis=2)
            beta[:, t] = np.where((t >= lengths - 1)[:, None], 0.0, step)
        gamma = alpha + beta
        return gamma - _logsumexp(gamma, axis=2)[..., None]

    def log_posteriors(self, features: np.ndarray) -> np.ndarray:
        """Exact log P(state_t = s | x_1..x_T), `[T, S]`, by forward-backward in log space."""
        ll = self.log_likelihoods(features)
        return self._log_posteriors_batch(ll[None], np.array([ll.shape[0]]))[0]

    def posteriors(self, features: np.ndarray) -> np.ndarray:
        """Exact P(state_t = s | whole sequence), `[T, S]`; rows sum to 1."""
        return np.exp(self.log_posteriors(features))

    def _batches(self, dataset: Dataset, size: int = 64) -> Iterator[tuple[np.ndarray, np.ndarray, np.ndarray]]:
        """Padded log-likelihood batches of similar length: (indices, ll [n, T_max, S], lengths)."""
        lengths = dataset.lengths
        order = np.argsort(lengths, kind="stable")
        for start in range(0, len(order), size):
            idx = order[start : start + size]
            t_max = int(lengths[idx].max())
            x = np.zeros((len(idx), t_max, self.feat_dim))
            for j, i in enumerate(idx):
                x[j, : lengths[i]] = self._check_features(dataset.features[i], f"sequence {i} features")
            yield idx, self._loglik(x), lengths[idx]

    def bayes_accuracy(self, dataset: Dataset) -> float:
        """Frame accuracy of argmax of exact posteriors: the best any classifier can do on average."""
        self._check_dataset(dataset)
        correct = 0
        for idx, ll, lengths in self._batches(dataset):
            best = self._log_posteriors_batch(ll, lengths).argmax(-1)
            correct += sum(int(np.sum(best[j, :n] == dataset.labels[i])) for j, (i, n) in enumerate(zip(idx, lengths)))
        return correct / dataset.num_frames

    def frame_marginal(self, first_frame: int = 0) -> np.ndarray:
        """P(state) of a frame drawn uniformly from all frames at positions >= `first_frame`, exactly:
        the average of init @ trans^t weighted by how often position t occurs under the length distribution."""
        lens = np.arange(self.min_length, self.max_length + 1)
        p, total = self.init.copy(), np.zeros(self.num_states)
        for t in range(self.max_length):
            if t >= first_frame:
                total += np.sum(lens > t) * p
            p = p @ self.trans
        return total / total.sum()

    # -- phones -----------------------------------------------------------------------------------------

    @property
    def num_phones(self) -> int:
        return self.num_states // self.states_per_phone

    def phone_alignments(self, dataset: Dataset) -> tuple[np.ndarray, ...]:
        """Each sequence's phone per frame, int32 `[T_i]` (state `s` is phone `s // states_per_phone`)."""
        self._check_dataset(dataset)
        return tuple((lab // self.states_per_phone).astype(np.int32) for lab in dataset.labels)

    def transcripts(self, dataset: Dataset) -> tuple[np.ndarray, ...]:
        """Each sequence's phone transcript: its phones in order, int32 `[L_i]` (a phone is never followed by
        itself, so these are the phone alignments with repeats collapsed)."""
        return tuple(_collapse(p) for p in self.phone_alignments(dataset))

    def phone_dataset(self, dataset: Dataset, first_label: int = 1) -> Dataset:
        """`dataset` with phone labels `phone + first_label` per frame: with the default 1, label 0 is free for
        CTC's blank (`fit(..., objective="ctc")` on an output of dim `num_phones + 1`)."""
        if isinstance(first_label, bool) or not isinstance(first_label, numbers.Integral) or first_label < 0:
            raise ShapeError(f"first_label={first_label!r} must be an integer >= 0")
        phones = self.phone_alignments(dataset)
        return Dataset(dataset.features, [p + int(first_label) for p in phones])

    def viterbi(self, features: np.ndarray) -> np.ndarray:
        """The most likely state sequence `[T]` of `features` under the true model (Viterbi, log space)."""
        ll = self.log_likelihoods(features)
        log_a = _log(self.trans)
        score = _log(self.init) + ll[0]
        back = np.zeros(ll.shape, np.int64)
        for t in range(1, len(ll)):
            candidates = score[:, None] + log_a
            back[t] = candidates.argmax(0)
            score = candidates.max(0) + ll[t]
        path = np.empty(len(ll), np.int64)
        path[-1] = int(score.argmax())
        for t in range(len(ll) - 1, 0, -1):
            path[t - 1] = back[t, path[t]]
        return path

    def viterbi_phone_error_rate(self, dataset: Dataset) -> float:
        """The reference phone error rate: phone edit errors of each sequence's Viterbi state path (true
        model) with repeats collapsed, against its transcript, over all transcript phones."""
        self._check_dataset(dataset)
        errors = tokens = 0
        for features, reference in zip(dataset.features, self.transcripts(dataset)):
            hypothesis = _collapse(self.viterbi(features) // self.states_per_phone)
            errors += edit_distance(reference, hypothesis)
            tokens += len(reference)
        return errors / max(tokens, 1)

    def single_frame_accuracy(self, dataset: Dataset) -> float:
        """Accuracy of argmax_s P(s) N(x_t | s) with P(s) the exact frame marginal: the best classifier
        that sees one frame and not its position."""
        self._check_dataset(dataset)
        log_prior = _log(self.frame_marginal())
        correct = 0
        for f, lab in zip(dataset.features, dataset.labels):
            correct += int(np.sum((self._loglik(self._check_features(f)) + log_prior).argmax(-1) == lab))
        return correct / dataset.num_frames

    def window_accuracy(self, dataset: Dataset, context: int, chunk: int = 4096) -> float:
        """Accuracy of argmax P(state_t | x_{t-context} .. x_{t+context}) (window clipped at the sequence
        edges): nearly the ceiling of a network with that context on each side. A window that starts
        at frame 0 uses `init`; one that starts later uses `frame_marginal(1)` as its first frame's prior,
        which ignores the (weak) dependence on absolute position. `context >= T` gives `bayes_accuracy`."""
        self._check_dataset(dataset)
        if context < 0:
            raise ShapeError(f"context={context} must be >= 0")
        log_a, log_init, log_prior = _log(self.trans), _log(self.init), _log(self.frame_marginal(1))
        lls = [self._loglik(self._check_features(f)) for f in dataset.features]
        # one row per frame: its sequence's ll padded by `context` rows each side, indexed per window
        seq_of = np.concatenate([np.full(len(ll), i) for i, ll in enumerate(lls)])
        t_of = np.concatenate([np.arange(len(ll)) for ll in lls])
        len_of = np.array([len(ll) for ll in lls])[seq_of]
        offsets = np.concatenate([[0], np.cumsum([len(ll) for ll in lls])])
        flat = np.concatenate(lls)
        labels = np.concatenate(dataset.labels)
        correct = 0
        for c in range(0, len(t_of), chunk):
            t, n, base = t_of[c : c + chunk], len_of[c : c + chunk], offsets[seq_of[c : c + chunk]]
            start = np.maximum(t - context, 0)
            end = np.minimum(t + context, n - 1)
            at = lambda pos, base=base, n=n: flat[base + np.clip(pos, 0, n - 1)]  # noqa: E731  (ll rows at positions pos)
            alpha = np.where((start == 0)[:, None], log_init, log_prior) + at(start)
            for j in range(-context + 1, 1):  # advance the windows that have started
                pos = t + j
                step = _logsumexp(alpha[:, :, None] + log_a, axis=1) + at(pos)
                alpha = np.where((pos > start)[:, None], step, alpha)
            beta = np.zeros_like(alpha)
            for j in range(context - 1, -1, -1):
                pos = t + j
                step = _logsumexp(log_a + (at(pos + 1) + beta)[:, None, :], axis=2)
                beta = np.where((pos < end)[:, None], step, beta)
            correct += int(np.sum((alpha + beta).argmax(-1) == labels[c : c + chunk]))
        return correct / len(t_of)


def _collapse(labels: np.ndarray) -> np.ndarray:
    """`labels` with runs of equal labels collapsed to one, int32."""
    labels = np.asarray(labels)
    keep = np.ones(len(labels), bool)
    keep[1:] = labels[1:] != labels[:-1]
    return labels[keep].astype(np.int32)


def phone_error_rate(hypotheses: Sequence[Sequence[int]], transcripts: Sequence[Sequence[int]]) -> float:
    """Edit errors of phone sequences against `transcripts`, over all transcript phones."""
    if len(hypotheses) != len(transcripts):
        raise ShapeError(f"{len(hypotheses)} hypotheses for {len(transcripts)} transcripts")
    errors = sum(edit_distance(r, h) for r, h in zip(transcripts, hypotheses))
    return errors / max(sum(len(r) for r in transcripts), 1)


def accuracy(predictions: Sequence[np.ndarray], dataset: Dataset) -> float:
    """Frame accuracy of per-sequence predicted labels `[T_i]` (or scores `[T_i, S]`, argmaxed) on `dataset`."""
    _check_nonempty(dataset)
    if len(predictions) != len(dataset):
        raise ShapeError(f"{len(predictions)} predictions for {len(dataset)} sequences")
    correct = 0
    for i, (p, lab) in enumerate(zip(predictions, dataset.labels)):
        p = np.asarray(p)
        p = p.argmax(-1) if p.ndim == 2 else p
        if p.shape != lab.shape:
            raise ShapeError(f"sequence {i}: predictions of shape {p.shape} for labels of shape {lab.shape}")
        correct += int(np.sum(p == lab))
    return correct / dataset.num_frames
