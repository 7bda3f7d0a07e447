"""The spread of the recipe's word error rates over runs of several seeds: the tables `digits_recipe.py --seed N`
wrote to FOLDER (results-TASK.md for seed 0, results-TASK-seedN.md for the others), per system and test set
the mean, the lowest and the highest %WER, and each run's.

    for s in 0 1 2; do python benchmarks/digits_recipe.py --folder DIR --chain --kaldi-bin BIN --seed $s; done
    python benchmarks/results_spread.py --folder DIR [--task digits]
"""

from __future__ import annotations

import argparse
import re
import statistics
from pathlib import Path


def read_rows(path: Path) -> dict[tuple[str, str], float]:
    """(system, test set) -> %WER of one results table (results_table's layout)."""
    out = {}
    for line in path.read_text().splitlines():
        cells = [c.strip() for c in line.strip().strip("|").split("|")]
        if len(cells) >= 5 and cells[1] in ("seen", "unseen"):
            out[(cells[0], cells[1])] = float(cells[4])
    return out


def main() -> None:
    p = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    p.add_argument("--folder", required=True, type=Path)
    p.add_argument("--task", default="digits")
    args = p.parse_args()
    files = sorted(args.folder.glob(f"results-{args.task}*.md"))
    seeds = {}
    for path in files:
        match = re.fullmatch(rf"results-{args.task}(?:-seed(\d+))?\.md", path.name)
        if match:
            seeds[int(match.group(1) or 0)] = read_rows(path)
    if not seeds:
        raise SystemExit(f"no results-{args.task}*.md in {args.folder}")
    print(f"{args.task}: seeds {sorted(seeds)}")
    print("| system | test set | mean %WER | lowest | highest | per seed |\n|---|---|---|---|---|---|")
    keys = sorted({k for rows in seeds.values() for k in rows}, key=lambda k: (k[1], k[0]))
    for key in keys:
        values = [seeds[s][key] for s in sorted(seeds) if key in seeds[s]]
        each = ", ".join(f"{v:.2f}" for v in values)
        print(
            f"| {key[0]} | {key[1]} | {statistics.mean(values):.2f} | {min(values):.2f} | {max(values):.2f} | {each} |"
        )


if __name__ == "__main__":
    main()
