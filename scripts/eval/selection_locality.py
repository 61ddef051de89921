#!/usr/bin/env python3
"""Selection locality from bench_locality's recordings (docs/working-set-scheduling.md,
"Measured locality"; issue 22 item 5 and the working-set window w).

Each recording line is one request: for each decode step t, the exact set S_t of head-pages
(layer, kv head, page) its attention read. This script computes, per request:

- overlap: |S_t ∩ S_t-1| / |S_t| (mean over steps 1..T-1), and the same over the steps that ran
  page_select only (with a selection reused for `interval` steps the others change only by the
  newest page);
- the exact union U_w(t) = S_t-w+1 ∪ ... ∪ S_t for w = 1..W (W = --max-window) and the next
  step's coverage |S_t+1 ∩ U_w(t)| / |S_t+1| (what a cache holding the union would hit), both
  averaged over the same steps t = W-1 .. T-2 for every w, so the columns compare;
- the yield of the w-th step of window: next-step hits gained per extra page of union,
  (hits(w) - hits(w-1)) / (|U_w| - |U_w-1|), hits(w) = mean |S_t+1 ∩ U_w(t)|;
- WorkingSetTracker's estimate of |U_w| (engine/working_set.cpp: max |S| + the later steps'
  new pages, new = |S| - |S ∩ S_t-1|, capped by all of the request's selectable pages) against
  the exact union: mean estimate / exact - 1;
- with the device cache on (--kv-offload on): its decode hit ratio and the overlap its counters
  measure (reused pages counted only while still resident).

The window is chosen per configuration where the yield flattens: the smallest w from which every
further step of window yields less than --yield-fraction (default 0.5) of the first step of
window that adds anything (w = 2 with a selection every step; w = interval + 1 when a selection
is reused for `interval` steps, since a window inside one interval adds no page the next step
reads but its newest ones). Prints a markdown table and writes every number as JSON. Pure Python, no deps.
"""

import argparse
import glob
import json
import math
import os
import sys


def step_sets(rec):
    sets = []
    for st in rec["steps"]:
        s = set()
        for layer, heads in enumerate(st["read"]):
            for h, pages in enumerate(heads):
                for p in pages:
                    s.add((layer, h, p))
        sets.append(s)
    return sets


