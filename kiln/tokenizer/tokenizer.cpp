#include "kiln/tokenizer/tokenizer.h"

#include <algorithm>
#include <array>
#include <filesystem>
#include <unordered_set>

#include "kiln/core/error.h"
#include "kiln/core/threads.h"
#include "kiln/io/atomic_file.h"
#include "kiln/io/json.h"
#include "kiln/tokenizer/bpe.h"
#include "kiln/tokenizer/components.h"
#include "kiln/tokenizer/decoder.h"
#include "kiln/tokenizer/normalizer.h"
#include "kiln/tokenizer/pre_tokenizer.h"
#include "kiln/tokenizer/tokenizer_json.h"
#include "kiln/tokenizer/unicode.h"

namespace kiln::tokenizer {

// Finds added tokens leftmost-longest, as HF's Aho-Corasick (MatchKind::LeftmostLongest) does:
// at the leftmost position where any content matches, the longest content wins; scanning resumes
// after it. Candidates are bucketed by first byte, longest first.
struct Tokenizer::AddedMatcher {
  std::array<std::vector<int32_t>, 256> by_first;  // indices into added_, longest content first

  bool empty() const {
    for (const auto& b : by_first)
      if (!b.empty()) return false;
    return true;
  }

  // Next match at or after `from`: (start, index into added_), or start == npos.
  std::pair<size_t, int32_t> next(std::string_view s, size_t from,
                                  const std::vector<AddedToken>& added,
                                  const std::vector<std::string>& patterns) const {
    for (size_t i = from; i < s.size(); ++i) {
      const auto& bucket = by_first[static_cast<unsigned char>(s[i])];
      for (int32_t k : bucket) {
        const std::string& p = patterns[size_t(k)];
        if (s.compare(i, p.size(), p) == 0) return {i, k};
      }
    }
    (void)added;
    return {kNpos, -1};
  }
};

namespace {

struct Split {
  size_t begin, end;
  int32_t added = -1;  // index into added tokens, or -1 for text
};

bool ends_with_word(std::string_view s) {
  if (s.empty()) return false;
  size_t start = s.size() - 1;
  while (start > 0 && (static_cast<unsigned char>(s[start]) & 0xC0) == 0x80) --start;
  size_t i = start;
  return is_word_char(utf8_next(s, i));
}

bool starts_with_word(std::string_view s) {
  if (s.empty()) return false;
  size_t i = 0;
  return is_word_char(utf8_next(s, i));
}

// HF AddedVocabulary::find_matches: matches with single_word / lstrip / rstrip applied, and the
// text between them, covering all of `s`.
template <typename Matcher>
void find_added(std::string_view s, const Matcher& m, const std::vector<AddedToken>& added,
                const std::vector<std::string>& patterns, std::vector<Split>& out) {
  out.clear();
  size_t start_offset = 0, from = 0;
  while (true) {
    auto [pos, k] = m.next(s, from, added, patterns);
    if (pos == kNpos) break;
    size_t start = pos, stop = pos + patterns[size_t(k)].size();
    from = stop;
    const AddedToken& t = added[size_t(k)];
    if (start < start_offset) continue;  // inside whitespace an rstrip already took
    if (t.single_word) {
      bool start_space = start == 0 || !ends_with_word(s.substr(0, start));
      bool stop_space = stop == s.size() || !starts_with_word(s.substr(stop));
      if (!start_space || !stop_space) continue;
    }
    if (t.lstrip) {
      size_t b = start;
      while (b > start_offset) {
        size_t p = b - 1;
        while (p > 0 && (static_cast<unsigned char>(s[p]) & 0xC0) == 0x80) --p;
        size_t i = p;
        if (!is_whitespace(utf8_next(s, i))) break;
        b = p;
      }
      start = b;
    }
    if (t.rstrip) {
      while (stop < s.size()) {
        size_t i = stop;
        if (!is_whitespace(utf8_next(s, i))) break;
        stop = i;
      }
    }
    if (start_offset < start) out.push_back({start_offset, start, -1});
    out.push_back({start, stop, k});
    start_offset = stop;
    from = std::max(from, stop);
  }
  if (start_offset < s.size()) out.push_back({start_offset, s.size(), -1});
}

std::optional<std::string> special_token_string(const nlohmann::json& cfg, const char* field,
                                                const std::string& where) {
  auto it = cfg.find(field);
  if (it == cfg.end() || it->is_null()) return std::nullopt;
  if (it->is_string()) return it->get<std::string>();
  if (it->is_object() && it->contains("content") && (*it)["content"].is_string())
    return (*it)["content"].get<std::string>();
  throw Error(where + ": " + field, "expected a string, an AddedToken object or null");
}

}  // namespace

Tokenizer::Tokenizer() = default;
Tokenizer::~Tokenizer() = default;

std::shared_ptr<Tokenizer> Tokenizer::from_pretrained(const std::string& dir) {
  namespace fs = std::filesystem;
  std::string tj_path = (fs::path(dir) / "tokenizer.json").string();
  if (!fs::exists(tj_path)) {
    if (!fs::exists(dir)) throw Error(dir, "tokenizer folder does not exist");
    throw Error(tj_path, "missing: kiln needs a fast-tokenizer tokenizer.json in the model folder");
  }
  std::string tj = io::read_file(tj_path);
  std::string cfg_path = (fs::path(dir) / "tokenizer_config.json").string();
  std::string cfg = fs::exists(cfg_path) ? io::read_file(cfg_path) : std::string();
  auto tok = from_json(tj, "", tj_path);
  // Config: tokenizer_config.json, with special_tokens_map.json filling in missing strings.
  std::string stm_path = (fs::path(dir) / "special_tokens_map.json").string();
  if (fs::exists(stm_path)) tok->load_config(io::read_file(stm_path), stm_path);
  if (!cfg.empty()) tok->load_config(cfg, cfg_path);
  return tok;
}

std::shared_ptr<Tokenizer> Tokenizer::from_json(const std::string& tokenizer_json,
                                                const std::string& config_json,
                                                const std::string& where) {
  std::shared_ptr<Tokenizer> t(new Tokenizer());
  TokenizerJson tj = parse_tokenizer_json(tokenizer_json, where);
  const nlohmann::json& doc = tj.doc;
  if (!doc.is_object()) throw Error(where, "expected a JSON object");
  auto section = [&](const char* name) -> const nlohmann::json& {
    static const nlohmann::json null_json;
    auto it = doc.find(name);
    return it == doc.end() ? null_json : *it;
  };
  // Model.
  const nlohmann::json& model = section("model");
  if (!model.is_object()) throw Error(where + ": model", "missing or not an object");
  std::string model_type = model.contains("type") && model["type"].is_string()
                               ? model["type"].get<std::string>()
                               : (model.contains("merges") || tj.merges_streamed ? "BPE" : "");
  if (model_type != "BPE")
    throw Error(where + ": model.type",
                "model type \"" + model_type + "\" is not supported by kiln (only BPE)");
  t->model_ = BpeModel::from_json(model, tj, where);
  t->normalizer_ = make_normalizer(section("normalizer"), where + ": normalizer");
  t->pre_tokenizer_ = make_pre_tokenizer(section("pre_tokenizer"), where + ": pre_tokenizer");
  t->decoder_ = make_decoder(section("decoder"), where + ": decoder");
  t->post_processor_ = make_post_processor(section("post_processor"), where + ": post_processor");
  // "truncation" and "padding" in tokenizer.json are ignored on purpose: Transformers resets them
  // on every call from its own arguments, which BatchEncodeOptions carries here.

  // Added tokens.
  const nlohmann::json& added = section("added_tokens");
  if (!added.is_null() && !added.is_array())
    throw Error(where + ": added_tokens", "expected an array");
  int64_t id_limit = t->model_->max_id() + 1;
  if (added.is_array()) {
    for (size_t i = 0; i < added.size(); ++i) {
      const auto& a = added[i];
      std::string loc = where + ": added_tokens[" + std::to_string(i) + "]";
      AddedToken tok;
      int64_t id = io::get_int(a, "id", loc);
      if (id < 0 || id > INT32_MAX - 1) throw Error(loc + ".id", "out of range");
      tok.id = int32_t(id);
      tok.content = io::get_string(a, "content", loc);
      if (utf8_invalid_at(tok.content) != kNpos) throw Error(loc + ".content", "not valid UTF-8");
      tok.special = json_bool_or(a, "special", false, loc);
      tok.lstrip = json_bool_or(a, "lstrip", false, loc);
      tok.rstrip = json_bool_or(a, "rstrip", false, loc);
      tok.normalized = json_bool_or(a, "normalized", !tok.special, loc);
      tok.single_word = json_bool_or(a, "single_word", false, loc);
      id_limit = std::max(id_limit, id + 1);
      t->added_.push_back(std::move(tok));
    }
  }
  if (id_limit > int64_t(t->model_->vocab_size()) * 4 + (int64_t(1) << 20))
    throw Error(where + ": added_tokens", "ids are too sparse");
  t->id_limit_ = id_limit;
  t->added_index_by_id_.assign(size_t(id_limit), -1);
  t->skip_id_.assign(size_t(id_limit), 0);
  std::unordered_set<std::string> special_contents;
  int64_t extra = 0;
  std::unordered_set<std::string> counted;
  for (size_t k = 0; k < t->added_.size(); ++k) {
    const AddedToken& a = t->added_[k];
    t->added_index_by_id_[size_t(a.id)] = int32_t(k);
    if (a.special) special_contents.insert(a.content);
    if (!t->model_->token_to_id(a.content) && counted.insert(a.content).second) ++extra;
  }
  t->vocab_size_ = int64_t(t->model_->vocab_size()) + extra;
  // skip_special_tokens removes tokens by content, as HF does: any id whose string is the content
  // of a special added token.
  for (int64_t id = 0; id < id_limit; ++id) {
    int32_t k = t->added_index_by_id_[size_t(id)];
    if (k >= 0) {
      t->skip_id_[size_t(id)] = special_contents.count(t->added_[size_t(k)].content) ? 1 : 0;
    } else if (auto s = t->model_->id_to_token(int32_t(id))) {
      t->skip_id_[size_t(id)] = special_contents.count(std::string(*s)) ? 1 : 0;
    }
  }
  // Matchers: raw (normalized=false) and normalized contents; longest first per first byte.
  t->raw_matcher_ = std::make_unique<AddedMatcher>();
  t->normalized_matcher_ = std::make_unique<AddedMatcher>();
  t->patterns_raw_.assign(t->added_.size(), "");
  t->patterns_norm_.assign(t->added_.size(), "");
  for (size_t k = 0; k < t->added_.size(); ++k) {
    const AddedToken& a = t->added_[k];
    if (a.content.empty()) continue;
    if (a.normalized && t->normalizer_) {
      std::string p = t->normalizer_->normalize(a.content);
      if (p.empty()) continue;
      t->patterns_norm_[k] = p;
      t->normalized_matcher_->by_first[static_cast<unsigned char>(p[0])].push_back(int32_t(k));
    } else {
      t->patterns_raw_[k] = a.content;
      t->raw_matcher_->by_first[static_cast<unsigned char>(a.content[0])].push_back(int32_t(k));
    }
  }
  auto sort_buckets = [](AddedMatcher& m, const std::vector<std::string>& pats) {
    for (auto& b : m.by_first)
      std::stable_sort(b.begin(), b.end(), [&](int32_t x, int32_t y) {
        return pats[size_t(x)].size() > pats[size_t(y)].size();
      });
  };
  sort_buckets(*t->raw_matcher_, t->patterns_raw_);
  sort_buckets(*t->normalized_matcher_, t->patterns_norm_);
  if (!config_json.empty()) t->load_config(config_json, "tokenizer_config.json");
  return t;
}

void Tokenizer::load_config(const std::string& config_json, const std::string& where) {
  nlohmann::json cfg = io::parse_json(config_json, where);
  if (!cfg.is_object()) throw Error(where, "expected a JSON object");
  auto set = [&](std::optional<std::string>& slot, const char* field) {
    if (!cfg.contains(field)) return;
    slot = special_token_string(cfg, field, where);
  };
  set(bos_token_, "bos_token");
  set(eos_token_, "eos_token");
  set(pad_token_, "pad_token");
  set(unk_token_, "unk_token");
  if (cfg.contains("model_max_length") && cfg["model_max_length"].is_number()) {
    double v = cfg["model_max_length"].get<double>();
    // Transformers writes a huge sentinel (1e30) when unknown.
    model_max_length_ = v > 0 && v < 1e15 ? int64_t(v) : int64_t(1) << 30;
  }
  auto side = [&](const char* field, Side& slot) {
    auto it = cfg.find(field);
    if (it == cfg.end() || it->is_null()) return;
    std::string s = it->is_string() ? it->get<std::string>() : it->dump();
    if (s == "left") slot = Side::kLeft;
    else if (s == "right") slot = Side::kRight;
    else throw Error(where + ": " + field, "expected \"left\" or \"right\", got " + s);
  };
  side("padding_side", padding_side_);
  side("truncation_side", truncation_side_);
  clean_up_spaces_ = io::get_bool_or(cfg, "clean_up_tokenization_spaces", clean_up_spaces_, where);
  // Transformers' LlamaTokenizerFast (and its relatives) rebuild the post-processor from
  // add_bos_token / add_eos_token; other classes ignore these fields.
  std::string cls = io::get_string_or(cfg, "tokenizer_class", "", where);
  static const std::unordered_set<std::string> kBosEosClasses = {
      "LlamaTokenizer", "LlamaTokenizerFast", "CodeLlamaTokenizer", "CodeLlamaTokenizerFast",
      "GemmaTokenizer", "GemmaTokenizerFast"};
  if (kBosEosClasses.count(cls)) {
    bool add_bos = io::get_bool_or(cfg, "add_bos_token", true, where);
    bool add_eos = io::get_bool_or(cfg, "add_eos_token", false, where);
    std::optional<int32_t> bos = add_bos ? bos_token_id() : std::nullopt;
    std::optional<int32_t> eos = add_eos ? eos_token_id() : std::nullopt;
    if (add_bos && !bos) throw Error(where + ": add_bos_token", "set but bos_token is not a token");
    if (add_eos && !eos) throw Error(where + ": add_eos_token", "set but eos_token is not a token");
    post_processor_ = make_bos_eos_processor(bos, eos);
  }
}

void Tokenizer::encode_segment(std::string_view segment, bool at_start,
                               std::vector<int32_t>& ids) const {
  if (segment.empty()) return;
  std::string normalized = normalizer_ ? normalizer_->normalize(segment) : std::string(segment);
  std::vector<Split> local;
  if (!normalized_matcher_->empty()) {
    find_added(normalized, *normalized_matcher_, added_, patterns_norm_, local);
  } else {
    local.push_back({0, normalized.size(), -1});
  }
  std::vector<Piece> pieces;
  for (const Split& s : local) {
    if (s.added >= 0) {
      ids.push_back(added_[size_t(s.added)].id);
      continue;
    }
    if (s.begin == s.end) continue;
    pieces.clear();
    pieces.push_back(Piece{normalized.substr(s.begin, s.end - s.begin), at_start && s.begin == 0});
    if (pre_tokenizer_) pre_tokenizer_->pre_tokenize(pieces);
    for (const Piece& p : pieces) model_->tokenize(p.text, ids);
  }
}

std::vector<int32_t> Tokenizer::encode(std::string_view text, const EncodeOptions& options) const {
  size_t bad = utf8_invalid_at(text);
  if (bad != kNpos)
    throw Error("encode", "text is not valid UTF-8 (byte " + std::to_string(bad) + ")");
  std::vector<int32_t> ids;
  ids.reserve(text.size() / 3 + 4);
  if (raw_matcher_->empty()) {
    encode_segment(text, true, ids);
  } else {
    std::vector<Split> splits;
    find_added(text, *raw_matcher_, added_, patterns_raw_, splits);
    for (const Split& s : splits) {
      if (s.added >= 0) {
        ids.push_back(added_[size_t(s.added)].id);
      } else {
        encode_segment(text.substr(s.begin, s.end - s.begin), s.begin == 0, ids);
      }
    }
  }
  if (options.add_special_tokens && post_processor_) post_processor_->process(ids);
  return ids;
}

BatchEncoding Tokenizer::encode_batch(const std::vector<std::string>& texts,
                                      const BatchEncodeOptions& options) const {
  const int64_t b = int64_t(texts.size());
  const bool post = options.add_special_tokens && post_processor_;
  const int64_t limit = options.max_length.value_or(model_max_length_);
  if ((options.truncation || options.padding == Padding::kMaxLength) && limit <= 0)
    throw Error("max_length", "must be positive, got " + std::to_string(limit));
  const int64_t added = post ? int64_t(post_processor_->added_tokens()) : 0;
  if (options.truncation && limit < added)
    throw Error("max_length", "is " + std::to_string(limit) + ", smaller than the " +
                                  std::to_string(added) + " special tokens added per text");
  const Side trunc_side = options.truncation_side.value_or(truncation_side_);
  BatchEncoding out;
  out.ids.resize(size_t(b));
  // Errors inside the parallel region are carried out of it (OpenMP regions must not throw).
  std::vector<std::string> errors(texts.size());
  parallel_for(b, [&](int64_t begin, int64_t end) {
    for (int64_t i = begin; i < end; ++i) {
      try {
        std::vector<int32_t> ids = encode(texts[size_t(i)], {.add_special_tokens = false});
        if (options.truncation && int64_t(ids.size()) > limit - added) {
          size_t keep = size_t(limit - added);
          if (trunc_side == Side::kRight) ids.resize(keep);
          else ids.erase(ids.begin(), ids.end() - std::ptrdiff_t(keep));
        }
        if (post) post_processor_->process(ids);
        out.ids[size_t(i)] = std::move(ids);
      } catch (const std::exception& e) {
        errors[size_t(i)] = e.what();
      }
    }
  });
  for (int64_t i = 0; i < b; ++i)
    if (!errors[size_t(i)].empty())
      throw Error("encode_batch: texts[" + std::to_string(i) + "]", errors[size_t(i)]);
  int64_t longest = 0;
  for (const auto& ids : out.ids) longest = std::max(longest, int64_t(ids.size()));
  int64_t len = longest;
  if (options.padding == Padding::kMaxLength) len = std::max(limit, longest);
  if (options.padding != Padding::kNone && options.pad_to_multiple_of) {
    int64_t m = *options.pad_to_multiple_of;
    if (m <= 0) throw Error("pad_to_multiple_of", "must be positive");
    len = (len + m - 1) / m * m;
  }
  if (options.padding == Padding::kNone) {
    for (const auto& ids : out.ids)
      if (int64_t(ids.size()) != longest)
        throw Error("padding", "texts encode to different lengths; pass padding=kLongest or "
                               "kMaxLength to get a rectangular batch");
  }
  std::optional<int32_t> pad = pad_token_id();
  bool needs_pad = false;
  for (const auto& ids : out.ids) needs_pad = needs_pad || int64_t(ids.size()) < len;
  if (needs_pad && !pad)
    throw Error("padding", "the tokenizer has no pad_token (tokenizer_config.json), cannot pad");
  const Side side = options.padding_side.value_or(padding_side_);
  out.input_ids = Tensor::empty({b, len}, DType::i32);
  out.attention_mask = Tensor::empty({b, len}, DType::i32);
  int32_t* ids_p = out.input_ids.data<int32_t>();
  int32_t* mask_p = out.attention_mask.data<int32_t>();
  for (int64_t i = 0; i < b; ++i) {
    const auto& ids = out.ids[size_t(i)];
    int64_t n = int64_t(ids.size()), padn = len - n;
    int64_t off = side == Side::kLeft ? padn : 0;
    int32_t* row = ids_p + i * len;
    int32_t* mrow = mask_p + i * len;
    for (int64_t k = 0; k < len; ++k) {
      row[k] = pad.value_or(0);
      mrow[k] = 0;
    }
    for (int64_t k = 0; k < n; ++k) {
      row[off + k] = ids[size_t(k)];
      mrow[off + k] = 1;
    }
  }
  return out;
}

std::optional<std::string> Tokenizer::id_to_token(int32_t id) const {
  if (id >= 0 && id < id_limit_) {
    int32_t k = added_index_by_id_[size_t(id)];
    if (k >= 0) return added_[size_t(k)].content;
  }
  if (auto s = model_->id_to_token(id)) return std::string(*s);
  return std::nullopt;
}

std::optional<int32_t> Tokenizer::token_to_id(std::string_view token) const {
  for (const AddedToken& a : added_)
    if (a.content == token) return a.id;
  return model_->token_to_id(token);
}

bool Tokenizer::is_special_id(int32_t id) const {
  return id >= 0 && id < id_limit_ && skip_id_[size_t(id)] != 0;
}

std::vector<std::string> Tokenizer::convert_ids_to_tokens(std::span<const int32_t> ids) const {
  std::vector<std::string> out;
  out.reserve(ids.size());
  for (int32_t id : ids) {
    auto t = id_to_token(id);
    if (!t) throw Error("ids", "id " + std::to_string(id) + " is not in the tokenizer");
    out.push_back(std::move(*t));
  }
  return out;
}

namespace {
// Transformers' clean_up_tokenization: removes spaces before punctuation and contractions.
std::string clean_up_tokenization(std::string s) {
  static const std::pair<const char*, const char*> kRules[] = {
      {" .", "."},     {" ?", "?"},     {" !", "!"},     {" ,", ","},     {" ' ", "'"},
      {" n't", "n't"}, {" 'm", "'m"},   {" 's", "'s"},   {" 've", "'ve"}, {" 're", "'re"}};
  for (auto [from, to] : kRules) s = replace_all(s, from, to);
  return s;
}
}  // namespace

std::string Tokenizer::decode(std::span<const int32_t> ids, const DecodeOptions& options) const {
  std::vector<std::string> tokens;
  tokens.reserve(ids.size());
  for (int32_t id : ids) {
    if (options.skip_special_tokens && is_special_id(id)) continue;
    if (id >= 0 && id < id_limit_) {
      int32_t k = added_index_by_id_[size_t(id)];
      if (k >= 0) {
        tokens.push_back(added_[size_t(k)].content);
        continue;
      }
    }
    if (auto s = model_->id_to_token(id)) tokens.emplace_back(*s);
    // Ids the tokenizer does not know are dropped, as HF does.
  }
  std::string text;
  if (decoder_) {
    decoder_->decode_chain(tokens);
    for (const auto& t : tokens) text += t;
  } else {
    for (size_t k = 0; k < tokens.size(); ++k) {
      if (k) text += ' ';
      text += tokens[k];
    }
  }
  if (options.clean_up_tokenization_spaces.value_or(clean_up_spaces_))
    text = clean_up_tokenization(std::move(text));
  return text;
}

}  // namespace kiln::tokenizer
