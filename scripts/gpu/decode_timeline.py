#!/usr/bin/env python3
"""Summarises a decode trace of bench_cuda_kernels --decode-trace FILE (docs/cuda.md; what it
showed: docs/history/cuda-decode.md, round 9).

Per traced case: percentiles of every decode block's start / wait / first data / loop end / end
(microseconds from the call's first block), the reduction kernel's, the per-SM finish, and, for a
bench built with -DLS_DECODE_TRACE_LANDINGS (src/kernels/cuda/decode_trace.h), the key blocks the
decode blocks consumed in each microsecond (x 32 KB for d 128 bf16 K+V: ~92 per us is 3 TB/s)
beside the number of blocks between their first data and their loop end.

usage: scripts/gpu/decode_timeline.py TRACE.tsv [...]
"""
import collections
import sys


def pct(v, q):
    return v[min(len(v) - 1, int(q * len(v)))]


def main(paths):
    recs, lands = collections.defaultdict(list), collections.defaultdict(list)
    for path in paths:
        nlab = None
        for line in open(path):
            f = line.rstrip("\n").split("\t")
            if f[0] == "policy":
                nlab = f.index("record")
            elif f[0] == "land" and nlab:
                lands[tuple(f[1:1 + nlab])].append(int(f[-1]))
            elif nlab and len(f) == nlab + 10:
                recs[tuple(f[:nlab])].append([int(x) for x in f[nlab:]])
    for lab, rr in recs.items():
        # record kernel split smid iterations start waited first_data loop_end end
        dec = [r for r in rr if r[1] == 0 and r[4] > 0]
        red = [r for r in rr if r[1] == 1]
        print("==", " ".join(lab), "working", len(dec), "empty",
              sum(1 for r in rr if r[1] == 0 and r[4] <= 0))
        for name, i in [("start", 5), ("waited", 6), ("first", 7), ("loop end", 8), ("end", 9)]:
            v = sorted(r[i] / 1000 for r in dec if r[i] >= 0)
            if v:
                print("  %-8s min %5.1f p10 %5.1f med %5.1f p90 %5.1f max %5.1f" % (
                    name, v[0], pct(v, .1), pct(v, .5), pct(v, .9), v[-1]))
        for name, i in [("start", 5), ("waited", 6), ("end", 9)]:
            v = sorted(r[i] / 1000 for r in red if r[i] >= 0)
            if v:
                print("  reduce %-7s min %5.1f med %5.1f max %5.1f" % (name, v[0], pct(v, .5), v[-1]))
        sm = collections.defaultdict(float)
        for r in dec:
            sm[r[3]] = max(sm[r[3]], r[9] / 1000)
        ends = sorted(sm.values())
        if ends:
            print("  per-SM last end: min %.1f med %.1f max %.1f (%d SMs)" % (
                ends[0], pct(ends, .5), ends[-1], len(ends)))
        land = lands.get(lab)
        if land:
            bins = collections.Counter(t // 1000 for t in land)
            active = collections.Counter()
            for r in dec:
                if r[7] >= 0 and r[8] >= 0:
                    for b in range(r[7] // 1000, r[8] // 1000 + 1):
                        active[b] += 1
            print("  us:consumed/active " + " ".join(
                "%d:%d/%d" % (b, bins.get(b, 0), active.get(b, 0)) for b in range(max(bins) + 1)))


if __name__ == "__main__":
    main(sys.argv[1:])
