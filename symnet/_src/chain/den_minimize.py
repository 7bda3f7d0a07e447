"""`chain-make-den-fst`'s minimisation of a denominator graph, so that symnet's den graph is Kaldi's.

Kaldi (chain-den-graph.cc, DenGraphMinimizeWrapper) makes its den.fst smaller than the plain expansion of
the phone LM with the HMMs, and the result is not a cosmetic choice: the denominator's initial probabilities
average the HMM's state occupancies, and every state is final with probability 1, so two graphs of the same
weighted language but different states give different objectives. Three passes of

    reverse; PushSpecial; quantise weights and minimise;  reverse; PushSpecial; quantise and minimise

then epsilon removal and a last PushSpecial, each step as OpenFst 1.7.9 (the version Kaldi links) and
Kaldi define it:

- **reverse** (fst::Reverse with a super-initial state): state `s` becomes `s + 1`, arcs turn around,
  the new start `0` has an epsilon arc to each final state weighted by its final weight, and the old
  start is the only final state (weight One);
- **PushSpecial** (`push_special`, here): reweighting by the top eigenvector of the transition matrix, so
  that every state's outgoing probability (final included) is the same;
- **quantise and minimise** (MinimizeAcceptorNoPush): every arc and final weight rounded to a multiple
  of `10 * kDelta` in float32 (`floor(w / delta + 0.5) * delta`), the automaton connected (states on no
  path from the start to a final state dropped), then states merged by the coarsest partition in which
  two states of a class have the same final weight and, for every (label, weight) and every class,
  either both or neither have such an arc into it (Hopcroft's algorithm on the acceptor with labels and
  weights encoded as one label, as OpenFst computes it for non-deterministic input); a class keeps its
  members' arcs, duplicates once;
- **epsilon removal** (fst::RmEpsilon, tropical): each state takes the arcs and final weights of the
  states its epsilon paths reach, the cheapest path's weight added.
"""

from __future__ import annotations

import warnings

import numpy as np

from ..kaldi_io.fst import Fst

__all__ = ["K_DELTA", "minimize_den_fst", "PUSH_MAX_ITERATIONS", "push_special", "QUANTIZE_DELTA"]

#: OpenFst's kDelta; Kaldi pushes its den graph to kDelta * 0.01.
K_DELTA = 1.0 / 1024.0
PUSH_MAX_ITERATIONS = 200

#: Kaldi's MinimizeAcceptorNoPush rounds weights to this (fst::kDelta * 10, as float32).
QUANTIZE_DELTA = np.float32(K_DELTA * 10.0)
#: Passes of reversed and regular minimisation in Kaldi's DenGraphMinimizeWrapper.
PASSES = 3


def minimize_den_fst(fst: Fst) -> Fst:
    """Kaldi's DenGraphMinimizeWrapper of the epsilon-free pdf acceptor `fst` (see the module docstring). Where
    a PushSpecial does not converge (Kaldi warns each time), one warning says how many did not."""
    failed = 0

    def push(g: Fst) -> Fst:
        nonlocal failed
        pushed, converged = _push(g)
        failed += not converged
        return pushed

    for _ in range(PASSES):
        reversed_ = _minimize(push(_reverse(fst)))
        fst = _minimize(push(_reverse(reversed_)))
    fst = push(_remove_epsilons(fst))
    if failed:
        warnings.warn(
            f"den graph: {failed} of {2 * PASSES + 1} weight pushings did not converge in {PUSH_MAX_ITERATIONS} "
            "iterations (chain-make-den-fst warns for this graph too); the graph's weights are as inexact as "
            "Kaldi's, and equal to them only where both graphs have the same states",
            stacklevel=2,
        )
    return fst


def _reverse(fst: Fst) -> Fst:
    finals = np.flatnonzero(np.isfinite(fst.final))
    final = np.full(fst.num_states + 1, np.inf, np.float32)
    final[fst.start + 1] = 0.0
    eps = np.zeros(len(finals), np.int32)
    return Fst(
        start=0,
        final=final,
        src=np.concatenate([fst.dst + 1, eps]).astype(np.int32),
        dst=np.concatenate([fst.src + 1, finals + 1]).astype(np.int32),
        ilabel=np.concatenate([fst.ilabel, eps]).astype(np.int32),
        olabel=np.concatenate([fst.olabel, eps]).astype(np.int32),
        weight=np.concatenate([fst.weight, fst.final[finals]]).astype(np.float32),
    )


