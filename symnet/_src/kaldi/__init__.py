"""The implementation behind `symnet.kaldi` (private: import its names from `symnet.kaldi`).

Nothing is imported here, so reading a config (`build.read_structure`, for `symnet info`) imports no jax.
"""

__all__: list[str] = []
