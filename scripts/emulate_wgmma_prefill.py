#!/usr/bin/env python3
# Host emulation of prefill_wgmma_kernel's data flow (src/kernels/cuda/attention_prefill_wgmma.cuh)
# for one 128-row tile of one head, written without a GPU to check the kernel's index math:
# the swizzled shared-memory writes (sw128_offset), the operands wgmma reads through the kernel's
# descriptors (modelled on the canonical SW128 K-major and MN-major layouts: unswizzled address
# from start / LBO / SBO, then bits 4..6 ^= bits 7..9), the accumulator and A-register fragment
# maps (wgmma.cuh), P packing, masking (per-warp "every key visible" skip), online softmax with
# quad reductions, the two-stage pipeline under adversarial timing (cp.async copies land when
# issued, wgmmas read their operands only when waited on), and the staging epilogue. Compares the
# output with a float64 reference. It cannot check the hardware itself: that the descriptor model
# and fragment maps match Hopper is what tests/cuda/attention_test.cpp checks on a GPU.
# Usage: python3 scripts/emulate_wgmma_prefill.py   (prints the max error per case; ~1e-4 = ok)
import numpy as np, sys

def run(D, BN, num_q, first_pos, kv_len, pt, streaming=False, sink_tokens=0, local=0,
        num_sink_pages=0, seed=0):
    rng = np.random.default_rng(seed)
    BM = 128
    Q = rng.uniform(-2, 2, (BM, D)).astype(np.float16)
    Q[num_q:] = 0
    Kall = rng.uniform(-1, 1, (kv_len, D)).astype(np.float16)
    Vall = rng.uniform(-1, 1, (kv_len, D)).astype(np.float16)
    q_last = first_pos + num_q - 1
    # span: logical pages (causal: 0..q_last_page; streaming: sinks + window range)
    qlp = q_last // pt
    if not streaming:
        pages = list(range(qlp + 1))
    else:
        wf = first_pos - local + 1
        sinks = [j for j in range(min(num_sink_pages, qlp + 1))
                 if j * pt < sink_tokens or (local > 0 and (j + 1) * pt - 1 >= wf)]
        first = max(max(wf, 0) // pt, num_sink_pages) if local > 0 else qlp + 1
        pages = sinks + list(range(first, qlp + 1))
    num_rows = len(pages) * pt
    nb = (num_rows + BN - 1) // BN
    def row_pos(r):
        li, off = divmod(r, pt)
        if li >= len(pages): return -1
        pos = pages[li] * pt + off
        return pos if pos < kv_len else -1
    def visible(q, k):
        return k >= 0 and k <= q and (not streaming or k < sink_tokens or q - k < local)

    # shared memory
    QB = BM * D * 2; KVB = BN * D * 2
    offK = QB; offV = offK + 2 * KVB
    smem = np.zeros(offV + 2 * KVB, dtype=np.uint8)
    kpos = np.full((2, BN), -7, dtype=np.int64)
    def sw(R, r, c): return (c >> 3) * R * 128 + r * 128 + (((c & 7) ^ (r & 7)) << 4)
    def write_row(base, R, r, vec):
        b = vec.astype(np.float16).view(np.uint8)
        for c in range(D // 8):
            o = base + sw(R, r, c); smem[o:o + 16] = b[c * 16:(c + 1) * 16]
    def swz(a): return a ^ (((a >> 7) & 7) << 4)
    def rd(a): return smem[a:a + 2].view(np.float16)[0]
    def desc_kmajor(start, rows, sbo):  # rows x 16
        M = np.zeros((rows, 16), np.float32)
        for r in range(rows):
            for k in range(16):
                M[r, k] = rd(swz(start + (r // 8) * sbo + (r % 8) * 128 + (k // 8) * 16 + (k % 8) * 2))
        return M
    def desc_mnmajor(start, N, lbo, sbo):  # 16 x N
        M = np.zeros((16, N), np.float32)
        for k in range(16):
            for n in range(N):
                M[k, n] = rd(swz(start + (n // 64) * lbo + (n % 64) * 2 + (k % 8) * 128 + (k // 8) * sbo))
        return M
    # fragment maps, thread t of a warpgroup
    def acc_rc(t, i):
        w, lane = divmod(t, 32); g, q = divmod(lane, 4); j, e = divmod(i, 4)
        return 16 * w + g + 8 * (e // 2), 8 * j + 2 * q + (e % 2)
    def areg_rc(t, reg, half):
        w, lane = divmod(t, 32); g, q = divmod(lane, 4)
        return 16 * w + g + 8 * (reg % 2), 2 * q + 8 * (reg // 2) + half

    for r in range(BM): write_row(0, BM, r, Q[r])
    def issue_k(b):
        st = b & 1
        for r in range(BN):
            pos = row_pos(b * BN + r)
            write_row(offK + st * KVB, BN, r, Kall[pos] if pos >= 0 else np.zeros(D))
            kpos[st, r] = pos
    def issue_v(b):
        st = b & 1
        for r in range(BN):
            pos = row_pos(b * BN + r)
            write_row(offV + st * KVB, BN, r, Vall[pos] if pos >= 0 else np.zeros(D))

    out = np.zeros((BM, D), np.float32)
    scale_log2 = (1.0 / np.sqrt(D)) * 1.4426950408889634
    # per warpgroup state (both warpgroups in lockstep; emulate them one after another per phase)
    S = {wg: np.zeros((128, BN // 2), np.float32) for wg in (0, 1)}
    O = {wg: np.zeros((128, D // 2), np.float32) for wg in (0, 1)}
    PF = {wg: np.zeros((128, BN // 16, 4, 2), np.float16) for wg in (0, 1)}
    m = {wg: np.full((128, 2), -np.inf, np.float32) for wg in (0, 1)}
    l = {wg: np.zeros((128, 2), np.float32) for wg in (0, 1)}

    def gemm_s(wg, j):  # S_j = Q K^T read now
        acc = np.zeros((64, BN), np.float32)
        kst = offK + (j & 1) * KVB
        for kk in range(D // 16):
            qa = (kk // 4) * (BM * 128) + 64 * wg * 128 + (kk % 4) * 32
            ka = kst + (kk // 4) * (BN * 128) + (kk % 4) * 32
            A = desc_kmajor(qa, 64, 1024); B = desc_kmajor(ka, BN, 1024)  # B: N x K
            acc += A @ B.T
        for t in range(128):
            for i in range(BN // 2):
                r, c = acc_rc(t, i); S[wg][t, i] = acc[r, c]
    def gemm_pv(wg, j):
        vst = offV + (j & 1) * KVB
        acc = np.zeros((64, D), np.float32)
        for t in range(128):
            for i in range(D // 2):
                r, c = acc_rc(t, i); acc[r, c] = O[wg][t, i]
        for kk in range(BN // 16):
            A = np.zeros((64, 16), np.float32)
            for t in range(128):
                for reg in range(4):
                    for half in range(2):
                        r, c = areg_rc(t, reg, half); A[r, c] = PF[wg][t, kk, reg, half]
            B = desc_mnmajor(vst + kk * 2048, D, BN * 128, 1024)
            acc += A @ B
        for t in range(128):
            for i in range(D // 2):
                r, c = acc_rc(t, i); O[wg][t, i] = acc[r, c]
    def softmax(wg, j):
        bpos = kpos[j & 1].copy()
        alpha = np.zeros((128, 2), np.float32)
        for warp in range(4):
            row0 = 64 * wg + 16 * warp
            wq_min = first_pos + row0; wq_max = first_pos + min(row0 + 15, num_q - 1)
            every = all(k >= 0 and k <= wq_min and (not streaming or k < sink_tokens or wq_max - k < local) for k in bpos)
            for lane in range(32):
                t = 32 * warp + lane; g, q = divmod(lane, 4)
                qp = [first_pos + row0 + g, first_pos + row0 + g + 8]
                if not every:
                    for jj in range(BN // 8):
                        for e in range(2):
                            k = bpos[jj * 8 + 2 * q + e]
                            for h in range(2):
                                if not visible(qp[h], k): S[wg][t, 4 * jj + 2 * h + e] = -np.inf
        # quad max (all threads first, as the shuffles see pre-exp values)
        MX = np.zeros((128, 2))
        for t in range(128):
            quad = [(t // 4) * 4 + x for x in range(4)]
            for h in range(2):
                MX[t, h] = max(S[wg][u, 4 * jj + 2 * h + e] for u in quad for jj in range(BN // 8) for e in range(2))
        for t in range(128):
            for h in range(2):
                mx = MX[t, h]
                mn = max(m[wg][t, h], mx)
                base = 0.0 if mn == -np.inf else mn * scale_log2
                alpha[t, h] = np.exp2(m[wg][t, h] * scale_log2 - base)
                m[wg][t, h] = mn
                rs = 0.0
                for jj in range(BN // 8):
                    for e in range(2):
                        v = np.exp2(S[wg][t, 4 * jj + 2 * h + e] * scale_log2 - base)
                        S[wg][t, 4 * jj + 2 * h + e] = v; rs += v
                l[wg][t, h] = l[wg][t, h] * alpha[t, h] + rs
        return alpha
    def rescale(wg, alpha):
        for t in range(128):
            for i in range(D // 2):
                O[wg][t, i] *= alpha[t, (i % 4) // 2]
    def pack(wg):
        for t in range(128):
            s = S[wg][t]
            for kk in range(BN // 16):
                PF[wg][t, kk, 0] = [s[8 * kk + 0], s[8 * kk + 1]]
                PF[wg][t, kk, 1] = [s[8 * kk + 2], s[8 * kk + 3]]
                PF[wg][t, kk, 2] = [s[8 * kk + 4], s[8 * kk + 5]]
                PF[wg][t, kk, 3] = [s[8 * kk + 6], s[8 * kk + 7]]
    if nb > 0: issue_k(0)
    def copies(j):
        if j < nb: issue_v(j)
        if j + 1 < nb: issue_k(j + 1)
    alpha = {}
    if nb > 0:
        copies(0)                      # copies land immediately (adversarial)
        for wg in (0, 1):
            gemm_s(wg, 0)              # operands read at wait time
            alpha[wg] = softmax(wg, 0)
            pack(wg)
        for j in range(1, nb):
            copies(j)
            for wg in (0, 1):
                rescale(wg, alpha[wg])
                gemm_s(wg, j)
                alpha[wg] = softmax(wg, j)
                gemm_pv(wg, j - 1)
                pack(wg)
        for wg in (0, 1):
            rescale(wg, alpha[wg])
            gemm_pv(wg, nb - 1)
    # epilogue: quad sums, normalise, staging through swizzled sQ
    for wg in (0, 1):
        for t in range(128):
            quad = [(t // 4) * 4 + x for x in range(4)]
            for i in range(D // 2):
                h = (i % 4) // 2
                L = sum(l[wg][u, h] for u in quad)
                val = np.float16(O[wg][t, i] / L if L > 0 else 0.0)
                r, c = acc_rc(t, i); r += 64 * wg
                # staging write: chunk c//8, byte 4*q + 2*(c%2)
                q = (t % 32) % 4
                a = sw(BM, r, c // 8) + 4 * q + 2 * (c % 2)
                assert (c % 8) == 2 * q + (c % 2)
                smem[a:a + 2] = np.array([val], np.float16).view(np.uint8)
    for r in range(num_q):
        for c in range(D // 8):
            a = sw(BM, r, c); out[r, 8 * c:8 * c + 8] = smem[a:a + 16].view(np.float16)
    # reference
    ref = np.zeros((num_q, D))
    for r in range(num_q):
        qp = first_pos + r
        vis = [row_pos(x) for x in range(nb * BN) if row_pos(x) >= 0 and visible(qp, row_pos(x))]
        if not vis: continue
        lg = np.array([Q[r].astype(np.float64) @ Kall[k].astype(np.float64) for k in vis]) / np.sqrt(D)
        w = np.exp(lg - lg.max()); w /= w.sum()
        ref[r] = w @ Vall[vis].astype(np.float64)
    err = np.abs(out[:num_q] - ref).max()
    return err

cases = [
    dict(D=128, BN=128, num_q=128, first_pos=0, kv_len=128, pt=64),
    dict(D=128, BN=64, num_q=100, first_pos=300, kv_len=400, pt=16),
    dict(D=64, BN=128, num_q=70, first_pos=190, kv_len=260, pt=32),
    dict(D=128, BN=128, num_q=128, first_pos=200, kv_len=328, pt=16, streaming=True, sink_tokens=20,
         local=100, num_sink_pages=2),
    dict(D=64, BN=64, num_q=17, first_pos=0, kv_len=17, pt=128),
    dict(D=128, BN=64, num_q=128, first_pos=500, kv_len=700, pt=32, streaming=True, sink_tokens=40,
         local=200, num_sink_pages=2),
    dict(D=128, BN=128, num_q=1, first_pos=900, kv_len=901, pt=64),
]
worst = 0.0
for c in cases:
    err = run(**c)
    worst = max(worst, err)
    print(c, "max err", err)
sys.exit(0 if worst < 2e-3 else 1)
