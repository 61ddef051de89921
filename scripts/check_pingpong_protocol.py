#!/usr/bin/env python3
# Host model of the ping-pong / persistent prefill kernels' synchronisation protocol
# (attention_prefill_wgmma_ws.cuh with kPingPong, attention_prefill_wgmma_persistent.cuh).
# Actors are warps (4 producer warps, 8 consumer warps) plus deferred cp.async arrivals; a random
# scheduler interleaves them. Checks: no deadlock, every consumer reads the K/V block it expects
# (landed data with the right tag), the producer never overwrites a stage a consumer still uses,
# every consumer sees the span of its own tile, named barrier phases balanced at exit.
import random
import sys


class MBar:
    def __init__(self, count):
        self.count, self.pending, self.phase = count, count, 0

    def arrive(self):
        self.pending -= 1
        assert self.pending >= 0
        if self.pending == 0:
            self.phase += 1
            self.pending = self.count

    def done(self, parity):  # try_wait.parity semantics
        return (self.phase & 1) != parity


class NBar:
    def __init__(self, count):
        self.count, self.arrived, self.gen = count, 0, 0

    def arrive(self):
        self.arrived += 1
        assert self.arrived <= self.count
        g = self.gen
        if self.arrived == self.count:
            self.arrived = 0
            self.gen += 1
        return g


def run(seed, S, persistent, items, usable, nblocks):
    rnd = random.Random(seed)
    full_k = [MBar(8) for _ in range(S)]  # 4 producer warps x (cp.async + plain) arrivals
    full_v = [MBar(4) for _ in range(S)]
    empty_k = [MBar(8) for _ in range(S)]  # 8 consumer warps
    empty_v = [MBar(8) for _ in range(S)]
    tile_full = [MBar(1) for _ in range(2)]
    tile_empty = [MBar(8) for _ in range(2)]
    nb = {i: NBar(c) for i, c in ((1, 4), (2, 4), (3, 8), (4, 8), (5, 4))}
    k_data = [dict() for _ in range(S)]  # producer warp -> (tag, landed): each copies its rows
    v_data = [dict() for _ in range(S)]
    k_users = [set() for _ in range(S)]
    v_users = [set() for _ in range(S)]
    span = [None, None]
    actors = []

    def nsync(i):
        g = nb[i].arrive()
        while nb[i].gen == g:
            yield
    def mwait(bar, parity):
        while not bar.done(parity):
            yield

    def async_arrive(bar, data, s, w):
        for _ in range(rnd.randint(0, 6)):
            yield
        tag, _ = data[s][w]
        data[s][w] = (tag, True)
        bar.arrive()

    def producer(w):
        u = 0
        stage0 = phase0 = warm = 0
        for t in items:
            if not usable[t]:
                continue
            b = u & 1
            if w == 0:
                if u >= 2:
                    yield from mwait(tile_empty[b], ((u >> 1) - 1) & 1)
                yield
                span[b] = t
                tile_full[b].arrive()
            yield from nsync(5)
            assert span[b] == t, "producer reads another tile's span"
            n = nblocks[t]
            for j in range(n):
                s = (stage0 + j) % S
                par = phase0 ^ (((stage0 + j) // S) & 1)
                if warm + j >= S:
                    yield from mwait(empty_k[s], par ^ 1)
                assert not k_users[s], f"K stage {s} overwritten while used by {k_users[s]}"
                k_data[s][w] = ((t, j), False)
                # this warp's cp.async arrival (deferred: when its copies land), then its plain one
                actors.append(async_arrive(full_k[s], k_data, s, w))
                full_k[s].arrive()
                yield
                if warm + j >= S:
                    yield from mwait(empty_v[s], par ^ 1)
                assert not v_users[s], f"V stage {s} overwritten while used"
                v_data[s][w] = ((t, j), False)
                actors.append(async_arrive(full_v[s], v_data, s, w))
                yield
            idx = stage0 + n
            stage0, phase0, warm = idx % S, phase0 ^ ((idx // S) & 1), min(warm + n, S)
            u += 1

    def consumer(cw):
        cwg = cw // 4
        own, other = (3, 4) if cwg == 0 else (4, 3)
        u = 0
        stage0 = phase0 = 0
        for t in items:
            if not usable[t]:
                yield
                continue
            b = u & 1
            yield from mwait(tile_full[b], (u >> 1) & 1)
            assert span[b] == t, f"consumer reads tile {span[b]}'s span for tile {t}"
            tile_empty[b].arrive()
            yield from nsync(1 + cwg)
            n = nblocks[t]
            st = lambda j: (stage0 + j) % S
            pa = lambda j: phase0 ^ (((stage0 + j) // S) & 1)

            def wait_k(j):
                yield from mwait(full_k[st(j)], pa(j))
                assert all(k_data[st(j)].get(w) == ((t, j), True) for w in range(4)), (k_data[st(j)], (t, j))
                k_users[st(j)].add(cw)

            def wait_v(j):
                yield from mwait(full_v[st(j)], pa(j))
                assert all(v_data[st(j)].get(w) == ((t, j), True) for w in range(4)), (v_data[st(j)], (t, j))
                v_users[st(j)].add(cw)

            def rel_k(j):
                k_users[st(j)].discard(cw)
                empty_k[st(j)].arrive()

            def rel_v(j):
                v_users[st(j)].discard(cw)
                empty_v[st(j)].arrive()

            if cwg == 0:
                nb[3].arrive()
            if n > 0:
                yield from wait_k(0)
                yield
                rel_k(0)
                for j in range(1, n):
                    yield from wait_k(j)
                    yield from wait_v(j - 1)
                    yield from nsync(own)
                    yield
                    nb[other].arrive()
                    yield
                    rel_k(j)
                    yield
                    rel_v(j - 1)
                yield from wait_v(n - 1)
                yield
                if persistent:
                    rel_v(n - 1)
                else:
                    v_users[st(n - 1)].discard(cw)
            if cwg == 0:
                yield from nsync(3)
            idx = stage0 + n
            stage0, phase0 = idx % S, phase0 ^ ((idx // S) & 1)
            u += 1
            yield from nsync(1 + cwg)

    actors += [producer(w) for w in range(4)] + [consumer(c) for c in range(8)]
    steps = 0
    while actors:
        i = rnd.randrange(len(actors))
        try:
            next(actors[i])
        except StopIteration:
            actors.pop(i)
        steps += 1
        if steps > 2_000_000:
            raise AssertionError("deadlock (no progress)")
    for i, bar in nb.items():
        assert bar.arrived == 0, f"named barrier {i} left with {bar.arrived} arrivals"


def main():
    trials = int(sys.argv[1]) if len(sys.argv) > 1 else 300
    rnd = random.Random(1)
    for trial in range(trials):
        S = rnd.choice([2, 3])
        persistent = rnd.random() < 0.7
        ntiles = rnd.randint(1, 7) if persistent else 1
        items = list(range(ntiles))
        usable = [rnd.random() < 0.8 for _ in items]
        nblocks = [rnd.choice([0, 1, 2, 3, 5, 8]) for _ in items]
        run(trial, S, persistent, items, usable, nblocks)
    print(f"{trials} runs: no deadlock, no stale or clobbered stage, balanced named barriers")


if __name__ == "__main__":
    main()
