"""The LDA-like input transform of Kaldi's recipes: what `nnet3-acc-lda-stats` and `nnet-get-feature-transform` do.

A recipe whose xconfig starts with

    fixed-affine-layer name=lda input=Append(-1,0,1,ReplaceIndex(ivector, t, 0)) affine-transform-file=configs/lda.mat

estimates lda.mat before it trains: the network of init.config (its output is the
layer's input, the spliced features) is run over the training data, LDA statistics
are accumulated with the pdfs of the targets as classes, and a scaled LDA is
estimated from them. Here:

    stats = accumulate_lda_stats(network, features, targets, online_ivectors=..., online_ivector_period=10)
    result = stats.rounded().transform(LdaOptions())   # result.matrix: [dim, input dim + 1], float32

(`symnet lda` does both and writes lda.mat.) The numbers follow Kaldi's
(nnet3bin/nnet3-acc-lda-stats.cc, transform/lda-estimate.cc,
nnet2/get-feature-transform.cc):

- Accumulation (`LdaStats`, in double): for every frame's (pdf, weight) pair,
  the class count, the class sum of the frame's output, and the total second
  moment. A frame's pairs are first what the egs hold (Kaldi's SparseVector: sorted
  by pdf, a repeated pdf summed, zero weights dropped); an alignment is weight 1.
- `--rand-prune` (Kaldi's RandPrune, recipes pass 4.0): a weight w with
  0 < |w| < p becomes p (its sign kept) with probability |w|/p and 0 otherwise.
  The draws are those of a Kaldi program that never seeds its generator: glibc's
  `rand()` from seed 1 (`GlibcRand`), one per such pair in the order of the
  utterances, frames and sorted pairs. Kaldi's nnet3 compiler draws from the
  same generator for its random self-checks when it compiles an eg (3 numbers
  for a plain init.config network); with those skipped (`rand.rand(3)`), the
  counts are Kaldi's exactly over egs that hold every frame once, in order.
- The stats file: nnet3-acc-lda-stats writes the counts, the class sums and the
  *within-class* second moment in float, and the reader adds the class terms
  back in double; `LdaStats.rounded()` makes the same round trip (Kaldi's
  numbers always pass through it).
- Estimation (`LdaStats.transform`): total and between-class covariance, the
  within-class one W = T - B, its Cholesky factor L (if that fails, 0.001 of
  the mean diagonal is added, as Kaldi does), the SVD of L^-1 B L^-T (LAPACK's
  dgesvd, as Kaldi calls it, so that the eigenvectors' signs are Kaldi's),
  sorted; the rows of U^T L^-1, the first `dim` of them (all when dim <= 0) in
  float. Row i is scaled by sqrt((f + d_i) / (1 + d_i)) for the within-class
  factor f (d_i the i-th singular value); singular values of the matrix above
  `max_singular_value` are capped at it (Kaldi's SVD is in float, this one in
  double on the float matrix: they agree to float precision); with
  `remove_offset`, a last column -M mean makes the mean of the output zero. The
  matrix is [dim, input dim + 1] (without `remove_offset`, [dim, input dim]).

Where fewer classes than the input dim + 1 have data, the between-class
covariance has a null space and the rows for its zero singular values are any
basis of it (Kaldi's differ from these); recipes have thousands of pdfs.
"""

from __future__ import annotations

import math
import os
import warnings
from collections import deque
from collections.abc import Iterable, Iterator, Mapping, Sequence
from typing import Any, ClassVar

import attrs
import numpy as np

from ...base.errors import SymnetError
from ...kaldi_io.binary import make_reader
from ...kaldi_io.writer import Writer

__all__ = [
    "GlibcRand",
    "LdaAccumulation",
    "LdaError",
    "LdaOptions",
    "LdaStats",
    "LdaTransform",
    "Posteriors",
    "accumulate_lda_stats",
    "rand_prune",
    "read_lda_stats",
]

RAND_MAX = 2**31 - 1
_MASK = np.uint64(0xFFFFFFFF)


