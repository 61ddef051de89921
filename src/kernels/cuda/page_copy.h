#pragma once
// The page-copy gather kernel (kernels/page_copy.h, method kGatherKernel): SparseServe's FlashH2D.
// One launch of a bounded number of thread blocks copies every listed page with 16-byte loads
// and stores; either side may be device memory or pinned host memory read or written through
// unified virtual addressing, so one kernel serves retrieve (host -> device), save (device ->
// host) and moves inside the device cache. The count and both index lists are read by the kernel,
// so one recorded launch serves any count <= max_pages.

#include <cuda_runtime_api.h>

#include <cstdint>

#include "core/status.h"
#include "kernels/page_copy.h"

namespace ls::kernels::cuda {

// Threads per block of the gather kernel (8 warps; each warp moves 4 KB chunks of a page).
inline constexpr int kPageCopyThreads = 256;

// Enqueues the gather kernel on `stream`. Every pointer in `params` must be readable (sources,
// index lists, num_pages_device) or writable (destinations) by the device: device memory, or
// the device address of pinned host memory (identical to the host address under UVA). Checked on
// the host: num_arrays, page_bytes and strides (multiples of 16, strides >= page_bytes), 16-byte
// aligned array bases, a host count inside [0, max_pages]. Checked by the kernel: a device count
// outside [0, max_pages] copies nothing, an index < 0 or >= its capacity (when given) skips its
// page; both set *error_flag = 1 when error_flag is not null (a word the host reads after the
// stream drained, e.g. mapped pinned memory). Blocks: min(max_sms (or num_sms when <= 0),
// num_sms, what max_pages can use).
Status page_copy_gather(const PageCopyParams& params, int num_sms, int32_t* error_flag,
                        cudaStream_t stream);

// The number of thread blocks page_copy_gather launches for `params` (0: nothing to do).
int page_copy_gather_blocks(const PageCopyParams& params, int num_sms);

}  // namespace ls::kernels::cuda
