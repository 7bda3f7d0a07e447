"""Settings shared by the whole suite: Hypothesis profiles, no compile cache, quick XLA compilation.

Property tests are reproducible by default: the `ci` profile derandomizes
Hypothesis (each test's examples follow from the test itself, so two runs of the
same code test the same inputs, and a CI failure reproduces locally) and keeps
no example database. Locally, draw fresh examples with the `random` profile:

    SYMNET_HYPOTHESIS_PROFILE=random make test

Hypothesis's own `--hypothesis-profile=random` option selects it as well. Tests
that pass their own `@settings(...)` keep those values and inherit the rest.

`symnet compute` keeps compiled programs in the user's cache folder
(`symnet._src.engine.compile_cache`); the suite turns that off (`SYMNET_COMPILE_CACHE=off`,
also for the commands it starts) so it writes nothing outside its temporary folders.

`fit` and the command line have glibc keep freed memory (`symnet.tune_host_memory`): a
training process's heap stays at its peak, which is what a long training run wants. A test
worker runs thousands of unrelated tests, and kept its peak of each (4 GB a worker a quarter
of the way through `make test-all`), so the suite leaves malloc as it is
(`SYMNET_HOST_MEMORY=system`, inherited by the commands it starts);
tests/core/test_host_memory.py checks the tuning in fresh processes of its own.

A worker's compiled programs are let go (`symnet.clear_caches()` and `jax.clear_caches()`) when a
test module ends with the worker holding more than `MAX_MAPPINGS` memory mappings. XLA on CPU maps
each program's code into memory (about three mappings a program), and Linux allows a process 65,530
(`vm.max_map_count`). Twice, near the end of `make test-all`, a worker died of a segmentation fault
inside XLA's compiler, with nothing else in common; 400 tests into tests/train and tests/engine in
one process, the suite held 10,943 mappings and 3.0 GB, and growing. Letting each module's programs
go, the same tests held 1,177 mappings and 1.5 GB; but doing it after every module cost `make test`
52 s of its 926 s of tests (mostly the garbage collection), so it is done only past the bound.

Most of the suite's time is XLA compiling small programs once each, so `make test`
runs with XLA's quick code generation (`QUICK_XLA_FLAGS`, set before JAX starts,
inherited by child processes, and left off with a warning where this jaxlib does
not know them): the same HLO programs, compiled much faster
(`benchmarks/quick_compile.py` measures it). A run with `XLA_FLAGS` already set
keeps it: `make test-all` sets it empty, so CI runs the whole suite on XLA's
optimised code as well.

Once a worker has collected its tests, the objects it holds then (JAX, symnet, the test
modules and items, all kept to the end) are moved out of the garbage collector's reach
(`gc.freeze()`): its full collections, 5% of tests/engine's time, no longer walk them
(3.7 s against 5.5 s a worker there).
"""

from __future__ import annotations

import gc
import os
import subprocess
import sys
import warnings
from collections.abc import Iterator

import pytest
from hypothesis import settings

PROFILE_VARIABLE = "SYMNET_HYPOTHESIS_PROFILE"
os.environ.setdefault("SYMNET_COMPILE_CACHE", "off")
os.environ.setdefault("SYMNET_HOST_MEMORY", "system")
QUICK_XLA_FLAGS = " ".join(
    [
        "--xla_backend_optimization_level=0",  # LLVM's -O0
        "--xla_llvm_disable_expensive_passes=true",
        "--xla_cpu_use_fusion_emitters=false",  # XLA's older emitters: same HLO, far quicker to compile at -O0
        "--xla_cpu_enable_concurrency_optimized_scheduler=false",
    ]
)


def _quick_flags_work() -> bool:
    """Whether this jaxlib's XLA takes QUICK_XLA_FLAGS (an unknown flag aborts the process that reads it)."""
    probe = subprocess.run(
        [sys.executable, "-c", "import jax.numpy as jnp; jnp.zeros(1).block_until_ready()"],
        env={**os.environ, "XLA_FLAGS": QUICK_XLA_FLAGS, "JAX_PLATFORMS": "cpu"},
        capture_output=True,
        timeout=300,
    )
    if probe.returncode:
        warnings.warn(f"XLA does not take the suite's quick flags, so they are off: {QUICK_XLA_FLAGS}", stacklevel=1)
    return probe.returncode == 0


