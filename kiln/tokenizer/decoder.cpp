#include "kiln/tokenizer/decoder.h"

#include <optional>

#include "kiln/core/error.h"
#include "kiln/tokenizer/components.h"
#include "kiln/tokenizer/unicode.h"

namespace kiln::tokenizer {

namespace {

class ByteLevelDec : public Decoder {
 public:
  void decode_chain(std::vector<std::string>& tokens) const override {
    std::string bytes;
    for (const std::string& t : tokens) {
      // A token whose characters are all byte characters maps to those bytes; any other token
      // (e.g. an added token with characters outside the table) contributes its raw UTF-8.
      size_t start = bytes.size();
      size_t i = 0;
      bool all = true;
      while (i < t.size()) {
        int b = char_to_byte(utf8_next(t, i));
        if (b < 0) {
          all = false;
          break;
        }
        bytes.push_back(static_cast<char>(b));
      }
      if (!all) {
        bytes.resize(start);
        bytes += t;
      }
    }
    tokens.assign(1, utf8_lossy(bytes));
  }
};

class MetaspaceDec : public Decoder {
 public:
  MetaspaceDec(std::string replacement, bool prepend)
      : replacement_(std::move(replacement)), prepend_(prepend) {}
  void decode_chain(std::vector<std::string>& tokens) const override {
    for (size_t i = 0; i < tokens.size(); ++i) {
      // As HF: every replacement character becomes a space, except in the first token, where
      // (with a prepend scheme) they are dropped.
      tokens[i] = replace_all(tokens[i], replacement_, i == 0 && prepend_ ? "" : " ");
    }
  }

 private:
  std::string replacement_;
  bool prepend_;
};

class ByteFallbackDec : public Decoder {
 public:
  void decode_chain(std::vector<std::string>& tokens) const override {
    std::vector<std::string> out;
    std::string pending;
    auto flush = [&] {
      if (pending.empty()) return;
      if (utf8_invalid_at(pending) == kNpos) {
        out.push_back(pending);
      } else {
        for (size_t k = 0; k < pending.size(); ++k) out.emplace_back("\xEF\xBF\xBD");
      }
      pending.clear();
    };
    for (std::string& t : tokens) {
      int byte = parse_byte(t);
      if (byte >= 0) {
        pending.push_back(static_cast<char>(byte));
        continue;
      }
      flush();
      out.push_back(std::move(t));
    }
    flush();
    tokens = std::move(out);
  }

 private:
  static int hex(char c) {
    if (c >= '0' && c <= '9') return c - '0';
    if (c >= 'A' && c <= 'F') return c - 'A' + 10;
    if (c >= 'a' && c <= 'f') return c - 'a' + 10;
    return -1;
  }
  static int parse_byte(const std::string& t) {
    if (t.size() != 6 || t.compare(0, 3, "<0x") != 0 || t[5] != '>') return -1;
    int h = hex(t[3]), l = hex(t[4]);
    return h < 0 || l < 0 ? -1 : h * 16 + l;
  }
};

class FuseDec : public Decoder {
 public:
  void decode_chain(std::vector<std::string>& tokens) const override {
    std::string all;
    for (const auto& t : tokens) all += t;
    tokens.assign(1, std::move(all));
  }
};

class StripDec : public Decoder {
 public:
  StripDec(std::string content, size_t start, size_t stop)
      : content_(std::move(content)), start_(start), stop_(stop) {}
  void decode_chain(std::vector<std::string>& tokens) const override {
    if (content_.empty()) return;
    for (std::string& t : tokens) {
      size_t b = 0, e = t.size();
      for (size_t k = 0; k < start_ && t.compare(b, content_.size(), content_) == 0 &&
                         b + content_.size() <= e;
           ++k)
        b += content_.size();
      for (size_t k = 0; k < stop_ && e >= b + content_.size() &&
                         t.compare(e - content_.size(), content_.size(), content_) == 0;
           ++k)
        e -= content_.size();
      t = t.substr(b, e - b);
    }
  }

