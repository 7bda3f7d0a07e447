"""symnet's FST algorithms against brute force: the weighted relation (every input/output string pair's
weight, by enumerating paths) of the result is the input's, on tiny random FSTs."""

from __future__ import annotations

import math

import numpy as np
import pytest

from symnet._src.decode.graphs.compose import compose
from symnet._src.decode.graphs.determinize import determinize
from symnet._src.decode.graphs.minimize import minimize
from symnet._src.decode.graphs.rmeps import remove_epsilons
from symnet._src.decode.graphs.wfst import GraphBuildError, Wfst, plus

from .fst_brute import random_fst, relation, same_relation

SEEDS = range(40)


@pytest.mark.parametrize("semiring", ["tropical", "log"])
def test_composition_is_the_relational_product(semiring: str) -> None:
    for seed in SEEDS:
        rng = np.random.default_rng(seed)
        a, b = random_fst(rng), random_fst(rng)
        k, n = 3, 5
        ra, rb = relation(a, k, k + n, semiring), relation(b, k + n, k, semiring)
        expected: dict = {}
        for (x, y), w in ra.items():
            for (y2, z), w2 in rb.items():
                if y == y2:
                    expected[(x, z)] = plus(expected.get((x, z), math.inf), w + w2, semiring)
        same_relation(relation(compose(a, b), k, k, semiring), expected)


def functional(rng: np.random.Generator) -> Wfst:
    """An acyclic transducer whose output is a function of its input: input epsilons write nothing, each
    input label always the same output (label 2 none)."""
    fst = random_fst(rng, states=6, arcs=12, loops=False, acceptor=True)
    fst.arcs = [[(i, {0: 0, 1: 5, 2: 0, 3: 6}[i], w, d) for i, _, w, d in arcs] for arcs in fst.arcs]
    return fst


@pytest.mark.parametrize("semiring", ["tropical", "log"])
def test_determinization_keeps_the_relation_and_is_deterministic(semiring: str) -> None:
    for seed in SEEDS:
        fst = functional(np.random.default_rng(seed))
        det = determinize(fst, semiring)
        same_relation(relation(det, 9, 9, semiring), relation(fst, 9, 9, semiring))
        for arcs in det.arcs:
            inputs = [i for i, o, _, _ in arcs if i]
            assert len(inputs) == len(set(inputs))
            assert all(o for i, o, _, _ in arcs if not i)  # an input epsilon only writes a label


def test_determinization_refuses_what_it_cannot_do() -> None:
    fst = Wfst()
    for _ in range(3):
        fst.add_state()
    fst.final[1] = fst.final[2] = 0.0
    fst.add_arc(0, 1, 7, 0.0, 1)
    fst.add_arc(0, 1, 8, 0.0, 2)  # input 1 writes 7 or 8: not functional
    with pytest.raises(GraphBuildError, match="not functional"):
        determinize(fst)
    fst.add_arc(1, 0, 0, 0.0, 0)
    fst.add_arc(0, 0, 0, 0.0, 1)
    with pytest.raises(GraphBuildError, match="cycle of input-epsilon"):
        determinize(fst)


@pytest.mark.parametrize("semiring", ["tropical", "log"])
def test_minimization_and_epsilon_removal_keep_the_relation(semiring: str) -> None:
    for seed in SEEDS:
        rng = np.random.default_rng(seed)
        fst = random_fst(rng, states=6, arcs=12)
        expected = relation(fst, 4, 4, semiring)
        same_relation(relation(remove_epsilons(fst, semiring), 4, 4, semiring), expected)
        assert not any(i == o == 0 for _, (i, o, _, _) in remove_epsilons(fst, semiring).all_arcs())
        det = determinize(functional(rng), semiring)
        small = minimize(det)
        same_relation(relation(small, 9, 9, semiring), relation(det, 9, 9, semiring))
        assert small.num_states <= det.num_states


def test_minimization_merges_equivalent_states() -> None:
    fst = Wfst()
    for _ in range(4):
        fst.add_state()
    fst.final[3] = 0.0
    fst.add_arc(0, 1, 1, 0.5, 1)
    fst.add_arc(0, 2, 2, 0.5, 2)
    fst.add_arc(1, 3, 3, 1.0, 3)
    fst.add_arc(2, 3, 3, 1.0, 3)  # states 1 and 2 have the same future
    assert minimize(fst).num_states == 3
