"""Walking and rewriting layer trees: every job that visits the nodes of a tree uses these.

Trees are DAGs in general (`h = h + h` shares its operand), so each function
visits every distinct layer once (by identity, which is cheap and exact), never
once per path, and none of them recurses, so a network of any depth is fine.
"""

from __future__ import annotations

from collections.abc import Callable, Iterable
from typing import TYPE_CHECKING, Any, TypeVar

import attrs

if TYPE_CHECKING:
    from .layer import Layer

__all__ = ["rewrite", "structurally_equal", "topological", "walk"]

Node = TypeVar("Node")


def walk(roots: Iterable[Layer]) -> list[Layer]:
    """Every layer reachable from `roots`, operands before their users, each once."""
    return topological(roots, lambda layer: layer.children)


def topological(roots: Iterable[Node], children: Callable[[Node], Iterable[Node]]) -> list[Node]:
    """Every node reachable from `roots` through `children`, children before their parents, each once (by
    identity): the order of layer trees (`walk`) and of tapes (`Tape.nodes`)."""
    order: list[Node] = []
    seen: set[int] = set()
    stack: list[tuple[Node, bool]] = [(r, False) for r in reversed(list(roots))]
    while stack:
        node, expanded = stack.pop()
        if expanded:
            order.append(node)
            continue
        if id(node) in seen:
            continue
        seen.add(id(node))
        stack.append((node, True))
        for c in reversed(list(children(node))):
            if id(c) not in seen:
                stack.append((c, False))
    return order


def rewrite(roots: Iterable[Layer], fn: Callable[[Layer], Layer]) -> list[Layer]:
    """The trees under `roots` with `fn` applied to every layer, operands first.

    `fn` receives each layer with its operands already rewritten and returns its
    replacement (or the layer itself). A shared sub-tree is rewritten once and
    stays shared.
    """
    roots = list(roots)
    done: dict[int, Layer] = {}
    for layer in walk(roots):
        done[id(layer)] = fn(layer.with_children(tuple(done[id(c)] for c in layer.children)))
    return [done[id(r)] for r in roots]


def structurally_equal(self: Layer, other: Any) -> Any:
    """attrs' structural `==`, walking shared sub-trees once.

    attrs' generated `__eq__` recurses into both operands of every node, so two
    separately built trees with shared sub-expressions (`h = h + h`, 60 times)
    took time exponential in the depth; `jax.jit` compares the static part of
    its arguments this way on every cache hit of a rebuilt Network. Here every
    pair of nodes is compared once, and cached hashes reject most inequalities
    at once.
    """
    if self is other:
        return True
    if other.__class__ is not self.__class__:
        return NotImplemented
    seen: set[tuple[int, int]] = set()
    stack: list[tuple[Any, Any]] = [(self, other)]
    while stack:
        a, b = stack.pop()
        if a is b:
            continue
        key = (id(a), id(b))
        if key in seen:
            continue
        seen.add(key)
        if a.__class__ is not b.__class__ or hash(a) != hash(b):
            return False
        for field in attrs.fields(a.__class__):
            if not field.eq:
                continue
            u, v = getattr(a, field.name), getattr(b, field.name)
            if field.metadata.get("child"):
                stack.append((u, v))
            elif field.metadata.get("children"):
                if len(u) != len(v):
                    return False
                stack.extend(zip(u, v))
            else:
                if field.eq_key is not None:
                    u, v = field.eq_key(u), field.eq_key(v)
                if not (u == v):
                    return False
    return True
