"""The SmolLM2 rows of the accuracy table from run.sh's JSON records (stdout, Markdown): one row
per configuration, one column per context length, each cell "contained / exact (prompts)":
RULER's string match (the answer contained in the reply) and exact match of the reply's first
line. Usage (from the repository root): python3 bench/results/accuracy/smollm2/make_table.py
"""

import json
import os
import sys

HERE = os.path.dirname(os.path.abspath(__file__))
DEFAULT = ["dense", "lserve-1024", "quest-p16-1024", "streaming"]


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
        cells = {(s["task"], s["context_tokens"]): s for s in j["summary"]}
        lengths |= {n for _, n in cells}
        rows.append((name, cells))
    lengths = sorted(lengths)
    out = ["| SmolLM2-135M-Instruct (Q4_1), chat template | task | " +
           " | ".join(label(n) for n in lengths) + " |",
           "|---|---|" + "---|" * len(lengths)]
    for name, cells in rows:
        for task in sorted({t for t, _ in cells}):
            row = [cells.get((task, n)) for n in lengths]
            text = [f"{c['contained']:.2f} / {c['exact']:.2f} ({c['num_prompts']})" if c else "-"
                    for c in row]
            out.append(f"| {name} | {task} | " + " | ".join(text) + " |")
    print("\n".join(out))
    return 0


if __name__ == "__main__":
    sys.exit(main(sys.argv[1:] or DEFAULT))
