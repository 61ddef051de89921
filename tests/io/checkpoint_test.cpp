#include "io/checkpoint.h"

#include <gtest/gtest.h>

#include <cstring>

#include "io_test_util.h"

namespace ls {
namespace {

using io_test::TempDir;
using io_test::write_text;

// Deterministic f32 contents so a test can tell tensors (and shards) apart by value.
std::vector<float> ramp(size_t n, float start) {
  std::vector<float> v(n);
  for (size_t i = 0; i < n; ++i) v[i] = start + static_cast<float>(i);
  return v;
}

float first_value(const TensorInfo& t) {
  float v;
  std::memcpy(&v, t.data, sizeof v);
  return v;
}

// Values live here so TensorToWrite pointers stay valid while files are written.
struct Weights {
  std::vector<float> embed = ramp(8 * 4, 100);                                   // [8, 4]
  std::vector<float> q = ramp(4 * 4, 200);                                       // [4, 4]
  std::vector<float> norm = ramp(4, 300);                                        // [4]
  std::vector<uint16_t> head = std::vector<uint16_t>(8 * 4, f32_to_bf16(0.5f));  // [8, 4] bf16
};

void write_single(const TempDir& dir, const Weights& w) {
  ASSERT_TRUE(write_safetensors(
                  dir / "model.safetensors",
                  {{"model.embed_tokens.weight", DType::kF32, {8, 4}, w.embed.data()},
                   {"model.layers.0.self_attn.q_proj.weight", DType::kF32, {4, 4}, w.q.data()},
                   {"model.norm.weight", DType::kF32, {4}, w.norm.data()},
                   {"lm_head.weight", DType::kBF16, {8, 4}, w.head.data()}})
                  .ok());
}

// Two shards: embed + q in shard 1, norm + lm_head in shard 2.
void write_sharded(const TempDir& dir, const Weights& w, const std::string& index_json = "") {
  ASSERT_TRUE(write_safetensors(
                  dir / "model-00001-of-00002.safetensors",
                  {{"model.embed_tokens.weight", DType::kF32, {8, 4}, w.embed.data()},
                   {"model.layers.0.self_attn.q_proj.weight", DType::kF32, {4, 4}, w.q.data()}})
                  .ok());
  ASSERT_TRUE(write_safetensors(dir / "model-00002-of-00002.safetensors",
                                {{"model.norm.weight", DType::kF32, {4}, w.norm.data()},
                                 {"lm_head.weight", DType::kBF16, {8, 4}, w.head.data()}})
                  .ok());
  const std::string index = index_json.empty() ? R"({
    "metadata": {"total_size": 272},
    "weight_map": {
      "lm_head.weight": "model-00002-of-00002.safetensors",
      "model.embed_tokens.weight": "model-00001-of-00002.safetensors",
      "model.layers.0.self_attn.q_proj.weight": "model-00001-of-00002.safetensors",
      "model.norm.weight": "model-00002-of-00002.safetensors"
    }})"
                                               : index_json;
  write_text(dir / "model.safetensors.index.json", index);
}

const std::vector<std::string> kAllNames = {"lm_head.weight", "model.embed_tokens.weight",
                                            "model.layers.0.self_attn.q_proj.weight",
                                            "model.norm.weight"};

void expect_error(const Result<Checkpoint>& r, StatusCode code,
                  std::initializer_list<std::string> fragments) {
  ASSERT_FALSE(r.ok());
  EXPECT_EQ(r.status().code(), code) << r.status().to_string();
  for (const std::string& f : fragments) {
    EXPECT_NE(r.status().message().find(f), std::string::npos)
        << "missing \"" << f << "\" in: " << r.status().message();
  }
}

TEST(Checkpoint, SingleFile) {
  TempDir dir;
  Weights w;
  write_single(dir, w);
  auto ckpt = Checkpoint::open(dir.path());
  ASSERT_TRUE(ckpt.ok()) << ckpt.status().to_string();
  EXPECT_EQ(ckpt->names(), kAllNames);
  EXPECT_EQ(ckpt->num_files(), 1u);
  EXPECT_EQ(ckpt->total_bytes(), 128 + 64 + 16 + 64);
  auto q = ckpt->get("model.layers.0.self_attn.q_proj.weight");
  ASSERT_TRUE(q.ok());
  EXPECT_EQ(first_value(**q), 200.0f);
  EXPECT_EQ((*q)->file, (dir / "model.safetensors").string());
  EXPECT_TRUE(ckpt->check_names(kAllNames).ok());
}

