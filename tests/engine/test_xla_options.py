"""symnet's programs compile with its XLA options (`symnet._src.engine.xla_options`): on a CPU, YNNPACK for
matrix products only; the user's XLA_FLAGS and `SYMNET_XLA_OPTIONS=default` leave XLA's defaults."""

from __future__ import annotations

import os
import subprocess
import sys

import jax
import jax.numpy as jnp
import numpy as np
import optax
import pytest

import symnet
from helpers import nets
from helpers.blstm import sequences
from symnet import Input
from symnet._src.engine import xla_options
from symnet.train import fit

#: In a process of its own, on XLA's optimised code (the suite's quick flags make no YNNPACK fusions at all): how
#: many YNNPACK fusions an element-wise function and a reduction compile to, asked for them, and with symnet's.
COUNT_FUSIONS = """
import jax, jax.numpy as jnp
from symnet._src.engine import xla_options

def work(x):
    return jnp.tanh(x * 2.0).sum(0)

def fusions(jitted):
    return jitted.lower(jnp.ones((256, 128))).compile().as_text().count('"kind":"__ynn_fusion"')

asked = {xla_options.OPTION: "LIBRARY_FUSION_TYPE_REDUCE,LIBRARY_FUSION_TYPE_ELTWISE"}
print(xla_options.compiler_options() == {xla_options.OPTION: xla_options.PRODUCTS_ONLY})
print(fusions(jax.jit(work, compiler_options=asked)), fusions(xla_options.jit(work)))
"""


@pytest.mark.skipif(jax.default_backend() != "cpu", reason="the options are XLA:CPU's")
def test_on_a_cpu_element_wise_work_and_reductions_stay_xlas():
    env = {**os.environ, "XLA_FLAGS": "", "JAX_PLATFORMS": "cpu", "SYMNET_XLA_OPTIONS": ""}
    out = subprocess.run([sys.executable, "-c", COUNT_FUSIONS], env=env, capture_output=True, text=True)
    assert out.returncode == 0, out.stderr
    ours, counts = out.stdout.split("\n")[:2]
    asked, symnets = map(int, counts.split())
    assert ours == "True" and asked >= 1 and symnets == 0  # the option reaches XLA, and symnet's leaves XLA's own
    x = jnp.ones((64, 32))
    np.testing.assert_allclose(xla_options.jit(lambda x: jnp.tanh(x).sum(0))(x), jnp.tanh(x).sum(0), rtol=1e-6)


@pytest.mark.parametrize(
    "env", [{"SYMNET_XLA_OPTIONS": "default"}, {"XLA_FLAGS": f"--{xla_options.OPTION}=dot,eltwise"}], ids=str
)
def test_the_users_choice_leaves_xlas_defaults(env, monkeypatch):
    for name, value in env.items():
        monkeypatch.setenv(name, value)
    assert xla_options.compiler_options.__wrapped__() == {}  # decided afresh, not from the process's cache


def test_an_unknown_choice_is_an_error_naming_it(monkeypatch):
    monkeypatch.setenv("SYMNET_XLA_OPTIONS", "off")
    with pytest.raises(symnet.SymnetError, match="SYMNET_XLA_OPTIONS is 'off'"):
        xla_options.compiler_options.__wrapped__()


def test_training_steps_compile_with_the_options(monkeypatch):
    """An option XLA refuses makes `fit`'s step fail: the step passes the options on (and a Computation, which
    may run inside the user's own `jax.jit`, does not: only a top-level jit takes them)."""
    monkeypatch.setattr(xla_options, "compiler_options", lambda: {xla_options.OPTION: "NOT_A_FUSION_TYPE"})
    net = nets.tdnn(Input("input", 3), hidden=6, out=5, log_softmax=True, seed=1)
    symnet.clear_caches()
    try:
        assert net.compute(sequences([7])[0])[0].shape == (7, 5)
        with pytest.raises(Exception, match="NOT_A_FUSION_TYPE"):
            fit(net, sequences([7, 5]), optax.sgd(0.1), epochs=1, batch_size=2, progress=False)
    finally:
        symnet.clear_caches()
