#!/usr/bin/env python3
"""Who issues what in a warp-specialised kernel, from ncu's SASS-level source counters.

Input: the CSV of `ncu --section SourceCounters --page source --print-source sass --csv` for one
kernel launch. The kernel's SASS is split at its `setmaxnreg` instructions (USETMAXREG): the code
before the first one (set-up), the code after TRY_ALLOC (the consumer warpgroups, which grow their
registers) and the code after DEALLOC (the producer, which gives registers back). Prints each
part's share of the executed warp instructions and of the warp stall samples, then the
instructions with the most stall samples.

Usage: ncu_source_split.py NCU_SOURCE_CSV [--top 20]
"""
import argparse
import csv
import io
import sys


def number(x):
    try:
        return float(x.replace(",", ""))
    except ValueError:
        return 0.0


def main():
    ap = argparse.ArgumentParser()
    ap.add_argument("csv")
    ap.add_argument("--top", type=int, default=20)
    a = ap.parse_args()
    text = open(a.csv, encoding="utf-8", errors="replace").read()
    start = text.find('"Address","Source"')
    if start < 0:
        sys.exit(f"{a.csv}: no source-counter table (\"Address\",\"Source\" header) found")
    rows = list(csv.reader(io.StringIO(text[start:])))
    head = rows[0]
    col = {name: head.index(name) for name in
           ("Address", "Source", "Warp Stall Sampling (All Samples)", "Instructions Executed")}
    recs = []
    for r in rows[1:]:
        if len(r) != len(head):
            continue
        try:
            addr = int(r[col["Address"]], 0)
        except ValueError:
            continue
        recs.append((addr, r[col["Source"]].strip(),
                     number(r[col["Warp Stall Sampling (All Samples)"]]),
                     number(r[col["Instructions Executed"]])))
    if not recs:
        sys.exit(f"{a.csv}: no instruction rows")
    alloc = [x[0] for x in recs if "USETMAXREG.TRY_ALLOC" in x[1]]
    dealloc = [x[0] for x in recs if "USETMAXREG.DEALLOC" in x[1]]
    parts = {"all": recs}
    if alloc and dealloc:
        lo, hi = min(alloc[0], dealloc[0]), max(alloc[0], dealloc[0])
        first = "consumers" if alloc[0] < dealloc[0] else "producer"
        second = "producer" if first == "consumers" else "consumers"
        parts = {"set-up": [x for x in recs if x[0] < lo],
                 first: [x for x in recs if lo <= x[0] < hi],
                 second: [x for x in recs if x[0] >= hi]}
    stalls = sum(x[2] for x in recs) or 1.0
    executed = sum(x[3] for x in recs) or 1.0
    print("| part | warp instructions executed | share | stall samples share |")
    print("|---|---:|---:|---:|")
    for name, group in parts.items():
        e = sum(x[3] for x in group)
        s = sum(x[2] for x in group)
        print(f"| {name} | {e:.3g} | {100 * e / executed:.1f}% | {100 * s / stalls:.1f}% |")
    print(f"\nTop {a.top} instructions by stall samples:\n")
    for addr, src, s, e in sorted(recs, key=lambda x: -x[2])[:a.top]:
        print(f"  {100 * s / stalls:5.2f}%  {e:10.3g}  {src[:100]}")


if __name__ == "__main__":
    main()
