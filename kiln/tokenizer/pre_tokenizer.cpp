#include "kiln/tokenizer/pre_tokenizer.h"

#include <optional>

#include "kiln/core/error.h"
#include "kiln/tokenizer/components.h"
#include "kiln/tokenizer/unicode.h"

namespace kiln::tokenizer {

// Note [Split regexes]
// The Qwen2/Qwen3 pattern
//   (?i:'s|'t|'re|'ve|'m|'ll|'d)|[^\r\n\p{L}\p{N}]?\p{L}+|\p{N}| ?[^\s\p{L}\p{N}]+[\r\n]*|
//   \s*[\r\n]+|\s+(?!\S)|\s+
// (Llama 3: \p{N}{1,3} instead of \p{N}) and the GPT-2 pattern
//   's|'t|'re|'ve|'m|'ll|'d| ?\p{L}+| ?\p{N}+| ?[^\s\p{L}\p{N}]+|\s+(?!\S)|\s+
// are matched by hand, alternative by alternative, in Oniguruma's order: at each position the
// first alternative that matches wins, and quantifiers are greedy with backtracking only where an
// alternative needs it (\s*[\r\n]+ ends at the last CR/LF of a whitespace run; \s+(?!\S) gives back
// the last whitespace character before a non-space). \p{L}/\p{N} are general categories L*/N*,
// \s is White_Space (so not U+FEFF, U+200B or U+180E), and (?i:...) folds ASCII only.
// See ../shared/testdata/tokenizer/NOTES.md for the cases each rule covers.

namespace {

constexpr uint8_t kL = 1, kN = 2, kS = 4;

struct Decoded {
  std::vector<char32_t> cp;
  std::vector<uint8_t> cls;
  std::vector<uint32_t> off;  // byte offset of each code point, plus the end
};

void decode(std::string_view text, Decoded& d) {
  d.cp.clear();
  d.cls.clear();
  d.off.clear();
  size_t i = 0;
  while (i < text.size()) {
    d.off.push_back(uint32_t(i));
    char32_t c = utf8_next(text, i);
    d.cp.push_back(c);
    uint8_t k = 0;
    if (is_letter(c)) k |= kL;
    else if (is_number(c)) k |= kN;
    else if (is_whitespace(c)) k |= kS;
    d.cls.push_back(k);
  }
  d.off.push_back(uint32_t(text.size()));
}

inline char32_t ascii_lower(char32_t c) { return (c >= 'A' && c <= 'Z') ? c + 32 : c; }
inline bool is_crlf(char32_t c) { return c == '\r' || c == '\n'; }

// Returns the end (exclusive, in code points) of the match at i, or i when none matches.
size_t match_qwen(const Decoded& d, size_t i, int max_digits) {
  const auto& cp = d.cp;
  const auto& cls = d.cls;
  const size_t n = cp.size();
  const char32_t c = cp[i];
  // (?i:'s|'t|'re|'ve|'m|'ll|'d)
  if (c == '\'' && i + 1 < n) {
    char32_t a = ascii_lower(cp[i + 1]);
    if (a == 's' || a == 't' || a == 'm' || a == 'd') return i + 2;
    if (i + 2 < n) {
      char32_t b = ascii_lower(cp[i + 2]);
      if ((a == 'r' && b == 'e') || (a == 'v' && b == 'e') || (a == 'l' && b == 'l')) return i + 3;
    }
  }
  // [^\r\n\p{L}\p{N}]?\p{L}+
  {
    size_t k = i;
    if (!(cls[i] & kL) && !(cls[i] & kN) && !is_crlf(c)) ++k;
    if (k < n && (cls[k] & kL)) {
      while (k < n && (cls[k] & kL)) ++k;
      return k;
    }
  }
  // \p{N} or \p{N}{1,3}
  if (cls[i] & kN) {
    size_t k = i + 1;
    while (k < n && k - i < size_t(max_digits) && (cls[k] & kN)) ++k;
    return k;
  }
  //  ?[^\s\p{L}\p{N}]+[\r\n]*
  {
    size_t k = i + (c == ' ' ? 1 : 0);
    if (k < n && cls[k] == 0) {
      while (k < n && cls[k] == 0) ++k;
      while (k < n && is_crlf(cp[k])) ++k;
      return k;
    }
  }
  if (cls[i] & kS) {
    size_t j = i;
    size_t last_crlf = n;
    while (j < n && (cls[j] & kS)) {
      if (is_crlf(cp[j])) last_crlf = j;
      ++j;
    }
    // \s*[\r\n]+
    if (last_crlf != n) return last_crlf + 1;
    // \s+(?!\S)
    if (j == n) return j;
    if (j - 1 > i) return j - 1;
    // \s+
    return j;
  }
  return i;
}

size_t match_gpt2(const Decoded& d, size_t i) {
  const auto& cp = d.cp;
  const auto& cls = d.cls;
  const size_t n = cp.size();
  const char32_t c = cp[i];
  if (c == '\'' && i + 1 < n) {
    char32_t a = cp[i + 1];
    if (a == 's' || a == 't' || a == 'm' || a == 'd') return i + 2;
    if (i + 2 < n) {
      char32_t b = cp[i + 2];
      if ((a == 'r' && b == 'e') || (a == 'v' && b == 'e') || (a == 'l' && b == 'l')) return i + 3;
    }
  }
  size_t k = i + (c == ' ' ? 1 : 0);
  if (k < n) {
    //  ?\p{L}+ |  ?\p{N}+ |  ?[^\s\p{L}\p{N}]+
    uint8_t want = cls[k] & kS ? 0xFF : cls[k];
    if (want != 0xFF) {
      while (k < n && cls[k] == want) ++k;
      return k;
    }
  }
  if (cls[i] & kS) {
    size_t j = i;
    while (j < n && (cls[j] & kS)) ++j;
    if (j == n) return j;
    if (j - 1 > i) return j - 1;
    return j;
  }
  return i;
}

enum class Behavior { kRemoved, kIsolated, kMergedWithPrevious, kMergedWithNext, kContiguous };

Behavior parse_behavior(const nlohmann::json& j, const std::string& where, Behavior fallback) {
  auto it = j.find("behavior");
  if (it == j.end() || it->is_null()) return fallback;
  std::string b = it->is_string() ? it->get<std::string>() : "";
  if (b == "Removed") return Behavior::kRemoved;
  if (b == "Isolated") return Behavior::kIsolated;
  if (b == "MergedWithPrevious") return Behavior::kMergedWithPrevious;
  if (b == "MergedWithNext") return Behavior::kMergedWithNext;
  if (b == "Contiguous") return Behavior::kContiguous;
  throw Error(where + ".behavior", "unknown split behavior " + it->dump());
}

struct Span {
  size_t b, e;
  bool match;
};

// Splits piece `p` at the spans (covering it, in order) according to `behavior`, as HF's
// NormalizedString::split does, appending non-empty sub-pieces to `out`.
void emit_split(const Piece& p, std::vector<Span>& spans, Behavior behavior, bool invert,
                std::vector<Piece>& out) {
  if (invert)
    for (auto& s : spans) s.match = !s.match;
  std::vector<Span> parts;
  parts.reserve(spans.size());
  switch (behavior) {
    case Behavior::kRemoved:
      for (auto& s : spans)
        if (!s.match) parts.push_back(s);
      break;
    case Behavior::kIsolated:
      parts = spans;
      break;
    case Behavior::kMergedWithPrevious: {
      bool prev_match = false;
      for (auto& s : spans) {
        if (s.match && !prev_match && !parts.empty()) parts.back().e = s.e;
        else parts.push_back(s);
        prev_match = s.match;
      }
      break;
    }
    case Behavior::kMergedWithNext: {
      bool prev_match = false;
      for (size_t k = spans.size(); k-- > 0;) {
        const Span& s = spans[k];
        if (s.match && !prev_match && !parts.empty()) parts.back().b = s.b;
        else parts.push_back(s);
        prev_match = s.match;
      }
      std::reverse(parts.begin(), parts.end());
      break;
    }
    case Behavior::kContiguous: {
      bool prev_match = false;
      for (auto& s : spans) {
        if (s.match == prev_match && !parts.empty()) parts.back().e = s.e;
        else parts.push_back(s);
        prev_match = s.match;
      }
      break;
    }
  }
  for (const Span& s : parts) {
    if (s.b == s.e) continue;
    out.push_back(Piece{p.text.substr(s.b, s.e - s.b), p.at_start && s.b == 0});
  }
}

// Turns matches into spans covering [0, size).
void matches_to_spans(const std::vector<std::pair<size_t, size_t>>& matches, size_t size,
                      std::vector<Span>& spans) {
  spans.clear();
  size_t prev = 0;
  for (auto [b, e] : matches) {
    if (b > prev) spans.push_back({prev, b, false});
    spans.push_back({b, e, true});
    prev = e;
  }
  if (prev < size) spans.push_back({prev, size, false});
}

template <typename Pred>
void char_matches(std::string_view text, Pred pred, std::vector<std::pair<size_t, size_t>>& m) {
  size_t i = 0;
  while (i < text.size()) {
    size_t b = i;
    if (pred(utf8_next(text, i))) m.emplace_back(b, i);
  }
}

class SplitPre : public PreTokenizer {
 public:
  SplitPre(std::optional<KnownRegex> re, std::string literal, Behavior behavior, bool invert)
      : re_(re), literal_(std::move(literal)), behavior_(behavior), invert_(invert) {}

