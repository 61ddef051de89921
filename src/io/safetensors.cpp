#include "io/safetensors.h"

#include <algorithm>
#include <array>
#include <fstream>
#include <limits>
#include <new>
#include <set>
#include <utility>

#include "io/json_util.h"

namespace ls {
namespace {

using io_json::Json;

// The reference reader refuses headers above this size; so do we, before parsing anything.
constexpr uint64_t kMaxHeaderBytes = 100'000'000;

struct DTypeEntry {
  std::string_view name;
  SafetensorsDType dtype;
  int size_bytes;
};

constexpr std::array<DTypeEntry, 19> kDTypes = {{
    {"BOOL", SafetensorsDType::kBool, 1},
    {"U8", SafetensorsDType::kU8, 1},
    {"I8", SafetensorsDType::kI8, 1},
    {"U16", SafetensorsDType::kU16, 2},
    {"I16", SafetensorsDType::kI16, 2},
    {"F16", SafetensorsDType::kF16, 2},
    {"BF16", SafetensorsDType::kBF16, 2},
    {"U32", SafetensorsDType::kU32, 4},
    {"I32", SafetensorsDType::kI32, 4},
    {"F32", SafetensorsDType::kF32, 4},
    {"F64", SafetensorsDType::kF64, 8},
    {"U64", SafetensorsDType::kU64, 8},
    {"I64", SafetensorsDType::kI64, 8},
    {"F8_E4M3", SafetensorsDType::kF8E4M3, 1},
    {"F8_E5M2", SafetensorsDType::kF8E5M2, 1},
    {"F8_E8M0", SafetensorsDType::kF8E8M0, 1},
    {"F8_E4M3FNUZ", SafetensorsDType::kF8E4M3Fnuz, 1},
    {"F8_E5M2FNUZ", SafetensorsDType::kF8E5M2Fnuz, 1},
    {"C64", SafetensorsDType::kC64, 8},
}};

// Sub-byte types the format defines; their bit-packing rules are not implemented here.
constexpr std::array<std::string_view, 3> kPackedDTypes = {"F4", "F6_E2M3", "F6_E3M2"};

const DTypeEntry& entry_of(SafetensorsDType dtype) {
  return kDTypes[static_cast<size_t>(dtype)];  // kDTypes is in enum order
}

std::optional<SafetensorsDType> parse_dtype(std::string_view name) {
  for (const DTypeEntry& e : kDTypes) {
    if (e.name == name) return e.dtype;
  }
  return std::nullopt;
}

std::optional<SafetensorsDType> to_file_dtype(DType dtype) {
  switch (dtype) {
    case DType::kF32:
      return SafetensorsDType::kF32;
    case DType::kF16:
      return SafetensorsDType::kF16;
    case DType::kBF16:
      return SafetensorsDType::kBF16;
    case DType::kI8:
      return SafetensorsDType::kI8;
    case DType::kU8:
      return SafetensorsDType::kU8;
    case DType::kI32:
      return SafetensorsDType::kI32;
    case DType::kI64:
      return SafetensorsDType::kI64;
    case DType::kI4:
      return std::nullopt;
  }
  return std::nullopt;
}

// A non-negative JSON integer that fits in int64, or nullopt.
std::optional<int64_t> non_negative_int(const Json& v) {
  if (v.is_number_unsigned()) {
    const auto u = v.get<uint64_t>();
    if (u > static_cast<uint64_t>(std::numeric_limits<int64_t>::max())) return std::nullopt;
    return static_cast<int64_t>(u);
  }
  if (v.is_number_integer()) {
    const auto i = v.get<int64_t>();
    if (i < 0) return std::nullopt;
    return i;
  }
  return std::nullopt;
}

std::string describe_value(const Json& v) {
  // Numbers are short and say what was wrong with them; anything else is named by its type.
  if (v.is_number()) return v.dump();
  return io_json::type_name(v);
}

// One header entry, validated on its own (everything but its place among the others).
struct Entry {
  TensorInfo info;
  int64_t begin = 0;
  int64_t end = 0;
};

Result<Entry> parse_entry(const std::string& file, const std::string& name, const Json& value,
                          int64_t data_bytes) {
  Entry e;
  e.info.name = name;
  e.info.file = file;
  if (!value.is_object()) {
    return data_loss("{}: tensor \"{}\": header entry must be an object, got {}", file, name,
                     io_json::type_name(value));
  }
  for (const char* field : {"dtype", "shape", "data_offsets"}) {
    if (!value.contains(field)) {
      return data_loss("{}: tensor \"{}\": header entry has no \"{}\"", file, name, field);
    }
  }

  const Json& dtype = value["dtype"];
  if (!dtype.is_string()) {
    return data_loss("{}: tensor \"{}\": \"dtype\" must be a string, got {}", file, name,
                     io_json::type_name(dtype));
  }
  const auto& dtype_str = dtype.get_ref<const std::string&>();
  const auto file_dtype = parse_dtype(dtype_str);
  if (!file_dtype) {
    if (std::find(kPackedDTypes.begin(), kPackedDTypes.end(), dtype_str) != kPackedDTypes.end()) {
      return unimplemented("{}: tensor \"{}\": packed sub-byte dtype {} is not supported", file,
                           name, dtype_str);
    }
    return data_loss("{}: tensor \"{}\": unknown dtype \"{}\"", file, name, dtype_str);
  }
  e.info.file_dtype = *file_dtype;
  e.info.dtype = core_dtype(*file_dtype);

  const Json& shape = value["shape"];
  if (!shape.is_array()) {
    return data_loss("{}: tensor \"{}\": \"shape\" must be an array, got {}", file, name,
                     io_json::type_name(shape));
  }
  // The running product is checked at every step (as the reference reader does), so a zero dim
  // after two huge ones is still an overflow rather than an accidental 0.
  int64_t numel = 1;
  for (size_t i = 0; i < shape.size(); ++i) {
    const auto dim = non_negative_int(shape[i]);
    if (!dim) {
      return data_loss("{}: tensor \"{}\": shape[{}] must be a non-negative integer, got {}", file,
                       name, i, describe_value(shape[i]));
    }
    e.info.shape.push_back(*dim);
    if (__builtin_mul_overflow(numel, *dim, &numel)) {
      return data_loss("{}: tensor \"{}\": element count of shape overflows 64 bits", file, name);
    }
  }
  const int64_t element_bytes = safetensors_dtype_size(*file_dtype);
  if (__builtin_mul_overflow(numel, element_bytes, &e.info.nbytes)) {
    return data_loss("{}: tensor \"{}\": byte size of shape overflows 64 bits", file, name);
  }

  const Json& offsets = value["data_offsets"];
  if (!offsets.is_array() || offsets.size() != 2) {
    return data_loss("{}: tensor \"{}\": \"data_offsets\" must be an array of two integers", file,
                     name);
  }
  const auto begin = non_negative_int(offsets[0]);
  const auto end = non_negative_int(offsets[1]);
  if (!begin || !end) {
    return data_loss("{}: tensor \"{}\": data_offsets must be non-negative integers, got [{}, {}]",
                     file, name, describe_value(offsets[0]), describe_value(offsets[1]));
  }
  if (*end < *begin) {
    return data_loss("{}: tensor \"{}\": data_offsets end {} is before begin {}", file, name, *end,
                     *begin);
  }
  if (*end > data_bytes) {
    return data_loss("{}: tensor \"{}\": data_offsets end {} is beyond the {}-byte data section",
                     file, name, *end, data_bytes);
  }
  if (*end - *begin != e.info.nbytes) {
    return data_loss(
        "{}: tensor \"{}\": data_offsets span {} bytes, but {} {} elements of shape [{}] need {}",
        file, name, *end - *begin, numel, dtype_str, fmt::join(e.info.shape, ", "), e.info.nbytes);
  }
  e.begin = *begin;
  e.end = *end;
  return e;
}

Status parse_metadata(const std::string& file, const Json& value,
                      std::map<std::string, std::string>* out) {
  if (value.is_null()) return {};  // the reference reader treats null as "no metadata"
  if (!value.is_object()) {
    return data_loss("{}: \"__metadata__\" must be an object of strings, got {}", file,
                     io_json::type_name(value));
  }
  for (const auto& [key, v] : value.items()) {
    if (!v.is_string()) {
      return data_loss("{}: \"__metadata__\" value of \"{}\" must be a string, got {}", file, key,
                       io_json::type_name(v));
    }
    (*out)[key] = v.get<std::string>();
  }
  return {};
}

}  // namespace

std::string_view safetensors_dtype_name(SafetensorsDType dtype) {
  return entry_of(dtype).name;
}

int safetensors_dtype_size(SafetensorsDType dtype) {
  return entry_of(dtype).size_bytes;
}

std::optional<DType> core_dtype(SafetensorsDType dtype) {
  switch (dtype) {
    case SafetensorsDType::kF32:
      return DType::kF32;
    case SafetensorsDType::kF16:
      return DType::kF16;
    case SafetensorsDType::kBF16:
      return DType::kBF16;
    case SafetensorsDType::kI8:
      return DType::kI8;
    case SafetensorsDType::kU8:
      return DType::kU8;
    case SafetensorsDType::kI32:
      return DType::kI32;
    case SafetensorsDType::kI64:
      return DType::kI64;
    default:
      return std::nullopt;
  }
}

int64_t TensorInfo::numel() const {
  int64_t n = 1;
  for (int64_t d : shape) n *= d;  // validated not to overflow
  return n;
}

Result<std::unique_ptr<SafetensorsFile>> SafetensorsFile::open(const std::filesystem::path& path) {
  LS_ASSIGN_OR_RETURN(FileBytes storage, FileBytes::map(path));
  return from_storage(path.string(), std::move(storage));
}

Result<std::unique_ptr<SafetensorsFile>> SafetensorsFile::from_memory(std::string name,
                                                                      std::vector<uint8_t> bytes) {
  return from_storage(std::move(name), FileBytes::own(std::move(bytes)));
}

Result<std::unique_ptr<SafetensorsFile>> SafetensorsFile::from_memory(
    std::string name, std::unique_ptr<uint8_t[]> bytes, size_t size) {
  return from_storage(std::move(name), FileBytes::own(std::move(bytes), size));
}

Result<std::unique_ptr<SafetensorsFile>> SafetensorsFile::from_storage(std::string name,
                                                                      FileBytes storage) {
  std::unique_ptr<SafetensorsFile> file(new (std::nothrow) SafetensorsFile());
  if (!file) return resource_exhausted("{}: out of memory", name);
  file->name_ = std::move(name);
  file->storage_ = std::move(storage);
  file->bytes_ = file->storage_.data();
  file->size_bytes_ = file->storage_.size();
  LS_RETURN_IF_ERROR(file->parse());
  return file;
}

const TensorInfo* SafetensorsFile::find(std::string_view name) const {
  auto it = index_.find(name);
  return it == index_.end() ? nullptr : &tensors_[it->second];
}

Status SafetensorsFile::parse() {
  const std::string& file = name_;
  if (size_bytes_ < 8) {
    return data_loss("{}: file is {} bytes, shorter than the 8-byte header length", file,
                     size_bytes_);
  }
  uint64_t header_bytes = 0;
  for (int i = 7; i >= 0; --i) header_bytes = (header_bytes << 8) | bytes_[i];  // little-endian
  if (header_bytes > kMaxHeaderBytes) {
    return data_loss("{}: header length {} exceeds the {}-byte limit", file, header_bytes,
                     kMaxHeaderBytes);
  }
  if (header_bytes > size_bytes_ - 8) {
    return data_loss("{}: header length {} is beyond the end of the file ({} bytes)", file,
                     header_bytes, size_bytes_);
  }
  const std::string_view header(reinterpret_cast<const char*>(bytes_ + 8), header_bytes);
  const uint8_t* data = bytes_ + 8 + header_bytes;
  const auto data_bytes = static_cast<int64_t>(size_bytes_ - 8 - header_bytes);

  // Depth 3 is the deepest a valid header nests (root / entry / shape); deeper input is rejected
  // before a DOM is built.
  auto parsed = io_json::parse(header, {.reject_duplicate_keys = true, .max_depth = 3});
  if (!parsed.ok()) {
    return Status(parsed.status().code(),
                  fmt::format("{}: header is not valid: {}", file, parsed.status().message()));
  }
  const Json& root = *parsed;
  if (!root.is_object()) {
    return data_loss("{}: header must be a JSON object, got {}", file, io_json::type_name(root));
  }

  std::vector<Entry> entries;
  entries.reserve(root.size());
  for (const auto& [key, value] : root.items()) {
    if (key == "__metadata__") {
      LS_RETURN_IF_ERROR(parse_metadata(file, value, &metadata_));
      continue;
    }
    LS_ASSIGN_OR_RETURN(Entry e, parse_entry(file, key, value, data_bytes));
    entries.push_back(std::move(e));
  }

  // The tensors must tile the data section exactly: sorted by offsets, each begins where the
  // previous one ended, and the last ends at the end of the file. Empty tensors may share an
  // offset with a neighbour.
  std::sort(entries.begin(), entries.end(), [](const Entry& a, const Entry& b) {
    return a.begin != b.begin ? a.begin < b.begin : a.end < b.end;
  });
  int64_t covered = 0;
  const Entry* previous = nullptr;
  for (const Entry& e : entries) {
    if (e.begin > covered) {
      return data_loss("{}: tensor \"{}\": data bytes [{}, {}) before it belong to no tensor", file,
                       e.info.name, covered, e.begin);
    }
    if (e.begin < covered) {
      return data_loss("{}: tensor \"{}\" (bytes [{}, {})) overlaps tensor \"{}\" (bytes [{}, {}))",
                       file, e.info.name, e.begin, e.end, previous->info.name, previous->begin,
                       previous->end);
    }
    covered = e.end;
    previous = &e;
  }
  if (covered != data_bytes) {
    return data_loss("{}: data bytes [{}, {}) after the last tensor belong to no tensor", file,
                     covered, data_bytes);
  }

  tensors_.reserve(entries.size());
  for (Entry& e : entries) {
    e.info.data = data + e.begin;
    index_.emplace(e.info.name, tensors_.size());
    tensors_.push_back(std::move(e.info));
  }
  return {};
}

Status write_safetensors(const std::filesystem::path& path,
                         const std::vector<TensorToWrite>& tensors,
                         const std::map<std::string, std::string>& metadata) {
  const std::string file = path.string();
  try {
    Json header = Json::object();
    if (!metadata.empty()) {
      Json meta = Json::object();
      for (const auto& [k, v] : metadata) meta[k] = v;
      header["__metadata__"] = std::move(meta);
    }
    std::set<std::string_view> seen;
    std::vector<int64_t> sizes;
    int64_t offset = 0;
    for (const TensorToWrite& t : tensors) {
      if (t.name == "__metadata__") {
        return invalid_argument("{}: \"__metadata__\" is reserved, not a tensor name", file);
      }
      if (!seen.insert(t.name).second) {
        return invalid_argument("{}: tensor \"{}\" given twice", file, t.name);
      }
      const auto file_dtype = to_file_dtype(t.dtype);
      if (!file_dtype) {
        return unimplemented("{}: tensor \"{}\": dtype {} has no safetensors equivalent", file,
                             t.name, dtype_name(t.dtype));
      }
      int64_t nbytes = safetensors_dtype_size(*file_dtype);
      for (int64_t d : t.shape) {
        if (d < 0) {
          return invalid_argument("{}: tensor \"{}\": negative dim {}", file, t.name, d);
        }
        if (__builtin_mul_overflow(nbytes, d, &nbytes)) {
          return invalid_argument("{}: tensor \"{}\": size overflows", file, t.name);
        }
      }
      if (nbytes > 0 && t.data == nullptr) {
        return invalid_argument("{}: tensor \"{}\": data is null", file, t.name);
      }
      header[t.name] = {{"dtype", safetensors_dtype_name(*file_dtype)},
                        {"shape", t.shape},
                        {"data_offsets", {offset, offset + nbytes}}};
      sizes.push_back(nbytes);
      offset += nbytes;
    }
    std::string text = header.dump();
    text.append((8 - text.size() % 8) % 8, ' ');

    std::filesystem::path tmp = path;
    tmp += ".tmp";
    {
      std::ofstream out(tmp, std::ios::binary | std::ios::trunc);
      if (!out) return io_error("{}: cannot create {}", file, tmp.string());
      std::array<char, 8> len{};
      uint64_t n = text.size();
      for (char& c : len) {
        c = static_cast<char>(n & 0xff);
        n >>= 8;
      }
      out.write(len.data(), len.size());
      out.write(text.data(), static_cast<std::streamsize>(text.size()));
      for (size_t i = 0; i < tensors.size(); ++i) {
        out.write(static_cast<const char*>(tensors[i].data), sizes[i]);
      }
      out.flush();
      if (!out) return io_error("{}: write failed", tmp.string());
    }
    std::error_code ec;
    std::filesystem::rename(tmp, path, ec);
    if (ec) return io_error("{}: cannot rename {}: {}", file, tmp.string(), ec.message());
    return {};
  } catch (const Json::type_error& e) {
    // dump() refuses strings that are not UTF-8.
    return invalid_argument("{}: a tensor name or metadata string is not valid UTF-8 ({})", file,
                            e.what());
  } catch (const std::bad_alloc&) {
    return resource_exhausted("{}: out of memory", file);
  } catch (const std::exception& e) {
    return internal_error("{}: {}", file, e.what());
  }
}

}  // namespace ls
