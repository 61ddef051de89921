#pragma once
// Internal to kernels/cuda: the persistent variant of the ping-pong warp-specialised wgmma
// prefill kernel (PrefillKernel::kWgmmaPersistent). Per tile it computes exactly what
// prefill_wgmma_ws_kernel<..., kPingPong = true> computes (same tiles, layouts, descriptors,
// masks, math and turns); what differs is who runs which tile and what carries over between
// tiles.
//
// Grid: min(#SMs, #items) blocks of 384 threads, one per SM. Registers: producer 104 (it also
// builds every tile's span; at 88 ptxas spills), consumers 200, within the 168 x 384 the launch
// bound gives the block (128 * 104 + 256 * 200 = 168 * 384; setmaxnreg.inc would wait forever
// for registers the block does not have). Items are (tile, query head) pairs in
// the plan's order (item i: tile i / num_q_heads, head i % num_q_heads; the plan lists each
// sequence's tiles from the one with the most keys), and round r of block b is item
// r * grid + b for even r and r * grid + grid - 1 - b for odd r: static, the heaviest items start
// first, and the snake order evens the blocks out (plain round-robin would give block 0 the
// heaviest item of every round, a few percent of the kernel's time at 8K tokens causal). Every
// thread walks the same items and decides `usable` the same way (params only), so the three
// warpgroups agree on the tiles without talking; unusable tiles are zeroed by the consumers.
//
// What persists across a block's tiles:
//   - the K/V stage pipeline: producer and consumers count key blocks over all their tiles, so
//     the n-th key block of the block's whole walk lives in stage n % kStages with parity
//     (n / kStages) & 1 (kept as the stage and parity of each tile's first block), and the producer
//     starts loading the next tile's first blocks while the consumers finish the current tile (that
//     overlap is the point of the variant);
//   - the span and listed pages, double-buffered by usable-tile count u (buffer u & 1): warp 0 of
//     the producer builds them, then arrives on tile_full[b] (32 lanes); the producer warps
//     synchronise on named barrier 5 (128 threads) before using listed; a consumer thread reads the
//     span after waiting tile_full[b] (parity (u >> 1) & 1) and arrives on tile_empty[b] (256
//     consumer threads); warp 0 waits tile_empty[b] (parity of use u - 2) before rebuilding
//     buffer b. The producer's own readers of listed[b] (tile u - 2) are done: they all reached
//     barrier 5 of tile u - 1 before warp 0 could get past it.
//   - sQ: each consumer warp loads its own 16 Q rows and stages its own 16 output rows there, so
//     the next tile's Q load only waits for the warp itself (__syncwarp) and the warpgroup's
//     named barrier (1 + cwg) makes the 64 rows visible before the first wgmma.
// The ping-pong turns (named barriers 3 and 4) are balanced per tile exactly as in the
// non-persistent kernel (A's own first arrival, num_blocks - 1 turns each, A's drain), so every
// phase is closed at each tile's end. Unlike the non-persistent kernel the consumers also release
// V of a tile's last block (the producer reuses the stage for the next tile).

#include <cstdint>

#include "kernels/cuda/attention_prefill_wgmma_ws.cuh"