  void pre_tokenize(std::vector<Piece>& pieces) const override {
    std::vector<Piece> out;
    out.reserve(pieces.size() * 4);
    std::vector<Span> spans;
    std::vector<std::pair<size_t, size_t>> matches;
    for (const Piece& p : pieces) {
      matches.clear();
      if (re_) {
        matches = find_regex_matches(*re_, p.text);
      } else if (!literal_.empty()) {
        size_t i = 0;
        while ((i = p.text.find(literal_, i)) != std::string::npos) {
          matches.emplace_back(i, i + literal_.size());
          i += literal_.size();
        }
      }
      if (behavior_ == Behavior::kIsolated && !invert_ && re_) {
        // Fast path: matches of the known regexes cover the text; keep pieces as they come.
        size_t prev = 0;
        for (auto [b, e] : matches) {
          if (b > prev) out.push_back(Piece{p.text.substr(prev, b - prev), p.at_start && prev == 0});
          out.push_back(Piece{p.text.substr(b, e - b), p.at_start && b == 0});
          prev = e;
        }
        if (prev < p.text.size())
          out.push_back(Piece{p.text.substr(prev), p.at_start && prev == 0});
        continue;
      }
      matches_to_spans(matches, p.text.size(), spans);
      emit_split(p, spans, behavior_, invert_, out);
    }
    pieces = std::move(out);
  }

