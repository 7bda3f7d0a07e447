"""A batched `[T, N, D]` forward sharded on N compiles without gathering activations across devices.

Runs in a subprocess with 4 host devices (XLA_FLAGS) so the rest of the suite
keeps one. The reference is the same call on one device (unsharded numpy input).
"""

from __future__ import annotations

import json
import os
import subprocess
import sys
import textwrap

import pytest

SCRIPT = textwrap.dedent(
    """
    import json, re
    import jax, jax.numpy as jnp, numpy as np
    from jax.sharding import Mesh, NamedSharding, PartitionSpec
    from symnet import Append, ComputationRequest, IndexSet, Input, Network, Normal, Offset, ReLU, Weight, compile

    assert len(jax.devices()) == 4
    x = Input("input", 12)
    def affine(h, rows, cols):  # W h + b as core layers (symnet.layers.Affine's vjp takes matrices: flat rows)
        return h @ Weight(Normal((rows, cols), 0.1)) + Weight(Normal((cols,), 0.1))

    h = ReLU(affine(Append(Offset(x, -1), x, Offset(x, 1)), 36, 32))
    h = ReLU(affine(Append(Offset(h, -2), h, Offset(h, 2)), 96, 24))
    net = Network({"output": affine(h, 24, 16)})
    T, N = 20, 8
    request = ComputationRequest(
        inputs={"input": IndexSet.range(n=N, t=(-3, T + 3))}, outputs={"output": IndexSet.range(n=N, t=T)}
    )
    computation = compile(net, request)
    sharding = NamedSharding(Mesh(np.array(jax.devices()), ("data",)), PartitionSpec(None, "data", None))
    features = np.random.default_rng(0).standard_normal((T + 6, N, 12)).astype(np.float32)
    xs = jax.device_put(features, sharding)
    forward = jax.jit(lambda net, v: computation(net, {"input": v})["output"])
    collectives = r"\\b(all-gather|all-to-all|all-reduce|collective-permute|reduce-scatter)\\b"
    text = forward.lower(net, xs).compile().as_text()
    out = forward(net, xs)

    def step(net, v):
        (tape,) = computation.forward(net, {"input": v}).values()
        return tape.backward(tape.value)

    grads = jax.jit(step)
    step_text = grads.lower(net, xs).compile().as_text()
    sharded_grads = grads(net, xs)
    print(json.dumps({
        "forward": sorted(set(re.findall(collectives, text))),
        "step": sorted(set(re.findall(collectives, step_text))),
        "out_sharded_on_n": out.sharding.is_equivalent_to(sharding, 3),
        "out_error": float(np.abs(np.asarray(out) - np.asarray(forward(net, features))).max()),
        "grad_error": max(
            float(np.abs(np.asarray(sharded_grads[k]) - np.asarray(g)).max())
            for k, g in step(net, jnp.asarray(features)).items()
        ),
    }))
    """
)


def run_on_four_devices() -> dict:
    env = {
        **os.environ,
        "XLA_FLAGS": os.environ.get("XLA_FLAGS", "") + " --xla_force_host_platform_device_count=4",
        "JAX_PLATFORMS": "cpu",
    }
    done = subprocess.run([sys.executable, "-c", SCRIPT], env=env, capture_output=True, text=True, timeout=600)
    assert done.returncode == 0, done.stderr[-3000:]
    return json.loads(done.stdout.strip().splitlines()[-1])


@pytest.mark.slow  # make test-all: 9 s in a subprocess of emulated devices (test_mesh.py runs in make test)
def test_forward_sharded_on_n_has_no_activation_collectives() -> None:
    report = run_on_four_devices()
    assert report["forward"] == [], report  # no all-gather, all-to-all or any other collective
    assert report["out_sharded_on_n"], report  # the output stays sharded on N
    assert report["out_error"] < 1e-5, report
    # A training step adds only the weight gradients' sum over devices.
    assert set(report["step"]) <= {"all-reduce"}, report
    assert report["grad_error"] < 1e-4, report