class LdaError(SymnetError):
    """Bad input to the LDA estimation (no statistics, a bad option, a malformed stats file)."""


# ----- glibc's rand() and Kaldi's RandPrune ---------------------------------------------------


class GlibcRand:
    """glibc's `rand()` from `srand(seed)`: the numbers a Kaldi program draws (its RandUniform, RandPrune) when it
    never seeds the generator (seed 1), as nnet3-acc-lda-stats does not.

    glibc's default generator (TYPE_3): words r[0..30] from the seed by the Lehmer step 16807 r mod (2^31 - 1),
    r[31..33] = r[0..2], r[i] = r[i - 31] + r[i - 3] mod 2^32; the i-th output is r[344 + i] >> 1. The next
    `_BLOCK` words are a linear map of the last 31 (coefficients mod 2^32), so a block costs one matrix product.
    """

    _BLOCK = 1024
    _coefficients: ClassVar[np.ndarray | None] = None

    def __init__(self, seed: int = 1):
        word = int(seed) & 0xFFFFFFFF
        word = word - 2**32 if word >= 2**31 else word  # the int32 glibc keeps
        if word == 0:
            word = 1
        words = [word]
        for _ in range(30):
            hi = abs(word) // 127773 * (1 if word >= 0 else -1)  # C's division, toward zero
            lo = word - hi * 127773
            word = 16807 * lo - 2836 * hi
            if word < 0:
                word += 2147483647
            words.append(word)
        r = [w & 0xFFFFFFFF for w in words]
        r += r[:3]
        for i in range(34, 344):
            r.append((r[i - 31] + r[i - 3]) & 0xFFFFFFFF)
        self._state = np.array(r[-31:], dtype=np.uint64)
        self._pending = np.zeros(0, dtype=np.uint32)

    @classmethod
    def _matrix(cls) -> np.ndarray:
        if cls._coefficients is None:
            rows = list(np.eye(31, dtype=np.uint64))  # row m: r[n - 31 + m] in terms of the last 31 words
            for j in range(cls._BLOCK):
                rows.append((rows[j] + rows[j + 28]) & _MASK)
            cls._coefficients = np.stack(rows[31:])
        return cls._coefficients

    def rand(self, count: int) -> np.ndarray:
        """The next `count` values of rand() (uint32 in [0, RAND_MAX])."""
        while len(self._pending) < count:
            block = (self._matrix() @ self._state) & _MASK  # uint64 products wrap mod 2^64: right mod 2^32
            self._state = block[-31:]
            self._pending = np.concatenate([self._pending, (block >> np.uint64(1)).astype(np.uint32)])
        out, self._pending = self._pending[:count], self._pending[count:]
        return out

    def uniform(self, count: int) -> np.ndarray:
        """Kaldi's RandUniform: (rand() + 1) / (RAND_MAX + 2), in double, as a float32."""
        return ((self.rand(count).astype(np.float64) + 1.0) / (RAND_MAX + 2.0)).astype(np.float32)


def rand_prune(weights: np.ndarray, threshold: float, rand: GlibcRand) -> np.ndarray:
    """Kaldi's RandPrune of each weight (float32), in order: a weight w with 0 < |w| < threshold becomes
    ±threshold with probability |w| / threshold (one draw each), else 0; the others stay."""
    w = np.asarray(weights, dtype=np.float32)
    if threshold < 0:
        raise LdaError(f"--rand-prune must be >= 0, got {threshold}")
    thr = np.float32(threshold)
    small = (w != 0) & (np.abs(w) < thr)
    if not small.any():
        return w
    picked = w[small]
    keep = rand.uniform(len(picked)) <= np.abs(picked) / thr
    out = w.copy()
    out[small] = np.where(keep, np.copysign(thr, picked), np.float32(0.0))
    return out


_rand_prune = rand_prune  # accumulate_lda_stats has an argument of that name


# ----- targets ----------------------------------------------------------------------------------


