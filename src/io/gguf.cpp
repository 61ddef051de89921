#include "io/gguf.h"

#include <array>
#include <cstring>
#include <limits>
#include <new>
#include <set>
#include <utility>

namespace ls {
namespace {

constexpr uint32_t kMagic = 0x46554747;  // "GGUF" read as a little-endian u32
constexpr uint32_t kMaxDims = 4;          // GGML_MAX_DIMS
constexpr uint64_t kDefaultAlignment = 32;

struct TypeEntry {
  GgmlType type;
  std::string_view name;
  int64_t block_elems;
  int64_t block_bytes;
};

// Block layouts from ggml-common.h: e.g. Q4_0 = f16 scale + 16 bytes of nibbles per 32 weights.
constexpr std::array<TypeEntry, 20> kTypes = {{
    {GgmlType::kF32, "F32", 1, 4},
    {GgmlType::kF16, "F16", 1, 2},
    {GgmlType::kQ4_0, "Q4_0", 32, 18},
    {GgmlType::kQ4_1, "Q4_1", 32, 20},
    {GgmlType::kQ5_0, "Q5_0", 32, 22},
    {GgmlType::kQ5_1, "Q5_1", 32, 24},
    {GgmlType::kQ8_0, "Q8_0", 32, 34},
    {GgmlType::kQ8_1, "Q8_1", 32, 36},
    {GgmlType::kQ2_K, "Q2_K", 256, 84},
    {GgmlType::kQ3_K, "Q3_K", 256, 110},
    {GgmlType::kQ4_K, "Q4_K", 256, 144},
    {GgmlType::kQ5_K, "Q5_K", 256, 176},
    {GgmlType::kQ6_K, "Q6_K", 256, 210},
    {GgmlType::kQ8_K, "Q8_K", 256, 292},
    {GgmlType::kI8, "I8", 1, 1},
    {GgmlType::kI16, "I16", 1, 2},
    {GgmlType::kI32, "I32", 1, 4},
    {GgmlType::kI64, "I64", 1, 8},
    {GgmlType::kF64, "F64", 1, 8},
    {GgmlType::kBF16, "BF16", 1, 2},
}};

const TypeEntry* type_entry(GgmlType type) {
  for (const TypeEntry& e : kTypes) {
    if (e.type == type) return &e;
  }
  return nullptr;
}

// Bytes a scalar of this value type occupies; 0 for string/array (variable) and unknown types.
int scalar_bytes(GgufValueType t) {
  switch (t) {
    case GgufValueType::kU8:
    case GgufValueType::kI8:
    case GgufValueType::kBool:
      return 1;
    case GgufValueType::kU16:
    case GgufValueType::kI16:
      return 2;
    case GgufValueType::kU32:
    case GgufValueType::kI32:
    case GgufValueType::kF32:
      return 4;
    case GgufValueType::kU64:
    case GgufValueType::kI64:
    case GgufValueType::kF64:
      return 8;
    case GgufValueType::kString:
    case GgufValueType::kArray:
      return 0;
  }
  return 0;
}

bool known_value_type(uint32_t t) { return t <= static_cast<uint32_t>(GgufValueType::kF64); }

// Sequential little-endian reads over [data, data + size); every read is bounds-checked and a
// failure is recorded as a message naming what was being read.
class Reader {
 public:
  Reader(const uint8_t* data, size_t size) : data_(data), size_(size) {}

  size_t pos() const { return pos_; }
  size_t remaining() const { return size_ - pos_; }

  bool bytes(void* out, size_t n) {
    if (n > remaining()) return false;
    std::memcpy(out, data_ + pos_, n);
    pos_ += n;
    return true;
  }
  template <typename T>
  bool scalar(T* out) {
    return bytes(out, sizeof(T));  // the host is little-endian (x86-64, aarch64)
  }
  // A GGUF string; its length is checked against the remaining bytes before anything allocates.
  bool string(std::string* out) {
    uint64_t n = 0;
    if (!scalar(&n) || n > remaining()) return false;
    out->assign(reinterpret_cast<const char*>(data_ + pos_), static_cast<size_t>(n));
    pos_ += static_cast<size_t>(n);
    return true;
  }