def _quantize(w: np.ndarray) -> np.ndarray:
    """OpenFst's TropicalWeight::Quantize in float32; infinite weights stay as they are."""
    w = np.asarray(w, np.float32)
    with np.errstate(invalid="ignore"):
        q = (np.floor(w / QUANTIZE_DELTA + np.float32(0.5)) * QUANTIZE_DELTA).astype(np.float32)
    return np.where(np.isfinite(w), q, w)


def _subgraph(fst: Fst, keep: np.ndarray) -> Fst:
    """`fst` with only the states where `keep` (renumbered in order) and the arcs between them."""
    new = np.cumsum(keep) - 1
    arcs = keep[fst.src] & keep[fst.dst]
    return Fst(
        start=int(new[fst.start]),
        final=fst.final[keep],
        src=new[fst.src[arcs]].astype(np.int32),
        dst=new[fst.dst[arcs]].astype(np.int32),
        ilabel=fst.ilabel[arcs],
        olabel=fst.olabel[arcs],
        weight=fst.weight[arcs],
    )


def _reach(n: int, frm: np.ndarray, to: np.ndarray, seeds: np.ndarray) -> np.ndarray:
    """The states reachable from `seeds` along arcs `frm -> to`."""
    seen = np.zeros(n, bool)
    seen[seeds] = True
    frontier = seen.copy()
    while frontier.any():
        step = np.zeros(n, bool)
        step[to[frontier[frm]]] = True
        frontier = step & ~seen
        seen |= step
    return seen


def _connect(fst: Fst) -> Fst:
    """fst::Connect: only the states on a path from the start to a final state."""
    n = fst.num_states
    accessible = _reach(n, fst.src, fst.dst, np.array([fst.start]))
    coaccessible = _reach(n, fst.dst, fst.src, np.flatnonzero(np.isfinite(fst.final)))
    keep = accessible & coaccessible
    if not keep[fst.start]:  # nothing left: OpenFst leaves an empty FST; Kaldi's graphs never get here
        keep[fst.start] = True
    return _subgraph(fst, keep)


def _minimize(fst: Fst) -> Fst:
    """MinimizeAcceptorNoPush: quantise, connect, merge states by the coarsest stable partition."""
    fst = Fst(
        start=fst.start,
        final=_quantize(fst.final),
        src=fst.src,
        dst=fst.dst,
        ilabel=fst.ilabel,
        olabel=fst.olabel,
        weight=_quantize(fst.weight),
    )
    fst = _connect(fst)
    n = fst.num_states
    # (label, weight) as one code, as fst::Encode makes it
    _, code = np.unique(
        np.stack([fst.ilabel.astype(np.float64), fst.weight.astype(np.float64)]), axis=1, return_inverse=True
    )
    code = code.reshape(-1)
    _, cls = np.unique(fst.final, return_inverse=True)
    cls = cls.reshape(-1)
    count = int(cls.max()) + 1
    order = np.argsort(fst.src, kind="stable")
    while True:
        pairs = np.stack([fst.src[order], code[order], cls[fst.dst[order]]], axis=1)
        pairs = np.unique(pairs, axis=0)  # sorted by state, then (code, class): each state's set, in order
        bounds = np.searchsorted(pairs[:, 0], np.arange(n + 1))
        signatures: dict[tuple, int] = {}
        new = np.empty(n, np.int64)
        for s in range(n):
            key = (int(cls[s]), pairs[bounds[s] : bounds[s + 1], 1:].tobytes())
            new[s] = signatures.setdefault(key, len(signatures))
        if len(signatures) == count:
            break
        cls, count = new, len(signatures)
    triples = np.unique(np.stack([cls[fst.src], code, cls[fst.dst]], axis=1), axis=0)
    first = np.zeros(count, np.int64)
    first[cls[::-1]] = np.arange(n)[::-1]  # a member of each class, for its final weight
    # each code's label and weight
    label_of = np.zeros(int(code.max(initial=-1)) + 1, np.int32)
    weight_of = np.zeros(len(label_of), np.float32)
    label_of[code] = fst.ilabel
    weight_of[code] = fst.weight
    merged = Fst(
        start=int(cls[fst.start]),
        final=fst.final[first],
        src=triples[:, 0].astype(np.int32),
        dst=triples[:, 2].astype(np.int32),
        ilabel=label_of[triples[:, 1]],
        olabel=label_of[triples[:, 1]],
        weight=weight_of[triples[:, 1]],
    )
    return _connect(merged)


