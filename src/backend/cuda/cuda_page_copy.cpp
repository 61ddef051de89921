// CudaBackend::copy_pages: the page transfers of the hierarchical KV memory (kernels/page_copy.h)
// by method. The gather kernel takes its lists and count from device-readable memory (device or
// mapped pinned host memory, so one recorded launch serves any count); the two memcpy methods
// read host lists and a host count and hand every page to the copy engines. Bad params are
// reported (take_error) and the op skipped; indices the gather kernel reads from device memory
// are checked there and reported at the next synchronize().

#include <cuda_runtime_api.h>

#include <cstdint>
#include <vector>

#include "backend/cuda/cuda_backend.h"
#include "kernels/cuda/check.h"
#include "kernels/cuda/page_copy.h"

namespace ls {

namespace {

using kernels::PageCopyMethod;
using kernels::PageCopyParams;
using kernels::cuda::cuda_status;

// The device address of `p` (device memory, or pinned host memory mapped into the device's
// address space); an error for pageable or unmapped host memory, which a kernel cannot read.
Result<void*> device_address(const void* p, const char* what) {
  cudaPointerAttributes attr{};
  if (cudaPointerGetAttributes(&attr, p) != cudaSuccess) {
    cudaGetLastError();
    attr.type = cudaMemoryTypeUnregistered;
  }
  if ((attr.type == cudaMemoryTypeDevice || attr.type == cudaMemoryTypeHost) &&
      attr.devicePointer != nullptr) {
    return attr.devicePointer;
  }
  return invalid_argument(
      "copy_pages: {} is {}; the gather kernel reads and writes only device memory and pinned "
      "host memory (Backend::allocate)",
      what,
      attr.type == cudaMemoryTypeHost ? "pinned host memory not mapped into the device"
                                      : "pageable host memory");
}

bool host_readable(const void* p) {
  cudaPointerAttributes attr{};
  if (cudaPointerGetAttributes(&attr, p) != cudaSuccess) {
    cudaGetLastError();
    return true;  // unregistered host memory
  }
  return attr.type != cudaMemoryTypeDevice;
}

Status check_common(const PageCopyParams& p) {
  if (p.num_arrays < 1 || p.num_arrays > kernels::kMaxPageArrays) {
    return invalid_argument("copy_pages: num_arrays {} outside [1, {}]", p.num_arrays,
                            kernels::kMaxPageArrays);
  }
  if (p.page_bytes <= 0 || p.src_stride_bytes < p.page_bytes || p.dst_stride_bytes < p.page_bytes) {
    return invalid_argument("copy_pages: page_bytes {} must be > 0 and <= both strides ({}, {})",
                            p.page_bytes, p.src_stride_bytes, p.dst_stride_bytes);
  }
  if (p.max_pages < 0) return invalid_argument("copy_pages: max_pages {} < 0", p.max_pages);
  if (p.num_pages_device == nullptr && (p.num_pages < 0 || p.num_pages > p.max_pages)) {
    return invalid_argument("copy_pages: {} pages outside [0, max_pages = {}]", p.num_pages,
                            p.max_pages);
  }
  return {};
}

// The memcpy methods: host count and host lists, every index checked here.
Status check_host_lists(const PageCopyParams& p) {
  if (p.num_pages_device != nullptr) {
    return invalid_argument(
        "copy_pages: the memcpy methods read num_pages on the host; "
        "num_pages_device is for the gather kernel");
  }
  if (p.num_pages == 0) return {};
  if (p.src_pages == nullptr || p.dst_pages == nullptr) {
    return invalid_argument("copy_pages: index lists missing");
  }
  if (!host_readable(p.src_pages) || !host_readable(p.dst_pages)) {
    return invalid_argument("copy_pages: the memcpy methods need index lists in host memory");
  }
  for (int a = 0; a < p.num_arrays; ++a) {
    if (p.src[a] == nullptr || p.dst[a] == nullptr) {
      return invalid_argument("copy_pages: array {} has no source or destination", a);
    }
  }
  for (int32_t i = 0; i < p.num_pages; ++i) {
    const int32_t s = p.src_pages[i], d = p.dst_pages[i];
    if (s < 0 || d < 0 || (p.src_capacity_pages > 0 && s >= p.src_capacity_pages) ||
        (p.dst_capacity_pages > 0 && d >= p.dst_capacity_pages)) {
      return invalid_argument("copy_pages: page {} is out of range ({} -> {}; capacities {}, {})",
                              i, s, d, p.src_capacity_pages, p.dst_capacity_pages);
    }
  }
  return {};
}

const char* src_page(const PageCopyParams& p, int a, int32_t i) {
  return static_cast<const char*>(p.src[a]) + p.src_pages[i] * p.src_stride_bytes;
}

char* dst_page(const PageCopyParams& p, int a, int32_t i) {
  return static_cast<char*>(p.dst[a]) + p.dst_pages[i] * p.dst_stride_bytes;
}

}  // namespace

Status CudaBackend::copy_pages_on(const PageCopyParams& p, cudaStream_t stream,
                                  int32_t* error_flag) {
  LS_RETURN_IF_ERROR(check_common(p));
  switch (p.method) {
    case PageCopyMethod::kGatherKernel: {
      if (kernels::cuda::page_copy_gather_blocks(p, num_sms_) == 0) return {};
      PageCopyParams d = p;
      for (int a = 0; a < p.num_arrays; ++a) {
        if (p.src[a] == nullptr || p.dst[a] == nullptr) {
          return invalid_argument("copy_pages: array {} has no source or destination", a);
        }
        LS_ASSIGN_OR_RETURN(void* s, device_address(p.src[a], "a source array"));
        LS_ASSIGN_OR_RETURN(d.dst[a], device_address(p.dst[a], "a destination array"));
        d.src[a] = s;
      }
      if (p.src_pages == nullptr || p.dst_pages == nullptr) {
        return invalid_argument("copy_pages: index lists missing");
      }
      LS_ASSIGN_OR_RETURN(void* sl, device_address(p.src_pages, "src_pages"));
      LS_ASSIGN_OR_RETURN(void* dl, device_address(p.dst_pages, "dst_pages"));
      d.src_pages = static_cast<const int32_t*>(sl);
      d.dst_pages = static_cast<const int32_t*>(dl);
      if (p.num_pages_device != nullptr) {
        LS_ASSIGN_OR_RETURN(void* c, device_address(p.num_pages_device, "num_pages_device"));
        d.num_pages_device = static_cast<const int32_t*>(c);
      }
      return kernels::cuda::page_copy_gather(d, num_sms_, error_flag, stream);
    }
    case PageCopyMethod::kMemcpyBatch: {
      LS_RETURN_IF_ERROR(check_host_lists(p));
      if (p.num_pages == 0) return {};
      const size_t n = static_cast<size_t>(p.num_pages) * static_cast<size_t>(p.num_arrays);
      batch_dsts_.resize(n);
      batch_srcs_.resize(n);
      batch_sizes_.assign(n, static_cast<size_t>(p.page_bytes));
      size_t k = 0;
      for (int32_t i = 0; i < p.num_pages; ++i) {
        for (int a = 0; a < p.num_arrays; ++a, ++k) {
          batch_dsts_[k] = dst_page(p, a, i);
          batch_srcs_[k] = src_page(p, a, i);
        }
      }
      cudaMemcpyAttributes attr{};
      attr.srcAccessOrder = cudaMemcpySrcAccessOrderStream;
      size_t attr_index = 0;
      return cuda_status(
          cudaMemcpyBatchAsync(batch_dsts_.data(), batch_srcs_.data(), batch_sizes_.data(), n,
                               &attr, &attr_index, 1, stream),
          "cudaMemcpyBatchAsync");
    }
    case PageCopyMethod::kPerPageMemcpy: {
      LS_RETURN_IF_ERROR(check_host_lists(p));
      for (int32_t i = 0; i < p.num_pages; ++i) {
        for (int a = 0; a < p.num_arrays; ++a) {
          LS_RETURN_IF_ERROR(cuda_status(
              cudaMemcpyAsync(dst_page(p, a, i), src_page(p, a, i),
                              static_cast<size_t>(p.page_bytes), cudaMemcpyDefault, stream),
              "cudaMemcpyAsync"));
        }
      }
      return {};
    }
  }
  return invalid_argument("copy_pages: unknown method {}", static_cast<int>(p.method));
}

void CudaBackend::copy_pages(const PageCopyParams& params) {
  if (!capturing_ && copy_fault_.trip()) {
    report(internal_error("copy_pages: injected fault (LONGSERVE_FAULT_COPY_PAGES={}): the "
                          "transfer failed, nothing was copied",
                          copy_fault_.at()),
           "copy_pages");
    return;
  }
  report(copy_pages_on(params, stream_, copy_flag_device_), "copy_pages");
}

Result<int64_t> CudaBackend::save_pages(const PageCopyParams& p) {
  if (capturing_) {
    return failed_precondition("save_pages cannot be recorded: call it outside a capture");
  }
  LS_RETURN_IF_ERROR(check_common(p));
  LS_RETURN_IF_ERROR(check_host_lists(p));
  if (p.page_bytes % 16 != 0 || p.src_stride_bytes % 16 != 0 || p.dst_stride_bytes % 16 != 0) {
    return invalid_argument(
        "save_pages: page_bytes ({}) and strides ({}, {}) must be multiples "
        "of 16",
        p.page_bytes, p.src_stride_bytes, p.dst_stride_bytes);
  }
  if (!saver_) {
    LS_ASSIGN_OR_RETURN(saver_, PageSaver::create(save_options_, device_, num_sms_));
  }
  PageCopyParams d = p;
  if (p.num_pages > 0) {
    const bool direct = save_options_.method == PageSaveMethod::kGatherKernel;
    for (int a = 0; a < p.num_arrays; ++a) {
      LS_ASSIGN_OR_RETURN(void* s, device_address(p.src[a], "a source array"));
      d.src[a] = s;
      if (direct) {
        LS_ASSIGN_OR_RETURN(d.dst[a], device_address(p.dst[a], "a destination array"));
      } else if (!host_readable(p.dst[a])) {
        return invalid_argument("save_pages: destinations must be host memory");
      }
    }
  }
  return saver_->save(d, stream_);
}

int64_t CudaBackend::saves_completed() {
  return saver_ ? saver_->completed() : 0;
}

Status CudaBackend::wait_saves(int64_t ticket) {
  if (!saver_) {
    return ticket <= 0 ? Status{} : invalid_argument("wait_saves: no save was issued");
  }
  return saver_->wait(ticket);
}

Status CudaBackend::set_save_options(const PageSaveOptions& options) {
  Status s;
  if (saver_) s = saver_->wait(saver_->issued());
  saver_.reset();  // tickets restart from 1 with the next saver
  save_options_ = options;
  return s;
}

Status CudaBackend::take_copy_flag(int32_t* flag) {
  if (flag == nullptr || *reinterpret_cast<volatile int32_t*>(flag) == 0) return {};
  *reinterpret_cast<volatile int32_t*>(flag) = 0;
  return invalid_argument(
      "copy_pages: a page count or index read from device memory was out of range; the gather "
      "kernel skipped those pages");
}

}  // namespace ls
