"""Merges the per-configuration JSON records of run_sweep.sh into one Markdown table (stdout):
one row per (configuration, task), one column per context length, exact-match accuracy with the
number of prompts per cell, plus the mean over the row. Usage (from the repository root):

    python3 bench/results/accuracy/make_table.py [NAME ...] > /tmp/table.md
"""

import json
import os
import sys

HERE = os.path.dirname(os.path.abspath(__file__))
DEFAULT = ["dense", "lserve-4096", "lserve-2048", "lserve-1024", "lserve-512",
           "lserve-4096-default-pattern", "quest-p64-2048", "streaming"]


def label(n: int) -> str:
    return f"{n // 1024}K" if n % 1024 == 0 else str(n)


def main(names: list[str]) -> int:
    rows, lengths = [], set()
    for name in names:
        path = os.path.join(HERE, name + ".json")
        if not os.path.exists(path):
            continue
        with open(path) as f:
            j = json.load(f)
        cells = {}
        for s in j["summary"]:
            cells[(s["task"], s["context_tokens"])] = s
            lengths.add(s["context_tokens"])
        rows.append((name, j["config"], cells))
    lengths = sorted(lengths)
    out = ["| configuration | task | " + " | ".join(label(n) for n in lengths) + " | mean |",
           "|---|---|" + "---|" * (len(lengths) + 1)]
    for name, config, cells in rows:
        for task in ("niah_single", "niah_multikey", "niah_multivalue", "vt"):
            row = [cells.get((task, n)) for n in lengths]
            if not any(row):
                continue
            vals = [c["exact"] for c in row if c]
            text = [f"{c['exact']:.2f} ({c['num_prompts']})" if c else "-" for c in row]
            out.append(f"| {name} | {task} | " + " | ".join(text) +
                       f" | {sum(vals) / len(vals):.3f} |")
    print("\n".join(out))
    return 0


if __name__ == "__main__":
    sys.exit(main(sys.argv[1:] or DEFAULT))
