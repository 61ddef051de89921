#include "model/dummy_weights.h"

#include <fmt/format.h>

#include <algorithm>
#include <cmath>
#include <cstring>
#include <memory>
#include <string>
#include <new>
#include <string_view>
#include <system_error>
#include <thread>
#include <utility>
#include <vector>

#include "core/dtype.h"
#include "io/safetensors.h"
#include "model/tensor_parallel.h"
#include "model/weights.h"

namespace ls {

namespace {

uint64_t splitmix64(uint64_t x) {
  uint64_t z = x + 0x9E3779B97F4A7C15ull;
  z = (z ^ (z >> 30)) * 0xBF58476D1CE4E5B9ull;
  z = (z ^ (z >> 27)) * 0x94D049BB133111EBull;
  return z ^ (z >> 31);
}

uint64_t fnv1a(std::string_view s) {
  uint64_t h = 0xCBF29CE484222325ull;
  for (const char c : s) {
    h ^= static_cast<uint8_t>(c);
    h *= 0x100000001B3ull;
  }
  return h;
}

uint64_t tensor_key(uint64_t seed, std::string_view name) {
  return splitmix64(seed ^ splitmix64(fnv1a(name)));
}

// The standard deviation of the tensor's values (make_bundled_model.py's InitScales); 0 for norm
// weights, which are exactly 1.
double scale_of(std::string_view name, int64_t cols) {
  if (name.ends_with("norm.weight")) return 0;
  if (name.ends_with(".bias")) return 0.3;
  if (name == "model.embed_tokens.weight") return 1.0;
  if (name == "lm_head.weight") return 4.0 / std::sqrt(static_cast<double>(cols));
  const bool qk = name.find(".q_proj.") != std::string_view::npos ||
                  name.find(".k_proj.") != std::string_view::npos;
  return (qk ? 2.0 : 1.0) / std::sqrt(static_cast<double>(cols));
}

// A uniform value of standard deviation `scale` (on [-sqrt(3) scale, sqrt(3) scale)), or 1 for a
// norm weight (scale 0).
inline float value_at(uint64_t key, float scale, int64_t index) {
  if (scale == 0.0f) return 1.0f;
  const uint64_t bits = splitmix64(key + static_cast<uint64_t>(index) * 0xD1B54A32D192ED03ull);
  // 24 random bits -> (-0.5, 0.5), symmetric around 0.
  const float u = (static_cast<float>(bits >> 40) + 0.5f) * (1.0f / 16777216.0f) - 0.5f;
  return u * (3.4641016f * scale);  // 2 sqrt(3): unit variance before the scale
}

using Ranges = std::vector<std::pair<int64_t, int64_t>>;  // [begin, count)

// One tensor of the rank's checkpoint: its full shape, and which rows (full row ids; -1: a zero
// padding row) and column ranges of the full tensor it holds.
struct Plan {
  std::string name;
  std::vector<int64_t> full_shape;  // [rows] or [rows, cols]
  std::vector<int64_t> rows;
  Ranges cols;
  bool zero = false;  // a row-parallel bias on ranks other than 0

