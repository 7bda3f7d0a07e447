"""Rich display for notebooks: layer trees, networks, Tapes, compiled Computations, pictures.

Everything here returns self-contained HTML or SVG text (no scripts, no
external style sheets or fonts, nothing fetched from the network), wrapped in
`Html` / `Svg` (plain `str` subclasses with `_repr_html_` / `_repr_svg_`), so
a notebook cell shows it and a test can parse it. One module per view:

- `tree.layer_html(layer)`: the expression tree, foldable (`<details>`); shared
  sub-expressions are shown once.
- `network.network_html(network)`: inputs, outputs, every node with its dim
  where it is known, the parameters (names, shapes, counts), the left/right
  context when the network works on Indexes, the graph picture and the expression.
- `tape.tape_html(tape, deltas=None)`: every tape node with its layer, shape,
  row Indexes and a value summary (min/mean/max); with
  `deltas=tape.backward_deltas(d)` also each node's delta.
- `computation.computation_html(computation)`: the request and every planned
  node with the Indexes it computes; `computation.index_map_html(computation,
  node)`: which operand row each row of a node reads.
- `graph.graph_svg(network)`: the node graph, laid out in layers by depth
  (inputs at the top, outputs at the bottom; recurrences as dashed back edges).
- `receptive.receptive_field(network)`: which frames of every node (down to the
  inputs) one output frame reads, planned by the engine; shows as an SVG grid
  of node x frame.
- `summary.summary_html(summary)`: `Network.summary()`'s table (layers, dims,
  parameter counts, context).
- `html` (the `Html` and `Svg` types, tables, folds) and `labels` (`label`,
  a layer's one-line name) are what the views are made of.

The views draw what the engine has planned (its plan, read back, not recomputed).
`Layer`, `Network`, `Tape` and `Computation` show themselves through these
(`_repr_html_`, registered as `symnet.extend.register_html` does when this package
is imported); their `repr` stays the plain-text form.
"""

from symnet._src.base import exports as _exports

__getattr__, __dir__, __all__ = _exports.attach(__name__, __file__, eager=True)
