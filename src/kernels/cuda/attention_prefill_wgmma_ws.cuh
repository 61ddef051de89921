#pragma once
// Internal to kernels/cuda: the warp-specialised variant of the wgmma prefill kernel
// (attention_prefill_wgmma.cuh), the default for head_dim 128 (PrefillKernel::kAuto /
// kWgmmaWs): it computes the same thing with the same tiles, layouts, descriptors and math, but a
// producer warpgroup does all the K/V copies and the two consumer warpgroups never wait for each
// other.
//
// Block: 384 threads. Warpgroup 0 = producer (setmaxnreg 56), warpgroups 1 and 2 = consumers
// (setmaxnreg 224; 2 * 128 * 224 + 128 * 56 = 64512 registers) owning query rows 0..63 and
// 64..127 of the 128-row tile. Key blocks of 64 rows only: with 128 the consumers need more than
// 240 registers (ptxas spills and serializes the wgmmas, C7512).
// kStages K/V stages (2 for kWgmmaWs; 2 or 3 for kWgmmaPingPong). Per key block j (stage
// s = j % kStages, use u = j / kStages of that stage), the producer in one of two modes, chosen
// per block of threads: TMA mode when the head's pool has tensor maps (kv_tma_maps.h) and the
// span has at least maps.min_blocks key blocks; cp.async mode otherwise. (TMA measured faster on
// long spans and slower on short ones, where the cp.async producer stays:
// docs/cuda-prefill-wgmma.md.)
//   cp.async mode, the whole producer warpgroup (one or two threads per row): waits empty_k[s]
//     (use u - 1 released), copies the 128-byte-swizzled K rows of block j with cp.async plus
//     their key positions (invalid rows zero-filled), then cp.async.mbarrier.arrive.noinc (one
//     arrival per thread when its copies land) and a plain arrive (releases the positions) on
//     full_k[s]; the same for V on empty_v[s] / full_v[s] (no positions).
//   TMA mode, the producer's first warp alone (the other three leave): lane l locates block rows
//     l and l + 32, waits empty_k[s] and writes their key positions; then
//     - when all 64 rows are valid: lane 0 arrives on full_k[s] announcing the block's bytes
//       (expect_tx), the other lanes arrive plainly, and lane 0 issues one box per (box of rows,
//       64-column panel), each completing its bytes on full_k[s];
//     - otherwise (rows past kv_len or of a missing page: a box would bring whatever they hold,
//       NaN included) cp.async as above from the 32 lanes, each adding an arrival-when-landed
//       that raises the pending count first (cp.async.mbarrier.arrive) and arriving plainly;
//     the same for V on empty_v[s] / full_v[s].
//   quantized pages (kQ != kNone; never TMA): the whole warpgroup, two threads per row, copies
//     the codes and the row's scale / zero point with cp.async into a staging area two blocks
//     ahead (WsQuantStaging), dequantizes block j's staged bytes in registers (kv_dequant.cuh),
//     stores the chunks into the swizzled tile, fences (fence.proxy.async) and arrives once on
//     full_k[s] / full_v[s] (128 arrivals per phase).
//   consumers: wait full_k[s] (parity u & 1) and fence.proxy.async before wgmma reads the tile;
//     arrive on empty_k[s] once S_j is complete and the softmax has read the positions; arrive
//     on empty_v[s] once P_j V_j is complete.
// Barrier counts: cp.async mode full_k 256 (128 async + 128 plain arrivals), full_v 128; TMA
// mode full_k and full_v 32 (one arrival per lane; the bytes or the landed cp.asyncs hold the
// phase open); empty_k / empty_v 256 (every consumer thread). Waits are bounded: a wait that
// never completes traps (a protocol bug must fail the launch, not hang the process).
//
// kPingPong (PrefillKernel::kWgmmaPingPong): FlashAttention-3's ping-pong scheduling of the two
// consumer warpgroups. Each iteration's wgmmas (S_j and P_{j-1} V_{j-1}) are issued in turns:
// warpgroup A (rows 0..63) issues, then B, then A, ... so that while the tensor cores run one
// warpgroup's GEMMs the other runs its softmax, instead of both issuing at once and then both
// waiting with the tensor cores idle. Two named barriers of 256 threads (ids 3: A's turn, 4: B's
// turn): a warpgroup takes its turn with bar.sync on its own id (its 128 threads plus 128
// arrivals of the other warpgroup complete the phase) and hands it over with bar.arrive on the
// other's id right after issuing. A arrives once on its own barrier before the first turn (the
// first phase of 3 completes with A's own 128 arrivals). Both warpgroups take num_blocks - 1
// turns (the loop below; S_0 and the last P V are issued outside turns), so barrier 3 receives
// one more arrival set than A syncs: A drains it with a last bar.sync after the loop, and every
// phase of both barriers has completed when the block exits. No deadlock: B's arrive of turn j
// needs only A's arrive of turn j and the K/V of blocks <= j, which the producer fills after
// both warpgroups released blocks <= j - 2.