 private:
  std::optional<KnownRegex> re_;
  std::string literal_;
  Behavior behavior_;
  bool invert_;
};

class CharClassPre : public PreTokenizer {
 public:
  CharClassPre(bool (*pred)(char32_t), Behavior behavior) : pred_(pred), behavior_(behavior) {}
  void pre_tokenize(std::vector<Piece>& pieces) const override {
    std::vector<Piece> out;
    std::vector<Span> spans;
    std::vector<std::pair<size_t, size_t>> matches;
    for (const Piece& p : pieces) {
      matches.clear();
      char_matches(p.text, pred_, matches);
      matches_to_spans(matches, p.text.size(), spans);
      emit_split(p, spans, behavior_, false, out);
    }
    pieces = std::move(out);
  }

 private:
  bool (*pred_)(char32_t);
  Behavior behavior_;
};

// Removes whitespace, splitting on it (HF WhitespaceSplit).
class WhitespaceSplitPre : public CharClassPre {
 public:
  WhitespaceSplitPre() : CharClassPre(&is_whitespace, Behavior::kRemoved) {}
};

class ByteLevelPre : public PreTokenizer {
 public:
  ByteLevelPre(bool add_prefix_space, bool use_regex)
      : add_prefix_space_(add_prefix_space), use_regex_(use_regex) {}
  void pre_tokenize(std::vector<Piece>& pieces) const override {
    if (add_prefix_space_)
      for (Piece& p : pieces)
        if (p.text.empty() || p.text[0] != ' ') p.text.insert(0, 1, ' ');
    if (use_regex_) SplitPre(KnownRegex::kGpt2, "", Behavior::kIsolated, false).pre_tokenize(pieces);
    const auto& table = byte_to_char();
    std::string mapped;
    for (Piece& p : pieces) {
      mapped.clear();
      for (char c : p.text) utf8_append(mapped, table[static_cast<unsigned char>(c)]);
      p.text.swap(mapped);
    }
  }

