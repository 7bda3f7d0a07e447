"""symnet's implementation: private. Its modules may change or move without notice.

The public API is `symnet` and its public subpackages (`symnet.layers`,
`symnet.components`, `symnet.kaldi`, `symnet.train`, `symnet.engine`,
`symnet.chain`, `symnet.display`, `symnet.datasets`, `symnet.errors`), which
re-export names defined here. Tests and benchmarks that import from
`symnet._src` test or measure internals, and say so by the import.
"""

__all__: list[str] = []
