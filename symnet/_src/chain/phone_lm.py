"""The phone language model of a chain denominator, estimated as Kaldi's `chain-est-phone-lm` does.

An n-gram over phones (1-based ids; 0 means sentence start in a history and sentence end as a
predicted phone) with Kaldi's "hard backoff" and no smoothing: every history of up to
`ngram_order - 1` phones seen in the data is an LM state with maximum-likelihood probabilities of
the phones that followed it. States whose history is at least `no_prune_ngram_order` phones long
may be removed (their counts merged into the state of their history without its first phone), the
one that loses the least training log-likelihood first, until `num_extra_lm_states` states remain
beyond the number of `no_prune_ngram_order - 1`-phone histories. A state may be removed only when no
longer history backs off to it and no state it leads to still needs its whole history (Kaldi's
LanguageModelEstimator, src/chain/language-model.cc). The result is an `Fst` acceptor: one arc per
(state, next phone), -log probability weights, the end-of-sentence probability as the final weight.

Phones never seen get no arcs: the LM gives unseen phone sequences probability 0, by design (a small
graph), as in Kaldi.
"""

from __future__ import annotations

import heapq
import math
from collections.abc import Iterable

import numpy as np

from ..base.errors import ChainError
from ..kaldi_io.fst import Fst

__all__ = ["estimate_phone_lm"]


class _LmState:
    """One history's counts (Kaldi's LmState): `counts` maps the next phone (0: end of sentence) to its count."""

    __slots__ = ("history", "counts", "total", "total_with_parents", "backoff", "backoff_allowed", "fst_state")

    def __init__(self, history: tuple[int, ...]) -> None:
        self.history = history
        self.counts: dict[int, int] = {}
        self.total = 0
        self.total_with_parents = 0
        self.backoff = -1
        self.backoff_allowed = False
        self.fst_state = -1

    def add(self, phone: int, count: int) -> None:
        self.counts[phone] = self.counts.get(phone, 0) + count
        self.total += count

    def log_like(self) -> np.float32:
        """sum(count * log(count / total)), rounded to float32 as Kaldi's BaseFloat is."""
        return np.float32(sum(c * math.log(c / self.total) for c in self.counts.values()))


def _approx_equal(a: np.float32, b: np.float32, tolerance: float = 0.001) -> bool:
    """Kaldi's ApproxEqual for floats (relative tolerance 0.001)."""
    if a == b:
        return True
    diff = abs(float(a) - float(b))
    return math.isfinite(diff) and diff <= tolerance * (abs(float(a)) + abs(float(b)))


class _Estimator:
    def __init__(self, ngram_order: int, num_extra_lm_states: int, no_prune_ngram_order: int) -> None:
        self.order = ngram_order
        self.extra = num_extra_lm_states
        self.no_prune = no_prune_ngram_order
        self.states: list[_LmState] = []
        self.index: dict[tuple[int, ...], int] = {}
        self.active = 0
        self.queue: list[tuple[float, int]] = []

    # -- counting --------------------------------------------------------------------------------------------

    def state_for(self, history: tuple[int, ...]) -> int:
        """The LM state of `history`, created (with its backoff states) if new."""
        found = self.index.get(history)
        if found is not None:
            return found
        i = len(self.states)
        self.states.append(_LmState(history))
        self.index[history] = i
        if len(history) >= self.no_prune:
            self.states[i].backoff = self.state_for(history[1:])
        return i

    def add_sentence(self, phones: Iterable[int]) -> None:
        history: list[int] = [0]
        for phone in phones:
            self.increment(tuple(history), phone)
            history.append(phone)
            if len(history) >= self.order:
                del history[0]
        self.increment(tuple(history), 0)

    def increment(self, history: tuple[int, ...], phone: int) -> None:
        state = self.states[self.state_for(history)]
        if state.total == 0:
            self.active += 1
        state.add(phone, 1)

    # -- pruning ---------------------------------------------------------------------------------------------

    def backoff_allowed(self, i: int) -> bool:
        s = self.states[i]
        if len(s.history) < self.no_prune or s.total != s.total_with_parents or s.total == 0:
            return False
        if len(s.history) == self.order - 1:
            return True
        for phone in s.counts:
            if phone:
                nxt = self.index.get(s.history + (phone,))
                if nxt is not None and self.states[nxt].total_with_parents != 0:
                    return False  # a longer history needs all of this one's context
        return True

    def change(self, i: int) -> np.float32:
        """The training log-likelihood change of merging state `i` into its backoff state (<= 0)."""
        s = self.states[i]
        b = self.states[s.backoff]
        if b.total == 0:
            return np.float32(-1.0e-15 * s.total)  # free: back off the smallest states first
        merged = _LmState(b.history)
        for source in (b, s):
            for phone, count in source.counts.items():
                merged.add(phone, count)
        change = np.float32(np.float32(merged.log_like() - s.log_like()) - b.log_like())
        return min(change, np.float32(0.0))

    def push(self, change: np.float32, i: int) -> None:
        # std::priority_queue<pair<float, int>> pops the largest pair: negate both for heapq's smallest.
        heapq.heappush(self.queue, (-float(change), -i))

    def initialize_queue(self) -> None:
        self.queue = []
        for i, s in enumerate(self.states):
            s.backoff_allowed = self.backoff_allowed(i)
            if s.backoff_allowed:
                self.push(self.change(i), i)

    def back_off(self, i: int) -> None:
        s = self.states[i]
        b = self.states[s.backoff]
        was_allowed = b.backoff_allowed
        if b.total != 0:
            self.active -= 1
        for phone, count in s.counts.items():
            b.add(phone, count)
        s.counts, s.total, s.total_with_parents, s.backoff_allowed = {}, 0, 0, False
        b.backoff_allowed = self.backoff_allowed(s.backoff)
        if not was_allowed and b.backoff_allowed:
            self.push(self.change(s.backoff), s.backoff)

    def prune(self) -> None:
        for i, s in enumerate(self.states):
            j = i
            while j != -1:
                self.states[j].total_with_parents += s.total
                j = self.states[j].backoff
        basic = sum(len(s.history) == self.no_prune - 1 for s in self.states)
        initial, target = self.active, basic + self.extra
        for stage in range(4):
            # C++ integer division truncates toward zero.
            step = int((target - initial) * (stage + 1) / 4)
            stage_target = initial + step
            self.initialize_queue()
            while self.active > stage_target and self.queue:
                negated, negated_i = heapq.heappop(self.queue)
                change, i = np.float32(-negated), -negated_i
                now = self.change(i)
                if not _approx_equal(change, now):
                    self.push(now, i)  # stale: requeue with the current change
                else:
                    self.back_off(i)

    # -- output ----------------------------------------------------------------------------------------------

    def nonzero_state(self, history: tuple[int, ...]) -> _LmState:
        while True:
            i = self.index.get(history)
            if i is not None and self.states[i].total:
                return self.states[i]
            history = history[1:]

    def to_fst(self) -> Fst:
        live = [s for s in self.states if s.total]
        for n, s in enumerate(live):
            s.fst_state = n
        final = np.full(len(live), np.inf, np.float32)
        src, dst, label, weight = [], [], [], []
        for s in live:
            for phone in sorted(s.counts):
                cost = -np.float32(math.log(s.counts[phone] / s.total))
                if phone == 0:
                    final[s.fst_state] = cost
                    continue
                src.append(s.fst_state)
                dst.append(self.nonzero_state(s.history + (phone,)).fst_state)
                label.append(phone)
                weight.append(cost)
        labels = np.array(label, np.int32)
        return Fst(
            start=self.nonzero_state((0,)).fst_state,
            final=final,
            src=np.array(src, np.int32),
            dst=np.array(dst, np.int32),
            ilabel=labels,
            olabel=labels.copy(),
            weight=np.array(weight, np.float32),
        )


