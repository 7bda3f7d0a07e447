"""Acoustic features computed as Kaldi computes them; the public names are in `symnet.features`."""

__all__: list[str] = []
