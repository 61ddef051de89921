#pragma once
// A Hugging Face checkpoint directory: `model.safetensors`, or shards listed in
// `model.safetensors.index.json` ({"metadata": {"total_size": N}, "weight_map": {tensor: file}}).
// When both exist the single file wins, as in transformers.
//
// Opening validates the whole directory up front, so later lookups cannot fail halfway through a
// model load:
// - the index is well-formed JSON, "weight_map" is an object of tensor -> relative file name
//   (absolute names and ".." are refused: shards live inside the directory);
// - every shard exists and passes SafetensorsFile's validation;
// - every indexed tensor is present in the shard the index names for it;
// - no tensor name appears in two shards (even if the index names only one of them).
// Deliberate leniencies, each logged as a warning:
// - tensors present in a shard but absent from the index are ignored (not visible through get()
//   or names()): the index is the manifest transformers loads by, and a stale extra tensor should
//   not make an otherwise complete checkpoint unusable; a required tensor that is only present
//   that way is still reported missing by check_names.
// - metadata.total_size that disagrees with the sum of the indexed tensors' bytes is only warned
//   about: writers compute it inconsistently (shared tensors, padding), and the per-tensor checks
//   above are what guarantee the data is there.

#include <cstdint>
#include <filesystem>
#include <initializer_list>
#include <map>
#include <memory>
#include <string>
#include <string_view>
#include <vector>

#include "core/dtype.h"
#include "core/status.h"
#include "io/gguf.h"
#include "io/safetensors.h"

namespace ls {

// A weight kept in ggml's quantized blocks instead of being converted (a GGUF model loaded for a
// backend that reads the blocks directly).
struct QuantizedTensorInfo {
  std::string name;  // the Hugging Face name
  GgmlType type = GgmlType::kQ8_0;
  const uint8_t* data = nullptr;  // [rows] rows of cols / block elems blocks; any alignment
  int64_t rows = 0;
  int64_t cols = 0;
  int64_t nbytes = 0;
  std::string file;  // for messages
};

class Checkpoint {
 public:
  static Result<Checkpoint> open(const std::filesystem::path& dir);
  // A checkpoint made of one already validated file (a GGUF model converted in memory); `dir` is
  // what messages name.
  static Checkpoint from_file(std::filesystem::path dir, std::unique_ptr<SafetensorsFile> file);
  // A checkpoint of tensors already in memory (a tensor-parallel rank's slices): each data
  // pointer must stay valid while `owner` (held by the checkpoint) or memory the caller keeps
  // alive does. A name given twice is an internal error.
  static Result<Checkpoint> from_tensors(std::filesystem::path dir, std::vector<TensorInfo> tensors,
                                         std::shared_ptr<const void> owner);

  // kNotFound "tensor <name> not found in checkpoint <dir>" when absent.
  Result<const TensorInfo*> get(std::string_view name) const;
  // nullptr when absent (for optional tensors such as lm_head.weight).
  const TensorInfo* find(std::string_view name) const;
  // Sorted.
  std::vector<std::string> names() const;

  // Every `required` name must be present, and every present name must be in `required` or
  // `optional`. One error reports both the missing and the unexpected tensors, each as a count and
  // the first few names (kNotFound when anything is missing, else kInvalidArgument).
  Status check_names(const std::vector<std::string>& required,
                     const std::vector<std::string>& optional = {}) const;

  // The tensor's shape must equal `shape` and its dtype be one of `allowed`, e.g.
  // "model.layers.3.self_attn.q_proj.weight in /p/model-00001-of-00002.safetensors has shape
  // [64, 32], expected [64, 64]" (kInvalidArgument). A tensor whose file dtype core cannot name
  // (F64, F8_*, ...) never passes.
  Status check_tensor(const TensorInfo& info, std::initializer_list<int64_t> shape,
                      std::initializer_list<DType> allowed) const;

  // Quantized tensors: a name may be both quantized and in get() (a GGUF embedding table, which
  // the loader dequantizes for lookups and keeps quantized for a tied lm_head), or only
  // quantized. check_names counts both kinds as present. The data lives as long as any copy of
  // keep_alive() (the mapped file and any reordered copies).
  void add_quantized(QuantizedTensorInfo info);
  const QuantizedTensorInfo* find_quantized(std::string_view name) const;
  void hold(std::shared_ptr<const void> owner) { keep_alive_.push_back(std::move(owner)); }
  const std::vector<std::shared_ptr<const void>>& keep_alive() const { return keep_alive_; }

  const std::filesystem::path& dir() const { return dir_; }
  // The safetensors files opened, in the order of their names.
  size_t num_files() const { return files_.size(); }
  // Sum of the visible tensors' bytes.
  int64_t total_bytes() const;

 private:
  Checkpoint() = default;

  std::filesystem::path dir_;
  std::vector<std::unique_ptr<SafetensorsFile>> files_;
  // The visible tensors; the pointers stay valid when a Checkpoint is moved because they point
  // into the heap-allocated SafetensorsFiles (or from_tensors' infos, held in keep_alive_).
  std::map<std::string, const TensorInfo*, std::less<>> tensors_;
  std::map<std::string, QuantizedTensorInfo, std::less<>> quantized_;
  std::vector<std::shared_ptr<const void>> keep_alive_;
};

}  // namespace ls