def _int64s(values: Any) -> np.ndarray:
    return np.ascontiguousarray(np.asarray(values), dtype=np.int64)


def _int32s(values: Any) -> np.ndarray:
    return np.ascontiguousarray(np.asarray(values), dtype=np.int32)


def _float32s(values: Any) -> np.ndarray:
    return np.ascontiguousarray(np.asarray(values), dtype=np.float32)


@attrs.frozen(eq=False)
class Posteriors:
    """The targets of one utterance as Kaldi's Posterior: frame t's (pdf, weight) pairs are
    `pdfs[offsets[t]:offsets[t + 1]]` and `weights[...]`.

    `Posteriors.of(targets)` takes an alignment (int [T], weight 1 each), a dense matrix [T, K] (the nonzero
    entries of each row), a list of per-frame lists of (pdf, weight) pairs, or anything with `offsets`, `pdfs`
    and `weights` (`symnet._src.kaldi_io.tables.read_posteriors` gives such).
    """

    offsets: np.ndarray = attrs.field(converter=_int64s)
    pdfs: np.ndarray = attrs.field(converter=_int32s)
    weights: np.ndarray = attrs.field(converter=_float32s)

    def __attrs_post_init__(self) -> None:
        o = self.offsets
        if o.ndim != 1 or len(o) < 1 or o[0] != 0 or (np.diff(o) < 0).any() or o[-1] != len(self.pdfs):
            raise LdaError("posteriors: offsets must rise from 0 to the number of pairs")
        if self.pdfs.shape != self.weights.shape or self.pdfs.ndim != 1:
            raise LdaError("posteriors: pdfs and weights must be vectors of one length")
        if len(self.pdfs) and self.pdfs.min() < 0:
            raise LdaError(f"posteriors: pdf {int(self.pdfs.min())}; pdfs are >= 0")
        if not np.isfinite(self.weights).all():
            raise LdaError("posteriors: a weight is not finite")

    def __len__(self) -> int:
        return len(self.offsets) - 1

    @classmethod
    def of(cls, targets: Any) -> Posteriors:
        if isinstance(targets, Posteriors):
            return targets
        if all(hasattr(targets, name) for name in ("offsets", "pdfs", "weights")):
            return cls(targets.offsets, targets.pdfs, targets.weights)
        if isinstance(targets, np.ndarray) and targets.ndim == 1:
            if not np.issubdtype(targets.dtype, np.integer):
                raise LdaError(f"an alignment must be integer pdf-ids, got a {targets.dtype} vector")
            return cls(np.arange(len(targets) + 1), targets, np.ones(len(targets), np.float32))
        if isinstance(targets, np.ndarray) and targets.ndim == 2:
            frames, pdfs = np.nonzero(targets)
            offsets = np.concatenate([[0], np.cumsum(np.bincount(frames, minlength=len(targets)))])
            return cls(offsets, pdfs, targets[frames, pdfs])
        if isinstance(targets, Sequence):
            counts = [len(frame) for frame in targets]
            pairs = [pair for frame in targets for pair in frame]
            return cls(
                np.concatenate([[0], np.cumsum(counts, dtype=np.int64)]),
                [int(p) for p, _ in pairs],
                [float(w) for _, w in pairs],
            )
        raise LdaError(f"targets must be an alignment, a matrix or posteriors, not a {type(targets).__name__}")

    def head(self, frames: int) -> Posteriors:
        """The first `frames` frames."""
        if frames >= len(self):
            return self
        end = self.offsets[frames]
        return Posteriors(self.offsets[: frames + 1], self.pdfs[:end], self.weights[:end])

    def sparse(self) -> Posteriors:
        """What Kaldi's egs hold (SparseVector): each frame's pairs sorted by pdf, a repeated pdf's weights summed
        (in float), zero weights dropped."""
        frames = np.repeat(np.arange(len(self)), np.diff(self.offsets))
        order = np.lexsort((self.pdfs, frames))
        f, p, w = frames[order], self.pdfs[order], self.weights[order]
        if len(p):
            start = np.concatenate([[True], (f[1:] != f[:-1]) | (p[1:] != p[:-1])])
            f, p = f[start], p[start]
            w = np.add.reduceat(w, np.flatnonzero(start)).astype(np.float32)
        keep = w != 0
        f, p, w = f[keep], p[keep], w[keep]
        offsets = np.concatenate([[0], np.cumsum(np.bincount(f, minlength=len(self)))])
        return Posteriors(offsets, p, w)


