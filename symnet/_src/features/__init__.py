"""Acoustic features computed as Kaldi computes them (`symnet.features`)."""