TEST(Checkpoint, ShardedFollowsTheIndex) {
  TempDir dir;
  Weights w;
  write_sharded(dir, w);
  auto ckpt = Checkpoint::open(dir.path());
  ASSERT_TRUE(ckpt.ok()) << ckpt.status().to_string();
  EXPECT_EQ(ckpt->names(), kAllNames);
  EXPECT_EQ(ckpt->num_files(), 2u);
  const TensorInfo* norm = ckpt->find("model.norm.weight");
  ASSERT_NE(norm, nullptr);
  EXPECT_EQ(norm->file, (dir / "model-00002-of-00002.safetensors").string());
  EXPECT_EQ(first_value(*norm), 300.0f);
  EXPECT_EQ(first_value(*ckpt->find("model.embed_tokens.weight")), 100.0f);
  EXPECT_EQ(ckpt->total_bytes(), 272);

  // Moving the checkpoint keeps the tensor pointers valid (they point into heap-held files).
  Checkpoint moved = std::move(ckpt).value();
  EXPECT_EQ(first_value(*moved.find("model.norm.weight")), 300.0f);
}

TEST(Checkpoint, SingleFileWinsOverIndex) {
  TempDir dir;
  Weights w;
  write_text(dir / "model.safetensors.index.json", "not even json");
  write_single(dir, w);
  auto ckpt = Checkpoint::open(dir.path());
  ASSERT_TRUE(ckpt.ok()) << ckpt.status().to_string();
  EXPECT_EQ(ckpt->num_files(), 1u);
}

TEST(Checkpoint, UnindexedShardTensorIsIgnored) {
  TempDir dir;
  Weights w;
  write_sharded(dir, w, R"({"weight_map": {
      "model.embed_tokens.weight": "model-00001-of-00002.safetensors",
      "model.layers.0.self_attn.q_proj.weight": "model-00001-of-00002.safetensors",
      "model.norm.weight": "model-00002-of-00002.safetensors"}})");
  auto ckpt = Checkpoint::open(dir.path());
  ASSERT_TRUE(ckpt.ok()) << ckpt.status().to_string();
  EXPECT_EQ(ckpt->find("lm_head.weight"), nullptr);
  EXPECT_EQ(ckpt->names().size(), 3u);
}

TEST(Checkpoint, TotalSizeMismatchIsOnlyAWarning) {
  TempDir dir;
  Weights w;
  write_sharded(dir, w, R"({"metadata": {"total_size": 999}, "weight_map": {
      "lm_head.weight": "model-00002-of-00002.safetensors",
      "model.embed_tokens.weight": "model-00001-of-00002.safetensors",
      "model.layers.0.self_attn.q_proj.weight": "model-00001-of-00002.safetensors",
      "model.norm.weight": "model-00002-of-00002.safetensors"}})");
  EXPECT_TRUE(Checkpoint::open(dir.path()).ok());
}

// ---------------------------------------------------------------------------------------------
// Faults of the directory and the index

TEST(CheckpointFault, NotADirectory) {
  TempDir dir;
  expect_error(Checkpoint::open(dir / "missing"), StatusCode::kNotFound,
               {(dir / "missing").string(), "not a directory"});
}

TEST(CheckpointFault, NoWeights) {
  TempDir dir;
  expect_error(Checkpoint::open(dir.path()), StatusCode::kNotFound,
               {dir.path().string(), "model.safetensors.index.json"});
}

TEST(CheckpointFault, IndexFaults) {
  const std::string index_name = "model.safetensors.index.json";
  struct Case {
    const char* what;
    std::string index;
    std::vector<std::string> fragments;
  };
  const std::string shard1 = "model-00001-of-00002.safetensors";
  const std::vector<Case> cases = {
      {"malformed JSON", R"({"weight_map": {)", {index_name}},
      {"not an object", R"([1, 2])", {index_name, "must be a JSON object"}},
      {"no weight_map", R"({"metadata": {}})", {index_name, "no \"weight_map\""}},
      {"weight_map not an object",
       R"({"weight_map": ["a"]})",
       {index_name, "\"weight_map\" must be an object"}},
      {"empty weight_map", R"({"weight_map": {}})", {index_name, "lists no tensors"}},
      {"shard name not a string",
       R"({"weight_map": {"model.norm.weight": 2}})",
       {index_name, "model.norm.weight", "must be a file name"}},
      {"shard outside the directory",
       R"({"weight_map": {"model.norm.weight": "../x.safetensors"}})",
       {index_name, "model.norm.weight", "../x.safetensors"}},
      {"absolute shard path",
       R"({"weight_map": {"model.norm.weight": "/etc/passwd"}})",
       {index_name, "model.norm.weight", "/etc/passwd"}},
      {"duplicate key",
       R"({"weight_map": {"model.norm.weight": ")" + shard1 + R"(", "model.norm.weight": ")" +
           shard1 + R"("}})",
       {index_name, "duplicate key \"model.norm.weight\""}},
      {"metadata not an object",
       R"({"metadata": 5, "weight_map": {"model.norm.weight": ")" +
           std::string("model-00002-of-00002.safetensors") + R"("}})",
       {index_name, "\"metadata\" must be an object"}},
  };
  for (const Case& c : cases) {
    SCOPED_TRACE(c.what);
    TempDir dir;
    Weights w;
    write_sharded(dir, w, c.index);
    auto r = Checkpoint::open(dir.path());
    ASSERT_FALSE(r.ok());
    EXPECT_TRUE(r.status().code() == StatusCode::kDataLoss) << r.status().to_string();
    for (const std::string& f : c.fragments) {
      EXPECT_NE(r.status().message().find(f), std::string::npos) << r.status().message();
    }
  }
}

