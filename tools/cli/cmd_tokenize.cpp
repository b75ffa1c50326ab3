// `kiln tokenize MODEL_DIR TEXT [--json]` and `kiln detokenize MODEL_DIR IDS
// [--skip-special-tokens] [--json]`: the tokenizer of a model (or tokenizer-only) folder.
#include <iostream>
#include <nlohmann/json.hpp>

#include "kiln/core/error.h"
#include "kiln/tokenizer/tokenizer.h"
#include "tools/cli/command.h"

namespace {

std::vector<int32_t> parse_ids(const std::string& s) {
  std::vector<int32_t> ids;
  size_t i = 0;
  while (i < s.size()) {
    size_t j = s.find(',', i);
    if (j == std::string::npos) j = s.size();
    std::string item = s.substr(i, j - i);
    size_t b = item.find_first_not_of(" \t"), e = item.find_last_not_of(" \t");
    if (b == std::string::npos) throw kiln::Error("IDS", "empty id in \"" + s + "\"");
    item = item.substr(b, e - b + 1);
    size_t used = 0;
    long long v = 0;
    try {
      v = std::stoll(item, &used);
    } catch (const std::exception&) {
      used = 0;
    }
    if (used != item.size() || v < INT32_MIN || v > INT32_MAX)
      throw kiln::Error("IDS", "\"" + item + "\" is not an integer id");
    ids.push_back(int32_t(v));
    i = j + 1;
  }
  return ids;
}

}  // namespace

KILN_COMMAND(tokenize, "Print the token ids and tokens of TEXT") {
  struct Args {
    std::string dir, text;
    bool json = false;
  };
  auto args = std::make_shared<Args>();
  cmd.add_option("MODEL_DIR", args->dir, "Folder with tokenizer.json")->required();
  cmd.add_option("TEXT", args->text, "Text to encode")->required();
  cmd.add_flag("--json", args->json, "Print {\"ids\": [...], \"tokens\": [...]}");
  return [args] {
    auto tok = kiln::AutoTokenizer::from_pretrained(args->dir);
    std::vector<int32_t> ids = tok->encode(args->text);
    std::vector<std::string> tokens = tok->convert_ids_to_tokens(ids);
    if (args->json) {
      nlohmann::json out;
      out["ids"] = ids;
      out["tokens"] = tokens;
      std::cout << out.dump(-1, ' ', false, nlohmann::json::error_handler_t::replace) << "\n";
    } else {
      for (size_t i = 0; i < ids.size(); ++i) std::cout << (i ? " " : "") << ids[i];
      std::cout << "\n";
      for (size_t i = 0; i < tokens.size(); ++i) std::cout << (i ? " " : "") << tokens[i];
      std::cout << "\n";
    }
    return 0;
  };
}

KILN_COMMAND(detokenize, "Print the text of comma-separated token IDS") {
  struct Args {
    std::string dir, ids;
    bool json = false, skip_special = false;
  };
  auto args = std::make_shared<Args>();
  cmd.add_option("MODEL_DIR", args->dir, "Folder with tokenizer.json")->required();
  cmd.add_option("IDS", args->ids, "Token ids, e.g. 9707,1879")->required();
  cmd.add_flag("--skip-special-tokens", args->skip_special, "Drop special tokens");
  cmd.add_flag("--json", args->json, "Print {\"text\": ...}");
  return [args] {
    auto tok = kiln::AutoTokenizer::from_pretrained(args->dir);
    std::vector<int32_t> ids = parse_ids(args->ids);
    std::string text = tok->decode(ids, {.skip_special_tokens = args->skip_special});
    if (args->json) {
      nlohmann::json out;
      out["text"] = text;
      std::cout << out.dump() << "\n";
    } else {
      std::cout << text << "\n";
    }
    return 0;
  };
}