 private:
  bool add_prefix_space_, use_regex_;
};

class MetaspacePre : public PreTokenizer {
 public:
  enum class Prepend { kAlways, kNever, kFirst };
  MetaspacePre(std::string replacement, Prepend prepend, bool split)
      : replacement_(std::move(replacement)), prepend_(prepend), split_(split) {}
  void pre_tokenize(std::vector<Piece>& pieces) const override {
    std::vector<Piece> out;
    std::vector<Span> spans;
    std::vector<std::pair<size_t, size_t>> matches;
    for (Piece& p : pieces) {
      p.text = replace_all(p.text, " ", replacement_);
      bool starts = p.text.compare(0, replacement_.size(), replacement_) == 0;
      if (!starts && (prepend_ == Prepend::kAlways || (prepend_ == Prepend::kFirst && p.at_start)))
        p.text.insert(0, replacement_);
      if (!split_) {
        if (!p.text.empty()) out.push_back(std::move(p));
        continue;
      }
      matches.clear();
      size_t i = 0;
      while ((i = p.text.find(replacement_, i)) != std::string::npos) {
        matches.emplace_back(i, i + replacement_.size());
        i += replacement_.size();
      }
      matches_to_spans(matches, p.text.size(), spans);
      emit_split(p, spans, Behavior::kMergedWithNext, false, out);
    }
    pieces = std::move(out);
  }

 private:
  std::string replacement_;
  Prepend prepend_;
  bool split_;
};

class SequencePre : public PreTokenizer {
 public:
  explicit SequencePre(std::vector<std::unique_ptr<PreTokenizer>> items) : items_(std::move(items)) {}
  void pre_tokenize(std::vector<Piece>& pieces) const override {
    for (const auto& p : items_) p->pre_tokenize(pieces);
  }