# ----- statistics -------------------------------------------------------------------------------


@attrs.define(eq=False)
class LdaStats:
    """Kaldi's LdaEstimate accumulators, in double: `counts` [C] (soft count of each class), `sums` [C, D] (each
    class's sum of frames) and `second` [D, D] (the total second moment, all classes together)."""

    counts: np.ndarray
    sums: np.ndarray
    second: np.ndarray

    @classmethod
    def empty(cls, dim: int, num_classes: int = 0) -> LdaStats:
        return cls(np.zeros(num_classes), np.zeros((num_classes, dim)), np.zeros((dim, dim)))

    @property
    def dim(self) -> int:
        return int(self.second.shape[0])

    @property
    def num_classes(self) -> int:
        return int(self.counts.shape[0])

    @property
    def count(self) -> float:
        """The soft frame count (Kaldi's TotCount)."""
        return float(self.counts.sum())

    def _grow(self, num_classes: int) -> None:
        if num_classes > self.num_classes:
            extra = num_classes - self.num_classes
            self.counts = np.concatenate([self.counts, np.zeros(extra)])
            self.sums = np.concatenate([self.sums, np.zeros((extra, self.dim))])

    def accumulate(self, frames: np.ndarray, posteriors: Posteriors) -> None:
        """Add frame t of `frames` [T, D] with each of its (pdf, weight) pairs (weights as they are: prune first)."""
        x = np.asarray(frames, dtype=np.float32).astype(np.float64)
        if x.ndim != 2 or x.shape[1] != self.dim or len(x) != len(posteriors):
            raise LdaError(f"frames of shape {x.shape} for {len(posteriors)} frames of targets of dim {self.dim}")
        keep = posteriors.weights != 0
        rows = np.repeat(np.arange(len(x)), np.diff(posteriors.offsets))[keep]
        pdfs, w = posteriors.pdfs[keep], posteriors.weights[keep].astype(np.float64)
        if not len(pdfs):
            return
        self._grow(int(pdfs.max()) + 1)
        self.counts += np.bincount(pdfs, weights=w, minlength=self.num_classes)
        order = np.argsort(pdfs, kind="stable")
        starts = np.flatnonzero(np.concatenate([[True], pdfs[order][1:] != pdfs[order][:-1]]))
        self.sums[pdfs[order][starts]] += np.add.reduceat(w[order, None] * x[rows[order]], starts, axis=0)
        per_frame = np.bincount(rows, weights=w, minlength=len(x))
        self.second += (x * per_frame[:, None]).T @ x

    def add(self, other: LdaStats) -> None:
        """Add another accumulator of the same dim (Kaldi's sum-lda-accs)."""
        if other.dim != self.dim:
            raise LdaError(f"LDA statistics of dim {other.dim} added to statistics of dim {self.dim}")
        self._grow(other.num_classes)
        self.counts[: other.num_classes] += other.counts
        self.sums[: other.num_classes] += other.sums
        self.second += other.second

    def within(self) -> np.ndarray:
        """The within-class second moment: `second` less each class's count times its mean's outer product."""
        nz = self.counts != 0
        s = self.sums[nz]
        return self.second - (s / self.counts[nz][:, None]).T @ s

    def rounded(self) -> LdaStats:
        """The statistics as a Kaldi stats file gives them back: counts, sums and the within-class second moment
        stored in float, the class terms added back in double (LdaEstimate's Write and Read)."""
        counts = self.counts.astype(np.float32).astype(np.float64)
        sums = self.sums.astype(np.float32).astype(np.float64)
        within = self.within().astype(np.float32).astype(np.float64)
        return LdaStats(counts, sums, _add_class_terms(within, counts, sums))

    def to_kaldi(self, binary: bool = True) -> bytes:
        """The statistics as nnet3-acc-lda-stats writes them (`<LDAACCS>` ..., text or binary)."""
        w = Writer(binary)
        if binary:
            w.raw(b"\0B")
        w.token("<LDAACCS>")
        w.token("<VECSIZE>")
        w.int(self.dim)
        w.token("<NUMCLASSES>")
        w.int(self.num_classes)
        w.token("<ZERO_ACCS>")
        w.vector(self.counts.astype(np.float32))
        w.token("<FIRST_ACCS>")
        w.matrix(self.sums.astype(np.float32))
        w.token("<SECOND_ACCS>")
        w.packed(self.within().astype(np.float32))
        w.token("</LDAACCS>")
        return w.getvalue()

    def transform(self, options: LdaOptions | None = None) -> LdaTransform:
        """nnet-get-feature-transform's matrix from these statistics (see the module doc; Kaldi estimates from the
        statistics of its stats file: use `rounded()` first for its numbers)."""
        return _estimate(self, options or LdaOptions())


