"""Kaldi's computations: nnet3-compute (`nnet3_compute`), every computable output frame (`exact`), the LDA-like
input transforms of recipes (`lda`, `chain_lda`), matrix archives out (`ark_writer`) and Kaldi's float32
products on every backend (`float32`)."""

__all__: list[str] = []