def selectable_pages(rec, st):
    """Head-pages a selecting head could read at this step: the tracker's cap."""
    pt = rec["page_tokens"]
    heads = sum(1 for hs in st["read"] for pages in hs if pages)
    return heads * ((st["kv_len"] + pt - 1) // pt)


def tracker_estimate(sizes, fresh, w, cap):
    """engine/working_set.cpp WorkingSetTracker::decode_pages over the last w steps."""
    n = len(sizes)
    later = n - 1 if n > 1 else 1
    added = 0
    if n > 1:
        f = sum(fresh[1:])
        added = (f * (w - 1) + later - 1) // later
    return min(cap, max(sizes) + added)


def analyse(rec, max_w):
    sets = step_sets(rec)
    T = len(sets)
    if T < max_w + 1:
        raise SystemExit(f"{rec['id']}: {T} steps, need more than --max-window {max_w}")
    sizes = [len(s) for s in sets]
    inter = [0] + [len(sets[t] & sets[t - 1]) for t in range(1, T)]
    fresh = [sizes[0]] + [sizes[t] - inter[t] for t in range(1, T)]
    overlap = sum(inter[t] / sizes[t] for t in range(1, T) if sizes[t]) / (T - 1)
    # The same at the steps that ran page_select (all of them with --select-interval 1).
    re_steps = [t for t in range(1, T) if rec["steps"][t]["reselected"] and sizes[t]]
    reselect_overlap = (sum(inter[t] / sizes[t] for t in re_steps) / len(re_steps)) if re_steps else None
    ts = range(max_w - 1, T - 1)
    n = len(ts)
    cov, union, hits, err, estimate = ([0.0] * max_w for _ in range(5))
    for t in ts:
        nxt = sets[t + 1]
        cap = selectable_pages(rec, rec["steps"][t])
        U = set()
        for w in range(1, max_w + 1):  # U grows by one older step per w
            U |= sets[t - w + 1]
            got = len(nxt & U)
            cov[w - 1] += (got / len(nxt) if nxt else 1.0) / n
            hits[w - 1] += got / n
            union[w - 1] += len(U) / n
            est = tracker_estimate(sizes[t - w + 1:t + 1], fresh[t - w + 1:t + 1], w, cap)
            err[w - 1] += (est / len(U) - 1.0 if U else 0.0) / n
            estimate[w - 1] += est / n
    out = {
        "id": rec["id"], "context_tokens": rec["context_tokens"], "prompt_tokens": rec["prompt_tokens"],
        "decode_steps": T, "mean_selected": sum(sizes) / T, "overlap": overlap,
        "reselect_overlap": reselect_overlap,
        "coverage": cov, "union": union, "next_hits": hits, "estimate": estimate,
        "estimate_error": err,
    }
    tier = [st["tier"] for st in rec["steps"] if "tier" in st]
    if tier:
        hi = sum(x["hits"] for x in tier)
        mi = sum(x["misses"] for x in tier)
        man = sum(x["mandatory"] for x in tier)
        out["hit_ratio"] = hi / (hi + mi) if hi + mi else None
        out["tier_overlap"] = sum(x["reused"] for x in tier) / man if man else None
        out["tier_selected"] = man / len(tier)
        out["slots_per_row"] = rec.get("slots_per_row")
        out["offload_buffer_ratio"] = rec.get("offload_buffer_ratio")
    return out


def mean(xs):
    xs = [x for x in xs if x is not None]
    return sum(xs) / len(xs) if xs else None


def yields(hits, union):
    y = [None]
    for w in range(1, len(hits)):
        du = union[w] - union[w - 1]
        y.append((hits[w] - hits[w - 1]) / du if du > 1e-9 else 0.0)
    return y


def choose_w(y, fraction):
    """Smallest w (1-based) from which every further window step y[w] (the yield of going from
    w to w + 1) is below `fraction` of the first positive yield."""
    first = next((v for v in y[1:] if v is not None and v > 0), None)
    if first is None:
        return 1
    threshold = fraction * first
    best = len(y)
    for w in range(len(y), 0, -1):  # y[w] is the yield of going from w to w+1
        if w < len(y) and y[w] is not None and y[w] >= threshold:
            break
        best = w
    return best


def summarize(name, reqs, fraction):
    max_w = len(reqs[0]["coverage"])
    agg = {k: [mean(r[k][i] for r in reqs) for i in range(max_w)]
           for k in ("coverage", "union", "next_hits", "estimate", "estimate_error")}
    y = yields(agg["next_hits"], agg["union"])
    s = {
        "config": name, "requests": len(reqs),
        "contexts": sorted({r["context_tokens"] for r in reqs}),
        "mean_selected": mean(r["mean_selected"] for r in reqs),
        "overlap": mean(r["overlap"] for r in reqs),
        "reselect_overlap": mean(r["reselect_overlap"] for r in reqs),
        **agg, "yield": y, "chosen_w": choose_w(y, fraction),
        "hit_ratio": mean(r.get("hit_ratio") for r in reqs),
        "tier_overlap": mean(r.get("tier_overlap") for r in reqs),
        "per_request": reqs,
    }
    return s


def fmt(x, d=3):
    return "-" if x is None else f"{x:.{d}f}"


def main():
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("recordings", nargs="+", help="bench_locality JSONL files (or directories)")
    ap.add_argument("--max-window", type=int, default=32)
    ap.add_argument("--yield-fraction", type=float, default=0.5)
    ap.add_argument("--out", help="JSON with every number")
    args = ap.parse_args()
    files = []
    for p in args.recordings:
        files += sorted(glob.glob(os.path.join(p, "*.jsonl"))) if os.path.isdir(p) else [p]
    summaries = []
    for f in files:
        with open(f) as fh:
            recs = [json.loads(l) for l in fh if l.strip()]
        if not recs:
            continue
        name = os.path.splitext(os.path.basename(f))[0]
        reqs = [analyse(r, args.max_window) for r in recs]
        s = summarize(name, reqs, args.yield_fraction)
        r0 = recs[0]
        s.update({k: r0.get(k) for k in ("model", "load_format", "attention", "token_budget",
                                          "select_interval", "page_tokens", "offload_buffer_ratio",
                                          "kv_offload")})
        summaries.append(s)
        print(f"[locality] {name}: {len(reqs)} requests", file=sys.stderr)
    ws = [w for w in (1, 2, 4, 8, 12, 16, 24, 32) if w <= args.max_window]
    print("| config | req | ctx | |S| | overlap | at reselection | " + " | ".join(f"cov w={w}" for w in ws)
          + " | |U_12|/|S| | est err w=12 | chosen w | hit ratio | tier overlap |")
    print("|---|---:|---|---:|---:|---:|" + "---:|" * len(ws) + "---:|---:|---:|---:|---:|")
    for s in summaries:
        w12 = min(12, args.max_window) - 1
        print(f"| {s['config']} | {s['requests']} | {','.join(map(str, s['contexts']))} | "
              f"{s['mean_selected']:.0f} | {fmt(s['overlap'])} | {fmt(s['reselect_overlap'])} | "
              + " | ".join(fmt(s["coverage"][w - 1]) for w in ws)
              + f" | {s['union'][w12] / s['mean_selected']:.2f} | {fmt(s['estimate_error'][w12], 2)} | "
              f"{s['chosen_w']} | {fmt(s['hit_ratio'])} | {fmt(s['tier_overlap'])} |")
    print()
    print("| config | " + " | ".join(f"|U_{w}|/|S| exact / tracker" for w in ws if w > 1) + " |")
    print("|---|" + "---:|" * len([w for w in ws if w > 1]))
    for s in summaries:
        m = s["mean_selected"]
        print(f"| {s['config']} | " + " | ".join(
            f"{s['union'][w - 1] / m:.2f} / {s['estimate'][w - 1] / m:.2f}" for w in ws if w > 1) + " |")
    if args.out:
        with open(args.out, "w") as fh:
            json.dump({"max_window": args.max_window, "yield_fraction": args.yield_fraction,
                       "configs": summaries}, fh, indent=1)
            fh.write("\n")


if __name__ == "__main__":
    main()