 private:
  std::vector<std::unique_ptr<PreTokenizer>> items_;
};

constexpr const char* kQwen2Pattern =
    R"((?i:'s|'t|'re|'ve|'m|'ll|'d)|[^\r\n\p{L}\p{N}]?\p{L}+|\p{N}| ?[^\s\p{L}\p{N}]+[\r\n]*|\s*[\r\n]+|\s+(?!\S)|\s+)";
constexpr const char* kLlama3Pattern =
    R"((?i:'s|'t|'re|'ve|'m|'ll|'d)|[^\r\n\p{L}\p{N}]?\p{L}+|\p{N}{1,3}| ?[^\s\p{L}\p{N}]+[\r\n]*|\s*[\r\n]+|\s+(?!\S)|\s+)";
constexpr const char* kGpt2Pattern =
    R"('s|'t|'re|'ve|'m|'ll|'d| ?\p{L}+| ?\p{N}+| ?[^\s\p{L}\p{N}]+|\s+(?!\S)|\s+)";

}  // namespace

std::vector<std::pair<size_t, size_t>> find_regex_matches(KnownRegex re, std::string_view text) {
  thread_local Decoded d;
  decode(text, d);
  std::vector<std::pair<size_t, size_t>> out;
  const size_t n = d.cp.size();
  size_t i = 0;
  while (i < n) {
    size_t e = re == KnownRegex::kGpt2 ? match_gpt2(d, i)
                                        : match_qwen(d, i, re == KnownRegex::kQwen2 ? 1 : 3);
    if (e == i) {
      ++i;  // no alternative matches here (cannot happen for these patterns)
      continue;
    }
    out.emplace_back(d.off[i], d.off[e]);
    i = e;
  }
  return out;
}

std::unique_ptr<PreTokenizer> make_pre_tokenizer(const nlohmann::json& j, const std::string& where) {
  if (j.is_null()) return nullptr;
  std::string type = component_type(j, where);
  if (type == "Sequence") {
    auto it = j.find("pretokenizers");
    if (it == j.end() || !it->is_array())
      throw Error(where + ".pretokenizers", "expected an array of pre-tokenizers");
    std::vector<std::unique_ptr<PreTokenizer>> items;
    for (size_t i = 0; i < it->size(); ++i) {
      auto p = make_pre_tokenizer((*it)[i], where + ".pretokenizers[" + std::to_string(i) + "]");
      if (p) items.push_back(std::move(p));
    }
    return std::make_unique<SequencePre>(std::move(items));
  }
  if (type == "Split") {
    auto pit = j.find("pattern");
    if (pit == j.end() || !pit->is_object()) throw Error(where + ".pattern", "expected an object");
    Behavior behavior = parse_behavior(j, where, Behavior::kIsolated);
    bool invert = json_bool_or(j, "invert", false, where);
    if (pit->contains("Regex")) {
      const auto& r = (*pit)["Regex"];
      std::string pattern = r.is_string() ? r.get<std::string>() : r.dump();
      std::optional<KnownRegex> known;
      if (pattern == kQwen2Pattern) known = KnownRegex::kQwen2;
      if (pattern == kLlama3Pattern) known = KnownRegex::kLlama3;
      if (pattern == kGpt2Pattern) known = KnownRegex::kGpt2;
      if (!known)
        throw Error(where + ".pattern.Regex",
                    "Split regex \"" + pattern +
                        "\" is not one kiln knows (it matches the Qwen2/Qwen3, Llama 3 and GPT-2 "
                        "patterns exactly; other regexes are not supported)");
      return std::make_unique<SplitPre>(known, "", behavior, invert);
    }
    return std::make_unique<SplitPre>(std::nullopt, string_pattern(j, where), behavior, invert);
  }
  if (type == "ByteLevel")
    return std::make_unique<ByteLevelPre>(json_bool_or(j, "add_prefix_space", true, where),
                                          json_bool_or(j, "use_regex", true, where));
  if (type == "Metaspace") {
    std::string replacement = json_string(j, "replacement", where);
    MetaspacePre::Prepend prepend = MetaspacePre::Prepend::kAlways;
    auto it = j.find("prepend_scheme");
    if (it != j.end() && !it->is_null()) {
      std::string s = it->is_string() ? it->get<std::string>() : it->dump();
      if (s == "always") prepend = MetaspacePre::Prepend::kAlways;
      else if (s == "never") prepend = MetaspacePre::Prepend::kNever;
      else if (s == "first") prepend = MetaspacePre::Prepend::kFirst;
      else throw Error(where + ".prepend_scheme", "unknown prepend scheme \"" + s + "\"");
    } else if (!json_bool_or(j, "add_prefix_space", true, where)) {
      prepend = MetaspacePre::Prepend::kNever;  // older files: add_prefix_space instead
    }
    return std::make_unique<MetaspacePre>(replacement, prepend, json_bool_or(j, "split", true, where));
  }
  if (type == "Digits") {
    bool individual = json_bool_or(j, "individual_digits", false, where);
    return std::make_unique<CharClassPre>(&is_number,
                                          individual ? Behavior::kIsolated : Behavior::kContiguous);
  }
  if (type == "Punctuation")
    return std::make_unique<CharClassPre>(&is_punctuation,
                                          parse_behavior(j, where, Behavior::kIsolated));
  if (type == "WhitespaceSplit") return std::make_unique<WhitespaceSplitPre>();
  throw Error(where, "pre-tokenizer type \"" + type + "\" is not supported by kiln");
}

}  // namespace kiln::tokenizer
