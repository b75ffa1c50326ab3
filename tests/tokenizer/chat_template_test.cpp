// Chat templates rendered as Transformers renders them: the golden Qwen3 renderings byte for byte,
// Llama 3.1 and Qwen2.5 shaped templates, config loading, and the CLI.
#include "kiln/tokenizer/chat_template.h"

#include <gtest/gtest.h>

#include <cstdio>
#include <filesystem>
#include <fstream>
#include <sstream>

#include "kiln/core/error.h"

namespace kt = kiln::tokenizer;
using OJ = nlohmann::ordered_json;

namespace {

std::string shared(const std::string& rel) { return std::string(KILN_SHARED_DIR) + "/" + rel; }

std::vector<OJ> golden_rows() {
  std::ifstream in(shared("testdata/chat/qwen3_chat.jsonl"));
  std::vector<OJ> rows;
  std::string line;
  while (std::getline(in, line))
    if (!line.empty()) rows.push_back(OJ::parse(line));
  return rows;
}

kt::ChatTemplateOptions options_from(const OJ& kwargs) {
  kt::ChatTemplateOptions o;
  o.extra_kwargs = OJ::object();
  for (auto it = kwargs.begin(); it != kwargs.end(); ++it) {
    if (it.key() == "add_generation_prompt") {
      o.add_generation_prompt = it.value().get<bool>();
    } else if (it.key() == "tools") {
      o.tools = it.value();
    } else {
      o.extra_kwargs[it.key()] = it.value();
    }
  }
  return o;
}

// A scratch folder removed at the end of the test.
struct TempDir {
  std::filesystem::path path;
  TempDir() {
    path = std::filesystem::temp_directory_path() /
           ("kiln_chat_" + std::to_string(::getpid()) + "_" +
            ::testing::UnitTest::GetInstance()->current_test_info()->name());
    std::filesystem::remove_all(path);
    std::filesystem::create_directories(path);
  }
  ~TempDir() { std::filesystem::remove_all(path); }
  void write(const std::string& name, const std::string& text) const {
    std::ofstream(path / name, std::ios::binary) << text;
  }
};

}  // namespace

TEST(ChatTemplate, GoldenQwen3Renderings) {
  auto rows = golden_rows();
  ASSERT_EQ(rows.size(), 14u);
  for (const char* dir : {"models/qwen3-tokenizer", "testdata/models/tiny"}) {
    kt::ChatTemplateConfig cfg = kt::load_chat_template_config(shared(dir));
    EXPECT_EQ(cfg.eos_token, "<|im_end|>");
    EXPECT_EQ(cfg.bos_token, "");
    for (const auto& row : rows) {
      std::string got = kt::apply_chat_template(cfg, row["messages"], options_from(row["kwargs"]));
      EXPECT_EQ(got, row["rendered"].get<std::string>()) << dir << " case " << row["name"];
    }
  }
}

TEST(ChatTemplate, Qwen3ContentNoneFailsLikePython) {
  kt::ChatTemplateConfig cfg = kt::load_chat_template_config(shared("models/qwen3-tokenizer"));
  OJ messages = OJ::parse(R"([{"role":"user","content":"hi"},{"role":"assistant","content":null}])");
  // Python: '</think>' in None is a TypeError; the error names the template file and line.
  try {
    kt::apply_chat_template(cfg, messages);
    FAIL() << "expected an error";
  } catch (const kiln::Error& e) {
    EXPECT_NE(std::string(e.what()).find("tokenizer_config.json:"), std::string::npos) << e.what();
    EXPECT_NE(std::string(e.what()).find("argument of type 'NoneType' is not iterable"), std::string::npos) << e.what();
  }
}