def estimate_phone_lm(
    sequences: Iterable[Iterable[int]],
    ngram_order: int = 4,
    num_extra_lm_states: int = 1000,
    no_prune_ngram_order: int = 3,
) -> Fst:
    """The phone LM of `sequences` (each a sequence of phone ids >= 1) as `chain-est-phone-lm` estimates it,
    with its options and defaults (`--ngram-order`, `--num-extra-lm-states`, `--no-prune-ngram-order`).

    Kaldi's recipes use `--num-extra-lm-states=2000` with the defaults otherwise. ChainError for phones < 1,
    no sequences, or options Kaldi refuses (ngram_order >= 2, 1 <= no_prune_ngram_order <= ngram_order)."""
    for name, value in (
        ("ngram_order", ngram_order),
        ("num_extra_lm_states", num_extra_lm_states),
        ("no_prune_ngram_order", no_prune_ngram_order),
    ):
        if isinstance(value, bool) or not isinstance(value, (int, np.integer)):
            raise ChainError(f"estimate_phone_lm: {name} must be an integer, got {value!r}")
    if ngram_order < 2:
        raise ChainError(f"estimate_phone_lm: ngram_order must be >= 2, got {ngram_order}")
    if not 1 <= no_prune_ngram_order <= ngram_order:
        raise ChainError(
            f"estimate_phone_lm: no_prune_ngram_order must be in [1, ngram_order={ngram_order}], "
            f"got {no_prune_ngram_order}"
        )
    if num_extra_lm_states < 0:
        raise ChainError(f"estimate_phone_lm: num_extra_lm_states must be >= 0, got {num_extra_lm_states}")
    estimator = _Estimator(int(ngram_order), int(num_extra_lm_states), int(no_prune_ngram_order))
    count = 0
    for n, sequence in enumerate(sequences):
        phones = np.asarray(list(sequence) if not isinstance(sequence, np.ndarray) else sequence)
        if phones.size and (phones.ndim != 1 or not np.issubdtype(phones.dtype, np.integer)):
            raise ChainError(f"estimate_phone_lm: sequence {n} is not a 1-d sequence of integer phone ids")
        if phones.size and phones.min() < 1:
            raise ChainError(
                f"estimate_phone_lm: sequence {n} has phone {int(phones.min())}; phone ids start at 1 "
                "(0 is reserved for the sentence boundary, as in Kaldi)"
            )
        estimator.add_sentence(int(p) for p in phones)
        count += 1
    if not count:
        raise ChainError("estimate_phone_lm: no sequences to estimate a phone LM from")
    estimator.prune()
    return estimator.to_fst()