namespace ls::kernels::cuda {

template <int kD, int kBN, int kStages>
struct WgmmaPersistentShape {
  using Ws = WgmmaWsShape<kD, kBN, kStages>;
  static constexpr int kThreads = 384;
  static constexpr int kOffSpan = Ws::kOffSpan;               // Span[2], 16 bytes each
  static constexpr int kOffBar = kOffSpan + 32;               // stage mbarriers, then tile_full[2],
  static constexpr int kOffTileBar = kOffBar + 32 * kStages;  // tile_empty[2]
  static constexpr int kOffListed = kOffTileBar + 32;         // listed[2][listed_cap]
  static constexpr int smem_bytes(int listed_cap) { return 1024 + kOffListed + 8 * listed_cap; }
};

template <int kD, typename T, int kBN, int kStages>
__global__ void __launch_bounds__(384, 1)
    prefill_wgmma_persistent_kernel(const AttentionParams p, const PrefillTile* tiles,
                                    const int32_t* num_tiles, int32_t listed_cap) {
  using Base = WgmmaPrefillShape<kD, kBN>;
  using Ws = WgmmaWsShape<kD, kBN, kStages>;
  using Shape = WgmmaPersistentShape<kD, kBN, kStages>;
  using Math = WgmmaTileMath<kD, kBN, T>;
  constexpr int kChunks = Base::kChunks;
  constexpr int kProducerRowThreads = 128 / kBN;

  const int tid = static_cast<int>(threadIdx.x);
  const int warp = tid / 32, lane = tid % 32;
  const int wg = warp / 4;  // 0: producer, 1 and 2: consumers
  const int32_t group = p.num_q_heads / p.num_kv_heads;
  const int32_t num_items = *num_tiles * p.num_q_heads;  // the launcher checks the product fits
  // This block's item of round `round` (see above); >= num_items: the block is done.
  const auto item_of = [&](int32_t round) {
    const int64_t base = static_cast<int64_t>(round) * gridDim.x;
    return base + ((round & 1) ? gridDim.x - 1 - blockIdx.x : blockIdx.x);
  };

  extern __shared__ __align__(16) unsigned char smem_raw[];
  unsigned char* smem = smem_raw + ((1024u - (smem_addr(smem_raw) & 1023u)) & 1023u);
  unsigned char* sQ = smem;
  unsigned char* sK = smem + Ws::kOffK;
  unsigned char* sV = smem + Ws::kOffV;
  int32_t* kpos = reinterpret_cast<int32_t*>(smem + Ws::kOffPos);
  Span* span_s = reinterpret_cast<Span*>(smem + Shape::kOffSpan);  // [2], 16-byte slots
  const auto span_slot = [&](int b) {
    return reinterpret_cast<Span*>(reinterpret_cast<unsigned char*>(span_s) + 16 * b);
  };
  const uint32_t bars = smem_addr(smem + Shape::kOffBar);
  const auto full_k = [&](int s) { return bars + 8 * s; };
  const auto full_v = [&](int s) { return bars + 8 * (kStages + s); };
  const auto empty_k = [&](int s) { return bars + 8 * (2 * kStages + s); };
  const auto empty_v = [&](int s) { return bars + 8 * (3 * kStages + s); };
  const uint32_t tile_bars = smem_addr(smem + Shape::kOffTileBar);
  const auto tile_full = [&](int b) { return tile_bars + 8 * b; };
  const auto tile_empty = [&](int b) { return tile_bars + 16 + 8 * b; };
  int32_t* listed = reinterpret_cast<int32_t*>(smem + Shape::kOffListed);  // [2][listed_cap]
  // The stage ring over all of this block's tiles: the current tile's key block 0 is in stage
  // stage0 with parity phase0; warm = min(key blocks of earlier tiles, kStages) (a stage is
  // refilled only after its first use). 32-bit counters, kept small, to spare registers.
  int32_t stage0 = 0, warm = 0;
  uint32_t phase0 = 0;
  const auto stage_of = [&](int32_t j) { return (stage0 + j) % kStages; };
  const auto parity_of = [&](int32_t j) {
    return phase0 ^ static_cast<uint32_t>(((stage0 + j) / kStages) & 1);
  };
  const auto advance = [&](int32_t num_blocks) {
    const int32_t idx = stage0 + num_blocks;
    stage0 = idx % kStages;
    phase0 ^= static_cast<uint32_t>((idx / kStages) & 1);
    warm = min(warm + num_blocks, kStages);
  };
  const uint32_t sQ_addr = smem_addr(sQ), sK_addr = smem_addr(sK), sV_addr = smem_addr(sV);
  const T* q_base = static_cast<const T*>(p.q);
  T* out_base = static_cast<T*>(p.out);

  if (tid == 32) {
    for (int s = 0; s < kStages; ++s) {
      mbar_init(full_k(s), 256);
      mbar_init(full_v(s), 128);
      mbar_init(empty_k(s), 256);
      mbar_init(empty_v(s), 256);
    }
    for (int b = 0; b < 2; ++b) {
      mbar_init(tile_full(b), 32);
      mbar_init(tile_empty(b), 256);
    }
  }
  __syncthreads();  // barrier init; the only block-wide barrier

  int32_t u = 0;  // this block's earlier usable tiles
  if (wg == 0) {
    // ---- producer ----
    asm volatile("setmaxnreg.dec.sync.aligned.u32 104;\n" ::: "memory");
    const int my_row = tid / kProducerRowThreads;
    for (int32_t round = 0; item_of(round) < num_items; ++round) {
      const int32_t item = static_cast<int32_t>(item_of(round));
      const PrefillTile tile = tiles[item / p.num_q_heads];
      const int32_t g = item % p.num_q_heads / group;
      const int64_t q_first = tile.first_pos;
      const int64_t q_last = q_first + tile.num_q - 1;
      HeadView hv;
      if (!resolve_head(p, tile.seq, g, q_first, q_last, hv)) continue;
      const int b = u & 1;
      int32_t* listed_b = listed + b * listed_cap;
      if (warp == 0) {
        if (u >= 2) mbar_wait(tile_empty(b), static_cast<uint32_t>(((u >> 1) - 1) & 1));
        const Span sp = build_span(p, hv, tile.seq, g, q_first, q_last, listed_b, listed_cap, lane);
        if (lane == 0) *span_slot(b) = sp;
        mbar_arrive(tile_full(b));
      }
      asm volatile("bar.sync 5, 128;\n" ::: "memory");  // span and listed of this tile built
      const Span sp = *span_slot(b);
      const int64_t num_rows = static_cast<int64_t>(sp.num_pages()) * hv.page_tokens;
      const int32_t num_blocks = static_cast<int32_t>(
          min((num_rows + kBN - 1) / kBN, static_cast<int64_t>(INT32_MAX / kBN - 1)));
      const T* k_pool = static_cast<const T*>(hv.k);
      const T* v_pool = static_cast<const T*>(hv.v);
      for (int32_t j = 0; j < num_blocks; ++j) {
        const int s = stage_of(j);
        const uint32_t free_parity = parity_of(j) ^ 1u;  // the stage's previous use
        const KeyRow kr = locate_row(hv, sp, listed_b, j * kBN + my_row, kD);
        const bool valid = kr.position >= 0;
        if (warm + j >= kStages) mbar_wait(empty_k(s), free_parity);
        {
          const T* src = k_pool + (valid ? kr.offset : 0);
          unsigned char* dst = sK + s * Base::kKVBytes;
          for (int c = tid % kProducerRowThreads; c < kChunks; c += kProducerRowThreads) {
            cp_async_16(dst + sw128_offset<kBN>(my_row, c), src + c * 8, valid);
          }
          if (tid % kProducerRowThreads == 0) kpos[s * kBN + my_row] = kr.position;
          mbar_arrive_cp_async(full_k(s));
          mbar_arrive(full_k(s));
        }
        if (warm + j >= kStages) mbar_wait(empty_v(s), free_parity);
        {
          const T* src = v_pool + (valid ? kr.offset : 0);
          unsigned char* dst = sV + s * Base::kKVBytes;
          for (int c = tid % kProducerRowThreads; c < kChunks; c += kProducerRowThreads) {
            cp_async_16(dst + sw128_offset<kBN>(my_row, c), src + c * 8, valid);
          }
          mbar_arrive_cp_async(full_v(s));
        }
      }
      advance(num_blocks);
      ++u;
    }
    asm volatile("cp.async.wait_all;\n" ::: "memory");
    return;
  }

  // ---- consumers ----
  asm volatile("setmaxnreg.inc.sync.aligned.u32 200;\n" ::: "memory");
  const int cwg = wg - 1;  // consumer warpgroup: rows 64 cwg .. 64 cwg + 63
  const int cwarp = warp - 4;
  const int wg_row0 = 64 * cwg;
  const int warp_row0 = wg_row0 + 16 * (cwarp % 4);
  const int row_a = warp_row0 + lane / 4;
  const float scale_log2 = p.scale * 1.4426950408889634f;

  float o[Math::kORegs];
  float s[Math::kSRegs];
  uint32_t pf[Math::kPVSteps][4];
  for (int32_t round = 0; item_of(round) < num_items; ++round) {
    const int32_t item = static_cast<int32_t>(item_of(round));
    const PrefillTile tile = tiles[item / p.num_q_heads];
    const int32_t h = item % p.num_q_heads;
    const int32_t g = h / group;
    const int64_t q_first = tile.first_pos;
    const int64_t q_last = q_first + tile.num_q - 1;
    HeadView hv;
    if (!resolve_head(p, tile.seq, g, q_first, q_last, hv)) {  // zero rows, as kernels/cpu
      zero_tile_rows<kD, 256>(out_base, tile, h, p.num_q_heads, tid - 128);
      continue;
    }
    const int b = u & 1;
    // This warp's 16 Q rows (rows past num_q zero), into the rows it staged its last output in.
    for (int i = lane; i < 16 * kChunks; i += 32) {
      const int r = warp_row0 + i / kChunks, c = i % kChunks;
      const bool valid = r < tile.num_q;
      const T* src =
          q_base + (static_cast<int64_t>(tile.token0 + (valid ? r : 0)) * p.num_q_heads + h) * kD;
      cp_async_16(sQ + sw128_offset<Base::kBM>(r, c), src + c * 8, valid);
    }
    cp_async_commit();
    mbar_wait(tile_full(b), static_cast<uint32_t>((u >> 1) & 1));
    const Span sp = *span_slot(b);
    mbar_arrive(tile_empty(b));
    cp_async_wait<0>();
    fence_proxy_async();
    // The warpgroup's 64 Q rows are in shared memory and visible to wgmma.
    if (cwg == 0) {
      asm volatile("bar.sync 1, 128;\n" ::: "memory");
    } else {
      asm volatile("bar.sync 2, 128;\n" ::: "memory");
    }
    const int64_t num_rows = static_cast<int64_t>(sp.num_pages()) * hv.page_tokens;
    const int32_t num_blocks = static_cast<int32_t>(
        min((num_rows + kBN - 1) / kBN, static_cast<int64_t>(INT32_MAX / kBN - 1)));
    const int64_t wq_min = q_first + warp_row0;
    const int64_t wq_max = q_first + min(warp_row0 + 15, tile.num_q - 1);
    const int64_t q_pos0 = q_first + row_a;
    const typename Math::Rows rows{q_pos0, q_pos0 + 8, wq_min, wq_max, scale_log2};

#pragma unroll
    for (int i = 0; i < Math::kORegs; ++i) o[i] = 0.0f;
    float m0 = -INFINITY, m1 = -INFINITY, l0 = 0.0f, l1 = 0.0f;
    auto wait_k = [&](int32_t j) {
      mbar_wait(full_k(stage_of(j)), parity_of(j));
      fence_proxy_async();
    };
    auto wait_v = [&](int32_t j) {
      mbar_wait(full_v(stage_of(j)), parity_of(j));
      fence_proxy_async();
    };
    auto issue_s = [&](int32_t j) {
      Math::template issue_s<Base::kBM>(s, sQ_addr, wg_row0,
                                        sK_addr + stage_of(j) * Base::kKVBytes);
    };
    auto issue_pv = [&](int32_t j) {
      Math::issue_pv(o, pf, sV_addr + stage_of(j) * Base::kKVBytes);
    };
    auto softmax = [&](int32_t j, float& alpha0, float& alpha1) {
      Math::softmax(s, kpos + stage_of(j) * kBN, hv, lane, rows, m0, m1, l0, l1, alpha0, alpha1);
    };

    if (cwg == 0) asm volatile("bar.arrive 3, 256;\n" ::: "memory");  // A's first turn
    if (num_blocks > 0) {
      float alpha0, alpha1;
      wait_k(0);
      wgmma_fence();
      issue_s(0);
      wgmma_wait<0>();
      wgmma_hold(s);
      softmax(0, alpha0, alpha1);
      mbar_arrive(empty_k(stage_of(0)));  // S_0 done, positions read
      Math::pack(pf, s);
      for (int32_t j = 1; j < num_blocks; ++j) {
        wait_k(j);
        wait_v(j - 1);
        pingpong_take_turn(cwg);
        wgmma_fence();
        issue_s(j);
        Math::rescale(o, alpha0, alpha1);
        wgmma_fence();
        issue_pv(j - 1);
        pingpong_pass_turn(cwg);
        wgmma_wait<1>();  // S_j done
        wgmma_hold(s);
        softmax(j, alpha0, alpha1);
        mbar_arrive(empty_k(stage_of(j)));
        wgmma_wait<0>();  // P_{j-1} V_{j-1} done
        wgmma_hold(o);
        mbar_arrive(empty_v(stage_of(j - 1)));
        Math::pack(pf, s);
      }
      wait_v(num_blocks - 1);
      Math::rescale(o, alpha0, alpha1);
      wgmma_fence();
      issue_pv(num_blocks - 1);
      wgmma_wait<0>();
      wgmma_hold(o);
      mbar_arrive(empty_v(stage_of(num_blocks - 1)));  // the next tile reuses the stage
    }
    if (cwg == 0) asm volatile("bar.sync 3, 256;\n" ::: "memory");  // drain, as the ws kernel
    advance(num_blocks);
    ++u;

    l0 += __shfl_xor_sync(0xffffffffu, l0, 1);
    l0 += __shfl_xor_sync(0xffffffffu, l0, 2);
    l1 += __shfl_xor_sync(0xffffffffu, l1, 1);
    l1 += __shfl_xor_sync(0xffffffffu, l1, 2);
    const float inv0 = l0 > 0.0f ? 1.0f / l0 : 0.0f;
    const float inv1 = l1 > 0.0f ? 1.0f / l1 : 0.0f;
    // Every warp of the warpgroup is past its last wgmma reading sQ.
    if (cwg == 0) {
      asm volatile("bar.sync 1, 128;\n" ::: "memory");
    } else {
      asm volatile("bar.sync 2, 128;\n" ::: "memory");
    }
#pragma unroll
    for (int j = 0; j < kD / 8; ++j) {
      const uint32_t in_chunk = 4 * (lane % 4);
      *reinterpret_cast<uint32_t*>(sQ + sw128_offset<Base::kBM>(row_a, j) + in_chunk) =
          pack2<T>(o[4 * j] * inv0, o[4 * j + 1] * inv0);
      *reinterpret_cast<uint32_t*>(sQ + sw128_offset<Base::kBM>(row_a + 8, j) + in_chunk) =
          pack2<T>(o[4 * j + 2] * inv1, o[4 * j + 3] * inv1);
    }
    __syncwarp();
    const int valid_rows = min(16, tile.num_q - warp_row0);
    for (int i = lane; i < valid_rows * kChunks; i += 32) {
      const int r = i / kChunks, c = i % kChunks;
      *reinterpret_cast<uint4*>(
          out_base + (static_cast<int64_t>(tile.token0 + warp_row0 + r) * p.num_q_heads + h) * kD +
          c * 8) = *reinterpret_cast<const uint4*>(sQ + sw128_offset<Base::kBM>(warp_row0 + r, c));
    }
    __syncwarp();  // the staged rows are read before the next tile's Q lands in them
  }
}

}  // namespace ls::kernels::cuda
