"""The machine a benchmark ran on, for the first line of its output: the same step's ratios differ between CPU
models (docs/performance.md keeps its figures per model), and on a shared machine with other jobs' load.

It imports neither jax nor symnet at module level, so that benchmarks that keep them out of their parent process
(chain_training.py, streaming.py, digits_recipe.py) can name the CPU too.
"""

from __future__ import annotations

import os
import platform
import time


def cpu_model() -> str:
    """The CPU's model name from /proc/cpuinfo with its family and model numbers (a virtual machine's model name
    may say only "Intel(R) Xeon(R) Processor"), else `platform.processor()`."""
    fields: dict[str, str] = {}
    try:
        with open("/proc/cpuinfo") as cpuinfo:
            for line in cpuinfo:
                key, _, value = line.partition(":")
                if not key.strip():
                    break  # the first processor's block ends
                fields.setdefault(key.strip(), value.strip())
    except OSError:
        pass
    if "model name" not in fields:
        return platform.processor() or platform.machine() or "unknown CPU"
    return f"{fields['model name']} (family {fields.get('cpu family', '?')}, model {fields.get('model', '?')})"


def header() -> str:
    """One line: the time (UTC), symnet's and jax's versions, jax's device, the CPU model, its core count and
    the load average (other jobs on a shared machine move wall-clock ratios)."""
    import jax

    import symnet

    load = ", ".join(f"{v:.1f}" for v in os.getloadavg())
    return (
        f"{time.strftime('%Y-%m-%d %H:%M UTC', time.gmtime())}; symnet {symnet.__version__}, jax {jax.__version__}, "
        f"{jax.devices()[0].platform}; CPU: {cpu_model()}, {os.cpu_count()} cores; load average {load}"
    )
