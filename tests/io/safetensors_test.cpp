#include "io/safetensors.h"

#include <gtest/gtest.h>
#include <nlohmann/json.hpp>

#include <cstring>
#include <fstream>

#include "io_test_util.h"

namespace ls {
namespace {

using io_test::f32_bytes;
using io_test::raw_safetensors;
using io_test::TempDir;
using io_test::zeros;

template <typename T>
T load(const void* base, int64_t index) {
  T v;
  std::memcpy(&v, static_cast<const uint8_t*>(base) + index * static_cast<int64_t>(sizeof(T)),
              sizeof(T));
  return v;
}

// ---------------------------------------------------------------------------------------------
// Valid files

TEST(Safetensors, WriterRoundTripThroughOpenAndFromMemory) {
  TempDir dir;
  const std::vector<float> a = {1.5f, -2.0f, 3.25f, 0.0f, 1e-30f, -7.0f};   // [2, 3]
  const std::vector<uint16_t> b = {f32_to_bf16(0.5f), f32_to_bf16(-3.0f)};  // [2]
  const std::vector<uint16_t> c = {f32_to_f16(0.25f)};                      // [] scalar
  const std::vector<int64_t> d = {-5, 1LL << 40};                           // [2]
  const auto path = dir / "model.safetensors";
  ASSERT_TRUE(write_safetensors(path,
                                {{"w.a", DType::kF32, {2, 3}, a.data()},
                                 {"w.b", DType::kBF16, {2}, b.data()},
                                 {"w.c", DType::kF16, {}, c.data()},
                                 {"w.empty", DType::kF32, {0, 4}, nullptr},
                                 {"w.d", DType::kI64, {2}, d.data()}},
                                {{"format", "pt"}})
                  .ok());

  // The header is padded to a multiple of 8 with spaces, and the data follows it contiguously.
  const auto bytes = io_test::read_bytes(path);
  uint64_t n = 0;
  std::memcpy(&n, bytes.data(), 8);
  EXPECT_EQ(n % 8, 0u);
  const std::string header(reinterpret_cast<const char*>(bytes.data() + 8), n);
  EXPECT_EQ(header.find_last_not_of(' '), header.rfind('}'));
  EXPECT_EQ(bytes.size(), 8 + n + 24 + 4 + 2 + 0 + 16);

  auto from_file = SafetensorsFile::open(path);
  ASSERT_TRUE(from_file.ok()) << from_file.status().to_string();
  auto from_mem = SafetensorsFile::from_memory("mem", bytes);
  ASSERT_TRUE(from_mem.ok()) << from_mem.status().to_string();

  for (const SafetensorsFile* f : {from_file->get(), from_mem->get()}) {
    ASSERT_EQ(f->tensors().size(), 5u);
    EXPECT_EQ(f->metadata().at("format"), "pt");
    const TensorInfo* ta = f->find("w.a");
    ASSERT_NE(ta, nullptr);
    EXPECT_EQ(ta->dtype, DType::kF32);
    EXPECT_EQ(ta->file_dtype, SafetensorsDType::kF32);
    EXPECT_EQ(ta->shape, (std::vector<int64_t>{2, 3}));
    EXPECT_EQ(ta->nbytes, 24);
    EXPECT_EQ(ta->numel(), 6);
    for (int i = 0; i < 6; ++i) EXPECT_EQ(load<float>(ta->data, i), a[static_cast<size_t>(i)]);
    const TensorInfo* tb = f->find("w.b");
    ASSERT_NE(tb, nullptr);
    EXPECT_EQ(tb->dtype, DType::kBF16);
    EXPECT_EQ(bf16_to_f32(load<uint16_t>(tb->data, 1)), -3.0f);
    const TensorInfo* tc = f->find("w.c");
    ASSERT_NE(tc, nullptr);
    EXPECT_TRUE(tc->shape.empty());
    EXPECT_EQ(tc->numel(), 1);
    EXPECT_EQ(f16_to_f32(load<uint16_t>(tc->data, 0)), 0.25f);
    const TensorInfo* te = f->find("w.empty");
    ASSERT_NE(te, nullptr);
    EXPECT_EQ(te->nbytes, 0);
    EXPECT_NE(te->data, nullptr);
    const TensorInfo* td = f->find("w.d");
    ASSERT_NE(td, nullptr);
    EXPECT_EQ(load<int64_t>(td->data, 1), 1LL << 40);
    EXPECT_EQ(f->find("w.missing"), nullptr);
    // tensors() is in data order, which here is the order written.
    EXPECT_EQ(f->tensors()[0].name, "w.a");
    EXPECT_EQ(f->tensors()[4].name, "w.d");
  }
  EXPECT_EQ(from_file->get()->find("w.a")->file, path.string());
  EXPECT_EQ(from_mem->get()->find("w.a")->file, "mem");
}

TEST(Safetensors, ReadsFileWrittenByReferenceLibrary) {
  const std::string dir = "tests/fixtures/io/";
  std::ifstream in(dir + "reference_safetensors.json");
  ASSERT_TRUE(in.good()) << "run scripts/fixtures/make_rope_fixtures.py";
  const auto expected = nlohmann::json::parse(in);
  auto file = SafetensorsFile::open(dir + "reference.safetensors");
  ASSERT_TRUE(file.ok()) << file.status().to_string();
  using StringMap = std::map<std::string, std::string>;
  EXPECT_EQ((*file)->metadata(), expected["metadata"].get<StringMap>());
  ASSERT_EQ((*file)->tensors().size(), expected["tensors"].size());
  for (const auto& [name, want] : expected["tensors"].items()) {
    SCOPED_TRACE(name);
    const TensorInfo* t = (*file)->find(name);
    ASSERT_NE(t, nullptr);
    EXPECT_EQ(safetensors_dtype_name(t->file_dtype), want["dtype"].get<std::string>());
    EXPECT_EQ(t->shape, want["shape"].get<std::vector<int64_t>>());
    const auto values = want["values"];
    ASSERT_EQ(t->numel(), static_cast<int64_t>(values.size()));
    for (int64_t i = 0; i < t->numel(); ++i) {
      const auto& v = values[static_cast<size_t>(i)];
      switch (t->file_dtype) {
        case SafetensorsDType::kF32:
          EXPECT_EQ(load<float>(t->data, i), v.get<double>());
          break;
        case SafetensorsDType::kF64:
          EXPECT_EQ(load<double>(t->data, i), v.get<double>());
          break;
        case SafetensorsDType::kF16:
          EXPECT_EQ(f16_to_f32(load<uint16_t>(t->data, i)), v.get<double>());
          break;
        case SafetensorsDType::kBF16:
          EXPECT_EQ(bf16_to_f32(load<uint16_t>(t->data, i)), v.get<double>());
          break;
        case SafetensorsDType::kI64:
          EXPECT_EQ(load<int64_t>(t->data, i), v.get<int64_t>());
          break;
        case SafetensorsDType::kI32:
          EXPECT_EQ(load<int32_t>(t->data, i), v.get<int64_t>());
          break;
        default:
          ADD_FAILURE() << "unexpected dtype in fixture";
      }
    }
  }
  // Core has no f64, so the F64 tensor is readable but has no core dtype.
  EXPECT_FALSE((*file)->find("f64.vector")->dtype.has_value());
}

TEST(Safetensors, AcceptsEveryReferenceDType) {
  struct Case {
    const char* name;
    int size_bytes;
    std::optional<DType> core;
  };
  const Case cases[] = {
      {"BOOL", 1, std::nullopt},
      {"U8", 1, DType::kU8},
      {"I8", 1, DType::kI8},
      {"U16", 2, std::nullopt},
      {"I16", 2, std::nullopt},
      {"F16", 2, DType::kF16},
      {"BF16", 2, DType::kBF16},
      {"U32", 4, std::nullopt},
      {"I32", 4, DType::kI32},
      {"F32", 4, DType::kF32},
      {"F64", 8, std::nullopt},
      {"U64", 8, std::nullopt},
      {"I64", 8, DType::kI64},
      {"F8_E4M3", 1, std::nullopt},
      {"F8_E5M2", 1, std::nullopt},
      {"F8_E8M0", 1, std::nullopt},
      {"F8_E4M3FNUZ", 1, std::nullopt},
      {"F8_E5M2FNUZ", 1, std::nullopt},
      {"C64", 8, std::nullopt},
  };
  for (const Case& c : cases) {
    SCOPED_TRACE(c.name);
    const std::string header = fmt::format(
        R"({{"t":{{"dtype":"{}","shape":[3],"data_offsets":[0,{}]}}}})", c.name, 3 * c.size_bytes);
    auto f = SafetensorsFile::from_memory("m", raw_safetensors(header, zeros(3 * c.size_bytes)));
    ASSERT_TRUE(f.ok()) << f.status().to_string();
    const TensorInfo& t = (*f)->tensors().at(0);
    EXPECT_EQ(safetensors_dtype_name(t.file_dtype), c.name);
    EXPECT_EQ(safetensors_dtype_size(t.file_dtype), c.size_bytes);
    EXPECT_EQ(t.nbytes, 3 * c.size_bytes);
    EXPECT_EQ(t.dtype, c.core);
  }
}

TEST(Safetensors, UnalignedDataIsReadable) {
  // A 61-byte header puts the data section at byte 69: no tensor is 4-byte aligned, which old
  // writers produce and the reader must tolerate.
  std::string header = R"({"x":{"dtype":"F32","shape":[3],"data_offsets":[0,12]}})";
  header.append(61 - header.size(), ' ');
  ASSERT_EQ(header.size(), 61u);
  const std::vector<float> values = {1.0f, -2.5f, 1e10f};
  const auto bytes = raw_safetensors(header, f32_bytes(values));

  TempDir dir;
  io_test::write_bytes(dir / "u.safetensors", bytes);
  auto from_file = SafetensorsFile::open(dir / "u.safetensors");
  auto from_mem = SafetensorsFile::from_memory("u", bytes);
  ASSERT_TRUE(from_file.ok()) << from_file.status().to_string();
  ASSERT_TRUE(from_mem.ok()) << from_mem.status().to_string();
  for (const SafetensorsFile* f : {from_file->get(), from_mem->get()}) {
    const TensorInfo* t = f->find("x");
    ASSERT_NE(t, nullptr);
    EXPECT_NE(reinterpret_cast<uintptr_t>(t->data) % 4, 0u);
    for (int i = 0; i < 3; ++i) EXPECT_EQ(load<float>(t->data, i), values[static_cast<size_t>(i)]);
  }
}

TEST(Safetensors, EdgeCasesTheReferenceAccepts) {
  // No tensors at all.
  EXPECT_TRUE(SafetensorsFile::from_memory("m", raw_safetensors("{}")).ok());
  // Leading whitespace, null metadata, unknown extra fields in an entry, empty tensors sharing an
  // offset with a neighbour, entries listed out of data order.
  const std::string header =
      R"( {"__metadata__":null,"z":{"dtype":"F32","shape":[1],"data_offsets":[0,4],"extra":1},)"
      R"("e":{"dtype":"I8","shape":[0],"data_offsets":[4,4]},)"
      R"("a":{"dtype":"U8","shape":[2,0,3],"data_offsets":[0,0]},)"
      R"("m":{"dtype":"U8","shape":[2],"data_offsets":[4,6]}})";
  auto f = SafetensorsFile::from_memory("m", raw_safetensors(header, zeros(6)));
  ASSERT_TRUE(f.ok()) << f.status().to_string();
  ASSERT_EQ((*f)->tensors().size(), 4u);
  EXPECT_TRUE((*f)->metadata().empty());
  EXPECT_EQ((*f)->tensors()[0].name, "a");  // [0, 0)
  EXPECT_EQ((*f)->tensors()[1].name, "z");  // [0, 4)
  EXPECT_EQ((*f)->tensors()[2].name, "e");  // [4, 4)
  EXPECT_EQ((*f)->tensors()[3].name, "m");  // [4, 6)
}

TEST(Safetensors, OpenReportsMissingFileAndDirectory) {
  TempDir dir;
  auto missing = SafetensorsFile::open(dir / "nope.safetensors");
  ASSERT_FALSE(missing.ok());
  EXPECT_EQ(missing.status().code(), StatusCode::kNotFound);
  EXPECT_NE(missing.status().message().find("nope.safetensors"), std::string::npos);
  auto directory = SafetensorsFile::open(dir.path());
  ASSERT_FALSE(directory.ok());
  EXPECT_NE(directory.status().message().find(dir.path().string()), std::string::npos);
}

TEST(Safetensors, WriterRejectsBadInput) {
  TempDir dir;
  const float x = 1.0f;
  const auto path = dir / "w.safetensors";
  auto code = [&](const std::vector<TensorToWrite>& t) {
    return write_safetensors(path, t).code();
  };
  EXPECT_EQ(code({{"a", DType::kF32, {1}, &x}, {"a", DType::kF32, {1}, &x}}),
            StatusCode::kInvalidArgument);
  EXPECT_EQ(code({{"__metadata__", DType::kF32, {1}, &x}}), StatusCode::kInvalidArgument);
  EXPECT_EQ(code({{"a", DType::kF32, {-1}, &x}}), StatusCode::kInvalidArgument);
  EXPECT_EQ(code({{"a", DType::kF32, {1}, nullptr}}), StatusCode::kInvalidArgument);
  EXPECT_EQ(code({{"a", DType::kI4, {2}, &x}}), StatusCode::kUnimplemented);
  EXPECT_EQ(code({{"bad\xff", DType::kF32, {1}, &x}}), StatusCode::kInvalidArgument);
  EXPECT_FALSE(std::filesystem::exists(path));
}

// ---------------------------------------------------------------------------------------------
// Damaged files: every fault is one clean error naming the file (and the tensor, where there is
// one), the same through open() and from_memory().

// The valid baseline: a F32 [2] at [0, 8) and b F16 [2] at [8, 12).
constexpr const char* kA = R"("a":{"dtype":"F32","shape":[2],"data_offsets":[0,8]})";
constexpr const char* kB = R"("b":{"dtype":"F16","shape":[2],"data_offsets":[8,12]})";

struct Fault {
  const char* name;
  std::vector<uint8_t> bytes;
  StatusCode code;
  const char* tensor;    // must appear in the message ("" when the fault has no tensor)
  const char* fragment;  // must appear in the message too
};

std::vector<uint8_t> file_with(const std::string& entries, size_t data_bytes = 12) {
  return raw_safetensors("{" + entries + "}", zeros(data_bytes));
}
std::string entry(const char* name, const std::string& body) {
  return fmt::format(R"("{}":{{{}}})", name, body);
}

std::vector<Fault> faults() {
  const std::string ab = std::string(kA) + "," + kB;
  const std::string valid_header = "{" + ab + "}";
  const auto dl = StatusCode::kDataLoss;
  std::vector<Fault> f = {
      {"EmptyFile", {}, dl, "", "shorter than the 8-byte"},
      {"SevenBytes", zeros(7), dl, "", "shorter than the 8-byte"},
      {"HeaderLengthBeyondFile", raw_safetensors(valid_header, zeros(12), valid_header.size() + 13),
       dl, "", "beyond the end of the file"},
      {"HeaderOver100MB", raw_safetensors(valid_header, zeros(12), 100'000'001), dl, "",
       "exceeds the 100000000-byte limit"},
      {"HeaderLengthMaxU64", raw_safetensors(valid_header, zeros(12), ~uint64_t{0}), dl, "",
       "exceeds"},
      {"EmptyHeader", raw_safetensors(""), dl, "", "header is not valid"},
      {"NotJson", raw_safetensors(R"({"a": })"), dl, "", "header is not valid"},
      {"InvalidUtf8", raw_safetensors("{\"\xff\xfe\":{}}"), dl, "", "header is not valid"},
      {"TrailingGarbage", raw_safetensors(valid_header + "x", zeros(12)), dl, "",
       "header is not valid"},
      {"NulPadding", raw_safetensors(valid_header + std::string(3, '\0'), zeros(12)), dl, "",
       "header is not valid"},
      {"HeaderIsArray", raw_safetensors("[1,2]"), dl, "", "must be a JSON object"},
      {"HeaderIsString", raw_safetensors(R"("x")"), dl, "", "must be a JSON object"},
      {"EntryNotObject", file_with(std::string(kA) + R"(,"b":5)", 8), dl, "\"b\"",
       "must be an object"},
      {"NoDtype", file_with(entry("b", R"("shape":[2],"data_offsets":[8,12])") + "," + kA), dl,
       "\"b\"", "no \"dtype\""},
      {"NoShape", file_with(entry("b", R"("dtype":"F16","data_offsets":[8,12])") + "," + kA), dl,
       "\"b\"", "no \"shape\""},
      {"NoDataOffsets", file_with(entry("b", R"("dtype":"F16","shape":[2])") + "," + kA), dl,
       "\"b\"", "no \"data_offsets\""},
      {"DtypeNotString",
       file_with(entry("b", R"("dtype":16,"shape":[2],"data_offsets":[8,12])") + "," + kA), dl,
       "\"b\"", "\"dtype\" must be a string"},
      {"UnknownDtype",
       file_with(entry("b", R"("dtype":"F31","shape":[2],"data_offsets":[8,12])") + "," + kA), dl,
       "\"b\"", "unknown dtype \"F31\""},
      {"PackedDtypeUnsupported",
       file_with(entry("b", R"("dtype":"F4","shape":[8],"data_offsets":[8,12])") + "," + kA),
       StatusCode::kUnimplemented, "\"b\"", "F4"},
      {"ShapeNotArray",
       file_with(entry("b", R"("dtype":"F16","shape":2,"data_offsets":[8,12])") + "," + kA), dl,
       "\"b\"", "\"shape\" must be an array"},
      {"NegativeDim",
       file_with(entry("b", R"("dtype":"F16","shape":[-2],"data_offsets":[8,12])") + "," + kA), dl,
       "\"b\"", "shape[0] must be a non-negative integer, got -2"},
      {"NonIntegerDim",
       file_with(entry("b", R"("dtype":"F16","shape":[2.0],"data_offsets":[8,12])") + "," + kA), dl,
       "\"b\"", "shape[0] must be a non-negative integer"},
      {"BooleanDim",
       file_with(entry("b", R"("dtype":"F16","shape":[1,true],"data_offsets":[8,12])") + "," + kA),
       dl, "\"b\"", "shape[1] must be a non-negative integer"},
      {"DimBeyondInt64",
       file_with(
           entry("b", R"("dtype":"F16","shape":[18446744073709551615],"data_offsets":[8,12])") +
           "," + kA),
       dl, "\"b\"", "shape[0]"},
      {"NumelOverflow",
       file_with(
           entry("b", R"("dtype":"F16","shape":[4294967296,4294967296,0],"data_offsets":[8,8])") +
               "," + kA,
           8),
       dl, "\"b\"", "element count of shape overflows"},
      {"ByteSizeOverflow",
       file_with(entry("b", R"("dtype":"F64","shape":[2305843009213693952],"data_offsets":[8,8])") +
                     "," + kA,
                 8),
       dl, "\"b\"", "byte size of shape overflows"},
      {"OffsetsNotArray",
       file_with(entry("b", R"("dtype":"F16","shape":[2],"data_offsets":8)") + "," + kA), dl,
       "\"b\"", "must be an array of two integers"},
      {"OffsetsWrongLength",
       file_with(entry("b", R"("dtype":"F16","shape":[2],"data_offsets":[8,12,16])") + "," + kA),
       dl, "\"b\"", "must be an array of two integers"},
      {"NegativeOffset",
       file_with(entry("b", R"("dtype":"F16","shape":[2],"data_offsets":[-4,12])") + "," + kA), dl,
       "\"b\"", "non-negative integers"},
      {"NonIntegerOffset",
       file_with(entry("b", R"("dtype":"F16","shape":[2],"data_offsets":[8,12.0])") + "," + kA), dl,
       "\"b\"", "non-negative integers"},
      {"EndBeforeBegin",
       file_with(entry("b", R"("dtype":"F16","shape":[2],"data_offsets":[12,8])") + "," + kA), dl,
       "\"b\"", "end 8 is before begin 12"},
      {"EndBeyondData",
       file_with(entry("b", R"("dtype":"F16","shape":[4],"data_offsets":[8,16])") + "," + kA), dl,
       "\"b\"", "end 16 is beyond the 12-byte data section"},
      {"SizeMismatch",
       file_with(entry("b", R"("dtype":"F32","shape":[2],"data_offsets":[8,12])") + "," + kA), dl,
       "\"b\"", "span 4 bytes, but 2 F32 elements of shape [2] need 8"},
      {"Overlap",
       file_with(
           std::string(kA) + "," + entry("b", R"("dtype":"F16","shape":[2],"data_offsets":[4,8])"),
           8),
       dl, "\"b\"", "overlaps tensor \"a\""},
      {"HoleBetweenTensors",
       file_with(std::string(kA) + "," +
                     entry("b", R"("dtype":"F16","shape":[2],"data_offsets":[12,16])"),
                 16),
       dl, "\"b\"", "data bytes [8, 12) before it belong to no tensor"},
      {"HoleAtStart",
       file_with(entry("a", R"("dtype":"F32","shape":[2],"data_offsets":[4,12])"), 12), dl, "\"a\"",
       "data bytes [0, 4) before it"},
      {"BytesAfterLastTensor", file_with(ab, 20), dl, "",
       "data bytes [12, 20) after the last tensor"},
      {"DuplicateTensor", file_with(ab + "," + kA), dl, "", "duplicate key \"a\""},
      {"DuplicateField",
       file_with(entry("b", R"("dtype":"F16","dtype":"F16","shape":[2],"data_offsets":[8,12])") +
                 "," + kA),
       dl, "\"b\"", "duplicate key \"dtype\""},
      {"MetadataNotObject", file_with(ab + R"(,"__metadata__":"v1")"), dl, "",
       "\"__metadata__\" must be an object"},
      {"MetadataValueNotString", file_with(ab + R"(,"__metadata__":{"step":100})"), dl, "step",
       "must be a string"},
      {"NestedTooDeep",
       file_with(entry("b", R"("dtype":"F16","shape":[[2]],"data_offsets":[8,12])") + "," + kA), dl,
       "", "deeper than 3 levels"},
  };
  return f;
}

class DamagedFile : public ::testing::TestWithParam<Fault> {};

TEST_P(DamagedFile, FailsCleanlyNamingFileAndTensor) {
  const Fault& fault = GetParam();
  TempDir dir;
  const auto path = dir / "damaged.safetensors";
  io_test::write_bytes(path, fault.bytes);

  auto from_file = SafetensorsFile::open(path);
  ASSERT_FALSE(from_file.ok());
  const Status& s = from_file.status();
  EXPECT_EQ(s.code(), fault.code) << s.to_string();
  EXPECT_NE(s.message().find(path.string()), std::string::npos) << s.message();
  EXPECT_NE(s.message().find(fault.tensor), std::string::npos) << s.message();
  EXPECT_NE(s.message().find(fault.fragment), std::string::npos) << s.message();

  auto from_mem = SafetensorsFile::from_memory("in-memory.safetensors", fault.bytes);
  ASSERT_FALSE(from_mem.ok());
  EXPECT_EQ(from_mem.status().code(), fault.code);
  EXPECT_NE(from_mem.status().message().find("in-memory.safetensors"), std::string::npos);
  EXPECT_NE(from_mem.status().message().find(fault.fragment), std::string::npos);
}

INSTANTIATE_TEST_SUITE_P(Safetensors, DamagedFile, ::testing::ValuesIn(faults()),
                         [](const auto& info) { return std::string(info.param.name); });

TEST(Safetensors, BaselineOfDamagedFilesIsValid) {
  // Guards the table above: the undamaged baseline itself must load.
  auto f = SafetensorsFile::from_memory("m", file_with(std::string(kA) + "," + kB));
  ASSERT_TRUE(f.ok()) << f.status().to_string();
  EXPECT_EQ((*f)->tensors().size(), 2u);
}

}  // namespace
}  // namespace ls
