"""The implementation behind `symnet.engine` (private: import its names from `symnet.engine`).

Nothing is imported here, so the planner (`plan`, `context`, `dims`) imports without the lowering modules and jax.
"""

__all__: list[str] = []
