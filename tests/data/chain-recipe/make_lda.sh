#!/bin/bash
# The chain LDA fixture of tests/chain/test_chain_recipe.py: nnet3-chain-acc-lda-stats (not among the ready-built
# programs: build it with ../shared/kaldi-bin.tar.xz's kaldi-bin/build/build_bins.sh after build_libs.sh, see
# shared/KALDI-BUILD.md) over each scenario's kept egs, with the network of an LDA init.config (lda-init.config:
# the spliced input, as a fixed-affine-layer's init.config has it), --rand-prune=0 (every weight as it is), stats
# as text: SCENARIO/lda.stats. Usage: bash make_lda.sh [folder with nnet3-init and nnet3-chain-acc-lda-stats].
set -euo pipefail
bin=${1:-/tmp/kaldi/kaldi-bin/bin}
here=$(cd "$(dirname "$0")" && pwd)
export PATH="$bin:$PATH"
tmp=$(mktemp -d); trap 'rm -rf "$tmp"' EXIT
for scenario in chain-topo three-state; do
  nnet3-init "$here/lda-init.config" "$tmp/init.raw" 2>/dev/null
  nnet3-chain-acc-lda-stats --binary=false --rand-prune=0 "$tmp/init.raw" ark:"$here/$scenario/cegs.ark" \
    "$here/$scenario/lda.stats" 2>&1 | grep "Accumulated stats"
done
