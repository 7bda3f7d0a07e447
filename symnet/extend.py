"""What a new layer, descriptor or notebook view needs beyond `symnet`'s own names (as `jax.extend` is to jax).

- `Formatter`: how a layer class prints itself in reprs and Kaldi-like text.
- `Combine` and `Rule`: the answers a new `Descriptor` gives the planner (how the rows it reads
  make a row; when a row is computable), with `encode` and `decode` between an Index
  `(n, t, x)` and the int64 key `map_keys` works on.
- `Product`: what a layer's `product()` answers where its value is its input rows times a matrix (plus a
  bias), so that the engine may lower a product of evenly spaced splices as one convolution.
- `register_html(cls, view)` and `render_html(obj)`: a notebook view for a new class.

docs/extending.md shows each in use.
"""

from symnet._src.base import exports as _exports

__getattr__, __dir__, __all__ = _exports.attach(__name__, __file__, eager=True)
