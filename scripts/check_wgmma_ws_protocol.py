#!/usr/bin/env python3
# Random-interleaving check of the mbarrier protocol of prefill_wgmma_ws_kernel
# (src/kernels/cuda/attention_prefill_wgmma_ws.cuh): producer (128 threads, modelled as one actor
# issuing their arrivals together), two consumer warpgroups, cp.async landings at random times.
# Checks: no deadlock, every read sees the right block landed, no stage is overwritten while a
# consumer may still read it. mbarrier semantics: phase counter n; try_wait.parity(P) succeeds
# iff (n & 1) != P.
import random, sys

class Bar:
    def __init__(s, count): s.count, s.pending, s.n = count, count, 0
    def arrive(s, k=1):
        for _ in range(k):
            s.pending -= 1
            assert s.pending >= 0
            if s.pending == 0: s.n += 1; s.pending = s.count
    def done(s, parity): return (s.n & 1) != parity

def run(nb, seed):
    rnd = random.Random(seed)
    full_k = [Bar(256), Bar(256)]; full_v = [Bar(128), Bar(128)]
    empty_k = [Bar(256), Bar(256)]; empty_v = [Bar(256), Bar(256)]
    K = [None, None]; V = [None, None]        # (block, landed)
    readers_k = [set(), set()]; readers_v = [set(), set()]  # consumers possibly reading
    pending_async = []                        # (bar, what, stage, block)
    def producer():
        for j in range(nb):
            s = j & 1
            if j >= 2:
                while not empty_k[s].done(((j >> 1) - 1) & 1): yield
            assert not readers_k[s], f"K stage {s} overwritten while read (block {j})"
            K[s] = (j, False)
            pending_async.append((full_k[s], 'K', s, j))
            full_k[s].arrive(128)            # plain arrivals (positions released)
            yield
            if j >= 2:
                while not empty_v[s].done(((j >> 1) - 1) & 1): yield
            assert not readers_v[s], f"V stage {s} overwritten while read (block {j})"
            V[s] = (j, False)
            pending_async.append((full_v[s], 'V', s, j))
            yield
    def consumer(c):
        def wait_k(j):
            while not full_k[j & 1].done((j >> 1) & 1): yield
            assert K[j & 1] == (j, True), (c, 'K', j, K[j & 1])
        def wait_v(j):
            while not full_v[j & 1].done((j >> 1) & 1): yield
            assert V[j & 1] == (j, True), (c, 'V', j, V[j & 1])
        if nb == 0: return
        yield from wait_k(0)
        readers_k[0].add(c); yield                       # S_0 issued .. waited, softmax reads kpos
        assert K[0] == (0, True)
        readers_k[0].discard(c); empty_k[0].arrive(128); yield
        for j in range(1, nb):
            yield from wait_k(j)
            yield from wait_v(j - 1)
            readers_k[j & 1].add(c); readers_v[(j - 1) & 1].add(c); yield
            assert K[j & 1] == (j, True); yield          # S_j reads, softmax reads positions
            readers_k[j & 1].discard(c); empty_k[j & 1].arrive(128); yield
            assert V[(j - 1) & 1] == (j - 1, True)       # P V reads until wait<0>
            readers_v[(j - 1) & 1].discard(c); empty_v[(j - 1) & 1].arrive(128); yield
        yield from wait_v(nb - 1)
        readers_v[(nb - 1) & 1].add(c); yield
        assert V[(nb - 1) & 1] == (nb - 1, True)
        readers_v[(nb - 1) & 1].discard(c)
    actors = {'p': producer(), 'c0': consumer(0), 'c1': consumer(1)}
    steps = 0
    while actors or pending_async:
        steps += 1
        if steps > 200000: raise RuntimeError(f"deadlock nb={nb} seed={seed}")
        choices = list(actors) + (['async'] if pending_async else [])
        a = rnd.choice(choices)
        if a == 'async':
            bar, what, s, j = pending_async.pop(rnd.randrange(len(pending_async)))
            buf = K if what == 'K' else V
            assert buf[s] == (j, False)
            buf[s] = (j, True)
            bar.arrive(128)
            continue
        try: next(actors[a])
        except StopIteration: del actors[a]

for nb in range(0, 9):
    for seed in range(300):
        run(nb, seed)
print("protocol ok")  # usage: python3 scripts/check_wgmma_ws_protocol.py