def _add_class_terms(within: np.ndarray, counts: np.ndarray, sums: np.ndarray) -> np.ndarray:
    nz = counts != 0
    s = sums[nz]
    return within + (s / counts[nz][:, None]).T @ s


def read_lda_stats(path: str | os.PathLike[str]) -> LdaStats:
    """A Kaldi LDA statistics file (nnet3-acc-lda-stats's, acc-lda's, sum-lda-accs's output; text or binary)."""
    path = os.fspath(path)
    with open(path, "rb") as f:
        data = f.read()
    return parse_lda_stats(data, path)


def parse_lda_stats(data: bytes, file: str = "<bytes>") -> LdaStats:
    """LDA statistics from the bytes of a Kaldi stats file (see `read_lda_stats`)."""
    r = make_reader(data, file)
    r.expect_token("<LDAACCS>")
    r.expect_token("<VECSIZE>")
    dim = r.read_int("the dim")
    r.expect_token("<NUMCLASSES>")
    num_classes = r.read_int("the number of classes")
    if dim < 0 or num_classes < 0:
        raise LdaError(f"{file}: a dim of {dim} and {num_classes} classes")
    stats = LdaStats.empty(dim, num_classes)
    counts = sums = None
    while True:
        r.skip_ws()
        token = r.read_token("<ZERO_ACCS>, <FIRST_ACCS>, <SECOND_ACCS> or </LDAACCS>")
        if token == "</LDAACCS>":
            break
        if token == "<ZERO_ACCS>":
            counts = np.asarray(r.read_vector("the class counts"), dtype=np.float64)
            shape: tuple[int, ...] = (num_classes,)
            value = counts
        elif token == "<FIRST_ACCS>":
            sums = np.asarray(r.read_matrix("the class sums"), dtype=np.float64)
            shape, value = (num_classes, dim), sums
        elif token == "<SECOND_ACCS>":
            if counts is None or sums is None:
                raise LdaError(f"{file}: <SECOND_ACCS> before <ZERO_ACCS> and <FIRST_ACCS>")
            within = np.asarray(r.read_packed("the second moment"), dtype=np.float64)
            shape, value = (dim, dim), within
            stats.second = stats.second + _add_class_terms(within, counts, sums)
        else:
            raise LdaError(f"{file}: unexpected token {token!r} in LDA statistics")
        if value.shape != shape:
            raise LdaError(f"{file}: {token} of shape {value.shape}, expected {shape}")
        if token == "<ZERO_ACCS>":
            stats.counts = stats.counts + value
        elif token == "<FIRST_ACCS>":
            stats.sums = stats.sums + value
    return stats


# ----- estimation -------------------------------------------------------------------------------