def _remove_epsilons(fst: Fst) -> Fst:
    """fst::RmEpsilon in the tropical semiring: each state gets the non-epsilon arcs and the final weights of
    the states its epsilon paths reach, plus the cheapest such path's weight; then connected."""
    n = fst.num_states
    eps = fst.ilabel == 0
    eps_out: list[list[tuple[int, float]]] = [[] for _ in range(n)]
    for s, d, w in zip(fst.src[eps].tolist(), fst.dst[eps].tolist(), fst.weight[eps].tolist()):
        eps_out[s].append((d, w))
    arcs_of: list[list[int]] = [[] for _ in range(n)]
    for a in np.flatnonzero(~eps).tolist():
        arcs_of[int(fst.src[a])].append(a)
    src: list[int] = []
    dst: list[int] = []
    label: list[int] = []
    weight: list[float] = []
    final = np.full(n, np.inf, np.float32)
    for s in range(n):
        distance = {s: np.float32(0.0)}
        queue = [s]
        while queue:  # Kaldi's den graphs have short epsilon chains and no epsilon cycles
            q = queue.pop()
            for d, w in eps_out[q]:
                through = np.float32(distance[q] + np.float32(w))
                if d not in distance or through < distance[d]:
                    distance[d] = through
                    queue.append(d)
        for q, d_q in distance.items():
            final[s] = min(final[s], np.float32(d_q + fst.final[q]))
            for a in arcs_of[q]:
                src.append(s)
                dst.append(int(fst.dst[a]))
                label.append(int(fst.ilabel[a]))
                weight.append(float(np.float32(d_q + fst.weight[a])))
    labels = np.asarray(label, np.int32)
    return _connect(
        Fst(
            start=fst.start,
            final=final,
            src=np.asarray(src, np.int32),
            dst=np.asarray(dst, np.int32),
            ilabel=labels,
            olabel=labels.copy(),
            weight=np.asarray(weight, np.float32),
        )
    )


def push_special(fst: Fst, delta: float = K_DELTA * 0.01) -> Fst:
    """Kaldi's PushSpecial: weights reweighted by the top eigenvector `v` of the transition matrix (a final
    probability counts as a transition to the start state), `p'(s -> t) = p v_t / v_s`, so every state's
    outgoing probability is the same; each complete path keeps its weight. Power iteration
    `v <- P v + 0.1 v` until the outgoing sums agree to `delta` (log ratio), checked every 5 iterations, at
    most 200 (then a warning, as in Kaldi)."""
    pushed, converged = _push(fst, delta)
    if not converged:
        warnings.warn(
            f"push_special: the weights did not converge in {PUSH_MAX_ITERATIONS} iterations; the pushed graph is "
            "inexact (as Kaldi warns)",
            stacklevel=2,
        )
    return pushed


def _push(fst: Fst, delta: float = K_DELTA * 0.01) -> tuple[Fst, bool]:
    """`push_special`'s graph, and whether the power iteration converged."""
    n = fst.num_states
    p = np.exp(-fst.weight.astype(np.float64))
    f = np.exp(-fst.final.astype(np.float64))
    # (P v)_s = sum over arcs s -> t of p v_t, plus final(s) v_start.
    src = np.concatenate([fst.src, np.arange(n)])
    dst = np.concatenate([fst.dst, np.full(n, fst.start)])
    w = np.concatenate([p, f])
    v = np.full(n, 1.0 / np.sqrt(n))
    converged = False
    for iteration in range(PUSH_MAX_ITERATIONS):
        new = 0.1 * v + np.bincount(src, w * v[dst], minlength=n)
        v = new / np.sqrt(np.sum(new * new))
        if iteration % 5 == 0 and iteration > 0:
            with np.errstate(divide="ignore", invalid="ignore"):
                sums = np.bincount(src, w * v[dst], minlength=n) / v
            if np.log(sums.max() / sums.min()) <= delta:
                converged = True
                break
    cost = -np.log(v)
    # Kaldi: arc weights in double then stored as float; final weights as a float Times
    final = (fst.final.astype(np.float32) + (cost[fst.start] - cost).astype(np.float32)).astype(np.float32)
    pushed = Fst(
        start=fst.start,
        final=final,
        src=fst.src,
        dst=fst.dst,
        ilabel=fst.ilabel,
        olabel=fst.olabel,
        weight=(fst.weight + cost[fst.dst] - cost[fst.src]).astype(np.float32),
    )
    return pushed, converged
