"""Random networks for property tests: small graphs mixing descriptors, row-wise layers, Weights and recurrences.

`NetGen(data, rng, dim, x_moves=..., recurrent=..., t_range=...)` draws layers
with known dims from hypothesis' `data`; `draw_network(gen)` makes a Network
with the output `output` and sometimes a second one, `aux`, sharing
sub-expressions. tests/engine/test_engine_property.py checks the engine
against the reference evaluator on them; tests/saving checks that they save
and load.
"""

from __future__ import annotations

from collections.abc import Sequence
from typing import Any

import numpy as np
from hypothesis import strategies as st

import symnet
from symnet import (
    Divide,
    Exp,
    Log,
    LogSoftmax,
    Negate,
    ReLU,
    Sigmoid,
    Softmax,
    Tanh,
    Weight,
)
from symnet._src.core.descriptor import (
    Append,
    Const,
    DimRange,
    Failover,
    IfDefined,
    Input,
    Node,
    Offset,
    Ref,
    ReplaceIndex,
    Round,
    Scale,
    Sum,
    Switch,
)
from symnet._src.core.layer import Layer


class NetGen:
    """Draws a random network (layers with known dims) from hypothesis' `data`."""

    def __init__(
        self,
        data: st.DataObject,
        rng: np.random.Generator,
        dim: int,
        *,
        x_moves: bool,
        recurrent: bool,
        t_range: tuple[int, int],
        replace_t: bool = True,
        directions: tuple[int, ...] = (1, 2, -1),
    ) -> None:
        self.replace_t = replace_t
        self.directions = directions
        self.data = data
        self.rng = rng
        self.x = Input("input", dim)
        self.dim = dim
        self.x_moves = x_moves
        self.recurrent = recurrent
        self.t_range = t_range
        self.pool: list[tuple[Layer, int]] = [(self.x, dim)]
        self.weights: dict[tuple, Weight] = {}
        self.names = 0
        self.budget = 14
        self.has_recurrence = False

    def draw(self, strategy: st.SearchStrategy[Any]) -> Any:
        return self.data.draw(strategy)

    def choice(self, options: Sequence[Any]) -> Any:
        return self.draw(st.sampled_from(options))

    def weight(self, shape: Sequence[int]) -> Weight:
        shape = tuple(shape)
        if shape in self.weights and self.draw(st.booleans()):
            return self.weights[shape]  # one Weight used twice is one shared parameter
        w = Weight(self.rng.normal(scale=0.6, size=shape))
        self.weights[shape] = w
        return w

    def to_dim(self, e: Layer, d: int, want: int) -> Layer:
        if d == want:
            return e
        how = self.choice(["dot", "dimrange" if d > want else "append"])
        if how == "dimrange":
            return DimRange(e, self.draw(st.integers(0, d - want)), want)
        if how == "append":
            return Append(e, Const(0.25, want - d))
        return e @ self.weight((d, want))

    def expr(self, depth: int) -> tuple[Layer, int]:
        self.budget -= 1
        if depth <= 0 or self.budget <= 0:
            return self.leaf()
        kinds = [
            "leaf",
            "share",
            "offset",
            "append",
            "sum",
            "ifdefined",
            "failover",
            "switch",
            "round",
            "replace_t",
            "far",
            "scale",
            "dimrange",
            "affine",
            "relu",
            "tanh",
            "sigmoid",
            "times",
            "literal",
            "minus",
            "negate",
            "power",
            "exp",
            "log",
            "divide",
            "softmax",
            "logsoftmax",
            "node",
        ]
        if self.x_moves:
            kinds += ["offset_x", "replace_x"]
        if self.recurrent:
            kinds += ["recurrence"]
        if not self.replace_t:
            kinds.remove("replace_t")
        kind = self.choice(kinds)
        out: Layer
        sub = lambda: self.expr(depth - 1)  # noqa: E731
        if kind == "leaf":
            return self.leaf()
        if kind == "share":
            return self.choice(self.pool)
        if kind == "offset":
            e, d = sub()
            out = Offset(e, self.draw(st.integers(-2, 2)))
        elif kind == "offset_x":
            e, d = sub()
            out = Offset(e, self.draw(st.integers(-1, 1)), self.draw(st.integers(-1, 1)))
        elif kind == "append":
            parts = [sub() for _ in range(self.draw(st.integers(1, 3)))]
            out, d = Append(*(p for p, _ in parts)), sum(pd for _, pd in parts)
        elif kind in ("sum", "failover", "switch"):
            count = 2 if kind == "failover" else self.draw(st.integers(1, 3))
            parts = [sub() for _ in range(count)]
            d = parts[0][1]
            layers = [self.to_dim(p, pd, d) for p, pd in parts]
            out = {"sum": Sum, "failover": Failover, "switch": Switch}[kind](*layers)
        elif kind == "ifdefined":
            e, d = sub()
            out = IfDefined(e)
        elif kind == "far":
            # A part that few or no requested rows use: an offset beyond the window, inside IfDefined or
            # as the first part of a Failover (the other part of a different kind).
            e, d = sub()
            far = Offset(e, self.choice([-9, 9]))
            if self.draw(st.booleans()):
                out = IfDefined(far)
            else:
                other, od = sub()
                out = Failover(far @ self.weight((d, od)), other)
                d = od
        elif kind == "round":
            e, d = sub()
            out = Round(e, self.draw(st.integers(1, 3)))
        elif kind == "replace_t":
            e, d = sub()
            lo, hi = self.t_range
            out = ReplaceIndex(e, "t", self.draw(st.integers(lo - 1, hi)))
        elif kind == "replace_x":
            e, d = sub()
            out = ReplaceIndex(e, "x", self.draw(st.integers(0, 1)))
        elif kind == "scale":
            e, d = sub()
            out = Scale(self.choice([0.5, -2.0, 3.0]), e)
        elif kind == "dimrange":
            e, d = sub()
            if d == 1:
                out = e
            else:
                k = self.draw(st.integers(1, d - 1))
                out, d = DimRange(e, self.draw(st.integers(0, d - k)), k), k
        elif kind == "affine":
            e, d = sub()
            k = self.draw(st.integers(1, 4))
            w: Layer = self.weight((d, k))
            if self.draw(st.booleans()):
                w = w * 0.5  # a function of weights only: one value for all rows
            out, d = e @ w + self.weight((k,)), k
        elif kind == "relu":
            # ReLU after an affine with a bias: no exact zeros, so no tie in the derivative.
            e, d = sub()
            out = ReLU(e @ self.weight((d, d)) + self.weight((d,)))
        elif kind in ("tanh", "sigmoid", "negate", "softmax", "logsoftmax"):
            e, d = sub()
            out = {"tanh": Tanh, "sigmoid": Sigmoid, "negate": Negate, "softmax": Softmax, "logsoftmax": LogSoftmax}[
                kind
            ](e)
        elif kind in ("times", "minus"):
            (a, da), (b, db) = sub(), sub()
            b = self.to_dim(b, db, da)
            out, d = (a * b if kind == "times" else a - b), da
        elif kind == "literal":
            e, d = sub()
            lit = self.choice(["plus", "times", "array"])
            if lit == "plus":
                out = 0.5 + e
            elif lit == "times":
                out = e * 2.0
            else:
                out = e * np.linspace(0.5, 1.5, d)
        elif kind == "power":
            e, d = sub()
            out = e**2.0
        elif kind == "exp":
            e, d = sub()
            out = Exp(Tanh(e))
        elif kind == "log":
            e, d = sub()
            out = Log(Sigmoid(e) + 0.5)
        elif kind == "divide":
            (a, da), (b, db) = sub(), sub()
            out, d = Divide(a, Sigmoid(self.to_dim(b, db, da)) + 1.0), da
        elif kind == "node":
            e, d = sub()
            name = f"n{self.names}"
            self.names += 1
            out = Node(name, e)
            self.pool.append((Ref(name), d))  # later expressions may refer to it by name
        elif kind == "recurrence":
            out, d = self.recurrence(depth)
        else:  # pragma: no cover
            raise AssertionError(kind)
        self.pool.append((out, d))
        return out, d

    def leaf(self) -> tuple[Layer, int]:
        if self.draw(st.integers(0, 9)) == 0:
            d = self.draw(st.integers(1, 2))
            return Const(self.choice([0.5, -1.0]), d), d
        return self.x, self.dim

    def recurrence(self, depth: int) -> tuple[Layer, int]:
        """h[t] = tanh(A [x[t+o]; e[t]] + U h[t-k]) with IfDefined (or Failover, when it works)."""
        name = f"r{self.names}"
        self.names += 1
        self.has_recurrence = True
        e, d = self.expr(depth - 1)
        k = self.choice(list(self.directions))
        hd = self.draw(st.integers(1, 3))
        o = self.draw(st.integers(-1, 1))
        # x comes first, so that the reference stops where x ends (a finite recursion).
        feed = Append(Offset(self.x, o), e) @ self.weight((self.dim + d, hd))
        past = Offset(Ref(name), -k)
        if self.draw(st.booleans()):
            back: Layer = Failover(past, Const(0.1, hd))
        else:
            back = IfDefined(past)
        if self.draw(st.booleans()):
            h = Node(name, Tanh(feed + back @ self.weight((hd, hd)) + self.weight((hd,))))
        else:  # no matrix inside the loop: the dims come from the descriptors alone
            h = Node(name, Sum(feed, Scale(0.5, back)))
        return h, hd


def reads_input(net: symnet.Network) -> bool:
    stack, seen = [layer for _, layer in net.structure.outputs], set()
    while stack:
        layer = stack.pop()
        if id(layer) in seen:
            continue
        seen.add(id(layer))
        if isinstance(layer, Input):
            return True
        stack.extend(layer.children)
    return False


def draw_network(gen: NetGen) -> symnet.Network:
    """A network with the output `output` and sometimes a second one, `aux`, sharing sub-expressions."""
    outputs = {"output": gen.expr(gen.draw(st.integers(1, 3)))[0]}
    if gen.draw(st.integers(0, 3)) == 0:
        gen.budget = 6
        outputs["aux"] = gen.expr(2)[0]
    return symnet.Network(outputs)