@attrs.frozen
class LdaOptions:
    """nnet-get-feature-transform's options (Kaldi's names with underscores, its defaults)."""

    dim: int = -1  # <= 0: the input dim (no reduction)
    within_class_factor: float = 0.001
    max_singular_value: float = 5.0  # <= 0: no cap
    remove_offset: bool = True


@attrs.frozen(eq=False)
class LdaTransform:
    """The estimated transform: `matrix` float32 [dim, input dim (+ 1 with remove_offset)], and what Kaldi logs."""

    matrix: np.ndarray
    singular_values: np.ndarray  # the LDA's, sorted, largest first
    count: float  # the soft frame count
    capped: int  # singular values of the matrix capped at max_singular_value
    smoothed: float  # what was added to the within-class covariance's diagonal (0.0: nothing)


def _symmetric(a: np.ndarray) -> np.ndarray:
    """The symmetric matrix of `a`'s lower triangle (Kaldi's SpMatrix keeps only that)."""
    lower = np.tril(a)
    return lower + np.tril(a, -1).T


def _dgesvd(a: np.ndarray) -> tuple[np.ndarray, np.ndarray]:
    """(s, U) of Kaldi's Matrix<double>::Svd of the symmetric `a` (LAPACK dgesvd on its column-major view, with
    Kaldi's prescaling of a matrix whose first element is tiny), sorted as SortSvd sorts them."""
    from scipy.linalg import lapack

    prescale = 1.0
    if abs(a[0, 0]) < 1.0e-30:
        largest = float(np.abs(a).max())
        if largest != 0:
            prescale = 1.0 / largest
            if math.isinf(prescale):
                prescale = 1.0e40
            a = a * prescale
    # Kaldi hands its row-major matrix to LAPACK, which sees the transpose (the same matrix: it is symmetric) and
    # returns u and vt; Kaldi's U is LAPACK's vt transposed.
    _u, s, vt, info = lapack.dgesvd(np.asfortranarray(a.T), compute_uv=1, full_matrices=0)
    if info != 0:
        raise LdaError(f"the SVD did not converge (LAPACK dgesvd info {info})")
    s = s / prescale
    order = np.argsort(-s, kind="stable")
    return s[order], vt.T[:, order]


def _cholesky(wc: np.ndarray) -> tuple[np.ndarray, float]:
    """The Cholesky factor of the within-class covariance; if it fails, of it with 0.001 of its mean diagonal
    (in float) added to the diagonal, as Kaldi does. Returns (L, what was added). (LAPACK refuses a zero pivot,
    which Kaldi's own factorization takes, only to fail inverting the factor: here that matrix is smoothed.)"""
    try:
        return np.linalg.cholesky(wc), 0.0
    except np.linalg.LinAlgError:
        pass
    smooth = float(np.float32(1.0e-03 * np.trace(wc) / len(wc)))
    try:
        return np.linalg.cholesky(wc + smooth * np.eye(len(wc))), smooth
    except np.linalg.LinAlgError:
        raise LdaError(
            "the within-class covariance is not positive definite, even with "
            f"{smooth:g} added to its diagonal (too little data, or a constant input dim?)"
        ) from None