TEST(CheckpointFault, MissingShard) {
  TempDir dir;
  Weights w;
  write_sharded(dir, w);
  std::filesystem::remove(dir / "model-00002-of-00002.safetensors");
  expect_error(Checkpoint::open(dir.path()), StatusCode::kNotFound,
               {(dir / "model-00002-of-00002.safetensors").string(), "does not exist"});
}

TEST(CheckpointFault, DamagedShardNamesFileAndTensor) {
  TempDir dir;
  Weights w;
  write_sharded(dir, w);
  // Rewrite shard 2 so lm_head's offsets overrun the data section.
  const auto shard = dir / "model-00002-of-00002.safetensors";
  const std::string header =
      R"({"lm_head.weight":{"dtype":"BF16","shape":[8,4],"data_offsets":[16,80]},)"
      R"("model.norm.weight":{"dtype":"F32","shape":[4],"data_offsets":[0,16]}})";
  io_test::write_bytes(shard, io_test::raw_safetensors(header, io_test::zeros(64)));
  expect_error(Checkpoint::open(dir.path()), StatusCode::kDataLoss,
               {shard.string(), "lm_head.weight", "beyond the 64-byte data section"});
}

TEST(CheckpointFault, IndexedTensorAbsentFromItsShard) {
  TempDir dir;
  Weights w;
  // The index puts model.norm.weight in shard 1, but it is in shard 2.
  write_sharded(dir, w, R"({"weight_map": {
      "lm_head.weight": "model-00002-of-00002.safetensors",
      "model.embed_tokens.weight": "model-00001-of-00002.safetensors",
      "model.layers.0.self_attn.q_proj.weight": "model-00001-of-00002.safetensors",
      "model.norm.weight": "model-00001-of-00002.safetensors"}})");
  expect_error(Checkpoint::open(dir.path()), StatusCode::kDataLoss,
               {"model.safetensors.index.json", "model.norm.weight",
                (dir / "model-00001-of-00002.safetensors").string(), "no such tensor"});
}

TEST(CheckpointFault, TensorInTwoShards) {
  TempDir dir;
  Weights w;
  write_sharded(dir, w);
  // Shard 2 also carries a copy of the embedding.
  ASSERT_TRUE(
      write_safetensors(dir / "model-00002-of-00002.safetensors",
                        {{"model.norm.weight", DType::kF32, {4}, w.norm.data()},
                         {"lm_head.weight", DType::kBF16, {8, 4}, w.head.data()},
                         {"model.embed_tokens.weight", DType::kF32, {8, 4}, w.embed.data()}})
          .ok());
  expect_error(Checkpoint::open(dir.path()), StatusCode::kDataLoss,
               {"model.embed_tokens.weight", "model-00001-of-00002.safetensors",
                "model-00002-of-00002.safetensors", "in both"});
}

// ---------------------------------------------------------------------------------------------
// Lookups and the checks the model layer runs

TEST(Checkpoint, GetNamesTensorAndDirectory) {
  TempDir dir;
  Weights w;
  write_single(dir, w);
  auto ckpt = Checkpoint::open(dir.path());
  ASSERT_TRUE(ckpt.ok());
  auto missing = ckpt->get("model.layers.7.mlp.up_proj.weight");
  ASSERT_FALSE(missing.ok());
  EXPECT_EQ(missing.status().code(), StatusCode::kNotFound);
  EXPECT_EQ(missing.status().message(),
            "tensor model.layers.7.mlp.up_proj.weight not found in "
            "checkpoint " +
                dir.path().string());
  EXPECT_EQ(ckpt->find("model.layers.7.mlp.up_proj.weight"), nullptr);
}

