#!/usr/bin/env python3
# Host emulation of the GPU page selector (src/kernels/cuda/page_select.cu), written without a GPU
# to check its selection logic and index math against the CPU contract (kernels/cpu/page_select):
#  - choose: per-page pmax from random logical-page bounds (heavy ties, +-0, +-inf, NaN, pages
#    past the item holding garbage), best_h over float4 quads with the P tail masked, group
#    scores, order keys, the radix passes thread by thread (warp digit aggregation, the
#    triple-buffered histograms: a pass must count into a zeroed buffer and clears only one that
#    no warp reads any more, every warp's own digit search, the early stop), the blocked
#    compaction (warp prefix sums, positions), the appended last page and the -1 tail; compared
#    with the CPU's nth_element on (score desc, page asc) and its page scores (as floats).
#  - bounds: the thread mapping of bounds_kernel for the launcher's lanes / parts / per and grid:
#    every (page, logical page, 16-byte vector) of an item is summed by exactly one thread per
#    head pass, the xor shuffles stay inside aligned groups, every page < num_pages is written
#    once per head, and the block-table reads stay inside the table row.
# It cannot check the hardware (match_any, barriers, PDL): tests/cuda/paged_ops_test.cpp does.
# Usage: python3 scripts/emulate_page_select.py [cases]   (prints the counts; exits 1 on a mismatch)
import random, struct, sys

import numpy as np

np.seterr(invalid='ignore', over='ignore')

F = np.float32
NEG_INF = F(-np.inf)
THREADS = 512  # kChooseThreads
WARPS = THREADS // 32


def order_key(f):
    u = struct.unpack('<I', struct.pack('<f', float(f)))[0]
    return (~u & 0xFFFFFFFF) if u & 0x80000000 else (u | 0x80000000)


def fmaxf(a, b, rng):
    # CUDA fmaxf: a NaN operand is ignored; +-0 may come back either way (the model picks).
    if np.isnan(a): return b
    if np.isnan(b): return a
    if a == b == 0: return a if rng.random() < 0.5 else b
    return a if a > b else b


def cpu_choose(bounds, lpp, num_pages, budget, max_selected):
    """kernels/cpu/page_select.cpp's choose_pages: (selected list, count, page scores)."""
    group, n_lp = bounds.shape
    ps = [NEG_INF] * num_pages
    for h in range(group):
        best = NEG_INF
        for lp in range(n_lp):
            best = bounds[h][lp] if best < bounds[h][lp] else best  # std::max(best, b)
        for lp in range(n_lp):
            sc = F(bounds[h][lp] - best)
            if sc != sc: sc = NEG_INF
            p = lp // lpp
            ps[p] = sc if ps[p] < sc else ps[p]
    if num_pages <= budget:
        count = min(num_pages, max_selected)
        sel = list(range(count))
    else:
        k = min(max(3, budget), num_pages)
        k = min(k, max_selected)
        cand = num_pages - 1
        take = max(0, min(k - 1, cand))
        order = sorted(range(cand), key=lambda i: (-float(ps[i]), i))  # -0 == +0: a tie
        sel = sorted(order[:take])
        if k >= 1: sel.append(num_pages - 1)
        count = len(sel)
    return sel + [-1] * (max_selected - count), count, ps