def _estimate(stats: LdaStats, options: LdaOptions) -> LdaTransform:
    count, dim = stats.count, stats.dim
    if count == 0:
        raise LdaError("accumulated no statistics (no frame had a target)")
    if not (np.isfinite(stats.second).all() and np.isfinite(stats.sums).all() and np.isfinite(stats.counts).all()):
        raise LdaError("the LDA statistics are not finite")
    target = options.dim if options.dim > 0 else dim
    if target > dim:
        raise LdaError(f"--dim={options.dim} is more than the input dim {dim}")
    mean = stats.sums.sum(axis=0) / count
    total = _symmetric(stats.second / count - np.outer(mean, mean))
    nz = stats.counts != 0
    means = stats.sums[nz] / stats.counts[nz][:, None]
    between = _symmetric((means * (stats.counts[nz] / count)[:, None]).T @ means - np.outer(mean, mean))
    chol, smoothed = _cholesky(_symmetric(total - between))
    inverse = np.linalg.inv(chol)
    s, u = _dgesvd(_symmetric(inverse @ between @ inverse.T))
    m = (u.T @ inverse)[:target].astype(np.float32)
    if options.within_class_factor != 1.0:
        f = np.float64(np.float32(options.within_class_factor))
        old = (1.0 + s[:target]).astype(np.float32)
        new = (f + s[:target]).astype(np.float32)
        m = m * np.sqrt(new / old)[:, None]
    capped = 0
    if options.max_singular_value > 0.0:  # Kaldi's SVD is in float: in double, the result is as near to it
        ceiling = np.float64(np.float32(options.max_singular_value))
        left, values, right = np.linalg.svd(m.astype(np.float64), full_matrices=False)
        capped = int((values.astype(np.float32) > ceiling).sum())
        if capped:
            m = (left @ (np.minimum(values, ceiling)[:, None] * right)).astype(np.float32)
    if options.remove_offset:  # -M mean, of the float matrix and the mean in float (summed in double)
        offset = -(m.astype(np.float64) @ mean.astype(np.float32).astype(np.float64))
        m = np.concatenate([m, offset.astype(np.float32)[:, None]], axis=1)
    m = np.ascontiguousarray(m, dtype=np.float32)
    m.setflags(write=False)
    return LdaTransform(m, s, count, capped, smoothed)


# ----- accumulation over utterances -------------------------------------------------------------


@attrs.frozen(eq=False)
class LdaAccumulation:
    """What `accumulate_lda_stats` did: the statistics, the utterances used and those skipped (with why)."""

    stats: LdaStats
    utterances: int
    frames: int
    skipped: tuple[tuple[str, str], ...]


def _skip(skipped: list[tuple[str, str]], utt: str, why: str) -> None:
    skipped.append((utt, why))
    warnings.warn(f"utterance {utt}: {why}: skipped", stacklevel=3)


def _items(features: Iterable[tuple[str, np.ndarray]] | Mapping[str, np.ndarray]) -> Iterator[tuple[str, Any]]:
    if isinstance(features, Mapping):
        yield from features.items()
    else:
        yield from features