 private:
  std::string content_;
  size_t start_, stop_;
};

class ReplaceDec : public Decoder {
 public:
  ReplaceDec(std::string pattern, std::string content)
      : pattern_(std::move(pattern)), content_(std::move(content)) {}
  void decode_chain(std::vector<std::string>& tokens) const override {
    for (std::string& t : tokens) t = replace_all(t, pattern_, content_);
  }

 private:
  std::string pattern_, content_;
};

class SequenceDec : public Decoder {
 public:
  explicit SequenceDec(std::vector<std::unique_ptr<Decoder>> items) : items_(std::move(items)) {}
  void decode_chain(std::vector<std::string>& tokens) const override {
    for (const auto& d : items_) d->decode_chain(tokens);
  }

 private:
  std::vector<std::unique_ptr<Decoder>> items_;
};

// TemplateProcessing restricted to what a single sequence uses: special ids before and after $A.
class TemplateProc : public PostProcessor {
 public:
  TemplateProc(std::vector<int32_t> before, std::vector<int32_t> after)
      : before_(std::move(before)), after_(std::move(after)) {}
  void process(std::vector<int32_t>& ids) const override {
    ids.insert(ids.begin(), before_.begin(), before_.end());
    ids.insert(ids.end(), after_.begin(), after_.end());
  }
  size_t added_tokens() const override { return before_.size() + after_.size(); }

 private:
  std::vector<int32_t> before_, after_;
};

class NoopProc : public PostProcessor {
 public:
  void process(std::vector<int32_t>&) const override {}
  size_t added_tokens() const override { return 0; }
};

class SequenceProc : public PostProcessor {
 public:
  explicit SequenceProc(std::vector<std::unique_ptr<PostProcessor>> items)
      : items_(std::move(items)) {}
  void process(std::vector<int32_t>& ids) const override {
    for (const auto& p : items_) p->process(ids);
  }
  size_t added_tokens() const override {
    size_t n = 0;
    for (const auto& p : items_) n += p->added_tokens();
    return n;
  }

