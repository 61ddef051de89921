#include "model/fp8_weights.h"

#include <fmt/format.h>

#include <algorithm>
#include <cmath>
#include <cstring>
#include <string>
#include <string_view>
#include <thread>
#include <vector>

#include "core/fp8.h"

namespace ls {

namespace {

int64_t ceil_div(int64_t a, int64_t b) { return (a + b - 1) / b; }

// The scale tensor's values as f32 after checking its shape against the layout; `grid` gets the
// number of scale rows and columns (1 x 1 for a tensor scale, rows x 1 for channel scales).
Result<std::vector<float>> read_scales(const Checkpoint& ckpt, const Fp8CheckpointFormat& f,
                                       std::string_view weight_name, int64_t rows, int64_t cols,
                                       int64_t& grid_rows, int64_t& grid_cols) {
  const std::string name = fp8_scale_name(f, weight_name);
  const TensorInfo* t = ckpt.find(name);
  if (t == nullptr) {
    return not_found("{} is stored in FP8 but its scale tensor {} is missing from {}", weight_name,
                     name, ckpt.dir().string());
  }
  if (!t->dtype || (*t->dtype != DType::kF32 && *t->dtype != DType::kBF16 &&
                    *t->dtype != DType::kF16)) {
    return invalid_argument("{} in {} has dtype {}, expected F32, BF16 or F16", name, t->file,
                            safetensors_dtype_name(t->file_dtype));
  }
  const int64_t n = t->numel();
  bool ok = false;
  switch (f.layout) {
    case Fp8ScaleLayout::kTensor:
      grid_rows = grid_cols = 1;
      ok = n == 1 && t->shape.size() <= 2;
      break;
    case Fp8ScaleLayout::kChannel:
      grid_rows = rows;
      grid_cols = 1;
      ok = (t->shape == std::vector<int64_t>{rows, 1}) || (t->shape == std::vector<int64_t>{rows});
      break;
    case Fp8ScaleLayout::kBlock:
      grid_rows = ceil_div(rows, f.block_rows);
      grid_cols = ceil_div(cols, f.block_cols);
      ok = t->shape == std::vector<int64_t>{grid_rows, grid_cols};
      break;
  }
  if (!ok) {
    std::string shape;
    for (int64_t d : t->shape) shape += (shape.empty() ? "" : ", ") + std::to_string(d);
    return invalid_argument("{} in {} has shape [{}]; {} {} scales of a [{}, {}] weight are {}",
                            name, t->file, shape, f.method, fp8_layout_name(f.layout), rows, cols,
                            f.layout == Fp8ScaleLayout::kTensor    ? std::string("[] or [1]")
                            : f.layout == Fp8ScaleLayout::kChannel ? fmt::format("[{}, 1]", rows)
                                                                   : fmt::format("[{}, {}]", grid_rows,
                                                                                 grid_cols));
  }
  std::vector<uint8_t> raw(static_cast<size_t>(t->nbytes));
  std::memcpy(raw.data(), t->data, raw.size());
  std::vector<float> s(static_cast<size_t>(n));
  convert_to_f32(*t->dtype, raw.data(), s.data(), n);
  for (float v : s) {
    if (!std::isfinite(v) || v <= 0.0f) {
      return invalid_argument("{} in {} holds a scale {} (scales must be finite and positive)",
                              name, t->file, v);
    }
  }
  return s;
}

Result<const TensorInfo*> fp8_weight(const Checkpoint& ckpt, std::string_view name, int64_t rows,
                                     int64_t cols) {
  LS_ASSIGN_OR_RETURN(const TensorInfo* t, ckpt.get(name));
  if (t->file_dtype != SafetensorsDType::kF8E4M3 ||
      t->shape != std::vector<int64_t>{rows, cols}) {
    return invalid_argument("{} in {} must be F8_E4M3 [{}, {}]", name, t->file, rows, cols);
  }
  return t;
}

}  // namespace

std::string fp8_scale_name(const Fp8CheckpointFormat& format, std::string_view weight_name) {
  std::string_view base = weight_name;
  if (base.size() >= 6 && base.substr(base.size() - 6) == "weight") {
    base.remove_suffix(6);
  }
  return std::string(base) + format.scale_suffix;
}

bool is_fp8_tensor(const Checkpoint& ckpt, std::string_view weight_name) {
  const TensorInfo* t = ckpt.find(weight_name);
  return t != nullptr && t->file_dtype == SafetensorsDType::kF8E4M3;
}

Result<std::vector<float>> read_fp8_dequantized(const Checkpoint& ckpt,
                                                const Fp8CheckpointFormat& f,
                                                std::string_view name, int64_t rows, int64_t cols) {
  LS_ASSIGN_OR_RETURN(const TensorInfo* t, fp8_weight(ckpt, name, rows, cols));
  int64_t gr = 0, gc = 0;
  LS_ASSIGN_OR_RETURN(std::vector<float> s, read_scales(ckpt, f, name, rows, cols, gr, gc));
  const auto* codes = static_cast<const uint8_t*>(t->data);
  float lut[256];
  for (int c = 0; c < 256; ++c) lut[c] = e4m3_to_f32(static_cast<uint8_t>(c));
  std::vector<float> out(static_cast<size_t>(rows * cols));
  for (int64_t r = 0; r < rows; ++r) {
    const int64_t sr = f.layout == Fp8ScaleLayout::kTensor    ? 0
                       : f.layout == Fp8ScaleLayout::kChannel ? r
                                                              : r / f.block_rows;
    for (int64_t c = 0; c < cols; ++c) {
      const int64_t sc = f.layout == Fp8ScaleLayout::kBlock ? c / f.block_cols : 0;
      const float v = lut[codes[r * cols + c]];
      if (std::isnan(v)) {
        return invalid_argument("{} in {} holds a NaN at [{}, {}]", name, t->file, r, c);
      }
      out[static_cast<size_t>(r * cols + c)] = v * s[static_cast<size_t>(sr * gc + sc)];
    }
  }
  return out;
}

Result<Fp8Rows> read_fp8_rows(const Checkpoint& ckpt, const Fp8CheckpointFormat& f,
                              std::string_view name, int64_t rows, int64_t cols) {
  if (f.layout == Fp8ScaleLayout::kBlock) {
    LS_ASSIGN_OR_RETURN(std::vector<float> w, read_fp8_dequantized(ckpt, f, name, rows, cols));
    return quantize_fp8_rows(w.data(), rows, cols);
  }
  LS_ASSIGN_OR_RETURN(const TensorInfo* t, fp8_weight(ckpt, name, rows, cols));
  int64_t gr = 0, gc = 0;
  LS_ASSIGN_OR_RETURN(std::vector<float> s, read_scales(ckpt, f, name, rows, cols, gr, gc));
  Fp8Rows out;
  out.codes.resize(static_cast<size_t>(rows * cols));
  std::memcpy(out.codes.data(), t->data, out.codes.size());
  for (size_t i = 0; i < out.codes.size(); ++i) {
    if ((out.codes[i] & 0x7fu) == 0x7fu) {
      return invalid_argument("{} in {} holds a NaN at [{}, {}]", name, t->file,
                              static_cast<int64_t>(i) / cols, static_cast<int64_t>(i) % cols);
    }
  }
  out.scales.resize(static_cast<size_t>(rows));
  for (int64_t r = 0; r < rows; ++r) {
    out.scales[static_cast<size_t>(r)] = s[f.layout == Fp8ScaleLayout::kTensor ? 0 : static_cast<size_t>(r)];
  }
  return out;
}

Fp8Rows quantize_fp8_rows(const float* x, int64_t rows, int64_t cols) {
  Fp8Rows out;
  out.codes.resize(static_cast<size_t>(rows * cols));
  out.scales.resize(static_cast<size_t>(rows));
  const auto quantize = [&](int64_t begin, int64_t end) {
    for (int64_t r = begin; r < end; ++r) {
      out.scales[static_cast<size_t>(r)] =
          quantize_row_e4m3(x + r * cols, cols, out.codes.data() + r * cols);
    }
  };
  // Rows are independent: an 8B model's weights (7e9 values) quantize in seconds on the cores
  // instead of half a minute on one.
  const int64_t threads = std::min<int64_t>(
      {static_cast<int64_t>(std::max(1u, std::thread::hardware_concurrency())), 16,
       rows * cols / (int64_t{1} << 20) + 1, rows});
  if (threads <= 1) {
    quantize(0, rows);
    return out;
  }
  std::vector<std::thread> pool;
  const int64_t per = (rows + threads - 1) / threads;
  for (int64_t t = 0; t < threads; ++t) {
    const int64_t begin = t * per, end = std::min(rows, begin + per);
    if (begin < end) pool.emplace_back(quantize, begin, end);
  }
  for (std::thread& th : pool) th.join();
  return out;
}

}  // namespace ls