def accumulate_lda_stats(
    network: Any,
    features: Iterable[tuple[str, np.ndarray]] | Mapping[str, np.ndarray],
    targets: Mapping[str, Any],
    *,
    ivectors: Mapping[str, np.ndarray] | None = None,
    online_ivectors: Mapping[str, np.ndarray] | None = None,
    online_ivector_period: int = 0,
    rand_prune: float = 0.0,
    targets_length_tolerance: int = 2,
    length_tolerance: int = 100,
    frames_per_chunk: int = 50,
    rand: GlibcRand | None = None,
) -> LdaAccumulation:
    """nnet3-acc-lda-stats over the egs nnet3-get-egs makes of these utterances: every frame once, in order.

    `network`: a Network whose output node `output` is the LDA's input (init.config's network).
    `features`: (utterance id, [T, D]) in order, or a mapping. `targets`: utterance id -> alignment (pdf-ids
    [T]) or posteriors (see `Posteriors.of`); frames beyond the targets have none, targets beyond the frames
    are left out; more than `targets_length_tolerance` frames apart is a skipped utterance, as in
    nnet3-get-egs. `ivectors` (one per utterance) or `online_ivectors` (every `online_ivector_period` frames,
    at most `length_tolerance` frames short or long, the last row repeated where short) feed the `ivector`
    input, as `symnet compute` does for chunks of `frames_per_chunk` (Kaldi's egs take the row of a random
    frame of each chunk: the same where i-vectors are constant in an utterance). An utterance without targets
    or i-vectors, or without frames, is skipped with a warning, as in Kaldi. `rand_prune`: Kaldi's
    --rand-prune (0: none), drawing from `rand` (default: glibc's rand() from seed 1, as Kaldi).
    """
    from ...network import Network
    from .nnet3_compute import ComputeOptions, Nnet3Computer

    if not isinstance(network, Network):
        raise LdaError(f"the network must be a Network, not a {type(network).__name__}")
    if ivectors is not None and online_ivectors is not None:
        raise LdaError("give i-vectors or online i-vectors, not both")
    if online_ivectors is not None and online_ivector_period <= 0:
        raise LdaError("online i-vectors need an online i-vector period > 0")
    if rand_prune < 0:
        raise LdaError(f"--rand-prune must be >= 0, got {rand_prune}")
    computer = Nnet3Computer(network, ComputeOptions(frames_per_chunk=frames_per_chunk))
    stats: LdaStats | None = None  # of the output's dim, when the first utterance is computed
    rng = rand or GlibcRand()
    skipped: list[tuple[str, str]] = []
    done = frames_done = 0
    job = computer.job(online_ivector_period)
    targets_of: deque[Posteriors] = deque()  # of the utterances added to the job and not yet accumulated

    def accumulate(outputs: list[tuple[Any, np.ndarray]]) -> None:
        nonlocal stats, done, frames_done
        for _, out in outputs:
            post = targets_of.popleft()
            out = np.asarray(out, dtype=np.float32)
            if stats is None:
                stats = LdaStats.empty(out.shape[1])
            frames = out[: len(post)]
            post = post.head(len(frames))
            stats.accumulate(frames, Posteriors(post.offsets, post.pdfs, rand_prune_(post.weights)))
            done += 1
            frames_done += len(frames)

    def rand_prune_(weights: np.ndarray) -> np.ndarray:
        return _rand_prune(weights, rand_prune, rng) if rand_prune > 0 else weights

    for utt, value in _items(features):
        feats = np.asarray(value)
        if feats.ndim != 2:
            raise LdaError(f"utterance {utt}: the features are not a matrix (shape {feats.shape})")
        if len(feats) == 0:
            _skip(skipped, utt, "no frames")
            continue
        if not np.isfinite(feats).all():
            raise LdaError(f"utterance {utt}: the features are not all finite")
        if utt not in targets:
            _skip(skipped, utt, "no targets")
            continue
        post = Posteriors.of(targets[utt])
        if abs(len(post) - len(feats)) > targets_length_tolerance:
            _skip(
                skipped,
                utt,
                f"{len(feats)} frames but targets for {len(post)} (more than --targets-length-tolerance="
                f"{targets_length_tolerance} apart)",
            )
            continue
        extra: dict[str, Any] = {}
        if ivectors is not None:
            if utt not in ivectors:
                _skip(skipped, utt, "no i-vector")
                continue
            extra["ivector"] = np.asarray(ivectors[utt], dtype=np.float32).reshape(-1)
        if online_ivectors is not None:
            if utt not in online_ivectors:
                _skip(skipped, utt, "no online i-vectors")
                continue
            rows = np.asarray(online_ivectors[utt], dtype=np.float32)
            if (
                rows.ndim != 2
                or len(rows) == 0
                or abs(len(feats) - len(rows) * online_ivector_period) > length_tolerance
            ):
                _skip(
                    skipped,
                    utt,
                    f"{len(feats)} frames but {len(rows)} online i-vectors every {online_ivector_period} frames "
                    f"(more than --length-tolerance={length_tolerance} apart)",
                )
                continue
            need = -(-len(feats) // online_ivector_period)
            if len(rows) < need:  # the egs clamp to the last row
                rows = np.concatenate([rows, np.repeat(rows[-1:], need - len(rows), axis=0)])
            extra["online_ivectors"] = rows
        targets_of.append(post.sparse())
        accumulate(job.add(utt, feats, **extra))
    accumulate(job.finish())
    if stats is None:
        raise LdaError("no utterance was used: accumulated no statistics")
    return LdaAccumulation(stats, done, frames_done, tuple(skipped))