# Decided once, by the process pytest starts; pytest-xdist's workers inherit the variable.
if "XLA_FLAGS" not in os.environ:
    os.environ["XLA_FLAGS"] = QUICK_XLA_FLAGS if _quick_flags_work() else ""

settings.register_profile("ci", derandomize=True, database=None, print_blob=True)
settings.register_profile("random", derandomize=False)
settings.load_profile(os.environ.get(PROFILE_VARIABLE, "ci"))


#: A worker lets its compiled programs go once it holds more memory mappings than this (see the module docstring).
MAX_MAPPINGS = 8000


def _mappings() -> int:
    """The memory mappings this process holds (/proc/self/maps), or MAX_MAPPINGS + 1 where it cannot tell."""
    try:
        with open("/proc/self/maps", "rb") as maps:
            return sum(1 for _ in maps)
    except OSError:
        return MAX_MAPPINGS + 1


@pytest.fixture(autouse=True, scope="module")
def _let_compiled_programs_go() -> Iterator[None]:
    """After a test module, forget the compiled programs if the worker holds too many (the mappings limit)."""
    yield
    if "jax" in sys.modules and _mappings() > MAX_MAPPINGS:
        import jax

        import symnet

        symnet.clear_caches()
        jax.clear_caches()
        gc.collect()


