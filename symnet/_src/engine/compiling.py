"""`compile`: a request planned on a network as a `Computation`, cached by (network structure, request, options).

Apart from `computation` (what a planned Computation holds and how a call runs it): here the options (lowering,
gradient, precision, sequence groups) are checked and resolved once, and the cache lets every training step with
one request shape reuse one Computation.
"""

from __future__ import annotations

from ..base.errors import PlanError
from ..core.precision import Precision, get_precision
from ..core.structure import NetworkLike
from .computation import Computation
from .gradient import GRADIENTS
from .graph import Graph
from .groups import SequenceGroups, group_count, part_request
from .memo import Cache
from .plan import Planner
from .recurrence import Lowering, check_lowering
from .request import ComputationRequest

__all__ = ["compile"]


_CACHE: Cache[Computation] = Cache(64)


def compile(
    network: NetworkLike,
    request: ComputationRequest,
    lowering: Lowering = "auto",
    gradient: str = "tape",
    precision: str | Precision | None = None,
    sequence_groups: int | None = None,
) -> Computation:
    """Plan `request` on `network` (eagerly) and return the Computation; cached.

    `lowering` says how recurrences and spliced products run (`explain()`
    shows what each got): `auto` as the fused scan (a hand-written backward
    pass, the fast one) where every member has a `vjp` and as a plain
    `lax.scan` that JAX differentiates where one does not; `fused` every
    recurrence fused (a PlanError naming a member without a `vjp`); `plain`
    every recurrence plain (the fused scan's reference). Under `fused`, and
    under `auto` where the default backend is the CPU, a product of evenly
    spaced splices of one value (`Append(Offset(h, o)...) @ W`, a TDNN layer;
    any layer whose `product()` names its input and matrix, as Kaldi's affine
    components do) in a regular request without sequence ends is one dilated
    convolution (symnet._src.engine.splice); `plain`, and `auto` on a GPU,
    keep it slices, a concatenation and one product (its reference).

    `gradient` says what `jax.grad` (or `jax.vjp`) of a call runs: `tape` the
    Tape's backward walk, the one `Computation.forward` + `tape.backward` runs
    (fast through recurrences; symnet._src.engine.gradient); `jax` JAX's own
    autodiff of the lowered program (forward mode too: `jax.jvp`, `jax.jacfwd`).

    `precision` is a mixed-precision policy (`symnet.Precision` or a preset's
    name: `"float32"`, `"bfloat16"`, `"float16"`): parameters, state and
    inputs are cast to its compute dtype in the program, outputs to its output
    dtype; gradients come back in each array's own dtype. None (the default):
    no casts, JAX's type promotion of the arrays given (docs/precision.md).

    `sequence_groups` says in how many groups of sequences a differentiated
    call (`jax.grad`, `jax.vjp` of one) runs its forward
    (symnet._src.engine.groups): side by side in one program, the parameters'
    gradients summed; the same numbers up to float rounding. None (the
    default) chooses: 2 on CPU for a regular request of a network without
    recurrences whose groups have a large enough product (W2's), else 1. A
    number asks for exactly that many, a PlanError where the request cannot
    (batch-norm in training mode, natural gradient, sequence ends, given
    states, `lowering="plain"`, `gradient="jax"`, groups of unequal size). A
    call that is not differentiated, a call inside `symnet.rng.randomness` and
    `forward`'s Tape always run as one group.

    The cache key is (network structure, request, lowering, gradient,
    precision, sequence_groups): parameters do not matter, so every training
    step with the same request shape reuses one Computation.
    """
    check_lowering(lowering)
    if gradient not in GRADIENTS:
        raise PlanError(f"gradient={gradient!r}: use one of {', '.join(map(repr, GRADIENTS))}")
    policy = get_precision(precision)
    key = (network.structure, request, lowering, gradient, policy, sequence_groups)
    hit = _CACHE.get(key)
    if hit is not None:
        return hit
    graph = Graph(dict(network.structure.outputs))
    planner = Planner(graph, request)
    k = group_count(graph, planner, request, lowering, gradient, sequence_groups)
    groups = None
    if k > 1:
        part = part_request(request, k)
        one_group = Computation(network.structure, graph, part, Planner(graph, part), lowering, gradient, policy)
        groups = SequenceGroups(one_group, k, request)
    computation = Computation(network.structure, graph, request, planner, lowering, gradient, policy, groups)
    return _CACHE.put(key, computation)
