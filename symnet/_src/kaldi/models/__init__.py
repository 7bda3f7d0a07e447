"""Kaldi's model files: nnet3 models at the token level (`nnet_file`, the tokens' kinds and values), as
networks (`model`, `model_reader`), and the transition model of acoustic models."""

__all__: list[str] = []