#: Further cases of parametrized tests that `make test` leaves to `make test-all` (marked slow): in each family,
#: `make test` runs the other cases, which take the same code paths; these add lowerings, networks or shapes
#: that other tests cover, and are among make test's longest (`pytest --durations=0` gives each one's time).
TEST_ALL_ONLY = (
    "engine/test_fused_scan.py::test_fused_scan_matches_the_plain_scan[lstm]",
    "engine/test_fused_scan.py::test_fused_scan_matches_the_plain_scan[lstmp]",
    "engine/test_fused_scan.py::test_fused_scan_matches_the_plain_scan[rnn]",
    "engine/test_fused_scan.py::test_inputs_that_start_late_mask_the_first_frames_alike[kaldi lstm]",
    "engine/test_lengths.py::test_compute_equals_each_sequence_alone[window]",
    "engine/test_lengths.py::test_compute_equals_each_sequence_alone[optional reads]",
    "engine/test_splice.py::test_values_and_tape_gradients_equal_the_reference[False-splices2]",
    "engine/test_recurrence.py::test_a_recurrence_needed_at_every_third_frame_steps_over_those_frames_only[0-fused]",
    "engine/test_groups.py::test_values_and_gradients_in_groups_equal_the_reference[False-2-birnn]",
    "layers/test_attention_lowering.py::test_attention_from_its_source_frames_is_softmax_attention_and_its_gradient[options1-",
    "layers/test_attention_lowering.py::test_attention_from_its_source_frames_is_softmax_attention_and_its_gradient[options4-",
    "chain/test_chunk_numerator.py::test_chain_examples_draw_their_chunks_and_train[three]",
    "engine/test_fused_scan.py::test_fused_scan_matches_the_plain_scan[kaldi gru]",
    "engine/test_fused_scan.py::test_fused_scan_matches_the_plain_scan[rnn lag 2]",
    "engine/test_fused_scan.py::test_fused_scan_matches_the_plain_scan[rnn backward in time]",
    "engine/test_fused_scan.py::test_inputs_that_start_late_mask_the_first_frames_alike[lstm]",
    "engine/test_fused_scan.py::test_given_state_gets_its_gradient[lstm]",
    "layers/test_transforms.py::test_hessian_is_the_jacobian_of_the_gradient_and_symmetric[Bidirectional LSTM]",
    "layers/test_transforms.py::test_hessian_is_the_jacobian_of_the_gradient_and_symmetric[LSTM projected, backward]",
    "layers/test_transforms.py::test_jvp_and_jacfwd_equal_the_reverse_mode_jacobian[Bidirectional LSTM]",
    "layers/test_transforms.py::test_jvp_and_jacfwd_equal_the_reverse_mode_jacobian[LSTM projected, backward]",
    "layers/test_attention_lowering.py::test_attention_from_its_source_frames_is_softmax_attention_and_its_gradient[options3-",
    "layers/test_attention_lowering.py::test_attention_from_its_source_frames_is_softmax_attention_and_its_gradient[options5-",
    "layers/test_attention_lowering.py::test_attention_from_its_source_frames_is_softmax_attention_and_its_gradient[options6-",
    "layers/test_attention_lowering.py::test_attention_from_its_source_frames_is_softmax_attention_and_its_gradient[options7-",
    "engine/test_groups.py::test_values_and_gradients_in_groups_equal_the_reference[False-4-",
    "engine/test_groups.py::test_values_and_gradients_in_groups_equal_the_reference[True-4-",
    "engine/test_splice.py::test_values_and_tape_gradients_equal_the_reference[True-splices1]",
    "engine/test_splice.py::test_values_and_tape_gradients_equal_the_reference[True-splices2]",
    "engine/test_splice.py::test_subsampled_splices_equal_the_reference_and_jax_grad[True-",
    "engine/test_precision.py::test_jax_grad_gives_parameter_dtype_gradients_near_float32[kaldi-bfloat16]",
    "engine/test_precision.py::test_jax_grad_gives_parameter_dtype_gradients_near_float32[tdnn-bfloat16]",
    "engine/test_lengths.py::test_gradients_equal_those_of_each_sequence_alone[optional reads]",
    "train/test_chain_fit.py::test_loss_and_gradient_are_chain_objectives_on_hand_built_graphs[3-2]",
    "engine/test_fused_scan.py::test_fused_scan_matches_the_plain_scan[bidirectional]",
    "engine/test_fused_scan.py::test_fused_scan_matches_the_plain_scan[gru]",
    "engine/test_splice.py::test_jax_grad_equals_the_plain_lowering[False-splices1]",
    "engine/test_splice.py::test_jax_grad_equals_the_plain_lowering[True-splices1]",
    "engine/test_splice.py::test_subsampled_splices_equal_the_reference_and_jax_grad[False-splices2-3]",
    "engine/test_lengths.py::test_masks_of_far_ends_equal_planned_ones[blstm]",
    "engine/test_precision.py::test_jax_grad_gives_parameter_dtype_gradients_near_float32[lstm-bfloat16]",
    "engine/test_streaming.py::test_compile_count_does_not_grow_with_length[subsampled]",
    "engine/test_buckets.py::test_at_most_eight_compilations_for_any_lengths[backward_rnn]",
    "layers/test_attention_lowering.py::test_kaldis_component_from_its_source_frames_equals_its_expansion[3-2-0-0-1-",
    "layers/test_layers_math.py::test_cnn_end_to_end_matches_the_composed_references",
    "chain/test_chain_recipe.py::test_one_step_equals_nnet3_chain_train[three-state]",
    "train/test_chain_egs.py::test_fit_on_kaldis_chain_egs_gives_kaldis_objective[1]",
    "train/test_chunk_widths.py::test_a_cut_down_minibatch_has_the_full_width_loss_and_gradients[blstm]",
    "engine/test_lengths.py::test_gradients_equal_those_of_each_sequence_alone[blstm]",
    "engine/test_splice.py::test_values_and_tape_gradients_equal_the_reference[False-splices1]",
    "engine/test_fused_scan.py::test_a_member_without_a_vjp_makes_its_recurrence_plain_under_auto",
    "layers/test_transforms.py::test_hessian_is_the_jacobian_of_the_gradient_and_symmetric[LSTM]",
    "layers/test_attention_lowering.py::test_a_padded_batch_with_ends_gives_each_sequence_its_own_outputs[options2]",
    "layers/test_attention_lowering.py::test_attention_from_its_source_frames_is_softmax_attention_and_its_gradient[options2-",
    "cli/test_cli_objective.py::test_train_with_chain_and_subsampling",
)


def pytest_collection_finish(session: pytest.Session) -> None:
    """Freeze what collection left (the module docstring): the session keeps it, so collections need not walk it."""
    gc.collect()
    gc.freeze()


def pytest_collection_modifyitems(config: pytest.Config, items: list[pytest.Item]) -> None:
    """Mark `TEST_ALL_ONLY`'s cases slow; a listed case that no longer exists fails the run (the list stays true)."""
    found: set[str] = set()
    for item in items:
        node = item.nodeid.removeprefix("tests/")
        for case in TEST_ALL_ONLY:
            if node.startswith(case):
                item.add_marker(pytest.mark.slow)
                found.add(case)
    selected_whole = not config.args or config.args == [str(config.rootpath / "tests")] or config.args == ["tests"]
    missing = [case for case in TEST_ALL_ONLY if case not in found]
    if selected_whole and missing:
        raise pytest.UsageError(f"tests/conftest.py TEST_ALL_ONLY names cases that are not collected: {missing}")