def gpu_choose(pmax_rows, P, budget, max_selected, max_pages_out, rng):
    """choose_kernel for one selected item; pmax_rows[h] has max_pages_ws entries (garbage past
    P). Returns (sel, count, scores_out)."""
    group = len(pmax_rows)
    ws = len(pmax_rows[0])
    assert ws % 4 == 0
    # best_h: per thread quads j = 4 tid, 4 tid + 4 THREADS, ...; per-warp max, then per head.
    best = []
    for h in range(group):
        m_warp = [NEG_INF] * WARPS
        for tid in range(THREADS):
            m = NEG_INF
            for j in range(4 * tid, P, 4 * THREADS):
                v = pmax_rows[h][j:j + 4]
                m = fmaxf(m, v[0], rng)
                for i in (1, 2, 3):
                    if j + i < P: m = fmaxf(m, v[i], rng)
            m_warp[tid // 32] = fmaxf(m_warp[tid // 32], m, rng)
        b = NEG_INF
        for w in range(WARPS): b = fmaxf(b, m_warp[w], rng)
        best.append(b)
    keys = [None] * ws
    scores_out = [F(99.0)] * max_pages_out
    for j4 in range(0, P, 4):
        sc = [NEG_INF] * 4
        for h in range(group):
            for i in range(4):
                d = F(pmax_rows[h][j4 + i] - best[h])
                if d != d: d = NEG_INF
                sc[i] = fmaxf(sc[i], d, rng)
        for i in range(4):
            if j4 + i < P:
                s = F(sc[i] + F(0.0))
                keys[j4 + i] = order_key(s)
                if j4 + i < max_pages_out: scores_out[j4 + i] = s
    for i in range(P, max_pages_out): scores_out[i] = NEG_INF

    sel = [12345] * max_selected
    if P <= budget:
        count = min(P, max_selected)
        for i in range(count): sel[i] = i
    else:
        k = min(max(3, budget), P)
        k = min(k, max_selected)
        cand = P - 1
        take = max(0, min(k - 1, cand))
        if take > 0:
            hist = [[rng.randrange(1 << 20) for _ in range(256)] for _ in range(3)]  # garbage
            hist[0] = [0] * 256  # cleared before the scores' barrier
            last_read = [-9, -9, -9]  # the pass whose digit search last read each buffer
            prefix, mask, remaining = 0, 0, take
            for ps_ in range(4):
                shift = 24 - 8 * ps_
                h = hist[ps_ % 3]
                assert all(c == 0 for c in h), 'pass counts into a dirty buffer'
                # Cleared in this pass: no warp may still be searching it, i.e. its last
                # search was before the previous pass's barrier.
                assert last_read[(ps_ + 1) % 3] <= ps_ - 2
                hist[(ps_ + 1) % 3] = [0] * 256
                for c0 in range(0, cand, THREADS):
                    for w in range(WARPS):
                        digits = []
                        for lane in range(32):
                            j = c0 + 32 * w + lane
                            key = keys[j] if j < cand else 0
                            counted = j < cand and (key & mask) == prefix
                            digits.append((key >> shift) & 255 if counted else 256)
                        if all(dg == 256 for dg in digits): continue  # __any_sync false
                        for lane, dg in enumerate(digits):
                            peers = [l for l in range(32) if digits[l] == dg]
                            if dg != 256 and lane == peers[0]: h[dg] += len(peers)
                # Every warp: lane l holds digits 255 - 8l .. 248 - 8l.
                results = set()
                for w in range(WARPS):
                    c = [[h[255 - 8 * l - i] for i in range(8)] for l in range(32)]
                    tot = [sum(x) for x in c]
                    incl = list(np.cumsum(tot))
                    here = [incl[l] - tot[l] < remaining <= incl[l] for l in range(32)]
                    assert sum(here) == 1
                    L = here.index(True)
                    run, found = incl[L] - tot[L], None
                    for i in range(8):
                        if found is None and run + c[L][i] >= remaining:
                            found = (255 - 8 * L - i, run, c[L][i])
                        run += c[L][i]
                    results.add(found)
                assert len(results) == 1
                last_read[ps_ % 3] = ps_
                digit, above, in_bin = results.pop()
                prefix |= digit << shift
                mask |= 255 << shift
                remaining -= above
                if in_bin == remaining: break
            # Blocked compaction.
            span = (cand + THREADS - 1) // THREADS
            rng_of = [(min(cand, t * span), min(cand, min(cand, t * span) + span))
                      for t in range(THREADS)]
            gt = [sum((keys[j] & mask) > prefix for j in range(*rng_of[t])) for t in range(THREADS)]
            eq = [sum((keys[j] & mask) == prefix for j in range(*rng_of[t])) for t in range(THREADS)]
            written = [0] * take
            for t in range(THREADS):
                w, lane = divmod(t, 32)
                gt_incl = sum(gt[32 * w:t + 1])
                eq_incl = sum(eq[32 * w:t + 1])
                gb = gt_incl - gt[t] + sum(sum(gt[32 * x:32 * x + 32]) for x in range(w))
                eb = eq_incl - eq[t] + sum(sum(eq[32 * x:32 * x + 32]) for x in range(w))
                for j in range(*rng_of[t]):
                    top = keys[j] & mask
                    if top > prefix:
                        pos = gb + min(eb, remaining)
                        assert 0 <= pos < take
                        sel[pos] = j
                        written[pos] += 1
                        gb += 1
                    elif top == prefix:
                        if eb < remaining:
                            pos = gb + eb
                            assert 0 <= pos < take
                            sel[pos] = j
                            written[pos] += 1
                        eb += 1
            assert written == [1] * take, 'positions not written exactly once'
        count = take
        if k >= 1:
            sel[count] = P - 1
            count += 1
    for i in range(count, max_selected): sel[i] = -1
    return sel, count, scores_out


def random_value(rng, style):
    r = rng.random()
    if style == 'special':
        if r < 0.05: return F(np.nan)
        if r < 0.10: return F(np.inf)
        if r < 0.18: return NEG_INF
        if r < 0.26: return F(-0.0)
        if r < 0.34: return F(0.0)
    if style in ('ints', 'special'): return F(rng.randint(-6, 6))
    if style == 'zeros': return F(rng.choice([-0.0, 0.0, -1.0, -2.0]))
    if style == 'fewbins': return F(rng.choice([-1.0, -1.5, -2.0, 3.0, 3.25, 1e-30, -1e30]))
    return F(rng.uniform(-50, 50))


def choose_case(rng, cases_stats):
    lpp = rng.choice([1, 2, 3, 4, 4, 4, 8])
    P = rng.choice([1, 2, 3, 4, 5, 63, 64, 65, 511, 512, 513, 1023, 1024, 1025, 2047, 2048, 2049,
                    rng.randint(1, 3000)])
    n_lp = (P - 1) * lpp + rng.randint(1, lpp)  # the last page may be partial
    group = rng.choice([1, 2, 3, 4, 4, 8, 9])
    style = rng.choice(['ints', 'special', 'zeros', 'fewbins', 'real'])
    budget = rng.choice([0, 1, 2, 3, 4, 5, 64, P - 2, P - 1, P, P + 1, rng.randint(0, P + 2)])
    budget = max(0, budget)
    max_selected = max(3, budget) + rng.choice([0, 0, 2])
    if rng.random() < 0.05: max_selected = rng.randint(0, 3)  # smaller than the contract says
    bounds = np.array([[random_value(rng, style) for _ in range(n_lp)] for _ in range(group)],
                      dtype=F)
    if rng.random() < 0.3:  # copies: exact ties across pages
        for h in range(group):
            for lp in range(1, n_lp, 2): bounds[h][lp] = bounds[h][lp - 1]
    ws = (P + rng.choice([0, 1, 5]) + 3) // 4 * 4
    pmax_rows = []
    for h in range(group):
        row = [F(rng.choice([np.nan, 7.0, -3.0, np.inf]))] * ws  # garbage past P
        for p in range(P):
            m = NEG_INF
            for lp in range(p * lpp, min(n_lp, p * lpp + lpp)): m = fmaxf(m, bounds[h][lp], rng)
            row[p] = m
        pmax_rows.append(row)
    max_pages_out = P + rng.choice([0, 3])
    want_sel, want_n, want_ps = cpu_choose(bounds, lpp, P, budget, max_selected)
    got_sel, got_n, got_scores = gpu_choose(pmax_rows, P, budget, max_selected, max_pages_out, rng)
    want_scores = [want_ps[i] if i < P else NEG_INF for i in range(max_pages_out)]
    ok = got_sel == want_sel and got_n == want_n and all(
        a == b for a, b in zip(got_scores, want_scores))
    if not ok:
        print('MISMATCH', dict(P=P, lpp=lpp, group=group, style=style, budget=budget,
                               max_selected=max_selected))
        print(' gpu', got_n, got_sel[:20])
        print(' cpu', want_n, want_sel[:20])
    cases_stats['radix' if P > budget else 'all'] += 1
    return ok


def launcher_layout(lpp, d, vec_elems, vec, bounds_threads=128, bounds_vecs=2):
    lanes = 1
    while lanes < 32 and lpp % (lanes * 2) == 0: lanes *= 2
    per = lpp // lanes
    parts = 1
    if vec:
        vecs = d // vec_elems
        while lanes * parts * 2 <= 32 and vecs % (parts * 2) == 0 and vecs // parts > bounds_vecs:
            parts *= 2
    return lanes, per, parts


def bounds_case(rng):
    """bounds_kernel's mapping for one item: returns True when every term is covered once."""
    lpp = rng.choice([1, 2, 3, 4, 4, 5, 6, 8, 16, 32, 48, 64])
    tm = rng.choice([2, 2, 4])  # bytes per summary element
    d = rng.choice([32, 64, 96, 128, 128, 256, 72, 40])
    V = 16 // tm
    vec = d % V == 0 and rng.random() < 0.9
    lanes, per, parts = launcher_layout(lpp, d, V, vec)
    assert lanes * per == lpp and 32 % (lanes * parts) == 0
    kHeads = rng.choice([1, 2, 4, 8])
    group = rng.randint(1, 2 * kHeads)
    stride = rng.randint(1, 700)
    num_pages = rng.randint(1, stride)
    n_lp = (num_pages - 1) * lpp + rng.randint(1, lpp)
    items = rng.choice([1, 8, 64, 200])
    per_page = lanes * parts
    ppb = 128 // per_page
    want = (stride + ppb - 1) // ppb
    cap = (132 * 16 + items - 1) // items
    gx = max(1, min(want, cap))
    holes = {p for p in range(num_pages) if rng.random() < 0.05}
    nvec = d // V if vec else d
    cover = {}
    writes = {}
    for bx in range(gx):
        page0 = bx * ppb
        if page0 >= num_pages: continue  # the block returns (uniform)
        for tid in range(128):
            part = tid & (parts - 1)
            lane_lp = (tid // parts) & (lanes - 1)
            page = page0 + tid // per_page
            assert page < stride or page >= num_pages
            pg0 = page0
            while pg0 < num_pages:  # uniform over the block
                nxt = page + gx * ppb
                assert nxt >= num_pages or nxt < stride  # table read inside the row
                for h0 in range(0, group, kHeads):
                    nh = min(kHeads, group - h0)
                    for k in range(per):
                        lp_in = lane_lp * per + k
                        lp = page * lpp + lp_in
                        if page < num_pages and lp < n_lp and page not in holes:
                            if vec:
                                for v0 in range(part, nvec, 2 * parts):
                                    for u in range(2):
                                        v = v0 + u * parts
                                        if v < nvec:
                                            key = (h0, page, lp, v)
                                            cover[key] = cover.get(key, 0) + 1
                            else:
                                for e in range(d):
                                    cover[(h0, page, lp, e)] = cover.get((h0, page, lp, e), 0) + 1
                    # shuffle groups: parts (xor < parts) and the page (xor < per_page) stay in
                    # the thread's aligned group of per_page lanes, inside its warp.
                    assert (tid ^ (per_page - 1)) // per_page == tid // per_page
                    assert (tid ^ (per_page - 1)) // 32 == tid // 32
                    if page < num_pages and tid % per_page == 0:
                        for hh in range(nh):
                            writes[(h0 + hh, page)] = writes.get((h0 + hh, page), 0) + 1
                pg0 += gx * ppb
                page += gx * ppb
    want_cover = {}
    for h0 in range(0, group, kHeads):
        for page in range(num_pages):
            if page in holes: continue
            for lp in range(page * lpp, min(n_lp, page * lpp + lpp)):
                for v in range(nvec): want_cover[(h0, page, lp, v)] = 1
    want_writes = {(h, p): 1 for h in range(group) for p in range(num_pages)}
    return cover == want_cover and writes == want_writes


def main():
    cases = int(sys.argv[1]) if len(sys.argv) > 1 else 400
    rng = random.Random(1)
    stats = {'radix': 0, 'all': 0}
    bad = 0
    for _ in range(cases):
        if not choose_case(rng, stats): bad += 1
    bbad = 0
    for _ in range(cases):
        if not bounds_case(rng): bbad += 1
    print(f'choose: {cases} cases ({stats["radix"]} through the radix select), {bad} mismatches')
    print(f'bounds mapping: {cases} cases, {bbad} mismatches')
    sys.exit(1 if bad or bbad else 0)


if __name__ == '__main__':
    main()
