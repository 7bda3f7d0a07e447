"""Kaldi's text: nnet3 config lines and descriptors, networks built from configs and written back as configs,
nnet3-info's lines, the compile-time rule on descriptor scales, and xconfig files (`xconfig`)."""

__all__: list[str] = []
