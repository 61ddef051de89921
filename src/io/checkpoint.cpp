#include "io/checkpoint.h"

#include <algorithm>
#include <memory>
#include <set>
#include <utility>
#include <vector>

#include "core/log.h"
#include "io/json_util.h"

namespace ls {
namespace {

using io_json::Json;

constexpr const char* kSingleFile = "model.safetensors";
constexpr const char* kIndexFile = "model.safetensors.index.json";
// How many names an error or warning lists before it only gives the count.
constexpr size_t kNamesShown = 5;

std::string first_names(const std::vector<std::string>& names) {
  std::string out;
  for (size_t i = 0; i < names.size() && i < kNamesShown; ++i) {
    if (i > 0) out += ", ";
    out += names[i];
  }
  if (names.size() > kNamesShown) out += fmt::format(", ... ({} more)", names.size() - kNamesShown);
  return out;
}

// A shard name from the index must stay inside the checkpoint directory.
bool is_safe_relative(const std::string& name) {
  if (name.empty()) return false;
  const std::filesystem::path p(name);
  if (p.is_absolute() || p.has_root_name() || p.has_root_directory()) return false;
  for (const auto& part : p) {
    if (part == "..") return false;
  }
  return true;
}

}  // namespace

Result<Checkpoint> Checkpoint::open(const std::filesystem::path& dir) {
  try {
    Checkpoint ckpt;
    ckpt.dir_ = dir;
    std::error_code ec;
    if (!std::filesystem::is_directory(dir, ec)) {
      return not_found("checkpoint {}: not a directory", dir.string());
    }

    const auto single = dir / kSingleFile;
    if (std::filesystem::exists(single, ec)) {
      LS_ASSIGN_OR_RETURN(auto file, SafetensorsFile::open(single));
      for (const TensorInfo& t : file->tensors()) ckpt.tensors_.emplace(t.name, &t);
      ckpt.files_.push_back(std::move(file));
      return ckpt;
    }

    const auto index_path = dir / kIndexFile;
    if (!std::filesystem::exists(index_path, ec)) {
      return not_found("checkpoint {}: neither {} nor {} exists", dir.string(), kSingleFile,
                       kIndexFile);
    }
    const std::string index_name = index_path.string();
    LS_ASSIGN_OR_RETURN(std::string text, io_json::read_file(index_path));
    auto parsed = io_json::parse(text, {.reject_duplicate_keys = true, .max_depth = 16});
    if (!parsed.ok()) {
      return Status(parsed.status().code(),
                    fmt::format("{}: {}", index_name, parsed.status().message()));
    }
    const Json& index = *parsed;
    if (!index.is_object()) {
      return data_loss("{}: must be a JSON object, got {}", index_name, io_json::type_name(index));
    }
    auto wm = index.find("weight_map");
    if (wm == index.end()) return data_loss("{}: no \"weight_map\"", index_name);
    if (!wm->is_object()) {
      return data_loss("{}: \"weight_map\" must be an object, got {}", index_name,
                       io_json::type_name(*wm));
    }
    if (wm->empty()) return data_loss("{}: \"weight_map\" lists no tensors", index_name);

    // tensor -> shard name, and the distinct shard names (sorted, so files_ has a stable order).
    std::map<std::string, std::string> weight_map;
    std::set<std::string> shard_names;
    for (const auto& [tensor, shard] : wm->items()) {
      if (!shard.is_string()) {
        return data_loss("{}: weight_map entry of tensor \"{}\" must be a file name, got {}",
                         index_name, tensor, io_json::type_name(shard));
      }
      const auto& shard_name = shard.get_ref<const std::string&>();
      if (!is_safe_relative(shard_name)) {
        return data_loss("{}: tensor \"{}\" maps to \"{}\", which is not a file inside {}",
                         index_name, tensor, shard_name, dir.string());
      }
      weight_map.emplace(tensor, shard_name);
      shard_names.insert(shard_name);
    }

    std::map<std::string, SafetensorsFile*> shards;
    for (const std::string& shard_name : shard_names) {
      const auto shard_path = dir / shard_name;
      if (!std::filesystem::exists(shard_path, ec)) {
        return not_found("{}: shard {} does not exist", index_name, shard_path.string());
      }
      LS_ASSIGN_OR_RETURN(auto file, SafetensorsFile::open(shard_path));
      shards.emplace(shard_name, file.get());
      ckpt.files_.push_back(std::move(file));
    }

    // Every name in any shard -> the shard holding it; a second holder is an error.
    std::map<std::string_view, const SafetensorsFile*> holder;
    for (const auto& file : ckpt.files_) {
      for (const TensorInfo& t : file->tensors()) {
        auto [it, inserted] = holder.emplace(t.name, file.get());
        if (!inserted) {
          return data_loss("checkpoint {}: tensor \"{}\" is in both {} and {}", dir.string(),
                           t.name, it->second->name(), file->name());
        }
      }
    }

    int64_t indexed_bytes = 0;
    for (const auto& [tensor, shard_name] : weight_map) {
      const SafetensorsFile* shard = shards.at(shard_name);
      const TensorInfo* info = shard->find(tensor);
      if (info == nullptr) {
        return data_loss("{}: tensor \"{}\" is indexed in {}, but that file has no such tensor",
                         index_name, tensor, shard->name());
      }
      ckpt.tensors_.emplace(tensor, info);
      indexed_bytes += info->nbytes;
    }

    std::vector<std::string> unindexed;
    for (const auto& [name, file] : holder) {
      if (!weight_map.count(std::string(name))) unindexed.emplace_back(name);
    }
    if (!unindexed.empty()) {
      LS_LOG_WARN("{}: ignoring {} tensor(s) present in shards but not in the index: {}",
                  index_name, unindexed.size(), first_names(unindexed));
    }

    if (auto meta = index.find("metadata"); meta != index.end() && !meta->is_null()) {
      if (!meta->is_object()) {
        return data_loss("{}: \"metadata\" must be an object, got {}", index_name,
                         io_json::type_name(*meta));
      }
      auto total = meta->find("total_size");
      if (total != meta->end() && !total->is_null()) {
        if (!total->is_number()) {
          LS_LOG_WARN("{}: ignoring metadata.total_size, which is {}, not a number", index_name,
                      io_json::type_name(*total));
        } else if (total->get<double>() != static_cast<double>(indexed_bytes)) {
          LS_LOG_WARN("{}: metadata.total_size is {}, but the indexed tensors hold {} bytes",
                      index_name, total->dump(), indexed_bytes);
        }
      }
    }
    return ckpt;
  } catch (const std::bad_alloc&) {
    return resource_exhausted("checkpoint {}: out of memory", dir.string());
  } catch (const std::exception& e) {
    return internal_error("checkpoint {}: {}", dir.string(), e.what());
  }
}

Checkpoint Checkpoint::from_file(std::filesystem::path dir,
                                 std::unique_ptr<SafetensorsFile> file) {
  Checkpoint ckpt;
  ckpt.dir_ = std::move(dir);
  for (const TensorInfo& t : file->tensors()) ckpt.tensors_.emplace(t.name, &t);
  ckpt.files_.push_back(std::move(file));
  return ckpt;
}

Result<Checkpoint> Checkpoint::from_tensors(std::filesystem::path dir,
                                            std::vector<TensorInfo> tensors,
                                            std::shared_ptr<const void> owner) {
  Checkpoint ckpt;
  ckpt.dir_ = std::move(dir);
  // The infos live on the heap (held below), so the map's pointers survive moves.
  auto infos = std::make_shared<const std::vector<TensorInfo>>(std::move(tensors));
  for (const TensorInfo& t : *infos) {
    if (!ckpt.tensors_.emplace(t.name, &t).second) {
      return internal_error("checkpoint {}: tensor {} given twice", ckpt.dir_.string(), t.name);
    }
  }
  ckpt.keep_alive_.push_back(std::move(infos));
  if (owner) ckpt.keep_alive_.push_back(std::move(owner));
  return ckpt;
}

Result<const TensorInfo*> Checkpoint::get(std::string_view name) const {
  const TensorInfo* info = find(name);
  if (info == nullptr)
    return not_found("tensor {} not found in checkpoint {}", name, dir_.string());
  return info;
}

const TensorInfo* Checkpoint::find(std::string_view name) const {
  auto it = tensors_.find(name);
  return it == tensors_.end() ? nullptr : it->second;
}

void Checkpoint::add_quantized(QuantizedTensorInfo info) {
  std::string name = info.name;
  quantized_.insert_or_assign(std::move(name), std::move(info));
}

const QuantizedTensorInfo* Checkpoint::find_quantized(std::string_view name) const {
  auto it = quantized_.find(name);
  return it == quantized_.end() ? nullptr : &it->second;
}

std::vector<std::string> Checkpoint::names() const {
  std::vector<std::string> out;
  out.reserve(tensors_.size());
  for (const auto& [name, info] : tensors_) out.push_back(name);
  return out;
}

int64_t Checkpoint::total_bytes() const {
  int64_t total = 0;
  for (const auto& [name, info] : tensors_) total += info->nbytes;
  return total;
}

Status Checkpoint::check_names(const std::vector<std::string>& required,
                               const std::vector<std::string>& optional) const {
  std::vector<std::string> missing;
  std::set<std::string_view> expected;
  for (const std::string& name : required) {
    expected.insert(name);
    if (find(name) == nullptr && find_quantized(name) == nullptr) missing.push_back(name);
  }
  for (const std::string& name : optional) expected.insert(name);
  std::vector<std::string> unexpected;
  for (const auto& [name, info] : tensors_) {
    if (!expected.count(name)) unexpected.push_back(name);
  }
  for (const auto& [name, info] : quantized_) {
    if (!expected.count(name) && find(name) == nullptr) unexpected.push_back(name);
  }
  std::sort(missing.begin(), missing.end());
  missing.erase(std::unique(missing.begin(), missing.end()), missing.end());
  if (missing.empty() && unexpected.empty()) return {};

  std::string message = fmt::format("checkpoint {}:", dir_.string());
  if (!missing.empty()) {
    message += fmt::format(" {} missing tensor(s): {}", missing.size(), first_names(missing));
  }
  if (!unexpected.empty()) {
    if (!missing.empty()) message += ";";
    message +=
        fmt::format(" {} unexpected tensor(s): {}", unexpected.size(), first_names(unexpected));
  }
  return Status(missing.empty() ? StatusCode::kInvalidArgument : StatusCode::kNotFound, message);
}

Status Checkpoint::check_tensor(const TensorInfo& info, std::initializer_list<int64_t> shape,
                                std::initializer_list<DType> allowed) const {
  if (!std::equal(info.shape.begin(), info.shape.end(), shape.begin(), shape.end())) {
    return invalid_argument("{} in {} has shape [{}], expected [{}]", info.name, info.file,
                            fmt::join(info.shape, ", "), fmt::join(shape, ", "));
  }
  const bool ok =
      info.dtype && std::find(allowed.begin(), allowed.end(), *info.dtype) != allowed.end();
  if (!ok) {
    std::vector<std::string_view> names;
    for (DType d : allowed) names.push_back(dtype_name(d));
    return invalid_argument("{} in {} has dtype {}, expected {}", info.name, info.file,
                            safetensors_dtype_name(info.file_dtype),
                            names.size() == 1 ? std::string(names[0])
                                              : fmt::format("one of {}", fmt::join(names, ", ")));
  }
  return {};
}

}  // namespace ls