TEST(Checkpoint, CheckNamesReportsMissingAndUnexpected) {
  TempDir dir;
  Weights w;
  write_single(dir, w);
  auto ckpt = Checkpoint::open(dir.path());
  ASSERT_TRUE(ckpt.ok());

  // lm_head is optional (tied embeddings): present or not, it passes.
  EXPECT_TRUE(ckpt->check_names({"model.embed_tokens.weight",
                                 "model.layers.0.self_attn.q_proj.weight", "model.norm.weight"},
                                {"lm_head.weight", "model.layers.0.self_attn.q_proj.bias"})
                  .ok());

  const Status missing = ckpt->check_names(
      {"model.embed_tokens.weight", "model.layers.0.self_attn.q_proj.weight", "model.norm.weight",
       "lm_head.weight", "model.layers.0.self_attn.k_proj.weight"});
  EXPECT_EQ(missing.code(), StatusCode::kNotFound);
  EXPECT_EQ(missing.message(), "checkpoint " + dir.path().string() +
                                   ": 1 missing tensor(s): model.layers.0.self_attn.k_proj.weight");

  const Status extra = ckpt->check_names({"model.embed_tokens.weight", "model.norm.weight"});
  EXPECT_EQ(extra.code(), StatusCode::kInvalidArgument);
  EXPECT_EQ(extra.message(), "checkpoint " + dir.path().string() +
                                 ": 2 unexpected tensor(s): lm_head.weight, "
                                 "model.layers.0.self_attn.q_proj.weight");

  // Both at once, and long lists are cut after five names with a count of the rest.
  std::vector<std::string> required = {"model.embed_tokens.weight"};
  for (int i = 0; i < 8; ++i) required.push_back(fmt::format("model.layers.{}.mlp.w", i));
  const Status both = ckpt->check_names(required);
  EXPECT_EQ(both.code(), StatusCode::kNotFound);
  EXPECT_EQ(both.message(),
            "checkpoint " + dir.path().string() +
                ": 8 missing tensor(s): model.layers.0.mlp.w, model.layers.1.mlp.w, "
                "model.layers.2.mlp.w, model.layers.3.mlp.w, model.layers.4.mlp.w, ... (3 more); "
                "3 unexpected tensor(s): lm_head.weight, model.layers.0.self_attn.q_proj.weight, "
                "model.norm.weight");
}

TEST(Checkpoint, CheckTensorShapeAndDtype) {
  TempDir dir;
  Weights w;
  write_sharded(dir, w);
  auto ckpt = Checkpoint::open(dir.path());
  ASSERT_TRUE(ckpt.ok());
  const TensorInfo& q = **ckpt->get("model.layers.0.self_attn.q_proj.weight");
  const std::string shard1 = (dir / "model-00001-of-00002.safetensors").string();

  EXPECT_TRUE(ckpt->check_tensor(q, {4, 4}, {DType::kF32, DType::kBF16}).ok());
  const Status shape = ckpt->check_tensor(q, {4, 8}, {DType::kF32});
  EXPECT_EQ(shape.code(), StatusCode::kInvalidArgument);
  EXPECT_EQ(shape.message(), "model.layers.0.self_attn.q_proj.weight in " + shard1 +
                                 " has shape [4, 4], expected [4, 8]");
  EXPECT_EQ(
      ckpt->check_tensor(q, {16}, {DType::kF32}).message(),
      "model.layers.0.self_attn.q_proj.weight in " + shard1 + " has shape [4, 4], expected [16]");

  const TensorInfo& head = **ckpt->get("lm_head.weight");
  const Status dtype = ckpt->check_tensor(head, {8, 4}, {DType::kF32, DType::kF16});
  EXPECT_EQ(dtype.code(), StatusCode::kInvalidArgument);
  EXPECT_EQ(dtype.message(), "lm_head.weight in " +
                                 (dir / "model-00002-of-00002.safetensors").string() +
                                 " has dtype BF16, expected one of f32, f16");
}

TEST(Checkpoint, CheckTensorRejectsDtypesCoreCannotName) {
  TempDir dir;
  // An F64 tensor, hand-built (the writer only speaks core dtypes).
  const std::string header = R"({"w":{"dtype":"F64","shape":[2],"data_offsets":[0,16]}})";
  io_test::write_bytes(dir / "model.safetensors",
                       io_test::raw_safetensors(header, io_test::zeros(16)));
  auto ckpt = Checkpoint::open(dir.path());
  ASSERT_TRUE(ckpt.ok()) << ckpt.status().to_string();
  const Status s = ckpt->check_tensor(**ckpt->get("w"), {2},
                                      {DType::kF32, DType::kF16, DType::kBF16, DType::kU8});
  EXPECT_EQ(s.message(), "w in " + (dir / "model.safetensors").string() +
                             " has dtype F64, expected one of f32, f16, bf16, u8");
}

}  // namespace
}  // namespace ls
