"""W3's memory against the number of frames: XLA's memory analysis of the compiled training step.

    python benchmarks/lstm_memory.py

A recurrence is one `lax.scan`, so the program is the same for every length
and its working memory (the scan's saved per-frame values) grows linearly with
the number of frames; the table shows bytes per frame staying constant.
"""

from __future__ import annotations

from workloads import w3


def main(frames: tuple[int, ...] = (50, 200, 1000)) -> dict[int, int]:
    print("| frames | temporary memory (MiB) | per frame (KiB) |")
    print("|---|---|---|")
    sizes = {}
    for count in frames:
        analysis = w3(num_sequences=32, frames=count).symnet_hlo_compile().memory_analysis()
        sizes[count] = analysis.temp_size_in_bytes
        print(f"| {count} | {sizes[count] / 2**20:.1f} | {sizes[count] / count / 2**10:.1f} |")
    return sizes


if __name__ == "__main__":
    main()
