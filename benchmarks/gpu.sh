#!/usr/bin/env bash
# The GPU figures of docs/performance.md: the benchmarks that mean something on a GPU, and the quick half of the
# Kaldi corpus on the GPU, each section under its own time limit.
#
#     benchmarks/gpu.sh LOG_FOLDER [SECTION...]     # from the repository root; every section when none is named
#
# Sections: machine, tdnn, recurrent, precision-w2, precision-w3, jax_grad, corpus (the default list), tdnn-fused. It runs with the python3 it
# finds (PYTHON=... to choose) and symnet from this checkout (PYTHONPATH), so a machine that has symnet's
# dependencies (jax with its CUDA plugin, optax, attrs, numpy, kaldiio; pytest and hypothesis for the corpus)
# needs nothing installed. Each section writes LOG_FOLDER/<section>.log; one that fails or runs out of time
# does not stop the next. Timings are ratios against a reference measured in the same run.
#
# XLA's GPU compiler autotunes every product, so most of a section's time is compiling: on an H200 (2026-12-04)
# the recurrent rows did not finish a round in 220 s, nor precision-w2 or jax_grad's BLSTM in 60 s. The limits
# below are sized from that; a 15-minute lease holds the machine's start and about three sections.
set -u
logs=${1:?usage: benchmarks/gpu.sh LOG_FOLDER [SECTION...]}
shift
mkdir -p "$logs"
logs=$(cd "$logs" && pwd)
py=$(command -v "${PYTHON:-python3}") || exit 1
case $py in /*) ;; *) py="$PWD/$py" ;; esac
export PYTHONPATH="$PWD${PYTHONPATH:+:$PYTHONPATH}" PYTHONUNBUFFERED=1 SYMNET_COMPILE_CACHE=off

section() {  # section NAME SECONDS COMMAND...: run COMMAND under a time limit, its output to NAME.log and here
    local name=$1 limit=$2
    shift 2
    echo "== $name $(date -u +%T) (at most ${limit} s): $*"
    timeout "$limit" "$@" >"$logs/$name.log" 2>&1
    status=$?
    grep -v "hlo_rematerialization\|bfc_allocator" "$logs/$name.log" | tail -n 40
    echo "== $name done $(date -u +%T), exit status $status"
}

run() {
    case $1 in
    machine) section machine 30 sh -c "nvidia-smi --query-gpu=name,driver_version,memory.total,clocks.max.sm \
--format=csv; $py -c 'import jax, optax, attrs, numpy, symnet; print(\"jax\", jax.__version__, jax.devices(), \
\"optax\", optax.__version__, \"attrs\", attrs.__version__, \"numpy\", numpy.__version__, \"symnet\", \
symnet.__version__)'" ;;
    # W2 by the Tape and by jax.value_and_grad (lowering="auto": slices on a GPU); tdnn-fused: its splices as
    # convolutions, which XLA's GPU compiler planned 129 GiB of buffers for (not in the default list)
    tdnn) (cd benchmarks && section tdnn 150 "$py" run_all.py --only w2,w2-grad --rounds 3 --steps 20) ;;
    tdnn-fused) (cd benchmarks && section tdnn-fused 240 "$py" run_all.py --only w2,w2-fused --rounds 3 --steps 20) ;;
    recurrent) (cd benchmarks && section recurrent 300 "$py" run_all.py --only w3,gru,blstm,kaldi-lstm --rounds 3) ;;
    precision-w2) (cd benchmarks && section precision-w2 150 "$py" precision.py --workload w2 --rounds 3 --steps 10) ;;
    precision-w3) (cd benchmarks && section precision-w3 60 "$py" precision.py --rounds 3 --steps 10) ;;
    jax_grad) (cd benchmarks && section jax_grad 150 "$py" jax_grad.py --rounds 3 --steps 10) ;;
    # The corpus's tolerance is Kaldi's float32 (rtol 1e-5): a failure says a GPU result is not Kaldi's.
    corpus) section corpus 240 "$py" -m pytest tests/kaldi/test_kaldi_corpus.py -m "not slow" -p no:cacheprovider \
        -W ignore --tb=line -rf ;;
    *) echo "unknown section $1" >&2 ;;
    esac
}

[ $# -gt 0 ] || set -- machine tdnn recurrent precision-w2 precision-w3 jax_grad corpus
for name in "$@"; do run "$name"; done
