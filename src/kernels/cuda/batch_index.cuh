#pragma once
// Internal to kernels/cuda: where a token sits in a batch described by q_indptr / kv_lens
// (device arrays), found on the device so no launch needs the host to know the lengths.

#include <cstdint>

namespace ls::kernels::cuda {

struct TokenPlace {
  int32_t seq = -1;     // -1: the token belongs to no sequence (or the batch is malformed)
  int32_t q_begin = 0;  // first row of the sequence's queries
  int32_t q_len = 0;
  int64_t position = 0;  // absolute position: kv_len - q_len + (token - q_begin)
};

// The sequence s with q_indptr[s] <= token < q_indptr[s + 1] by binary search (empty sequences
// are skipped naturally), and the token's absolute position. Rejects inconsistent lengths
// (negative first position) the way kernels/cpu does: such tokens get seq = -1.
__device__ inline TokenPlace place_token(const int32_t* q_indptr, const int32_t* kv_lens,
                                         int32_t num_seqs, int32_t token) {
  TokenPlace p;
  int32_t lo = 0, hi = num_seqs - 1;
  while (lo < hi) {  // largest s with q_indptr[s] <= token
    const int32_t mid = (lo + hi + 1) / 2;
    if (q_indptr[mid] <= token) {
      lo = mid;
    } else {
      hi = mid - 1;
    }
  }
  const int32_t begin = q_indptr[lo], end = q_indptr[lo + 1];
  if (num_seqs <= 0 || token < begin || token >= end) return p;
  const int64_t first = static_cast<int64_t>(kv_lens[lo]) - (end - begin);
  if (first < 0) return p;
  p.seq = lo;
  p.q_begin = begin;
  p.q_len = end - begin;
  p.position = first + (token - begin);
  return p;
}

// Device twin of kernels/paged_kv.h's streaming_table_index: the column of a streaming block-table
// row that holds logical page `logical_page` (sink pages first, then the ring).
__device__ __forceinline__ int32_t ring_table_index(int32_t logical_page, int32_t num_sink_pages,
                                                    int32_t ring_pages) {
  return logical_page < num_sink_pages
             ? logical_page
             : num_sink_pages + (logical_page - num_sink_pages) % ring_pages;
}

}  // namespace ls::kernels::cuda
