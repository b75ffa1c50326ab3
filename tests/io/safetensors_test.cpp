// safetensors: round trip, and every kind of broken file is a kiln::Error naming file and tensor.
#include "kiln/io/safetensors.h"

#include <gtest/gtest.h>
#include <unistd.h>

#include <cstring>
#include <filesystem>
#include <fstream>

#include "kiln/core/error.h"
#include "kiln/io/atomic_file.h"
#include "kiln/io/json.h"

namespace {

namespace fs = std::filesystem;

struct TempDir {
  fs::path path;
  TempDir() {
    path = fs::temp_directory_path() / ("kiln_io_test_" + std::to_string(getpid()) + "_" +
                                        std::to_string(counter++));
    fs::create_directories(path);
  }
  ~TempDir() { fs::remove_all(path); }
  static inline int counter = 0;
};

std::string raw_file(const std::string& header, size_t data_bytes) {
  std::string h = header;
  std::string out(8, '\0');
  uint64_t n = h.size();
  for (int i = 0; i < 8; ++i) out[size_t(i)] = char((n >> (8 * i)) & 0xff);
  return out + h + std::string(data_bytes, '\0');
}

std::string error_of(const std::string& bytes) {
  auto buf = kiln::allocate_host(bytes.size());
  if (!bytes.empty()) std::memcpy(buf->data(), bytes.data(), bytes.size());
  try {
    auto f = kiln::io::SafetensorsFile::from_buffer(buf, "x.safetensors");
    for (const auto& n : f->names()) f->tensor(n);
  } catch (const kiln::Error& e) {
    return e.what();
  }
  return "";
}

TEST(Safetensors, RoundTripAllDtypes) {
  TempDir dir;
  auto a = kiln::Tensor::from_vector(std::vector<float>{1, 2, 3, 4, 5, 6}, {2, 3});
  auto b = a.to(kiln::DType::bf16);
  auto c = kiln::Tensor::from_vector(std::vector<int32_t>{7, -8}, {2});
  const std::string path = (dir.path / "m.safetensors").string();
  kiln::io::save_safetensors(path, {{"a", a}, {"b.weight", b}, {"c", c}});
  auto f = kiln::io::SafetensorsFile::open(path);
  EXPECT_EQ(f->names().size(), 3u);
  EXPECT_EQ(f->tensor("a").to_f32_vector(), a.to_f32_vector());
  EXPECT_EQ(f->tensor("b.weight").dtype(), kiln::DType::bf16);
  EXPECT_EQ(f->tensor("b.weight").to_f32_vector(), a.to_f32_vector());
  EXPECT_EQ(f->tensor("c").data<int32_t>()[1], -8);
  EXPECT_EQ(f->metadata().at("format"), "pt");
  // Data starts 8-byte aligned, as the reference writer does.
  EXPECT_EQ((8 + (f->tensor("a").offset() - 8)) % 8, 0u);
}

TEST(Safetensors, BrokenFilesAreClearErrors) {
  EXPECT_NE(error_of("").find("truncated"), std::string::npos);
  EXPECT_NE(error_of("abc").find("truncated"), std::string::npos);
  std::string absurd(8, '\xff');
  EXPECT_NE(error_of(absurd).find("100 MB"), std::string::npos);
  std::string claims = raw_file("{}", 0);
  claims[0] = 100;  // header says 100 bytes, file has 2
  EXPECT_NE(error_of(claims).find("truncated"), std::string::npos);
  EXPECT_NE(error_of(raw_file("not json", 0)).find("not valid JSON"), std::string::npos);
  EXPECT_NE(error_of(raw_file(R"({"w":{"dtype":"F32","shape":[2],"data_offsets":[0,16]}})", 8))
                .find("run past the end"),
            std::string::npos);
  auto mismatch = error_of(raw_file(R"({"w":{"dtype":"F32","shape":[3],"data_offsets":[0,8]}})", 8));
  EXPECT_NE(mismatch.find("tensor 'w'"), std::string::npos) << mismatch;
  EXPECT_NE(mismatch.find("needs 12 bytes"), std::string::npos) << mismatch;
  auto overlap = error_of(raw_file(
      R"({"a":{"dtype":"F32","shape":[2],"data_offsets":[0,8]},"b":{"dtype":"F32","shape":[2],"data_offsets":[4,12]}})",
      12));
  EXPECT_NE(overlap.find("overlap"), std::string::npos) << overlap;
  EXPECT_NE(error_of(raw_file(R"({"w":{"dtype":"Q4","shape":[1],"data_offsets":[0,1]}})", 1))
                .find("unknown dtype"),
            std::string::npos);
  EXPECT_NE(error_of(raw_file(R"({"w":{"dtype":"F64","shape":[1],"data_offsets":[0,8]}})", 8))
                .find("not supported"),
            std::string::npos);
  EXPECT_NE(error_of(raw_file(R"({"w":{"dtype":"F32","shape":[-1],"data_offsets":[0,4]}})", 4))
                .find("non-negative"),
            std::string::npos);
}

TEST(Safetensors, TruncatedFileOnDiskNamesTheFile) {
  TempDir dir;
  const std::string path = (dir.path / "model.safetensors").string();
  auto a = kiln::Tensor::zeros({64, 64}, kiln::DType::f32);
  kiln::io::save_safetensors(path, {{"a", a}});
  fs::resize_file(path, fs::file_size(path) - 100);
  try {
    kiln::io::SafetensorsFile::open(path);
    FAIL() << "expected an error";
  } catch (const kiln::Error& e) {
    EXPECT_NE(std::string(e.what()).find(path), std::string::npos) << e.what();
  }
  try {
    kiln::io::SafetensorsFile::open((dir.path / "missing.safetensors").string());
    FAIL();
  } catch (const kiln::Error& e) {
    EXPECT_NE(std::string(e.what()).find("missing.safetensors"), std::string::npos);
  }
}

TEST(Safetensors, ShardedCheckpointThroughIndex) {
  TempDir dir;
  auto a = kiln::Tensor::from_vector(std::vector<float>{1, 2}, {2});
  auto b = kiln::Tensor::from_vector(std::vector<float>{3}, {1});
  kiln::io::save_safetensors((dir.path / "model-00001-of-00002.safetensors").string(), {{"a", a}});
  kiln::io::save_safetensors((dir.path / "model-00002-of-00002.safetensors").string(), {{"b", b}});
  std::ofstream(dir.path / "model.safetensors.index.json")
      << R"({"metadata":{},"weight_map":{"a":"model-00001-of-00002.safetensors","b":"model-00002-of-00002.safetensors"}})";
  kiln::io::CheckpointReader r(dir.path.string());
  EXPECT_EQ(r.tensor("b").to_f32_vector()[0], 3.0f);
  EXPECT_THROW(r.tensor("c"), kiln::Error);
}

TEST(AtomicWrite, FailedWriteKeepsTheOldFile) {
  TempDir dir;
  const std::string path = (dir.path / "f.json").string();
  kiln::io::write_file_atomic(path, "old");
  EXPECT_THROW(kiln::io::write_file_atomic(path, [](std::FILE*) { throw kiln::Error("x", "disk full"); }),
               kiln::Error);
  EXPECT_EQ(kiln::io::read_file(path), "old");
  for (const auto& e : fs::directory_iterator(dir.path))
    EXPECT_EQ(e.path().filename(), "f.json") << "temporary file left behind";
}

}  // namespace

namespace {
TEST(Json, NumberOverflowIsAnErrorNamingTheFile) {
  try {
    kiln::io::parse_json("{\"x\": 1" + std::string(400, '7') + "e0000642}", "config.json");
    FAIL() << "expected an error";
  } catch (const kiln::Error& e) {
    EXPECT_NE(std::string(e.what()).find("config.json"), std::string::npos) << e.what();
  }
}

// The position is the offending character's, as nlohmann's own message gives it (an earlier
// version counted one character too many).
TEST(Json, SyntaxErrorNamesTheLineAndColumnOfTheOffendingCharacter) {
  auto message = [](const std::string& text) {
    try {
      kiln::io::parse_json(text, "config.json");
    } catch (const kiln::Error& e) {
      return std::string(e.what());
    }
    return std::string("no error");
  };
  EXPECT_NE(message("[1,]").find("[config.json] invalid JSON at line 1, column 4:"),
            std::string::npos)
      << message("[1,]");
  const std::string two_lines = "{\"a\":\n  tru}";
  EXPECT_NE(message(two_lines).find("invalid JSON at line 2, column 6:"), std::string::npos)
      << message(two_lines);
}
}  // namespace
