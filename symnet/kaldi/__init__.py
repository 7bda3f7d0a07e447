"""Kaldi nnet3 compatibility: config files (lines and descriptors), networks from configs, model files.

`parse_config` / `read_config` turn a config into immutable line objects
whose descriptors are symnet layers; `write_config` prints them back as Kaldi
does; `merge_config` adds a further config by Kaldi's rules; `check_config`
runs Kaldi's name and reference checks. `read_network` / `parse_network` /
`build_network` build a `Network` (its `objectives` the output-nodes')
from a config; `write_network` writes a Network back as a config.
Components: one record per Kaldi type in `COMPONENTS`
(`build_component`, `component_options`, `lookup`). Kaldi's own model
files: `read_nnet` / `write_nnet` hold them at the token level (`NnetFile`),
`read_model` / `write_model` as networks (`KaldiModel`, whose `network` is the Network). symnet's own files,
which keep any network, are `symnet.save` / `symnet.load`; `symnet.load_network` reads any of these files.

Modules: `config` (config lines), `descriptor_text` (the descriptor grammar),
`build` (networks from configs), `network` (networks as configs; `KaldiNetwork`,
a deprecated alias), `components` (the component records), `nnet_file`,
`token_kinds`, `token_values`, `transition_model` (model files at the token level), `model` and
`model_reader` (model files as networks), `nnet3_compute`
(nnet3-compute; `compute_table` runs it over Kaldi tables, as `symnet compute` does),
`exact` (every computable output frame, as the corpus's nnet3-eval-exact), `scales` (Kaldi's
compile-time rule on descriptor scales),
`lda` (the LDA-like input transform of recipes: nnet3-acc-lda-stats and
nnet-get-feature-transform);
the subpackage `xconfig` reads Kaldi's xconfig files. Kaldi's file formats themselves (binary and text
tokens, archives, egs, FSTs) are read by `symnet._src.kaldi_io`.
"""

from symnet._src.base import exports as _exports

__getattr__, __dir__, __all__ = _exports.attach(__name__, __file__)