 private:
  const uint8_t* data_;
  size_t size_;
  size_t pos_ = 0;
};

// Reads one scalar of type `t` into `v` (integer types into v.i / v.u64, floats into v.f).
bool read_scalar(Reader& r, GgufValueType t, GgufValue& v) {
  switch (t) {
    case GgufValueType::kU8: {
      uint8_t x;
      if (!r.scalar(&x)) return false;
      v.i = x;
      return true;
    }
    case GgufValueType::kI8: {
      int8_t x;
      if (!r.scalar(&x)) return false;
      v.i = x;
      return true;
    }
    case GgufValueType::kU16: {
      uint16_t x;
      if (!r.scalar(&x)) return false;
      v.i = x;
      return true;
    }
    case GgufValueType::kI16: {
      int16_t x;
      if (!r.scalar(&x)) return false;
      v.i = x;
      return true;
    }
    case GgufValueType::kU32: {
      uint32_t x;
      if (!r.scalar(&x)) return false;
      v.i = x;
      return true;
    }
    case GgufValueType::kI32: {
      int32_t x;
      if (!r.scalar(&x)) return false;
      v.i = x;
      return true;
    }
    case GgufValueType::kU64: {
      uint64_t x;
      if (!r.scalar(&x)) return false;
      v.u64 = x;
      v.is_big_u64 = x > static_cast<uint64_t>(std::numeric_limits<int64_t>::max());
      v.i = v.is_big_u64 ? 0 : static_cast<int64_t>(x);
      return true;
    }
    case GgufValueType::kI64: {
      int64_t x;
      if (!r.scalar(&x)) return false;
      v.i = x;
      return true;
    }
    case GgufValueType::kBool: {
      uint8_t x;
      if (!r.scalar(&x)) return false;
      v.i = x;
      return x <= 1;  // the caller reports a byte other than 0/1
    }
    case GgufValueType::kF32: {
      float x;
      if (!r.scalar(&x)) return false;
      v.f = x;
      return true;
    }
    case GgufValueType::kF64: {
      double x;
      if (!r.scalar(&x)) return false;
      v.f = x;
      return true;
    }
    case GgufValueType::kString:
      return r.string(&v.s);
    case GgufValueType::kArray:
      return false;
  }
  return false;
}

bool is_integer_type(GgufValueType t) {
  switch (t) {
    case GgufValueType::kU8:
    case GgufValueType::kI8:
    case GgufValueType::kU16:
    case GgufValueType::kI16:
    case GgufValueType::kU32:
    case GgufValueType::kI32:
    case GgufValueType::kU64:
    case GgufValueType::kI64:
    case GgufValueType::kBool:
      return true;
    default:
      return false;
  }
}

std::string describe(const GgufValue& v) {
  if (v.is_array()) {
    return fmt::format("array of {} {}", v.array_size(), gguf_value_type_name(v.elem_type));
  }
  return std::string(gguf_value_type_name(v.type));
}

}  // namespace

std::string ggml_type_name(GgmlType type) {
  const TypeEntry* e = type_entry(type);
  if (e != nullptr) return std::string(e->name);
  return fmt::format("type {}", static_cast<uint32_t>(type));
}

std::optional<int64_t> ggml_block_elems(GgmlType type) {
  const TypeEntry* e = type_entry(type);
  if (e == nullptr) return std::nullopt;
  return e->block_elems;
}

std::optional<int64_t> ggml_block_bytes(GgmlType type) {
  const TypeEntry* e = type_entry(type);
  if (e == nullptr) return std::nullopt;
  return e->block_bytes;
}

std::string_view gguf_value_type_name(GgufValueType type) {
  switch (type) {
    case GgufValueType::kU8:
      return "u8";
    case GgufValueType::kI8:
      return "i8";
    case GgufValueType::kU16:
      return "u16";
    case GgufValueType::kI16:
      return "i16";
    case GgufValueType::kU32:
      return "u32";
    case GgufValueType::kI32:
      return "i32";
    case GgufValueType::kF32:
      return "f32";
    case GgufValueType::kBool:
      return "bool";
    case GgufValueType::kString:
      return "string";
    case GgufValueType::kArray:
      return "array";
    case GgufValueType::kU64:
      return "u64";
    case GgufValueType::kI64:
      return "i64";
    case GgufValueType::kF64:
      return "f64";
  }
  return "unknown";
}

bool GgufValue::is_integer() const { return is_integer_type(type); }

size_t GgufValue::array_size() const {
  if (!is_array()) return 0;
  if (elem_type == GgufValueType::kString) return strings.size();
  if (elem_type == GgufValueType::kF32 || elem_type == GgufValueType::kF64) return floats.size();
  return ints.size();
}

std::vector<int64_t> GgufTensor::shape() const { return {ne.rbegin(), ne.rend()}; }

Result<std::unique_ptr<GgufFile>> GgufFile::open(const std::filesystem::path& path) {
  LS_ASSIGN_OR_RETURN(FileBytes storage, FileBytes::map(path));
  return from_storage(path.string(), std::move(storage));
}

Result<std::unique_ptr<GgufFile>> GgufFile::from_memory(std::string name,
                                                        std::vector<uint8_t> bytes) {
  return from_storage(std::move(name), FileBytes::own(std::move(bytes)));
}

Result<std::unique_ptr<GgufFile>> GgufFile::from_storage(std::string name, FileBytes storage) {
  std::unique_ptr<GgufFile> file(new (std::nothrow) GgufFile());
  if (!file) return resource_exhausted("{}: out of memory", name);
  file->name_ = std::move(name);
  file->storage_ = std::move(storage);
  file->bytes_ = file->storage_.data();
  file->size_bytes_ = file->storage_.size();
  LS_RETURN_IF_ERROR(file->parse());
  return file;
}

const GgufTensor* GgufFile::find_tensor(std::string_view name) const {
  auto it = index_.find(name);
  return it == index_.end() ? nullptr : &tensors_[it->second];
}

const GgufValue* GgufFile::find(std::string_view key) const {
  auto it = metadata_.find(key);
  return it == metadata_.end() ? nullptr : &it->second;
}

Status GgufFile::parse() {
  const std::string& file = name_;
  try {
    Reader r(bytes_, size_bytes_);
    uint32_t magic = 0;
    if (!r.scalar(&magic)) {
      return data_loss("{}: file is {} bytes, too short for the GGUF magic", file, size_bytes_);
    }
    if (magic != kMagic) {
      return data_loss("{}: not a GGUF file (magic {:#010x}, expected \"GGUF\")", file, magic);
    }
    if (!r.scalar(&version_)) return data_loss("{}: truncated before the version", file);
    if (version_ == 1) {
      return unimplemented("{}: GGUF version 1 is not supported (versions 2 and 3 are)", file);
    }
    if (version_ != 2 && version_ != 3) {
      if ((version_ & 0xffff) == 0) {
        return unimplemented("{}: GGUF version {:#x} looks big-endian, which is not supported",
                             file, version_);
      }
      return unimplemented("{}: unknown GGUF version {} (versions 2 and 3 are supported)", file,
                           version_);
    }
    uint64_t n_tensors = 0;
    uint64_t n_kv = 0;
    if (!r.scalar(&n_tensors) || !r.scalar(&n_kv)) {
      return data_loss("{}: truncated before the tensor and metadata counts", file);
    }
    // Every key/value pair takes at least 8 + 4 + 1 bytes and every tensor entry at least
    // 8 + 4 + 4 + 8, so larger counts cannot fit and are rejected before any allocation.
    if (n_kv > r.remaining() / 13) {
      return data_loss("{}: metadata count {} cannot fit in the {}-byte file", file, n_kv,
                       size_bytes_);
    }
    if (n_tensors > r.remaining() / 24) {
      return data_loss("{}: tensor count {} cannot fit in the {}-byte file", file, n_tensors,
                       size_bytes_);
    }

    for (uint64_t k = 0; k < n_kv; ++k) {
      std::string key;
      if (!r.string(&key)) return data_loss("{}: metadata entry {}: truncated key", file, k);
      if (key.empty()) return data_loss("{}: metadata entry {}: empty key", file, k);
      uint32_t raw_type = 0;
      if (!r.scalar(&raw_type)) {
        return data_loss("{}: metadata key \"{}\": truncated value type", file, key);
      }
      if (!known_value_type(raw_type)) {
        return data_loss("{}: metadata key \"{}\": unknown value type {}", file, key, raw_type);
      }
      GgufValue v;
      v.type = static_cast<GgufValueType>(raw_type);
      if (v.type != GgufValueType::kArray) {
        if (!read_scalar(r, v.type, v)) {
          return data_loss("{}: metadata key \"{}\": truncated or invalid {} value", file, key,
                           gguf_value_type_name(v.type));
        }
      } else {
        uint32_t raw_elem = 0;
        uint64_t count = 0;
        if (!r.scalar(&raw_elem) || !r.scalar(&count)) {
          return data_loss("{}: metadata key \"{}\": truncated array header", file, key);
        }
        if (!known_value_type(raw_elem)) {
          return data_loss("{}: metadata key \"{}\": unknown array element type {}", file, key,
                           raw_elem);
        }
        v.elem_type = static_cast<GgufValueType>(raw_elem);
        if (v.elem_type == GgufValueType::kArray) {
          return unimplemented("{}: metadata key \"{}\": nested arrays are not supported", file,
                               key);
        }
        // Strings take at least their 8-byte length each.
        const int min_bytes = v.elem_type == GgufValueType::kString ? 8 : scalar_bytes(v.elem_type);
        if (count > r.remaining() / static_cast<uint64_t>(min_bytes)) {
          return data_loss("{}: metadata key \"{}\": array of {} {} runs past the end of the file",
                           file, key, count, gguf_value_type_name(v.elem_type));
        }
        const auto n = static_cast<size_t>(count);
        if (v.elem_type == GgufValueType::kString) {
          v.strings.resize(n);
          for (size_t i = 0; i < n; ++i) {
            if (!r.string(&v.strings[i])) {
              return data_loss("{}: metadata key \"{}\": element {} truncated", file, key, i);
            }
          }
        } else {
          const bool is_float =
              v.elem_type == GgufValueType::kF32 || v.elem_type == GgufValueType::kF64;
          (is_float ? v.floats.reserve(n) : v.ints.reserve(n));
          GgufValue e;
          for (size_t i = 0; i < n; ++i) {
            if (!read_scalar(r, v.elem_type, e)) {
              return data_loss("{}: metadata key \"{}\": element {} is not a valid {}", file, key,
                               i, gguf_value_type_name(v.elem_type));
            }
            if (e.is_big_u64) {
              return unimplemented("{}: metadata key \"{}\": element {} ({}) exceeds int64", file,
                                   key, i, e.u64);
            }
            if (is_float) {
              v.floats.push_back(e.f);
            } else {
              v.ints.push_back(e.i);
            }
          }
        }
      }
      if (metadata_.count(key) != 0) {
        return data_loss("{}: metadata key \"{}\" appears twice", file, key);
      }
      metadata_.emplace(std::move(key), std::move(v));
    }

    if (const GgufValue* a = find("general.alignment")) {
      if (a->type != GgufValueType::kU32) {
        return data_loss("{}: metadata key \"general.alignment\" must be u32, got {}", file,
                         describe(*a));
      }
      if (a->i == 0 || (a->i & (a->i - 1)) != 0) {
        return data_loss("{}: general.alignment {} is not a power of two", file, a->i);
      }
      alignment_ = static_cast<uint64_t>(a->i);
    } else {
      alignment_ = kDefaultAlignment;
    }

    tensors_.reserve(static_cast<size_t>(n_tensors));
    for (uint64_t k = 0; k < n_tensors; ++k) {
      GgufTensor t;
      if (!r.string(&t.name)) return data_loss("{}: tensor entry {}: truncated name", file, k);
      const std::string& tn = t.name;
      if (tn.empty()) return data_loss("{}: tensor entry {}: empty name", file, k);
      uint32_t n_dims = 0;
      if (!r.scalar(&n_dims)) return data_loss("{}: tensor \"{}\": truncated dims", file, tn);
      if (n_dims == 0 || n_dims > kMaxDims) {
        return data_loss("{}: tensor \"{}\": {} dims (1 to {} allowed)", file, tn, n_dims,
                         kMaxDims);
      }
      int64_t numel = 1;
      for (uint32_t d = 0; d < n_dims; ++d) {
        uint64_t dim = 0;
        if (!r.scalar(&dim)) return data_loss("{}: tensor \"{}\": truncated dims", file, tn);
        if (dim > static_cast<uint64_t>(std::numeric_limits<int64_t>::max())) {
          return data_loss("{}: tensor \"{}\": dim {} ({}) exceeds int64", file, tn, d, dim);
        }
        t.ne.push_back(static_cast<int64_t>(dim));
        if (__builtin_mul_overflow(numel, static_cast<int64_t>(dim), &numel)) {
          return data_loss("{}: tensor \"{}\": element count overflows 64 bits", file, tn);
        }
      }
      uint32_t raw_type = 0;
      if (!r.scalar(&raw_type) || !r.scalar(&t.offset)) {
        return data_loss("{}: tensor \"{}\": truncated type or offset", file, tn);
      }
      t.type = static_cast<GgmlType>(raw_type);
      const TypeEntry* te = type_entry(t.type);
      if (te == nullptr) {
        return unimplemented("{}: tensor \"{}\": ggml type {} is not supported", file, tn,
                             raw_type);
      }
      t.numel = numel;
      t.row_elems = t.ne[0];
      t.rows = t.row_elems == 0 ? 0 : numel / t.row_elems;
      if (t.row_elems % te->block_elems != 0) {
        return data_loss("{}: tensor \"{}\": row length {} is not a multiple of the {} block of {}",
                         file, tn, t.row_elems, te->name, te->block_elems);
      }
      if (__builtin_mul_overflow(numel / te->block_elems, te->block_bytes, &t.nbytes)) {
        return data_loss("{}: tensor \"{}\": byte size overflows 64 bits", file, tn);
      }
      if (t.offset % alignment_ != 0) {
        return data_loss("{}: tensor \"{}\": offset {} is not a multiple of the alignment {}",
                         file, tn, t.offset, alignment_);
      }
      if (index_.count(t.name) != 0) {
        return data_loss("{}: tensor \"{}\" appears twice in the tensor directory", file, tn);
      }
      index_.emplace(t.name, tensors_.size());
      tensors_.push_back(std::move(t));
    }

    // The data section starts at the directory's end, padded to the alignment.
    const uint64_t header_end = r.pos();
    const uint64_t data_start = (header_end + alignment_ - 1) / alignment_ * alignment_;
    // Tensors are laid out in directory order, each at the previous one's end padded to the
    // alignment (what llama.cpp and gguf-py write and what llama.cpp insists on when loading).
    uint64_t expected = 0;
    for (GgufTensor& t : tensors_) {
      if (t.offset != expected) {
        return data_loss("{}: tensor \"{}\": offset {} where {} was expected (tensors must follow "
                         "each other in directory order, aligned to {})",
                         file, t.name, t.offset, expected, alignment_);
      }
      const auto nbytes = static_cast<uint64_t>(t.nbytes);
      if (data_start > size_bytes_ || t.offset > size_bytes_ - data_start ||
          nbytes > size_bytes_ - data_start - t.offset) {
        return data_loss("{}: tensor \"{}\": bytes [{}, {}) of the data section run past the end "
                         "of the file ({} bytes, data at {})",
                         file, t.name, t.offset, t.offset + nbytes, size_bytes_, data_start);
      }
      t.data = bytes_ + data_start + t.offset;
      expected = (t.offset + nbytes + alignment_ - 1) / alignment_ * alignment_;
    }
    return {};
  } catch (const std::bad_alloc&) {
    return resource_exhausted("{}: out of memory while reading the GGUF header", file);
  }
}

namespace {

Status wrong_type(const std::string& file, std::string_view key, std::string_view want,
                  const GgufValue& v) {
  return data_loss("{}: metadata key \"{}\" must be {}, got {}", file, key, want, describe(v));
}

}  // namespace

Result<std::optional<int64_t>> GgufFile::opt_int(std::string_view key) const {
  const GgufValue* v = find(key);
  if (v == nullptr) return std::optional<int64_t>();
  if (!v->is_integer() || v->type == GgufValueType::kBool) {
    return wrong_type(name_, key, "an integer", *v);
  }
  if (v->is_big_u64) {
    return data_loss("{}: metadata key \"{}\" = {} exceeds int64", name_, key, v->u64);
  }
  return std::optional<int64_t>(v->i);
}

Result<std::optional<double>> GgufFile::opt_float(std::string_view key) const {
  const GgufValue* v = find(key);
  if (v == nullptr) return std::optional<double>();
  if (v->is_float()) return std::optional<double>(v->f);
  if (v->is_integer() && v->type != GgufValueType::kBool && !v->is_big_u64) {
    return std::optional<double>(static_cast<double>(v->i));
  }
  return wrong_type(name_, key, "a number", *v);
}

Result<std::optional<bool>> GgufFile::opt_bool(std::string_view key) const {
  const GgufValue* v = find(key);
  if (v == nullptr) return std::optional<bool>();
  if (v->type != GgufValueType::kBool) return wrong_type(name_, key, "a bool", *v);
  return std::optional<bool>(v->i != 0);
}

Result<std::optional<std::string>> GgufFile::opt_string(std::string_view key) const {
  const GgufValue* v = find(key);
  if (v == nullptr) return std::optional<std::string>();
  if (v->type != GgufValueType::kString) return wrong_type(name_, key, "a string", *v);
  return std::optional<std::string>(v->s);
}

Result<int64_t> GgufFile::get_int(std::string_view key) const {
  LS_ASSIGN_OR_RETURN(std::optional<int64_t> v, opt_int(key));
  if (!v) return not_found("{}: metadata key \"{}\" is missing", name_, key);
  return *v;
}

Result<double> GgufFile::get_float(std::string_view key) const {
  LS_ASSIGN_OR_RETURN(std::optional<double> v, opt_float(key));
  if (!v) return not_found("{}: metadata key \"{}\" is missing", name_, key);
  return *v;
}

Result<std::string> GgufFile::get_string(std::string_view key) const {
  LS_ASSIGN_OR_RETURN(std::optional<std::string> v, opt_string(key));
  if (!v) return not_found("{}: metadata key \"{}\" is missing", name_, key);
  return std::move(*v);
}

Result<const std::vector<std::string>*> GgufFile::opt_string_array(std::string_view key) const {
  const GgufValue* v = find(key);
  if (v == nullptr) return static_cast<const std::vector<std::string>*>(nullptr);
  if (!v->is_array() || v->elem_type != GgufValueType::kString) {
    return wrong_type(name_, key, "an array of strings", *v);
  }
  return &v->strings;
}

Result<const std::vector<int64_t>*> GgufFile::opt_int_array(std::string_view key) const {
  const GgufValue* v = find(key);
  if (v == nullptr) return static_cast<const std::vector<int64_t>*>(nullptr);
  if (!v->is_array() || !is_integer_type(v->elem_type)) {
    return wrong_type(name_, key, "an array of integers", *v);
  }
  return &v->ints;
}

Result<const std::vector<double>*> GgufFile::opt_float_array(std::string_view key) const {
  const GgufValue* v = find(key);
  if (v == nullptr) return static_cast<const std::vector<double>*>(nullptr);
  if (!v->is_array() ||
      (v->elem_type != GgufValueType::kF32 && v->elem_type != GgufValueType::kF64)) {
    return wrong_type(name_, key, "an array of floats", *v);
  }
  return &v->floats;
}

}  // namespace ls
