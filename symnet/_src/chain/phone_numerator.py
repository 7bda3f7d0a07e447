"""Chain numerators from phone alignments, as Kaldi's `chain-get-supervision` makes them.

From a phone alignment (one phone id >= 1 per input frame, where a run of one phone is one phone instance; or
Kaldi's (phone, length) pairs, one per instance),
Kaldi (src/chain/chain-supervision.cc, AlignmentToProtoSupervision and ProtoSupervisionToSupervision):

- lets phone instance `i`, aligned to input frames `[b, e)`, be at output frames
  `ceil(max(0, b - left_tolerance) / k) .. ceil(min(n, e + right_tolerance) / k) - 1`;
- composes the phone sequence with the HMMs (no transition probabilities: every arc has probability 1;
  self-loops reordered after the frame that leaves a state, as in the denominator) and keeps, at output
  frame `t`, only arcs of phones allowed at `t`: a time-unrolled acceptor with one state per (frame,
  HMM position), start at frame 0, final the states at frame `T` that have completed the last phone.

`phone_numerator` builds that graph. With `open_ends=True` it is the numerator of a chunk cut from a
longer utterance, as Kaldi's SupervisionSplitter makes it: any position in the chunk's first phone may
start the chunk and any position reached at its last frame may end it (Kaldi cuts the utterance's graph;
here the chunk's own phones are used, so a phone outside the chunk that tolerance would let in is not; and a
chunk at the utterance's start or end is open there too, where Kaldi's graph starts and ends its phones).
"""

from __future__ import annotations

from collections.abc import Mapping, Sequence

import numpy as np

from ..base.errors import ChainError
from ..kaldi_io.fst import Fst
from .graph import ChainGraph
from .phone_lm_graph import expand_with_phones
from .topology import Topology

__all__ = ["allowed_phones", "phone_numerator", "phone_runs"]


def phone_runs(phone_alignment: np.ndarray) -> tuple[np.ndarray, np.ndarray]:
    """(phones, durations) of the runs of equal ids in a per-frame phone alignment."""
    a = np.asarray(phone_alignment)
    if not a.size:
        return a.astype(np.int64), a.astype(np.int64)
    starts = np.flatnonzero(np.concatenate([[True], a[1:] != a[:-1]]))
    return a[starts].astype(np.int64), np.diff(np.append(starts, len(a)))