 private:
  std::vector<std::unique_ptr<PostProcessor>> items_;
};

std::unique_ptr<PostProcessor> make_template(const nlohmann::json& j, const std::string& where) {
  auto sit = j.find("single");
  if (sit == j.end() || !sit->is_array()) throw Error(where + ".single", "expected an array");
  auto specials = j.find("special_tokens");
  std::vector<int32_t> before, after;
  bool seen_a = false;
  for (size_t i = 0; i < sit->size(); ++i) {
    const auto& piece = (*sit)[i];
    std::string loc = where + ".single[" + std::to_string(i) + "]";
    if (piece.contains("Sequence")) {
      std::string id = json_string(piece["Sequence"], "id", loc + ".Sequence");
      if (id != "A") throw Error(loc, "a single-sequence template can only use $A, got $" + id);
      if (seen_a) throw Error(loc, "$A appears twice");
      seen_a = true;
    } else if (piece.contains("SpecialToken")) {
      std::string id = json_string(piece["SpecialToken"], "id", loc + ".SpecialToken");
      if (specials == j.end() || !specials->is_object() || !specials->contains(id))
        throw Error(where + ".special_tokens", "no entry for \"" + id + "\"");
      const auto& st = (*specials)[id];
      auto ids = st.find("ids");
      if (ids == st.end() || !ids->is_array())
        throw Error(where + ".special_tokens." + id + ".ids", "expected an array of ids");
      for (const auto& v : *ids) {
        if (!v.is_number_integer()) throw Error(where + ".special_tokens." + id, "bad id " + v.dump());
        (seen_a ? after : before).push_back(v.get<int32_t>());
      }
    } else {
      throw Error(loc, "expected {\"Sequence\": ...} or {\"SpecialToken\": ...}");
    }
  }
  if (!seen_a) throw Error(where + ".single", "the template has no $A");
  return std::make_unique<TemplateProc>(std::move(before), std::move(after));
}

int32_t token_pair_id(const nlohmann::json& j, const char* field, const std::string& where) {
  auto it = j.find(field);
  if (it == j.end() || !it->is_array() || it->size() != 2 || !(*it)[1].is_number_integer())
    throw Error(where + "." + field, "expected [token, id]");
  return (*it)[1].get<int32_t>();
}

}  // namespace

std::unique_ptr<Decoder> make_decoder(const nlohmann::json& j, const std::string& where) {
  if (j.is_null()) return nullptr;
  std::string type = component_type(j, where);
  if (type == "ByteLevel") return std::make_unique<ByteLevelDec>();
  if (type == "Metaspace") {
    bool prepend = true;
    auto it = j.find("prepend_scheme");
    if (it != j.end() && it->is_string()) prepend = it->get<std::string>() != "never";
    else prepend = json_bool_or(j, "add_prefix_space", true, where);
    return std::make_unique<MetaspaceDec>(json_string(j, "replacement", where), prepend);
  }
  if (type == "ByteFallback") return std::make_unique<ByteFallbackDec>();
  if (type == "Fuse") return std::make_unique<FuseDec>();
  if (type == "Strip") {
    int64_t start = json_int_or(j, "start", 0, where), stop = json_int_or(j, "stop", 0, where);
    if (start < 0 || stop < 0) throw Error(where, "start and stop must be non-negative");
    return std::make_unique<StripDec>(json_string(j, "content", where), size_t(start), size_t(stop));
  }
  if (type == "Replace")
    return std::make_unique<ReplaceDec>(string_pattern(j, where), json_string(j, "content", where));
  if (type == "Sequence") {
    auto it = j.find("decoders");
    if (it == j.end() || !it->is_array()) throw Error(where + ".decoders", "expected an array");
    std::vector<std::unique_ptr<Decoder>> items;
    for (size_t i = 0; i < it->size(); ++i) {
      auto d = make_decoder((*it)[i], where + ".decoders[" + std::to_string(i) + "]");
      if (d) items.push_back(std::move(d));
    }
    return std::make_unique<SequenceDec>(std::move(items));
  }
  throw Error(where, "decoder type \"" + type + "\" is not supported by kiln");
}

std::unique_ptr<PostProcessor> make_post_processor(const nlohmann::json& j,
                                                   const std::string& where) {
  if (j.is_null()) return nullptr;
  std::string type = component_type(j, where);
  if (type == "ByteLevel") return std::make_unique<NoopProc>();  // only touches offsets
  if (type == "TemplateProcessing") return make_template(j, where);
  if (type == "RobertaProcessing" || type == "BertProcessing") {
    int32_t cls = token_pair_id(j, "cls", where), sep = token_pair_id(j, "sep", where);
    return std::make_unique<TemplateProc>(std::vector<int32_t>{cls}, std::vector<int32_t>{sep});
  }
  if (type == "Sequence") {
    auto it = j.find("processors");
    if (it == j.end() || !it->is_array()) throw Error(where + ".processors", "expected an array");
    std::vector<std::unique_ptr<PostProcessor>> items;
    for (size_t i = 0; i < it->size(); ++i) {
      auto p = make_post_processor((*it)[i], where + ".processors[" + std::to_string(i) + "]");
      if (p) items.push_back(std::move(p));
    }
    return std::make_unique<SequenceProc>(std::move(items));
  }
  throw Error(where, "post-processor type \"" + type + "\" is not supported by kiln");
}

std::unique_ptr<PostProcessor> make_bos_eos_processor(std::optional<int32_t> bos,
                                                      std::optional<int32_t> eos) {
  std::vector<int32_t> before, after;
  if (bos) before.push_back(*bos);
  if (eos) after.push_back(*eos);
  return std::make_unique<TemplateProc>(std::move(before), std::move(after));
}

}  // namespace kiln::tokenizer