  int64_t full_cols() const { return full_shape.size() > 1 ? full_shape[1] : 1; }
  int64_t out_cols() const {
    int64_t n = 0;
    for (const auto& c : cols) n += c.second;
    return n;
  }
  std::vector<int64_t> out_shape() const {
    if (full_shape.size() == 1) return {static_cast<int64_t>(rows.size())};
    return {static_cast<int64_t>(rows.size()), out_cols()};
  }
};

std::vector<int64_t> expand(const Ranges& ranges) {
  std::vector<int64_t> ids;
  for (const auto& [b, n] : ranges) {
    for (int64_t i = 0; i < n; ++i) ids.push_back(b + i);
  }
  return ids;
}

// The full shape of `name` in a checkpoint of `c`, or an error for a name no rule knows.
Result<std::vector<int64_t>> full_shape_of(const std::string& name, const ModelConfig& c) {
  const int64_t hidden = c.hidden_size(), d = c.head_dim(), inter = c.intermediate_size();
  const int64_t q = c.num_attention_heads() * d, kv = c.num_key_value_heads() * d;
  if (name == "model.embed_tokens.weight" || name == "lm_head.weight") {
    return std::vector<int64_t>{c.vocab_size(), hidden};
  }
  if (name.ends_with("q_norm.weight") || name.ends_with("k_norm.weight")) {
    return std::vector<int64_t>{d};
  }
  if (name.ends_with("norm.weight")) return std::vector<int64_t>{hidden};
  const bool bias = name.ends_with(".bias");
  auto shape = [&](int64_t out, int64_t in) {
    return bias ? std::vector<int64_t>{out} : std::vector<int64_t>{out, in};
  };
  if (name.find("self_attn.q_proj.") != std::string::npos) return shape(q, hidden);
  if (name.find("self_attn.k_proj.") != std::string::npos ||
      name.find("self_attn.v_proj.") != std::string::npos) {
    return shape(kv, hidden);
  }
  if (name.find("self_attn.o_proj.") != std::string::npos) return shape(hidden, q);
  if (name.find("mlp.gate_proj.") != std::string::npos ||
      name.find("mlp.up_proj.") != std::string::npos) {
    return shape(inter, hidden);
  }
  if (name.find("mlp.down_proj.") != std::string::npos) return shape(hidden, inter);
  return invalid_argument("--load-format dummy: no shape rule for tensor {}", name);
}

// Rank's slice of `name` (the rules of shard_checkpoint, model/tensor_parallel.cpp).
Plan plan_of(std::string name, std::vector<int64_t> full, const ModelConfig& c,
             const TpLayout& l, int32_t rank) {
  Plan p;
  p.name = std::move(name);
  p.full_shape = std::move(full);
  const int64_t full_rows = p.full_shape[0];
  const Ranges all_rows = {{0, full_rows}};
  const Ranges all_cols = {{0, p.full_cols()}};
  p.cols = all_cols;
  p.rows = expand(all_rows);
  if (l.size == 1) return p;
  const std::string& n = p.name;
  const int64_t d = c.head_dim();
  const int64_t layer = tensor_layer_index(n);
  Ranges q, kv;
  if (layer >= 0) {
    for (int64_t j = 0; j < l.q_heads_per_rank; ++j) q.push_back({l.q_head(layer, rank, j) * d, d});
    for (int64_t j = 0; j < l.kv_heads_per_rank; ++j) {
      kv.push_back({l.kv_head(layer, rank, j) * d, d});
    }
  }
  const Ranges mlp = {{rank * l.inter_per_rank, l.inter_per_rank}};
  const bool weight = n.ends_with(".weight");
  if (n.find("self_attn.q_proj.") != std::string::npos) {
    p.rows = expand(q);
  } else if (n.find("self_attn.k_proj.") != std::string::npos ||
             n.find("self_attn.v_proj.") != std::string::npos) {
    p.rows = expand(kv);
  } else if (n.find("mlp.gate_proj.") != std::string::npos ||
             n.find("mlp.up_proj.") != std::string::npos) {
    p.rows = expand(mlp);
  } else if (weight && n.find("self_attn.o_proj.") != std::string::npos) {
    p.cols = q;
  } else if (weight && n.find("mlp.down_proj.") != std::string::npos) {
    p.cols = mlp;
  } else if (n == "model.embed_tokens.weight" || n == "lm_head.weight") {
    p.rows.clear();
    for (int64_t i = 0; i < l.vocab_per_rank; ++i) {
      const int64_t id = rank * l.vocab_per_rank + i;
      p.rows.push_back(id < full_rows ? id : -1);
    }
  } else if (n.ends_with("self_attn.o_proj.bias") || n.ends_with("mlp.down_proj.bias")) {
    p.zero = rank != 0;  // added once, by rank 0, before the all-reduce
  }
  return p;
}

// Fills out rows [r0, r1) of the plan's [rows, out_cols] bf16 slice.
void fill_rows(const Plan& p, uint64_t key, float scale, int64_t r0, int64_t r1, uint16_t* out) {
  const int64_t oc = p.out_cols(), fc = p.full_cols();
  for (int64_t r = r0; r < r1; ++r) {
    uint16_t* row = out + r * oc;
    const int64_t src = p.rows[static_cast<size_t>(r)];
    if (src < 0 || p.zero) {
      std::fill(row, row + oc, uint16_t{0});
      continue;
    }
    int64_t at = 0;
    for (const auto& [b, n] : p.cols) {
      for (int64_t i = 0; i < n; ++i) row[at + i] = f32_to_bf16(value_at(key, scale, src * fc + b + i));
      at += n;
    }
  }
}

}  // namespace

Status run_on_threads(unsigned n, const std::function<void(unsigned)>& work,
                      const ThreadSpawner& spawn) {
  std::vector<std::thread> threads;
  threads.reserve(n);  // no reallocation may throw while a made thread is not yet stored
  Status failed;
  for (unsigned t = 1; t < n; ++t) {
    // Anything thrown while making a thread (std::system_error, or bad_alloc from the job's
    // storage) must not unwind past the joinable threads already made: that would terminate.
    try {
      std::function<void()> job = [&work, t] { work(t); };
      threads.push_back(spawn ? spawn(std::move(job)) : std::thread(std::move(job)));
    } catch (const std::exception& e) {
      failed = resource_exhausted("cannot start thread {} of {}: {}", t, n, e.what());
      break;
    } catch (...) {
      failed = resource_exhausted("cannot start thread {} of {}", t, n);
      break;
    }
  }
  if (failed.ok()) work(0);
  for (std::thread& t : threads) t.join();
  return failed;
}

Result<LoadFormat> parse_load_format(std::string_view name) {
  if (name == "auto") return LoadFormat::kAuto;
  if (name == "dummy") return LoadFormat::kDummy;
  return invalid_argument("--load-format must be auto or dummy (got '{}')", name);
}

float dummy_weight_value(uint64_t seed, std::string_view name, int64_t rows, int64_t cols,
                         int64_t index) {
  (void)rows;
  return value_at(tensor_key(seed, name), static_cast<float>(scale_of(name, cols)), index);
}

Result<Checkpoint> dummy_checkpoint(const ModelConfig& c, const ArchitectureSpec& arch,
                                    const TpLayout& l, int32_t rank, uint64_t seed) {
  if (c.fp8_weights()) {
    return unimplemented("{}: --load-format dummy generates bf16 weights; a config with an FP8 "
                         "quantization_config is not generated (drop it and use --quantization "
                         "fp8 to quantize the dummy weights at load)",
                         c.source());
  }
  std::vector<std::string> required, optional;
  expected_tensor_names(c, arch, required, optional);
  std::vector<Plan> plans;
  for (std::string& name : required) {
    LS_ASSIGN_OR_RETURN(std::vector<int64_t> full, full_shape_of(name, c));
    plans.push_back(plan_of(std::move(name), std::move(full), c, l, rank));
  }
  // The safetensors bytes: header (padded to 8 bytes), then each tensor's bf16 data.
  std::string header = "{";
  int64_t offset = 0;
  std::vector<int64_t> offsets;
  for (size_t i = 0; i < plans.size(); ++i) {
    const std::vector<int64_t> shape = plans[i].out_shape();
    int64_t n = 2;
    for (const int64_t s : shape) n *= s;
    header += fmt::format("{}\"{}\":{{\"dtype\":\"BF16\",\"shape\":[{}],\"data_offsets\":[{},{}]}}",
                          i ? "," : "", plans[i].name, fmt::join(shape, ","), offset, offset + n);
    offsets.push_back(offset);
    offset += n;
  }
  header += "}";
  while (header.size() % 8 != 0) header += ' ';
  // Not zeroed: the generation threads below write every byte of the data (zero rows too), so
  // the pages are first touched, in parallel, by them instead of by a one-thread zero-fill.
  const size_t total = 8 + header.size() + static_cast<size_t>(offset);
  std::unique_ptr<uint8_t[]> bytes(new (std::nothrow) uint8_t[total]);
  if (!bytes) {
    return resource_exhausted("--load-format dummy: cannot allocate {} bytes of weights", total);
  }
  const uint64_t len = header.size();
  for (int b = 0; b < 8; ++b) bytes[static_cast<size_t>(b)] = static_cast<uint8_t>(len >> (8 * b));
  std::memcpy(bytes.get() + 8, header.data(), header.size());
  uint8_t* data = bytes.get() + 8 + header.size();

  // Rows of every tensor in blocks, handed to one thread per core (the tensor-parallel builder
  // loads its ranks one after another).
  struct Block {
    size_t plan;
    int64_t r0, r1;
  };
  std::vector<Block> blocks;
  for (size_t i = 0; i < plans.size(); ++i) {
    const int64_t rows = static_cast<int64_t>(plans[i].rows.size());
    const int64_t per = std::max<int64_t>(1, (int64_t{1} << 20) / std::max<int64_t>(1, plans[i].out_cols()));
    for (int64_t r = 0; r < rows; r += per) blocks.push_back({i, r, std::min(rows, r + per)});
  }
  const unsigned hw = std::max(1u, std::thread::hardware_concurrency());
  const unsigned n_threads =
      std::max(1u, std::min<unsigned>(hw, static_cast<unsigned>(blocks.size())));
  auto work = [&](unsigned t) {
    for (size_t b = t; b < blocks.size(); b += n_threads) {
      const Plan& p = plans[blocks[b].plan];
      auto* out = reinterpret_cast<uint16_t*>(data + offsets[blocks[b].plan]);
      fill_rows(p, tensor_key(seed, p.name),
                static_cast<float>(scale_of(p.name, p.full_cols())), blocks[b].r0, blocks[b].r1,
                out);
    }
  };
  LS_RETURN_IF_ERROR(run_on_threads(n_threads, work).with_context("--load-format dummy"));

  const std::string name = l.size > 1 ? fmt::format("dummy weights (seed {}, tensor-parallel rank "
                                                    "{} of {})", seed, rank, l.size)
                                      : fmt::format("dummy weights (seed {})", seed);
  LS_ASSIGN_OR_RETURN(std::unique_ptr<SafetensorsFile> file,
                      SafetensorsFile::from_memory(name, std::move(bytes), total));
  return Checkpoint::from_file(std::filesystem::path(c.source()).parent_path(), std::move(file));
}

}  // namespace ls