def allowed_phones(
    phones: np.ndarray, durations: np.ndarray, subsampling: int, left_tolerance: int, right_tolerance: int
) -> np.ndarray:
    """Which phone ids are allowed at each output frame (Kaldi's ProtoSupervision.allowed_phones), as a table
    `[output frame, phone id]` of booleans."""
    n = int(np.sum(durations))
    k = subsampling
    out = np.zeros((-(-n // k), int(phones.max(initial=0)) + 1), bool)
    frame = 0
    for phone, duration in zip(phones.tolist(), durations.tolist()):
        begin = max(0, frame - left_tolerance)
        end = min(n, frame + duration + right_tolerance)
        out[-(-begin // k) : -(-end // k), phone] = True
        frame += duration
    return out


def phone_numerator(
    phone_alignment: Sequence[int] | np.ndarray,
    topology: Topology,
    pdfs: Mapping[int, Sequence[int]] | None = None,
    *,
    subsampling: int = 1,
    left_tolerance: int = 5,
    right_tolerance: int = 5,
    open_ends: bool = False,
) -> ChainGraph:
    """The numerator graph of `phone_alignment` (phone ids >= 1, one per input frame; or `(phone, length)`
    pairs, one per phone instance, as `ali-to-phones --write-lengths` writes them and chain-get-supervision
    reads them: a phone said twice in a row is two instances, which one id per frame cannot tell apart) with
    `topology`'s HMMs
    and pdf-ids `pdfs[phone][pdf-class]` (default `topology.monophone_pdfs()`), at frame subsampling
    `subsampling`, with Kaldi's tolerances (chain-get-supervision's defaults: 5 and 5). Kaldi requires
    `left_tolerance + right_tolerance + 1 >= subsampling`. A graph with no complete path has no final state
    (its chain objective is Kaldi's default for a failed numerator)."""
    a = np.asarray(phone_alignment)
    pairs = a.ndim == 2 and a.shape[1:] == (2,)
    if not (a.ndim == 1 or pairs) or not a.size or not np.issubdtype(a.dtype, np.integer):
        raise ChainError(
            "a phone alignment must be a non-empty 1-d array of integer phone ids (one per frame) or an array of "
            f"(phone, length) pairs, got {a.dtype} {a.shape}"
        )
    if pairs and a[:, 1].min() < 1:
        raise ChainError(f"phone alignment: phone instance {int(np.argmin(a[:, 1]))} has length {int(a[:, 1].min())}")
    phones, durations = (a[:, 0].astype(np.int64), a[:, 1].astype(np.int64)) if pairs else phone_runs(a)
    if phones.min() < 1:
        raise ChainError(f"phone alignment: phone {int(phones.min())} is not a phone id (ids start at 1)")
    for name, value, least in (
        ("subsampling", subsampling, 1),
        ("left_tolerance", left_tolerance, 0),
        ("right_tolerance", right_tolerance, 0),
    ):
        if isinstance(value, bool) or not isinstance(value, (int, np.integer)) or value < least:
            raise ChainError(f"{name} must be an integer >= {least}, got {value!r}")
    if left_tolerance + right_tolerance + 1 < subsampling:
        raise ChainError(
            f"left_tolerance + right_tolerance + 1 = {left_tolerance + right_tolerance + 1} is less than the frame "
            f"subsampling factor {subsampling}: some output frames would allow no phone (Kaldi refuses this too)"
        )
    pdf_map = dict(topology.monophone_pdfs() if pdfs is None else pdfs)
    missing = sorted({int(p) for p in np.unique(phones)} - set(topology.phones))
    if missing:
        raise ChainError(f"phone alignment: phone {missing[0]} has no HMM in the topology")
    num_pdfs = 1 + max(max(v) for v in pdf_map.values())
    allowed = allowed_phones(phones, durations, subsampling, left_tolerance, right_tolerance)
    # The phone sequence as a linear "LM": state i -> i + 1 by phone i, final at the end.
    count = len(phones)
    linear = Fst(
        start=0,
        final=np.where(np.arange(count + 1) == count, 0.0, np.inf).astype(np.float32),
        src=np.arange(count, dtype=np.int32),
        dst=np.arange(1, count + 1, dtype=np.int32),
        ilabel=phones.astype(np.int32),
        olabel=phones.astype(np.int32),
        weight=np.zeros(count, np.float32),
    )
    graph, arc_phone, position = expand_with_phones(linear, topology, pdf_map)
    complete = np.isfinite(graph.final)
    frames = len(allowed)
    # Time-unrolled: layer t holds the graph states reachable at output frame t.
    first = {0} | (set(np.flatnonzero(position == 1).tolist()) if open_ends else set())
    layers: list[np.ndarray] = [np.array(sorted(first), np.int64)]
    steps: list[tuple[np.ndarray, np.ndarray]] = []  # per frame: arcs taken, and their source's index in layer t
    arc_allowed = allowed[:, arc_phone]  # [frame, arc]: the arc's phone is allowed at the frame
    in_layer = np.zeros(graph.num_states, bool)
    for t in range(frames):
        here = layers[-1]
        in_layer[here] = True
        arcs = np.flatnonzero(in_layer[graph.src] & arc_allowed[t])
        in_layer[here] = False
        steps.append((arcs, np.searchsorted(here, graph.src[arcs])))
        layers.append(np.unique(graph.dst[arcs]))
    last = layers[-1]
    end = np.ones(len(last), bool) if open_ends else complete[last]
    # Keep the states on a path to an end state (Kaldi's Connect), frame by frame from the end.
    alive = [np.zeros(len(layer), bool) for layer in layers]
    alive[-1] = end
    for t in range(frames - 1, -1, -1):
        arcs, src_index = steps[t]
        nxt = np.searchsorted(layers[t + 1], graph.dst[arcs])
        useful = alive[t + 1][nxt]
        alive[t][src_index[useful]] = True
    offsets = np.cumsum([0] + [int(m.sum()) for m in alive])
    ids = [np.where(m, offsets[t] + np.cumsum(m) - 1, -1) for t, m in enumerate(alive)]
    src: list[np.ndarray] = []
    dst: list[np.ndarray] = []
    pdf: list[np.ndarray] = []
    for t, (arcs, src_index) in enumerate(steps):
        nxt = np.searchsorted(layers[t + 1], graph.dst[arcs])
        s, d = ids[t][src_index], ids[t + 1][nxt]
        keep = (s >= 0) & (d >= 0)
        src.append(s[keep])
        dst.append(d[keep])
        pdf.append(graph.ilabel[arcs[keep]].astype(np.int64) - 1)
    num_states = max(int(offsets[-1]), 1)
    log_initial = np.full(num_states, -np.inf)
    log_final = np.full(num_states, -np.inf)
    if offsets[-1]:
        log_initial[ids[0][alive[0]]] = 0.0
        log_final[ids[-1][alive[-1]]] = 0.0
    cat = np.concatenate
    src_a, dst_a, pdf_a = cat(src), cat(dst), cat(pdf)
    return ChainGraph(
        num_pdfs=num_pdfs,
        src=src_a.astype(np.int32),
        dst=dst_a.astype(np.int32),
        pdf=pdf_a.astype(np.int32),
        log_prob=np.zeros(len(src_a)),
        log_initial=log_initial,
        log_final=log_final,
    )
