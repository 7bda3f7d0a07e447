#!/bin/bash
# The merged-minibatch fixture of tests/chain/test_chain_recipe.py: each scenario's kept egs merged into one
# minibatch by nnet3-chain-merge-egs (as recipes train on merged egs) and one nnet3-chain-train step on it from
# init.txt with the scenario's options (opts.txt): SCENARIO/step/merged.txt. Run after make.py (Kaldi's programs
# on PATH or in the folder given: ../shared/kaldi-bin.tar.xz's kaldi-bin/bin).
set -euo pipefail
bin=${1:-/tmp/kaldi/kaldi-bin/bin}
here=$(cd "$(dirname "$0")" && pwd)
export PATH="$bin:$PATH"
tmp=$(mktemp -d); trap 'rm -rf "$tmp"' EXIT
for scenario in chain-topo three-state; do
  d="$here/$scenario"
  count=$(nnet3-chain-copy-egs ark:"$d/cegs.ark" ark:/dev/null 2>&1 | sed -n 's/.*examples, wrote \([0-9]*\).*/\1/p')
  nnet3-chain-merge-egs --minibatch-size="$count" ark:"$d/cegs.ark" ark:"$tmp/merged.ark" 2>/dev/null
  nnet3-copy "$d/init.txt" "$tmp/init.mdl" 2>/dev/null
  nnet3-chain-train --use-gpu=no $(cat "$d/opts.txt") --max-param-change=2.0 "$tmp/init.mdl" "$d/den.fst" \
    ark:"$tmp/merged.ark" "$tmp/step.mdl" 2>/dev/null
  nnet3-copy --binary=false "$tmp/step.mdl" "$d/step/merged.txt" 2>/dev/null
  echo "$scenario: $count egs merged"
done