#include <cstdint>

#include "kernels/cuda/attention_prefill_wgmma.cuh"
#include "kernels/cuda/kv_dequant.cuh"
#include "kernels/cuda/kv_tma_maps.h"

namespace ls::kernels::cuda {

// The quantized-page producer's staging area (none for bf16 / f16 pages): kBuffers buffers of
// one 64-key block each, every producer thread's code vectors (K and V, [row][code bytes]), its
// row's parameters (one 8-byte slot per thread, K and V) and its row's key position (one slot
// per thread).
template <int kD, KvQuant kQ>
struct WsQuantStaging {
  static constexpr int kAhead = 2;  // blocks copied ahead of the one being dequantized
  static constexpr int kBuffers = kAhead + 1;
  static constexpr int kRows = 64;
  static constexpr int kThreads = 128;
  static constexpr int kCodeBytes = kQ == KvQuant::kNone ? 0 : kQuantCodeBytes<kD, kQ>;
  static constexpr int kOffParams = kBuffers * 2 * kRows * kCodeBytes;
  static constexpr int kOffPos = kOffParams + kBuffers * 2 * kThreads * 8;
  static constexpr int kBytes = kQ == KvQuant::kNone ? 0 : kOffPos + kBuffers * kThreads * 4;
  // Byte offset of code vector c (16 bytes) of `row`. The vectors of a row are rotated by two
  // per row of a 128-byte line: the 8 threads of a quarter warp (4 rows, vectors c and c + 1)
  // then read 8 distinct 16-byte bank groups instead of 2.
  static __device__ __forceinline__ int code_offset(int b, int kv, int row, int c) {
    constexpr int kVecs = kCodeBytes / 16 >= 2 ? kCodeBytes / 16 : 2;  // per row: 8 or 4
    constexpr int kRowsPerLine = 128 / (16 * kVecs);
    const int phys = (c + 2 * ((row / kRowsPerLine) % (kVecs / 2))) % kVecs;
    return ((b * 2 + kv) * kRows + row) * kCodeBytes + 16 * phys;
  }
  static __device__ __forceinline__ int param_offset(int b, int kv, int thread) {
    return kOffParams + ((b * 2 + kv) * kThreads + thread) * 8;
  }
  static __device__ __forceinline__ int pos_offset(int b, int thread) {
    return kOffPos + (b * kThreads + thread) * 4;
  }
};

// Shared memory of the warp-specialised kernel: the wgmma kernel's Q tile, then kStages K and V
// stages (each laid out as in attention_prefill_wgmma.cuh), the key positions of each stage, the
// span, 4 kStages mbarriers (full_k, full_v, empty_k, empty_v per stage), kStagingBytes for the
// quantized-page producer (WsQuantStaging) and the listed pages.
template <int kD, int kBN, int kStages = 2, int kStagingBytes = 0>
struct WgmmaWsShape {
  static_assert(kBN == 64, "the warp-specialised kernel has key blocks of 64 rows");
  static_assert(kStages >= 2 && kStages <= 4, "2 to 4 K/V stages");
  using Base = WgmmaPrefillShape<kD, kBN>;
  static constexpr int kThreads = 384;
  static constexpr int kOffK = Base::kQBytes;
  static constexpr int kOffV = kOffK + kStages * Base::kKVBytes;
  static constexpr int kOffPos = kOffV + kStages * Base::kKVBytes;
  static constexpr int kOffSpan = kOffPos + kStages * kBN * 4;
  // kOffSpan: the span (12 bytes), then the producer's mode (int32: 1 = TMA)
  static constexpr int kOffBar = kOffSpan + 16;  // 4 kStages mbarriers, 8 bytes each
  static constexpr int kOffStaging = kOffBar + 32 * kStages;
  static constexpr int kOffListed = kOffStaging + kStagingBytes;
  static constexpr int smem_bytes(int listed_cap) { return 1024 + kOffListed + 4 * listed_cap; }
};

__device__ __forceinline__ void mbar_init(uint32_t bar, uint32_t count) {
  asm volatile("mbarrier.init.shared::cta.b64 [%0], %1;\n" ::"r"(bar), "r"(count) : "memory");
}

__device__ __forceinline__ void mbar_arrive(uint32_t bar) {
  asm volatile("{\n.reg .b64 state;\nmbarrier.arrive.shared::cta.b64 state, [%0];\n}\n" ::"r"(bar)
               : "memory");
}

// One arrival on `bar` when every cp.async this thread issued before it has landed.
__device__ __forceinline__ void mbar_arrive_cp_async(uint32_t bar) {
  asm volatile("cp.async.mbarrier.arrive.noinc.shared::cta.b64 [%0];\n" ::"r"(bar) : "memory");
}

// Without .noinc: the pending count is raised by one first, so the arrival when this thread's
// cp.asyncs land does not count against the barrier's expected arrivals.
__device__ __forceinline__ void mbar_arrive_cp_async_inc(uint32_t bar) {
  asm volatile("cp.async.mbarrier.arrive.shared::cta.b64 [%0];\n" ::"r"(bar) : "memory");
}

// An arrival that first raises the phase's expected transaction bytes by `bytes` (the TMA
// copies that will complete them).
__device__ __forceinline__ void mbar_arrive_expect_tx(uint32_t bar, uint32_t bytes) {
  asm volatile("mbarrier.arrive.expect_tx.shared::cta.b64 _, [%0], %1;\n" ::"r"(bar), "r"(bytes)
               : "memory");
}

// TMA: the box at (x = column, y = row) of `map` into shared memory at `dst`, completing its
// bytes on `bar`. `map` is a __grid_constant__ kernel parameter.
__device__ __forceinline__ void tma_load_2d(uint32_t dst, const CUtensorMap* map, int32_t x,
                                            int32_t y, uint32_t bar) {
  asm volatile(
      "cp.async.bulk.tensor.2d.shared::cluster.global.tile.mbarrier::complete_tx::bytes"
      " [%0], [%1, {%2, %3}], [%4];\n" ::"r"(dst),
      "l"(reinterpret_cast<uint64_t>(map)), "r"(x), "r"(y), "r"(bar)
      : "memory");
}

// Brings a __grid_constant__ tensor map into the TMA unit's descriptor cache.
__device__ __forceinline__ void tma_prefetch_map(const CUtensorMap* map) {
  asm volatile("prefetch.tensormap [%0];\n" ::"l"(reinterpret_cast<uint64_t>(map)) : "memory");
}

// Waits until the phase of `bar` with this parity has completed; traps after about 4e9 clocks
// (seconds: no correct wait takes that long).
__device__ __forceinline__ void mbar_wait(uint32_t bar, uint32_t parity) {
  const long long start = clock64();
  for (;;) {
    uint32_t done;
    asm volatile(
        "{\n.reg .pred p;\nmbarrier.try_wait.parity.shared::cta.b64 p, [%1], %2;\n"
        "selp.u32 %0, 1, 0, p;\n}\n"
        : "=r"(done)
        : "r"(bar), "r"(parity)
        : "memory");
    if (done) return;
    if (clock64() - start > (1ll << 32)) __trap();
  }
}

// The ping-pong turns (kPingPong): named barrier 3 + consumer warpgroup index, 256 threads.
// Immediate ids: a register id would make ptxas reserve all 16 barriers.
__device__ __forceinline__ void pingpong_take_turn(int cwg) {
  if (cwg == 0) {
    asm volatile("bar.sync 3, 256;\n" ::: "memory");
  } else {
    asm volatile("bar.sync 4, 256;\n" ::: "memory");
  }
}

__device__ __forceinline__ void pingpong_pass_turn(int cwg) {
  if (cwg == 0) {
    asm volatile("bar.arrive 4, 256;\n" ::: "memory");
  } else {
    asm volatile("bar.arrive 3, 256;\n" ::: "memory");
  }
}

template <int kD, typename T, int kBN, bool kPingPong, int kStages, KvQuant kQ = KvQuant::kNone>
__global__ void __launch_bounds__(384, 1)
    prefill_wgmma_ws_kernel(const AttentionParams p, const __grid_constant__ KvTmaMaps maps,
                            const PrefillTile* tiles, const int32_t* num_tiles,
                            int32_t listed_cap) {
  using Base = WgmmaPrefillShape<kD, kBN>;
  using Shape = WgmmaWsShape<kD, kBN, kStages, WsQuantStaging<kD, kQ>::kBytes>;
  constexpr int kChunks = Base::kChunks;
  constexpr int kPVSteps = WgmmaTileMath<kD, kBN, T>::kPVSteps;
  constexpr int kSRegs = WgmmaTileMath<kD, kBN, T>::kSRegs;
  constexpr int kORegs = WgmmaTileMath<kD, kBN, T>::kORegs;

  const int tile_index = static_cast<int>(blockIdx.y);
  if (tile_index >= *num_tiles) return;
  const PrefillTile tile = tiles[tile_index];
  const int32_t h = static_cast<int32_t>(blockIdx.x);
  const int32_t group = p.num_q_heads / p.num_kv_heads;
  const int32_t g = h / group;
  const int tid = static_cast<int>(threadIdx.x);
  const int warp = tid / 32, lane = tid % 32;
  const int wg = warp / 4;  // 0: producer, 1 and 2: consumers

  extern __shared__ __align__(16) unsigned char smem_raw[];
  unsigned char* smem = smem_raw + ((1024u - (smem_addr(smem_raw) & 1023u)) & 1023u);
  unsigned char* sQ = smem;
  unsigned char* sK = smem + Shape::kOffK;
  unsigned char* sV = smem + Shape::kOffV;
  int32_t* kpos = reinterpret_cast<int32_t*>(smem + Shape::kOffPos);
  Span* span_s = reinterpret_cast<Span*>(smem + Shape::kOffSpan);
  const uint32_t bars = smem_addr(smem + Shape::kOffBar);
  // mbarriers: full_k[kStages], full_v[kStages], empty_k[kStages], empty_v[kStages]
  const auto full_k = [&](int s) { return bars + 8 * s; };
  const auto full_v = [&](int s) { return bars + 8 * (kStages + s); };
  const auto empty_k = [&](int s) { return bars + 8 * (2 * kStages + s); };
  const auto empty_v = [&](int s) { return bars + 8 * (3 * kStages + s); };
  // Block j lives in stage j % kStages; its use of that stage is the (j / kStages)-th, so the
  // full barriers of block j complete their phase of parity (j / kStages) & 1.
  const auto stage_of = [](int32_t j) { return static_cast<int>(j % kStages); };
  const auto parity_of = [](int32_t j) { return static_cast<uint32_t>((j / kStages) & 1); };
  int32_t* listed = reinterpret_cast<int32_t*>(smem + Shape::kOffListed);
  const uint32_t sQ_addr = smem_addr(sQ), sK_addr = smem_addr(sK), sV_addr = smem_addr(sV);

  const int64_t q_first = tile.first_pos;
  const int64_t q_last = q_first + tile.num_q - 1;
  const T* q_base = static_cast<const T*>(p.q);
  T* out_base = static_cast<T*>(p.out);

  if (tid == 0) {  // the tensor maps' first use should not wait for their fetch
#pragma unroll
    for (int i = 0; i < 2; ++i) {
      if (maps.box_rows[i] > 0) {
        tma_prefetch_map(&maps.k[i]);
        tma_prefetch_map(&maps.v[i]);
      }
    }
  }
  HeadView hv;
  const bool usable = resolve_head(p, tile.seq, g, q_first, q_last, hv);
  if (!usable) {  // zero rows, as kernels/cpu
    zero_tile_rows<kD, Shape::kThreads>(out_base, tile, h, p.num_q_heads, tid);
    return;
  }
  const auto blocks_of = [&](const Span& sp) {
    const int64_t num_rows = static_cast<int64_t>(sp.num_pages()) * hv.page_tokens;
    return static_cast<int32_t>(
        min((num_rows + kBN - 1) / kBN, static_cast<int64_t>(INT32_MAX / kBN - 1)));
  };
  // TMA mode: the head's pool has tensor maps (kv_tma_maps.h) and the span has at least
  // maps.min_blocks key blocks; else the cp.async producer.
  const int32_t box_rows = maps.box_rows[hv.streaming ? 1 : 0];
  const auto tma_mode_of = [&](int32_t blocks) {
    return box_rows > 0 && blocks >= maps.min_blocks;
  };
  // The mode, decided once beside the span (the barrier counts depend on it).
  static_assert(sizeof(Span) <= 12, "the mode flag lives in the span slot's last 4 bytes");
  int32_t* tma_mode_s = reinterpret_cast<int32_t*>(smem + Shape::kOffSpan + 12);
  if (warp == 0) {
    const Span sp = build_span(p, hv, tile.seq, g, q_first, q_last, listed, listed_cap, lane);
    if (lane == 0) {
      *span_s = sp;
      const bool tma = tma_mode_of(blocks_of(sp));
      *tma_mode_s = tma ? 1 : 0;
      // Arrivals per phase: TMA mode one per lane; cp.async two per thread for K (landed +
      // positions), one for V; quantized pages one per thread (their stores precede it).
      const uint32_t k_count = tma ? 32 : (kQ == KvQuant::kNone ? 256 : 128);
      for (int s = 0; s < kStages; ++s) {
        mbar_init(full_k(s), k_count);
        mbar_init(full_v(s), tma ? 32 : 128);
        mbar_init(empty_k(s), 256);
        mbar_init(empty_v(s), 256);
      }
      // The inits visible to the async proxy too (TMA completes its bytes on these barriers).
      asm volatile("fence.mbarrier_init.release.cluster;\n" ::: "memory");
    }
  }
  // Q tile (rows past num_q zero), copied by the 256 consumer threads.
  if (wg > 0) {
    const int t = tid - 128;
    const int r = t / Base::kQRowThreads;
    const bool valid = r < tile.num_q;
    const T* src =
        q_base + (static_cast<int64_t>(tile.token0 + (valid ? r : 0)) * p.num_q_heads + h) * kD;
    for (int c = t % Base::kQRowThreads; c < kChunks; c += Base::kQRowThreads) {
      cp_async_16(sQ + sw128_offset<Base::kBM>(r, c), src + c * 8, valid);
    }
    cp_async_commit();
    cp_async_wait<0>();
    fence_proxy_async();
  }
  __syncthreads();  // span, listed, barrier init, Q
  const Span sp = *span_s;
  const int32_t num_blocks = blocks_of(sp);
  const bool tma_mode = *tma_mode_s != 0;

  if constexpr (kQ != KvQuant::kNone) {
    if (wg == 0) {
      // ---- producer over quantized pages: the whole warpgroup, two threads per row. Each
      // thread copies its half of the row's codes and the row's scale / zero point with cp.async
      // into a staging buffer Staging::kAhead blocks ahead of the block it dequantizes (three
      // buffers: the copies of blocks j + 1 and j + 2 are in flight while block j is
      // dequantized), then dequantizes its own staged bytes in registers (kv_dequant.cuh: one
      // rounding to T, as the mma.sync kernel), stores the chunks into the swizzled tile, makes
      // them visible to wgmma (fence.proxy.async) and arrives. A thread reads back only what it
      // copied itself, so cp.async.wait_group is the only synchronisation the staging needs. ----
      asm volatile("setmaxnreg.dec.sync.aligned.u32 56;\n" ::: "memory");
      using Staging = WsQuantStaging<kD, kQ>;
      constexpr int kRowThreads = 128 / kBN;
      constexpr int kCodeBytes = kQuantCodeBytes<kD, kQ>;
      constexpr int kVecChunks = kQuantVecElems<kQ> / 8;        // 16-byte chunks per code vector
      constexpr int kParamBytes = kQ == KvQuant::kFp8 ? 4 : 8;  // kv_quant_params_per_token floats
      const int my_row = tid / kRowThreads;
      const int32_t pt = hv.page_tokens;
      const int64_t page_bytes = kv_quant_page_bytes(kQ, pt, kD);
      const int64_t params_offset = kv_quant_params_offset(kQ, pt, kD);
      unsigned char* staging = smem + Shape::kOffStaging;
      // Block j's copies into buffer j % kBuffers (an empty group past the last block, so the
      // wait below always leaves kAhead groups pending).
      const auto stage_copies = [&](int32_t j) {
        if (j < num_blocks) {
          const int b = j % Staging::kBuffers;
          const KeyRow kr = locate_row(hv, sp, listed, j * kBN + my_row, kD);
          const bool valid = kr.position >= 0;
          // Storage page * pt + row in page, in 32 bits (paged_attention refuses a quantized pool
          // of 2^31 rows or more, pool_rows_fit):
          // a 64-bit division by the page size costs several times a 32-bit one.
          const uint32_t row = valid ? static_cast<uint32_t>(kr.offset / kD) : 0u;
          const uint32_t page = row / static_cast<uint32_t>(pt);
          const uint32_t in_page = row - page * static_cast<uint32_t>(pt);
          const int64_t code_off = int64_t{page} * page_bytes + int64_t{in_page} * kCodeBytes;
          const int64_t param_off =
              int64_t{page} * page_bytes + params_offset + int64_t{in_page} * kParamBytes;
#pragma unroll
          for (int kv = 0; kv < 2; ++kv) {
            const char* pool = static_cast<const char*>(kv == 0 ? hv.k : hv.v);
#pragma unroll
            for (int c = tid % kRowThreads; c < kCodeBytes / 16; c += kRowThreads) {
              cp_async_16(staging + Staging::code_offset(b, kv, my_row, c),
                          pool + code_off + 16 * c, valid);
            }
            cp_async_params_or_zero<kParamBytes>(staging + Staging::param_offset(b, kv, tid),
                                                 pool + param_off, valid ? 0 : -1);
          }
          *reinterpret_cast<int32_t*>(staging + Staging::pos_offset(b, tid)) = kr.position;
        }
        cp_async_commit();
      };
      const auto dequant_row = [&](int b, int kv, unsigned char* dst) {
        const int32_t position =
            *reinterpret_cast<const int32_t*>(staging + Staging::pos_offset(b, tid));
        const float* params =
            reinterpret_cast<const float*>(staging + Staging::param_offset(b, kv, tid));
        const float scale = params[0];
        const float zero = kQ == KvQuant::kFp8 ? 0.0f : params[kParamBytes / 4 - 1];
        const auto code_vec = [&](int c) {
          return *reinterpret_cast<const uint4*>(staging +
                                                 Staging::code_offset(b, kv, my_row, c));
        };
        // One code vector at a time (the producer has 56 registers), the next one's shared
        // load issued before this one's conversion. Rows past the context or of a missing page
        // need no mask: their copies zero-filled the codes and the parameters, so they
        // dequantize to zeros.
        int c = tid % kRowThreads;
        uint4 w = code_vec(c);
#pragma unroll 1
        for (; c < kCodeBytes / 16; c += kRowThreads) {
          const int next = c + kRowThreads;
          const uint4 w_next = next < kCodeBytes / 16 ? code_vec(next) : w;
          uint4 chunks[kVecChunks];
          dequant_vec16_chunks<kQ, T>(w, scale, zero, true, chunks);
#pragma unroll
          for (int k = 0; k < kVecChunks; ++k) {
            *reinterpret_cast<uint4*>(dst + sw128_offset<kBN>(my_row, c * kVecChunks + k)) =
                chunks[k];
          }
          w = w_next;
        }
        fence_proxy_async();
        return position;
      };
#pragma unroll
      for (int a = 0; a < Staging::kAhead; ++a) stage_copies(a);
      for (int32_t j = 0; j < num_blocks; ++j) {
        const int s = stage_of(j);
        const int b = j % Staging::kBuffers;
        const uint32_t free_parity = parity_of(j) ^ 1u;
        stage_copies(j + Staging::kAhead);
        cp_async_wait<Staging::kAhead>();  // block j's copies landed
        if (j >= kStages) mbar_wait(empty_k(s), free_parity);
        const int32_t position = dequant_row(b, 0, sK + s * Base::kKVBytes);
        if (tid % kRowThreads == 0) kpos[s * kBN + my_row] = position;
        mbar_arrive(full_k(s));
        if (j >= kStages) mbar_wait(empty_v(s), free_parity);
        dequant_row(b, 1, sV + s * Base::kKVBytes);
        mbar_arrive(full_v(s));
      }
      cp_async_wait<0>();
      return;
    }
  }
  if (wg == 0 && !tma_mode) {
    // ---- producer without maps: the whole warpgroup, cp.async, one or two threads per row ----
    asm volatile("setmaxnreg.dec.sync.aligned.u32 56;\n" ::: "memory");
    constexpr int kRowThreads = 128 / kBN;
    const int my_row = tid / kRowThreads;
    const T* k_pool = static_cast<const T*>(hv.k);
    const T* v_pool = static_cast<const T*>(hv.v);
    for (int32_t j = 0; j < num_blocks; ++j) {
      const int s = stage_of(j);
      const uint32_t free_parity = parity_of(j) ^ 1u;
      const KeyRow kr = locate_row(hv, sp, listed, j * kBN + my_row, kD);
      const bool valid = kr.position >= 0;
      if (j >= kStages) mbar_wait(empty_k(s), free_parity);
      {
        const T* src = k_pool + (valid ? kr.offset : 0);
        unsigned char* dst = sK + s * Base::kKVBytes;
        for (int c = tid % kRowThreads; c < kChunks; c += kRowThreads) {
          cp_async_16(dst + sw128_offset<kBN>(my_row, c), src + c * 8, valid);
        }
        if (tid % kRowThreads == 0) kpos[s * kBN + my_row] = kr.position;
        mbar_arrive_cp_async(full_k(s));
        mbar_arrive(full_k(s));
      }
      if (j >= kStages) mbar_wait(empty_v(s), free_parity);
      {
        const T* src = v_pool + (valid ? kr.offset : 0);
        unsigned char* dst = sV + s * Base::kKVBytes;
        for (int c = tid % kRowThreads; c < kChunks; c += kRowThreads) {
          cp_async_16(dst + sw128_offset<kBN>(my_row, c), src + c * 8, valid);
        }
        mbar_arrive_cp_async(full_v(s));
      }
    }
    asm volatile("cp.async.wait_all;\n" ::: "memory");
    return;
  }
  if (wg == 0) {
    // ---- producer with maps: warp 0 alone (warps 1..3 leave once the registers are handed
    // over) ----
    asm volatile("setmaxnreg.dec.sync.aligned.u32 56;\n" ::: "memory");
    if (warp != 0) return;
    const int pool = hv.streaming ? 1 : 0;
    const CUtensorMap* k_map = &maps.k[pool];
    const CUtensorMap* v_map = &maps.v[pool];
    const T* k_pool = static_cast<const T*>(hv.k);
    const T* v_pool = static_cast<const T*>(hv.v);
    // Copies rows lane and lane + 32 of a block with cp.async (invalid rows zero-filled) and
    // arrives on `full` when they land (the arrival does not count against the barrier's 32).
    const auto copy_rows = [&](const T* pool_base, unsigned char* dst, const KeyRow& ra,
                               const KeyRow& rb, uint32_t full) {
      const T* src_a = pool_base + (ra.position >= 0 ? ra.offset : 0);
      const T* src_b = pool_base + (rb.position >= 0 ? rb.offset : 0);
#pragma unroll
      for (int c = 0; c < kChunks; ++c) {
        cp_async_16(dst + sw128_offset<kBN>(lane, c), src_a + c * 8, ra.position >= 0);
        cp_async_16(dst + sw128_offset<kBN>(lane + 32, c), src_b + c * 8, rb.position >= 0);
      }
      mbar_arrive_cp_async_inc(full);
    };
    // One TMA per box: box i of the block starts at block row i * box_rows, whose pool row is
    // that row's offset / kD (the rows of a box are consecutive rows of one head-page).
    const auto load_boxes = [&](const CUtensorMap* map, uint32_t dst, const KeyRow& ra,
                                const KeyRow& rb, uint32_t full) {
      for (int32_t r0 = 0; r0 < kBN; r0 += box_rows) {
        const int64_t off = r0 < 32 ? ra.offset : rb.offset;
        const int32_t y = __shfl_sync(0xffffffffu, static_cast<int32_t>(off / kD), r0 % 32);
        if (lane == 0) {
#pragma unroll
          for (int panel = 0; panel < kD / 64; ++panel) {
            tma_load_2d(dst + panel * kBN * 128 + r0 * 128, map, 64 * panel, y, full);
          }
        }
      }
    };
    for (int32_t j = 0; j < num_blocks; ++j) {
      const int s = stage_of(j);
      // The stage's previous block (j - kStages) released it: the phase of that block's parity.
      const uint32_t free_parity = parity_of(j) ^ 1u;
      const KeyRow ra = locate_row(hv, sp, listed, j * kBN + lane, kD);
      const KeyRow rb = locate_row(hv, sp, listed, j * kBN + 32 + lane, kD);
      // TMA reads whole boxes, so only blocks whose 64 rows are all valid (rows past kv_len or
      // of a missing page hold anything, NaN included, and cp.async zero-fills them).
      const bool tma = __all_sync(0xffffffffu, ra.position >= 0 && rb.position >= 0);
      if (j >= kStages) mbar_wait(empty_k(s), free_parity);
      kpos[s * kBN + lane] = ra.position;
      kpos[s * kBN + 32 + lane] = rb.position;
      if (tma) {
        // Lane 0's arrival announces the block's bytes first, so the phase waits for them.
        if (lane == 0) {
          mbar_arrive_expect_tx(full_k(s), Base::kKVBytes);
        } else {
          mbar_arrive(full_k(s));
        }
        load_boxes(k_map, sK_addr + s * Base::kKVBytes, ra, rb, full_k(s));
      } else {
        copy_rows(k_pool, sK + s * Base::kKVBytes, ra, rb, full_k(s));
        mbar_arrive(full_k(s));
      }
      if (j >= kStages) mbar_wait(empty_v(s), free_parity);
      if (tma) {
        if (lane == 0) {
          mbar_arrive_expect_tx(full_v(s), Base::kKVBytes);
        } else {
          mbar_arrive(full_v(s));
        }
        load_boxes(v_map, sV_addr + s * Base::kKVBytes, ra, rb, full_v(s));
      } else {
        copy_rows(v_pool, sV + s * Base::kKVBytes, ra, rb, full_v(s));
        mbar_arrive(full_v(s));
      }
    }
    asm volatile("cp.async.wait_all;\n" ::: "memory");
    return;
  }

  // ---- consumers ----
  asm volatile("setmaxnreg.inc.sync.aligned.u32 224;\n" ::: "memory");
  const int cwg = wg - 1;  // consumer warpgroup: rows 64 cwg .. 64 cwg + 63
  const int cwarp = warp - 4;
  const int wg_row0 = 64 * cwg;
  const int warp_row0 = wg_row0 + 16 * (cwarp % 4);
  const int64_t wq_min = q_first + warp_row0;
  const int64_t wq_max = q_first + min(warp_row0 + 15, tile.num_q - 1);
  const int row_a = warp_row0 + lane / 4;
  const int64_t q_pos0 = q_first + row_a;
  const int64_t q_pos1 = q_pos0 + 8;
  const float scale_log2 = p.scale * 1.4426950408889634f;

  float o[kORegs];
#pragma unroll
  for (int i = 0; i < kORegs; ++i) o[i] = 0.0f;
  float m0 = -INFINITY, m1 = -INFINITY, l0 = 0.0f, l1 = 0.0f;
  float s[kSRegs];
  uint32_t pf[kPVSteps][4];

  auto wait_k = [&](int32_t j) {
    mbar_wait(full_k(stage_of(j)), parity_of(j));
    fence_proxy_async();
  };
  auto wait_v = [&](int32_t j) {
    mbar_wait(full_v(stage_of(j)), parity_of(j));
    fence_proxy_async();
  };
  using Math = WgmmaTileMath<kD, kBN, T>;
  const typename Math::Rows rows{q_pos0, q_pos1, wq_min, wq_max, scale_log2};
  auto issue_s = [&](int32_t j) {
    Math::template issue_s<Base::kBM>(s, sQ_addr, wg_row0, sK_addr + stage_of(j) * Base::kKVBytes);
  };
  auto issue_pv = [&](int32_t j) { Math::issue_pv(o, pf, sV_addr + stage_of(j) * Base::kKVBytes); };
  auto softmax = [&](int32_t j, float& alpha0, float& alpha1) {
    Math::softmax(s, kpos + stage_of(j) * kBN, hv, lane, rows, m0, m1, l0, l1, alpha0, alpha1);
  };
  auto rescale = [&](float alpha0, float alpha1) { Math::rescale(o, alpha0, alpha1); };
  auto pack = [&]() { Math::pack(pf, s); };

  // The loop of prefill_wgmma_kernel, with the barriers replaced by the stage mbarriers (and, with
  // kPingPong, each iteration's wgmmas issued in turns).
  if constexpr (kPingPong) {
    if (cwg == 0) asm volatile("bar.arrive 3, 256;\n" ::: "memory");  // A's first turn
  }
  if (num_blocks > 0) {
    float alpha0, alpha1;
    wait_k(0);
    wgmma_fence();
    issue_s(0);
    wgmma_wait<0>();
    wgmma_hold(s);
    softmax(0, alpha0, alpha1);
    mbar_arrive(empty_k(0));  // S_0 done, positions read
    pack();
    for (int32_t j = 1; j < num_blocks; ++j) {
      wait_k(j);
      wait_v(j - 1);
      if constexpr (kPingPong) pingpong_take_turn(cwg);
      wgmma_fence();
      issue_s(j);
      rescale(alpha0, alpha1);
      wgmma_fence();
      issue_pv(j - 1);
      if constexpr (kPingPong) pingpong_pass_turn(cwg);
      wgmma_wait<1>();  // S_j done
      wgmma_hold(s);
      softmax(j, alpha0, alpha1);
      mbar_arrive(empty_k(stage_of(j)));
      wgmma_wait<0>();  // P_{j-1} V_{j-1} done
      wgmma_hold(o);
      mbar_arrive(empty_v(stage_of(j - 1)));
      pack();
    }
    wait_v(num_blocks - 1);
    rescale(alpha0, alpha1);
    wgmma_fence();
    issue_pv(num_blocks - 1);
    wgmma_wait<0>();
    wgmma_hold(o);
  }
  if constexpr (kPingPong) {
    // Completes barrier 3's last phase (B's last hand-over, or A's own first arrival when no turn
    // was taken), so no named-barrier phase is left open at exit.
    if (cwg == 0) asm volatile("bar.sync 3, 256;\n" ::: "memory");
  }

  l0 += __shfl_xor_sync(0xffffffffu, l0, 1);
  l0 += __shfl_xor_sync(0xffffffffu, l0, 2);
  l1 += __shfl_xor_sync(0xffffffffu, l1, 1);
  l1 += __shfl_xor_sync(0xffffffffu, l1, 2);
  const float inv0 = l0 > 0.0f ? 1.0f / l0 : 0.0f;
  const float inv1 = l1 > 0.0f ? 1.0f / l1 : 0.0f;
  if (cwg == 0) {
    asm volatile("bar.sync 1, 128;\n" ::: "memory");
  } else {
    asm volatile("bar.sync 2, 128;\n" ::: "memory");
  }
  const int valid_rows = min(16, tile.num_q - warp_row0);
  if (valid_rows <= 0) return;
#pragma unroll
  for (int j = 0; j < kD / 8; ++j) {
    const uint32_t in_chunk = 4 * (lane % 4);
    *reinterpret_cast<uint32_t*>(sQ + sw128_offset<Base::kBM>(row_a, j) + in_chunk) =
        pack2<T>(o[4 * j] * inv0, o[4 * j + 1] * inv0);
    *reinterpret_cast<uint32_t*>(sQ + sw128_offset<Base::kBM>(row_a + 8, j) + in_chunk) =
        pack2<T>(o[4 * j + 2] * inv1, o[4 * j + 3] * inv1);
  }
  __syncwarp();
  for (int i = lane; i < valid_rows * kChunks; i += 32) {
    const int r = i / kChunks, c = i % kChunks;
    *reinterpret_cast<uint4*>(
        out_base + (static_cast<int64_t>(tile.token0 + warp_row0 + r) * p.num_q_heads + h) * kD +
        c * 8) = *reinterpret_cast<const uint4*>(sQ + sw128_offset<Base::kBM>(warp_row0 + r, c));
  }
}

}  // namespace ls::kernels::cuda
