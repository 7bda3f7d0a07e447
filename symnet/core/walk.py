"""Walking and rewriting layer trees: every job that visits the nodes of a tree uses these.

Trees are DAGs in general (`h = h + h` shares its operand), so each function
visits every distinct layer once (by identity, which is cheap and exact), never
once per path, and none of them recurses, so a network of any depth is fine.
"""

from __future__ import annotations

from typing import TYPE_CHECKING, Any, Callable, Iterable

import attrs

if TYPE_CHECKING:
    from .layer import Layer


def walk(roots: Iterable[Layer]) -> list[Layer]:
    """Every layer reachable from `roots`, operands before their users, each once."""
    order: list[Layer] = []
    seen: set[int] = set()
    stack: list[tuple[Layer, bool]] = [(r, False) for r in reversed(list(roots))]
    while stack:
        layer, expanded = stack.pop()
        if expanded:
            order.append(layer)
            continue
        if id(layer) in seen:
            continue
        seen.add(id(layer))
        stack.append((layer, True))
        for c in reversed(layer.children):
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


def first_uses(roots: Iterable[tuple[str, Layer]]) -> dict[int, tuple[str, Layer | None]]:
    """For every layer (by identity), where a depth-first walk in field order first meets it.

    The result is `(scope, user)`: `scope` is the name of the nearest enclosing
    layer with a `scope` (a named `Node`), else the root's prefix; `user` is the
    layer whose operand it is there (None for a root).
    """
    found: dict[int, tuple[str, Layer | None]] = {}
    stack: list[tuple[str, Layer | None, Layer]] = [(prefix, None, layer) for prefix, layer in reversed(list(roots))]
    while stack:
        scope, user, layer = stack.pop()
        if id(layer) in found:
            continue
        found[id(layer)] = (scope, user)
        inner = layer.scope or scope
        for c in reversed(layer.children):
            if id(c) not in found:
                stack.append((inner, layer, c))
    return found


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
