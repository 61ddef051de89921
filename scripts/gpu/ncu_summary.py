#!/usr/bin/env python3
"""Per-kernel time table from an `ncu --csv --metrics gpu__time_duration.sum` log.

Usage: ncu_summary.py NCU_CSV [--steps N]
Groups kernels by name (template arguments dropped), prints count, total and per-step
microseconds and the share of the sum, largest first. The sum is kernel time only: ncu
serialises kernels, so launch gaps are not in it.
"""
import argparse
import csv
import io
import re
import sys
from collections import defaultdict

UNITS = {"nsecond": 1e-3, "ns": 1e-3, "usecond": 1.0, "us": 1.0, "msecond": 1e3, "ms": 1e3,
         "second": 1e6, "s": 1e6}


def short(name: str) -> str:
    name = re.sub(r"^void\s+", "", name)
    # Anonymous namespaces print as "<unnamed>::" or "(anonymous namespace)::": not a template
    # argument list to drop with the kernel's name.
    name = re.sub(r"(<unnamed>|\(anonymous namespace\))::", "", name)
    out, depth = [], 0
    for ch in name:  # drop template arguments and the parameter list
        if ch in "<(":
            depth += 1
        elif ch in ">)":
            depth -= 1
        elif depth == 0:
            out.append(ch)
    s = "".join(out).strip()
    return s.split("::")[-1] if "::" in s else s


def main() -> int:
    ap = argparse.ArgumentParser()
    ap.add_argument("csv")
    ap.add_argument("--steps", type=int, default=1)
    a = ap.parse_args()
    text = open(a.csv, errors="replace").read()
    start = text.find('"ID"')
    if start < 0:
        print(f"no ncu table in {a.csv}")
        return 1
    total = defaultdict(float)
    count = defaultdict(int)
    for row in csv.DictReader(io.StringIO(text[start:])):
        if row.get("Metric Name") != "gpu__time_duration.sum":
            continue
        try:
            v = float(row["Metric Value"].replace(",", ""))
        except ValueError:
            continue
        k = short(row["Kernel Name"])
        total[k] += v * UNITS.get(row.get("Metric Unit", "ns"), 1e-3)
        count[k] += 1
    s = sum(total.values())
    print(f"kernel time over {a.steps} step(s): {s:.0f} us, {s / a.steps:.1f} us per step, "
          f"{sum(count.values()) / a.steps:.0f} kernels per step\n")
    print("| kernel | launches/step | us/step | share |\n|---|---|---|---|")
    for k in sorted(total, key=total.get, reverse=True):
        print(f"| {k} | {count[k] / a.steps:.1f} | {total[k] / a.steps:.1f} | {100 * total[k] / s:.1f}% |")
    return 0


if __name__ == "__main__":
    sys.exit(main())
