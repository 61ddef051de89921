#include "io/gguf_writer.h"

#include <fmt/format.h>
#include <fmt/ranges.h>

#include <cstring>
#include <fstream>
#include <optional>
#include <system_error>

namespace ls {
namespace {

constexpr uint64_t kAlignment = 32;

template <typename T>
void put(std::vector<uint8_t>& out, T v) {
  // The build targets little-endian hosts only (as the reader). resize + memcpy rather than
  // insert: GCC 12 reports a false stringop-overflow for a small array insert.
  const size_t at = out.size();
  out.resize(at + sizeof(T));
  std::memcpy(out.data() + at, &v, sizeof(T));
}

void put_string(std::vector<uint8_t>& out, const std::string& s) {
  put<uint64_t>(out, s.size());
  const size_t at = out.size();
  out.resize(at + s.size());
  if (!s.empty()) std::memcpy(out.data() + at, s.data(), s.size());
}

void put_key(std::vector<uint8_t>& out, const std::string& key, GgufValueType type) {
  put_string(out, key);
  put<uint32_t>(out, static_cast<uint32_t>(type));
}

}  // namespace

void GgufWriter::add_string(const std::string& key, const std::string& value) {
  put_key(kv_, key, GgufValueType::kString);
  put_string(kv_, value);
  ++kv_count_;
}

void GgufWriter::add_u32(const std::string& key, uint32_t value) {
  put_key(kv_, key, GgufValueType::kU32);
  put<uint32_t>(kv_, value);
  ++kv_count_;
}

void GgufWriter::add_i32(const std::string& key, int32_t value) {
  put_key(kv_, key, GgufValueType::kI32);
  put<int32_t>(kv_, value);
  ++kv_count_;
}

void GgufWriter::add_f32(const std::string& key, float value) {
  put_key(kv_, key, GgufValueType::kF32);
  put<float>(kv_, value);
  ++kv_count_;
}

void GgufWriter::add_bool(const std::string& key, bool value) {
  put_key(kv_, key, GgufValueType::kBool);
  put<uint8_t>(kv_, value ? 1 : 0);
  ++kv_count_;
}

void GgufWriter::add_strings(const std::string& key, const std::vector<std::string>& values) {
  put_key(kv_, key, GgufValueType::kArray);
  put<uint32_t>(kv_, static_cast<uint32_t>(GgufValueType::kString));
  put<uint64_t>(kv_, values.size());
  for (const std::string& s : values) put_string(kv_, s);
  ++kv_count_;
}

void GgufWriter::add_i32s(const std::string& key, const std::vector<int32_t>& values) {
  put_key(kv_, key, GgufValueType::kArray);
  put<uint32_t>(kv_, static_cast<uint32_t>(GgufValueType::kI32));
  put<uint64_t>(kv_, values.size());
  for (int32_t v : values) put<int32_t>(kv_, v);
  ++kv_count_;
}

void GgufWriter::add_f32s(const std::string& key, const std::vector<float>& values) {
  put_key(kv_, key, GgufValueType::kArray);
  put<uint32_t>(kv_, static_cast<uint32_t>(GgufValueType::kF32));
  put<uint64_t>(kv_, values.size());
  for (float v : values) put<float>(kv_, v);
  ++kv_count_;
}

Status GgufWriter::add_tensor(const std::string& name, GgmlType type,
                              const std::vector<int64_t>& shape, std::vector<uint8_t> data) {
  const std::optional<int64_t> be = ggml_block_elems(type), bb = ggml_block_bytes(type);
  if (!be || shape.empty() || shape.size() > 4) {
    return invalid_argument("tensor {}: bad type or shape", name);
  }
  int64_t numel = 1;
  for (int64_t d : shape) numel *= d;
  if (shape.back() % *be != 0 || numel / *be * *bb != static_cast<int64_t>(data.size())) {
    return invalid_argument("tensor {}: {} bytes do not hold [{}] in {}", name, data.size(),
                            fmt::join(shape, ", "), ggml_type_name(type));
  }
  tensors_.push_back(Tensor{name, type, std::vector<int64_t>(shape.rbegin(), shape.rend()),
                            std::move(data)});
  return {};
}

std::vector<uint8_t> GgufWriter::bytes() const {
  std::vector<uint8_t> out;
  put<uint32_t>(out, 0x46554747);  // "GGUF"
  put<uint32_t>(out, 3);
  put<uint64_t>(out, tensors_.size());
  put<uint64_t>(out, kv_count_ + 1);
  put_key(out, "general.alignment", GgufValueType::kU32);
  put<uint32_t>(out, static_cast<uint32_t>(kAlignment));
  out.insert(out.end(), kv_.begin(), kv_.end());
  uint64_t offset = 0;
  for (const Tensor& t : tensors_) {
    put_string(out, t.name);
    put<uint32_t>(out, static_cast<uint32_t>(t.ne.size()));
    for (int64_t d : t.ne) put<uint64_t>(out, static_cast<uint64_t>(d));
    put<uint32_t>(out, static_cast<uint32_t>(t.type));
    put<uint64_t>(out, offset);
    offset += (t.data.size() + kAlignment - 1) / kAlignment * kAlignment;
  }
  out.resize((out.size() + kAlignment - 1) / kAlignment * kAlignment, 0);
  for (const Tensor& t : tensors_) {
    out.insert(out.end(), t.data.begin(), t.data.end());
    out.resize((out.size() + kAlignment - 1) / kAlignment * kAlignment, 0);
  }
  return out;
}

Status GgufWriter::write(const std::filesystem::path& path) const {
  const std::vector<uint8_t> data = bytes();
  const std::filesystem::path tmp = path.string() + ".tmp";
  {
    std::ofstream f(tmp, std::ios::binary | std::ios::trunc);
    if (!f) return invalid_argument("cannot write {}", tmp.string());
    f.write(reinterpret_cast<const char*>(data.data()), static_cast<std::streamsize>(data.size()));
    if (!f) return internal_error("writing {} failed", tmp.string());
  }
  std::error_code ec;
  std::filesystem::rename(tmp, path, ec);
  if (ec) return internal_error("cannot rename {} to {}: {}", tmp.string(), path.string(), ec.message());
  return {};
}

}  // namespace ls
