#include "kernels/cuda/kv_tma_maps.h"

#include <cuda_runtime_api.h>

#include <cstdint>
#include <cstring>

namespace ls::kernels::cuda {
namespace {

using EncodeTiled = CUresult (*)(CUtensorMap*, CUtensorMapDataType, cuuint32_t, void*,
                                 const cuuint64_t*, const cuuint64_t*, const cuuint32_t*,
                                 const cuuint32_t*, CUtensorMapInterleave, CUtensorMapSwizzle,
                                 CUtensorMapL2promotion, CUtensorMapFloatOOBfill);

// cuTensorMapEncodeTiled through the runtime's driver entry point: no link to libcuda.
EncodeTiled encode_tiled() {
  static const EncodeTiled fn = [] {
    void* f = nullptr;
    cudaDriverEntryPointQueryResult found{};
    if (cudaGetDriverEntryPointByVersion("cuTensorMapEncodeTiled", &f, 12000, cudaEnableDefault,
                                         &found) != cudaSuccess ||
        found != cudaDriverEntryPointSuccess) {
      (void)cudaGetLastError();
      f = nullptr;
    }
    return reinterpret_cast<EncodeTiled>(f);
  }();
  return fn;
}

// The pool's rows: storage pages (head-pages, or the tier's cache slots) x page_tokens.
int64_t pool_rows(const PagedKvPool& pool) {
  const int64_t pages = pool.page_slot != nullptr ? int64_t{pool.num_cache_slots}
                                                  : int64_t{pool.num_blocks} * pool.heads_per_block;
  return pages * pool.page_tokens;
}

Status encode(EncodeTiled fn, const PagedKvPool& pool, void* base, int64_t rows, int32_t box_rows,
              CUtensorMap& map) {
  const cuuint64_t dims[2] = {static_cast<cuuint64_t>(pool.head_dim),
                              static_cast<cuuint64_t>(rows)};
  const cuuint64_t strides[1] = {static_cast<cuuint64_t>(pool.head_dim) * 2};
  const cuuint32_t box[2] = {64, static_cast<cuuint32_t>(box_rows)};
  const cuuint32_t elem_strides[2] = {1, 1};
  const CUresult r = fn(&map,
                        pool.dtype == DType::kBF16 ? CU_TENSOR_MAP_DATA_TYPE_BFLOAT16
                                                   : CU_TENSOR_MAP_DATA_TYPE_FLOAT16,
                        2, base, dims, strides, box, elem_strides, CU_TENSOR_MAP_INTERLEAVE_NONE,
                        CU_TENSOR_MAP_SWIZZLE_128B, CU_TENSOR_MAP_L2_PROMOTION_L2_256B,
                        CU_TENSOR_MAP_FLOAT_OOB_FILL_NONE);
  if (r != CUDA_SUCCESS) {
    return internal_error("attention: cuTensorMapEncodeTiled failed ({}) for a pool of {} rows",
                          static_cast<int>(r), rows);
  }
  return {};
}

}  // namespace

int32_t kv_tma_box_rows(const PagedKvPool& pool) {
  if (pool.k == nullptr || pool.v == nullptr || pool.quant != KvQuant::kNone) return 0;
  if (pool.dtype != DType::kBF16 && pool.dtype != DType::kF16) return 0;
  if (pool.head_dim != 64 && pool.head_dim != 128) return 0;
  const int32_t pt = pool.page_tokens;
  if (pt < 8 || (pt % 64 != 0 && 64 % pt != 0)) return 0;
  const int64_t rows = pool_rows(pool);
  if (rows <= 0 || rows > INT32_MAX) return 0;
  if ((reinterpret_cast<uintptr_t>(pool.k) | reinterpret_cast<uintptr_t>(pool.v)) % 16 != 0) {
    return 0;
  }
  return pt < 64 ? pt : 64;
}

Status make_kv_tma_maps(const AttentionParams& p, bool enabled, int32_t min_blocks,
                        KvTmaMaps& maps) {
  std::memset(static_cast<void*>(&maps), 0, sizeof(maps));
  maps.min_blocks = min_blocks;
  if (!enabled) return {};
  const EncodeTiled fn = encode_tiled();
  if (fn == nullptr) return {};  // a driver without TMA maps: cp.async everywhere
  const PagedKvPool* pools[2] = {&p.retrieval, &p.streaming};
  for (int i = 0; i < 2; ++i) {
    const PagedKvPool& pool = *pools[i];
    const int32_t box_rows = kv_tma_box_rows(pool);
    if (box_rows == 0) continue;
    const int64_t rows = pool_rows(pool);
    LS_RETURN_IF_ERROR(encode(fn, pool, pool.k, rows, box_rows, maps.k[i]));
    LS_RETURN_IF_ERROR(encode(fn, pool, pool.v, rows, box_rows, maps.v[i]));
    maps.box_rows[i] = box_rows;
  }
  return {};
}

}  // namespace ls::kernels::cuda
