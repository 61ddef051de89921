#include "io/gguf.h"

#include <gtest/gtest.h>

#include <cstring>
#include <functional>
#include <string>
#include <vector>

#include "core/dtype.h"
#include "gguf_test_util.h"
#include "io_test_util.h"

namespace ls {
namespace {

using io_test::GgufBuilder;
using io_test::TempDir;
using B = GgufBuilder;

std::vector<uint8_t> f32_data(const std::vector<float>& v) { return B::bytes_of_vec(v); }

// A small valid file: a few metadata types and two tensors (an f32 matrix and a Q8_0 row).
GgufBuilder valid_builder() {
  GgufBuilder b;
  b.kv_str("general.architecture", "llama");
  b.kv_u32("llama.block_count", 2);
  b.kv_f32("llama.attention.layer_norm_rms_epsilon", 1e-5f);
  b.kv_bool("tokenizer.ggml.add_bos_token", true);
  b.kv_str_array("tokenizer.ggml.tokens", {"a", "b", "<s>"});
  b.kv_i32_array("tokenizer.ggml.token_type", {1, 1, 3});
  b.kv_f32_array("tokenizer.ggml.scores", {0.f, -1.f, 0.5f});
  b.kv_u64("big", ~0ull);
  b.tensor("w", {3, 2}, 0, f32_data({1, 2, 3, 4, 5, 6}));
  std::vector<uint8_t> q8(34, 0);
  const uint16_t half = f32_to_f16(0.5f);
  std::memcpy(q8.data(), &half, 2);
  for (int i = 0; i < 32; ++i) q8[2 + i] = static_cast<uint8_t>(static_cast<int8_t>(i - 16));
  b.tensor("q", {32}, 8, q8);
  return b;
}

TEST(Gguf, ValidFileThroughOpenAndFromMemory) {
  TempDir dir;
  const auto bytes = valid_builder().build();
  io_test::write_bytes(dir / "m.gguf", bytes);
  auto from_file = GgufFile::open(dir / "m.gguf");
  ASSERT_TRUE(from_file.ok()) << from_file.status().to_string();
  auto from_mem = GgufFile::from_memory("mem", bytes);
  ASSERT_TRUE(from_mem.ok()) << from_mem.status().to_string();
  for (const GgufFile* f : {from_file->get(), from_mem->get()}) {
    EXPECT_EQ(f->version(), 3u);
    EXPECT_EQ(f->alignment(), 32u);
    EXPECT_EQ(*f->get_string("general.architecture"), "llama");
    EXPECT_EQ(*f->get_int("llama.block_count"), 2);
    EXPECT_FLOAT_EQ(static_cast<float>(*f->get_float("llama.attention.layer_norm_rms_epsilon")),
                    1e-5f);
    EXPECT_EQ(**f->opt_bool("tokenizer.ggml.add_bos_token"), true);
    const auto* tokens = *f->opt_string_array("tokenizer.ggml.tokens");
    ASSERT_NE(tokens, nullptr);
    EXPECT_EQ(*tokens, (std::vector<std::string>{"a", "b", "<s>"}));
    EXPECT_EQ(**f->opt_int_array("tokenizer.ggml.token_type"), (std::vector<int64_t>{1, 1, 3}));
    EXPECT_EQ(**f->opt_float_array("tokenizer.ggml.scores"), (std::vector<double>{0, -1, 0.5}));
    EXPECT_FALSE(f->opt_int("absent")->has_value());
    // Wrong types and values that do not fit are errors naming the key.
    auto wrong = f->opt_int("general.architecture");
    ASSERT_FALSE(wrong.ok());
    EXPECT_NE(wrong.status().message().find("general.architecture"), std::string::npos);
    EXPECT_FALSE(f->opt_int("big").ok());
    EXPECT_FALSE(f->opt_string_array("tokenizer.ggml.scores").ok());
    EXPECT_EQ(f->get_int("absent").status().code(), StatusCode::kNotFound);

    ASSERT_EQ(f->tensors().size(), 2u);
    const GgufTensor* w = f->find_tensor("w");
    ASSERT_NE(w, nullptr);
    EXPECT_EQ(w->shape(), (std::vector<int64_t>{2, 3}));
    EXPECT_EQ(w->rows, 2);
    EXPECT_EQ(w->row_elems, 3);
    EXPECT_EQ(w->nbytes, 24);
    float last;
    std::memcpy(&last, w->data + 20, 4);
    EXPECT_EQ(last, 6.f);
    const GgufTensor* q = f->find_tensor("q");
    ASSERT_NE(q, nullptr);
    EXPECT_EQ(q->type, GgmlType::kQ8_0);
    EXPECT_EQ(q->nbytes, 34);
    EXPECT_EQ(q->offset, 32u);  // 24 bytes padded to the alignment
    EXPECT_EQ(reinterpret_cast<uintptr_t>(q->data) - reinterpret_cast<uintptr_t>(w->data), 32u);
  }
}

TEST(Gguf, CustomAlignmentAndVersion2) {
  GgufBuilder b;
  b.version = 2;
  b.alignment = 64;
  b.kv_u32("general.alignment", 64);
  b.tensor("a", {1}, 0, f32_data({1}));
  b.tensor("b", {1}, 0, f32_data({2}));
  auto f = GgufFile::from_memory("mem", b.build());
  ASSERT_TRUE(f.ok()) << f.status().to_string();
  EXPECT_EQ((*f)->alignment(), 64u);
  EXPECT_EQ((*f)->find_tensor("b")->offset, 64u);
}

TEST(Gguf, NoTensors) {
  GgufBuilder b;
  b.kv_str("general.name", "empty");
  auto f = GgufFile::from_memory("mem", b.build());
  ASSERT_TRUE(f.ok()) << f.status().to_string();
  EXPECT_TRUE((*f)->tensors().empty());
}

// ---------------------------------------------------------------------------------------------
// Damaged files: each is written to disk and opened; the error has the expected code and names
// the file and what is wrong (and the key or tensor, where there is one).

void expect_damaged(const std::vector<uint8_t>& bytes, StatusCode code,
                    const std::vector<std::string>& needles) {
  TempDir dir;
  const auto path = dir / "damaged.gguf";
  io_test::write_bytes(path, bytes);
  auto f = GgufFile::open(path);
  ASSERT_FALSE(f.ok());
  EXPECT_EQ(f.status().code(), code) << f.status().to_string();
  const std::string& msg = f.status().message();
  EXPECT_NE(msg.find(path.string()), std::string::npos) << msg;
  for (const std::string& n : needles) EXPECT_NE(msg.find(n), std::string::npos) << msg;
}

TEST(GgufDamaged, EmptyFile) { expect_damaged({}, StatusCode::kDataLoss, {"too short"}); }

TEST(GgufDamaged, BadMagic) {
  auto b = valid_builder();
  b.magic = 0x4c4c4747;
  expect_damaged(b.build(), StatusCode::kDataLoss, {"not a GGUF file"});
}

TEST(GgufDamaged, Version1) {
  auto b = valid_builder();
  b.version = 1;
  expect_damaged(b.build(), StatusCode::kUnimplemented, {"version 1"});
}

TEST(GgufDamaged, UnknownVersion) {
  auto b = valid_builder();
  b.version = 7;
  expect_damaged(b.build(), StatusCode::kUnimplemented, {"unknown GGUF version 7"});
}

TEST(GgufDamaged, BigEndian) {
  auto b = valid_builder();
  b.version = 0x03000000;
  expect_damaged(b.build(), StatusCode::kUnimplemented, {"big-endian"});
}

TEST(GgufDamaged, TruncatedCounts) {
  auto bytes = valid_builder().build();
  bytes.resize(12);
  expect_damaged(bytes, StatusCode::kDataLoss, {"counts"});
}

TEST(GgufDamaged, MetadataCountTooLarge) {
  auto b = valid_builder();
  b.n_kv_override = 1ull << 60;
  expect_damaged(b.build(), StatusCode::kDataLoss, {"metadata count"});
}

TEST(GgufDamaged, TensorCountTooLarge) {
  auto b = valid_builder();
  b.n_tensors_override = 1ull << 62;
  expect_damaged(b.build(), StatusCode::kDataLoss, {"tensor count"});
}

TEST(GgufDamaged, TruncatedInMetadata) {
  auto bytes = valid_builder().build();
  bytes.resize(60);  // inside the first key/value pairs
  expect_damaged(bytes, StatusCode::kDataLoss, {"metadata"});
}

TEST(GgufDamaged, KeyLengthPastEnd) {
  GgufBuilder b;
  std::vector<uint8_t> raw = B::bytes_of(uint64_t{1} << 40);
  auto bytes = b.build();
  bytes[16] = 1;  // one key/value pair, whose key length is huge
  bytes.insert(bytes.end(), raw.begin(), raw.end());
  bytes.resize(bytes.size() + 16, 'k');  // enough bytes for the count, far too few for the key
  expect_damaged(bytes, StatusCode::kDataLoss, {"truncated key"});
}

TEST(GgufDamaged, EmptyKey) {
  GgufBuilder b;
  b.kv_u32("", 1);
  expect_damaged(b.build(), StatusCode::kDataLoss, {"empty key"});
}

TEST(GgufDamaged, UnknownValueType) {
  GgufBuilder b;
  b.kv_raw("general.x", 13, {0, 0, 0, 0});
  expect_damaged(b.build(), StatusCode::kDataLoss, {"general.x", "unknown value type 13"});
}

TEST(GgufDamaged, TruncatedValue) {
  GgufBuilder b;
  b.kv_raw("general.x", B::U64, {1, 2, 3});
  expect_damaged(b.build(), StatusCode::kDataLoss, {"general.x", "u64"});
}

TEST(GgufDamaged, BoolNotZeroOrOne) {
  GgufBuilder b;
  b.kv_raw("general.flag", B::BOOL, {2});
  expect_damaged(b.build(), StatusCode::kDataLoss, {"general.flag", "bool"});
}

TEST(GgufDamaged, StringLengthPastEnd) {
  GgufBuilder b;
  b.kv_raw("general.name", B::STRING, B::bytes_of(uint64_t{1000}));
  expect_damaged(b.build(), StatusCode::kDataLoss, {"general.name"});
}

TEST(GgufDamaged, ArrayCountPastEnd) {
  GgufBuilder b;
  std::vector<uint8_t> v = B::bytes_of(uint32_t{B::I32});
  const auto count = B::bytes_of(uint64_t{1} << 40);
  v.insert(v.end(), count.begin(), count.end());
  b.kv_raw("tokenizer.ggml.token_type", B::ARRAY, v);
  expect_damaged(b.build(), StatusCode::kDataLoss, {"tokenizer.ggml.token_type", "past the end"});
}

TEST(GgufDamaged, StringArrayElementTruncated) {
  GgufBuilder b;
  std::vector<uint8_t> v = B::bytes_of(uint32_t{B::STRING});
  const auto count = B::bytes_of(uint64_t{2});
  v.insert(v.end(), count.begin(), count.end());
  const auto len = B::bytes_of(uint64_t{1});
  v.insert(v.end(), len.begin(), len.end());
  v.push_back('a');
  const auto len2 = B::bytes_of(uint64_t{500});
  v.insert(v.end(), len2.begin(), len2.end());
  b.kv_raw("tokenizer.ggml.tokens", B::ARRAY, v);
  expect_damaged(b.build(), StatusCode::kDataLoss, {"tokenizer.ggml.tokens", "element 1"});
}

TEST(GgufDamaged, NestedArray) {
  GgufBuilder b;
  std::vector<uint8_t> v = B::bytes_of(uint32_t{B::ARRAY});
  const auto count = B::bytes_of(uint64_t{0});
  v.insert(v.end(), count.begin(), count.end());
  b.kv_raw("general.nested", B::ARRAY, v);
  expect_damaged(b.build(), StatusCode::kUnimplemented, {"general.nested", "nested"});
}

TEST(GgufDamaged, DuplicateKey) {
  auto b = valid_builder();
  b.kv_u32("llama.block_count", 3);
  expect_damaged(b.build(), StatusCode::kDataLoss, {"llama.block_count", "twice"});
}

TEST(GgufDamaged, AlignmentWrongType) {
  auto b = valid_builder();
  b.kv_u64("general.alignment", 32);
  expect_damaged(b.build(), StatusCode::kDataLoss, {"general.alignment", "u32"});
}

TEST(GgufDamaged, AlignmentNotPowerOfTwo) {
  auto b = valid_builder();
  b.kv_u32("general.alignment", 48);
  expect_damaged(b.build(), StatusCode::kDataLoss, {"general.alignment", "power of two"});
}

TEST(GgufDamaged, TooManyDims) {
  GgufBuilder b;
  b.tensor("t5", {1, 1, 1, 1, 1}, 0, f32_data({1}));
  expect_damaged(b.build(), StatusCode::kDataLoss, {"\"t5\"", "5 dims"});
}

TEST(GgufDamaged, ZeroDims) {
  GgufBuilder b;
  b.tensor("t0", {}, 0, {});
  expect_damaged(b.build(), StatusCode::kDataLoss, {"\"t0\"", "0 dims"});
}

TEST(GgufDamaged, ElementCountOverflow) {
  GgufBuilder b;
  b.tensor("huge", {1ull << 40, 1ull << 40}, 0, {});
  expect_damaged(b.build(), StatusCode::kDataLoss, {"\"huge\"", "overflows"});
}

TEST(GgufDamaged, UnknownTensorType) {
  GgufBuilder b;
  b.tensor("iq", {256}, 19, std::vector<uint8_t>(50));  // IQ1_S: layout not known here
  expect_damaged(b.build(), StatusCode::kUnimplemented, {"\"iq\"", "ggml type 19"});
}

TEST(GgufDamaged, RowNotWholeBlocks) {
  GgufBuilder b;
  b.tensor("q", {48, 2}, 8, std::vector<uint8_t>(102));
  expect_damaged(b.build(), StatusCode::kDataLoss, {"\"q\"", "row length 48", "Q8_0"});
}

TEST(GgufDamaged, MisalignedOffset) {
  auto b = valid_builder();
  b.tensor("late", {1}, 0, f32_data({1})).offset_override = 65;
  expect_damaged(b.build(), StatusCode::kDataLoss, {"\"late\"", "alignment"});
}

TEST(GgufDamaged, OffsetOutOfOrder) {
  auto b = valid_builder();
  b.tensor("late", {1}, 0, f32_data({1})).offset_override = 0;  // overlaps "w"
  expect_damaged(b.build(), StatusCode::kDataLoss, {"\"late\"", "offset 0 where 96"});
}

TEST(GgufDamaged, DuplicateTensorName) {
  auto b = valid_builder();
  b.tensor("w", {1}, 0, f32_data({1}));
  expect_damaged(b.build(), StatusCode::kDataLoss, {"\"w\"", "twice"});
}

TEST(GgufDamaged, EmptyTensorName) {
  GgufBuilder b;
  b.tensor("", {1}, 0, f32_data({1}));
  expect_damaged(b.build(), StatusCode::kDataLoss, {"empty name"});
}

TEST(GgufDamaged, TruncatedTensorDirectory) {
  auto b = valid_builder();
  auto bytes = b.build();
  // Cut inside the directory entry of the second tensor (its name "q" is the last "q" byte
  // before the data section).
  const std::string s(bytes.begin(), bytes.end());
  const size_t pos = s.rfind(std::string("q\x01\x00\x00\x00", 5));
  ASSERT_NE(pos, std::string::npos);
  bytes.resize(pos + 3);
  expect_damaged(bytes, StatusCode::kDataLoss, {"\"q\"", "truncated"});
}

TEST(GgufDamaged, DataPastEndOfFile) {
  auto bytes = valid_builder().build();
  bytes.resize(bytes.size() - 1);  // the last tensor's final byte is missing
  expect_damaged(bytes, StatusCode::kDataLoss, {"\"q\"", "past the end"});
}

TEST(GgufDamaged, NotARegularFile) {
  TempDir dir;
  auto f = GgufFile::open(dir.path());
  ASSERT_FALSE(f.ok());
  EXPECT_NE(f.status().message().find(dir.path().string()), std::string::npos);
  EXPECT_EQ(GgufFile::open(dir / "absent.gguf").status().code(), StatusCode::kNotFound);
}

}  // namespace
}  // namespace ls
