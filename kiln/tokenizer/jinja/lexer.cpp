#include "kiln/tokenizer/jinja/lexer.h"

#include <cctype>

namespace kiln::tokenizer::jinja {
namespace {

bool is_digit(char c) { return c >= '0' && c <= '9'; }
bool is_name_start(char c) { return std::isalpha(static_cast<unsigned char>(c)) || c == '_'; }
bool is_name_char(char c) { return std::isalnum(static_cast<unsigned char>(c)) || c == '_'; }

void append_utf8(std::string& out, uint32_t cp) {
  if (cp >= 0xd800 && cp <= 0xdfff) cp = 0xfffd;  // lone surrogates cannot be UTF-8
  if (cp > 0x10ffff) cp = 0xfffd;
  if (cp < 0x80) {
    out += static_cast<char>(cp);
  } else if (cp < 0x800) {
    out += static_cast<char>(0xc0 | (cp >> 6));
    out += static_cast<char>(0x80 | (cp & 0x3f));
  } else if (cp < 0x10000) {
    out += static_cast<char>(0xe0 | (cp >> 12));
    out += static_cast<char>(0x80 | ((cp >> 6) & 0x3f));
    out += static_cast<char>(0x80 | (cp & 0x3f));
  } else {
    out += static_cast<char>(0xf0 | (cp >> 18));
    out += static_cast<char>(0x80 | ((cp >> 12) & 0x3f));
    out += static_cast<char>(0x80 | ((cp >> 6) & 0x3f));
    out += static_cast<char>(0x80 | (cp & 0x3f));
  }
}

class Lexer {
 public:
  Lexer(const std::string& source, Budget& budget) : budget_(budget) {
    // jinja2: "\r\n", "\r" and "\n" all become "\n"; one trailing newline is dropped.
    src_.reserve(source.size());
    for (size_t i = 0; i < source.size(); ++i) {
      if (source[i] == '\r') {
        src_ += '\n';
        if (i + 1 < source.size() && source[i + 1] == '\n') ++i;
      } else {
        src_ += source[i];
      }
    }
    if (!src_.empty() && src_.back() == '\n') src_.pop_back();
  }

  std::vector<Token> run() {
    size_t pos = 0;
    bool line_starting = true;
    const size_t n = src_.size();
    while (pos < n) {
      size_t p = pos;
      for (p = src_.find('{', pos); p != std::string::npos; p = src_.find('{', p + 1))
        if (p + 1 < n && (src_[p + 1] == '%' || src_[p + 1] == '{' || src_[p + 1] == '#')) break;
      if (p == std::string::npos) {
        emit(TokenType::kData, src_.substr(pos), pos);
        break;
      }
      char kind = src_[p + 1];
      char sign = (p + 2 < n && (src_[p + 2] == '-' || src_[p + 2] == '+')) ? src_[p + 2] : 0;
      size_t after = p + 2 + (sign ? 1 : 0);
      size_t raw_end = kind == '%' ? match_raw_begin(after) : 0;
      std::string text = src_.substr(pos, p - pos);
      strip_before(text, sign, kind != '{', line_starting);
      emit(TokenType::kData, std::move(text), pos);
      if (raw_end) {
        lex_raw(raw_end, &pos, &line_starting);
      } else if (kind == '#') {
        lex_comment(after, &pos, &line_starting);
      } else {
        lex_tag(kind, p, after, &pos, &line_starting);
      }
    }
    tokens_.push_back({TokenType::kEof, "", line_at(n)});
    return std::move(tokens_);
  }

 private:
  int line_at(size_t pos) {
    // Positions only move forward, so count newlines incrementally.
    if (pos < line_pos_) {
      line_pos_ = 0;
      line_ = 1;
    }
    for (; line_pos_ < pos && line_pos_ < src_.size(); ++line_pos_)
      if (src_[line_pos_] == '\n') ++line_;
    return line_;
  }
  [[noreturn]] void fail(const std::string& what, size_t pos) {
    throw TemplateError(what, line_at(pos));
  }
  void emit(TokenType type, std::string value, size_t pos) {
    if (type == TokenType::kData && value.empty()) return;
    budget_.alloc(value.size());
    tokens_.push_back({type, std::move(value), line_at(pos)});
  }
  size_t skip_space(size_t q) const {
    size_t len = 0;
    while (q < src_.size() && is_py_space(src_, q, &len)) q += len;
    return q;
  }
  bool at(size_t q, const char* s) const { return src_.compare(q, std::char_traits<char>::length(s), s) == 0; }

  // `{%-`: strip all whitespace before the tag. lstrip_blocks: for block and comment tags not
  // marked `+`, strip the indentation when only whitespace precedes the tag on its line.
  void strip_before(std::string& text, char sign, bool lstrip, bool line_starting) {
    if (sign == '-') {
      size_t end = text.size();
      while (end > 0) {
        size_t start = end - 1;
        while (start > 0 && (static_cast<unsigned char>(text[start]) & 0xc0) == 0x80) --start;
        size_t len = 0;
        if (!is_py_space(text, start, &len) || start + len != end) break;
        end = start;
      }
      text.resize(end);
    } else if (sign != '+' && lstrip) {
      size_t nl = text.rfind('\n');
      size_t l_pos = nl == std::string::npos ? 0 : nl + 1;
      if ((l_pos > 0 || line_starting) && l_pos < text.size()) {
        size_t q = l_pos, len = 0;
        while (q < text.size() && is_py_space(text, q, &len)) q += len;
        if (q == text.size()) text.resize(l_pos);
      }
    }
  }

  // `{% raw %}` or `{%- raw -%}`: returns the end of the opening tag, or 0.
  size_t match_raw_begin(size_t q) const {
    q = skip_space(q);
    if (!at(q, "raw")) return 0;
    q = skip_space(q + 3);
    if (at(q, "-%}")) return skip_space(q + 3);
    if (at(q, "%}")) return q + 2;
    return 0;
  }

  void lex_raw(size_t start, size_t* pos, bool* line_starting) {
    bool starting = src_[start - 1] == '\n';
    for (size_t p = src_.find("{%", start); p != std::string::npos; p = src_.find("{%", p + 1)) {
      char sign = (p + 2 < src_.size() && (src_[p + 2] == '-' || src_[p + 2] == '+')) ? src_[p + 2] : 0;
      size_t q = skip_space(p + 2 + (sign ? 1 : 0));
      if (!at(q, "endraw")) continue;
      q = skip_space(q + 6);
      size_t end;
      if (at(q, "+%}")) {
        end = q + 3;
      } else if (at(q, "-%}")) {
        end = skip_space(q + 3);
      } else if (at(q, "%}")) {
        end = q + 2;
        if (end < src_.size() && src_[end] == '\n') ++end;
      } else {
        continue;
      }
      std::string text = src_.substr(start, p - start);
      strip_before(text, sign, true, starting);
      emit(TokenType::kData, std::move(text), start);
      *pos = end;
      *line_starting = src_[end - 1] == '\n';
      return;
    }
    fail("Missing end of raw directive", start);
  }

  void lex_comment(size_t body, size_t* pos, bool* line_starting) {
    size_t h = src_.find("#}", body);
    if (h == std::string::npos) fail("Missing end of comment tag", body);
    size_t end = h + 2;
    if (h > body && src_[h - 1] == '-') {
      end = skip_space(end);
    } else if (h > body && src_[h - 1] == '+') {
    } else if (end < src_.size() && src_[end] == '\n') {
      ++end;  // trim_blocks
    }
    *pos = end;
    *line_starting = src_[end - 1] == '\n';
  }

  size_t scan_digits(size_t q) const {  // (\d+_)*\d+ ; returns q when nothing matches
    if (q >= src_.size() || !is_digit(src_[q])) return q;
    while (true) {
      while (q < src_.size() && is_digit(src_[q])) ++q;
      if (q + 1 < src_.size() && src_[q] == '_' && is_digit(src_[q + 1])) {
        ++q;
        continue;
      }
      return q;
    }
  }
  size_t scan_exponent(size_t q) const {
    if (q >= src_.size() || (src_[q] != 'e' && src_[q] != 'E')) return 0;
    ++q;
    if (q < src_.size() && (src_[q] == '+' || src_[q] == '-')) ++q;
    size_t e = scan_digits(q);
    return e == q ? 0 : e;
  }

  void lex_tag(char kind, size_t open, size_t q, size_t* pos, bool* line_starting) {
    emit(kind == '%' ? TokenType::kBlockBegin : TokenType::kVarBegin, "", open);
    tokens_.back().value = kind == '%' ? "{%" : "{{";
    std::vector<char> balance;
    const size_t n = src_.size();
    while (true) {
      if (q >= n) fail("unexpected end of template inside a tag", open);
      if (balance.empty()) {
        size_t end = 0;
        if (kind == '%') {
          if (at(q, "+%}")) {
            end = q + 3;
          } else if (at(q, "-%}")) {
            end = skip_space(q + 3);
          } else if (at(q, "%}")) {
            end = q + 2;
            if (end < n && src_[end] == '\n') ++end;  // trim_blocks
          }
        } else {
          if (at(q, "-}}")) {
            end = skip_space(q + 3);
          } else if (at(q, "}}")) {
            end = q + 2;
          }
        }
        if (end) {
          emit(kind == '%' ? TokenType::kBlockEnd : TokenType::kVarEnd, "", q);
          tokens_.back().value = kind == '%' ? "%}" : "}}";
          *pos = end;
          *line_starting = src_[end - 1] == '\n';
          return;
        }
      }
      size_t len = 0;
      if (is_py_space(src_, q, &len)) {
        q = skip_space(q);
        continue;
      }
      char c = src_[q];
      if (is_digit(c)) {
        size_t a = scan_digits(q);
        if (q == 0 || src_[q - 1] != '.') {
          size_t frac = 0;
          if (a < n && src_[a] == '.') {
            size_t f = scan_digits(a + 1);
            if (f > a + 1) frac = f;
          }
          size_t e = frac ? scan_exponent(frac) : 0;
          if (!e) e = scan_exponent(a);
          size_t end = e ? e : frac;
          if (end) {
            emit(TokenType::kFloat, strip_underscores(q, end), q);
            q = end;
            continue;
          }
        }
        size_t end = a;
        if (c == '0') {  // 0(_?0)*
          end = q + 1;
          while (end < n && (src_[end] == '0' || (src_[end] == '_' && end + 1 < n && src_[end + 1] == '0')))
            ++end;
        }
        emit(TokenType::kInteger, strip_underscores(q, end), q);
        q = end;
        continue;
      }
      if (is_name_start(c)) {
        size_t end = q + 1;
        while (end < n && is_name_char(src_[end])) ++end;
        emit(TokenType::kName, src_.substr(q, end - q), q);
        q = end;
        continue;
      }
      if (c == '\'' || c == '"') {
        q = lex_string(q);
        continue;
      }
      static const char* kOps[] = {"//", "**", "==", "!=", ">=", "<=", "+", "-", "/", "*", "%",
                                   "~", "[", "]", "(", ")", "{", "}", ">", "<", "=", ".", ":",
                                   "|", ",", ";"};
      const char* op = nullptr;
      for (const char* o : kOps)
        if (at(q, o)) {
          op = o;
          break;
        }
      if (!op) fail(std::string("unexpected char '") + c + "'", q);
      std::string o = op;
      if (o == "(" || o == "[" || o == "{") {
        if (balance.size() >= static_cast<size_t>(budget_.limits().max_depth))
          fail("brackets nested too deeply", q);
        balance.push_back(o == "(" ? ')' : o == "[" ? ']' : '}');
      } else if (o == ")" || o == "]" || o == "}") {
        if (balance.empty()) fail("unexpected '" + o + "'", q);
        if (balance.back() != o[0])
          fail("unexpected '" + o + "', expected '" + std::string(1, balance.back()) + "'", q);
        balance.pop_back();
      }
      emit(TokenType::kOperator, o, q);
      q += o.size();
    }
  }

  std::string strip_underscores(size_t a, size_t b) const {
    std::string s;
    for (size_t i = a; i < b; ++i)
      if (src_[i] != '_') s += src_[i];
    return s;
  }

  static int hex_value(char c) {
    if (c >= '0' && c <= '9') return c - '0';
    if (c >= 'a' && c <= 'f') return c - 'a' + 10;
    if (c >= 'A' && c <= 'F') return c - 'A' + 10;
    return -1;
  }

  // A string literal, decoded as Python's "unicode-escape" codec does.
  size_t lex_string(size_t q) {
    char quote = src_[q];
    size_t i = q + 1;
    std::string out;
    const size_t n = src_.size();
    while (true) {
      if (i >= n) fail("unexpected char '" + std::string(1, quote) + "'", q);
      char c = src_[i];
      if (c == quote) break;
      if (c != '\\') {
        out += c;
        ++i;
        continue;
      }
      if (i + 1 >= n) fail("unexpected char '" + std::string(1, quote) + "'", q);
      char e = src_[i + 1];
      i += 2;
      switch (e) {
        case '\n': break;
        case '\\': out += '\\'; break;
        case '\'': out += '\''; break;
        case '"': out += '"'; break;
        case 'a': out += '\a'; break;
        case 'b': out += '\b'; break;
        case 'f': out += '\f'; break;
        case 'n': out += '\n'; break;
        case 'r': out += '\r'; break;
        case 't': out += '\t'; break;
        case 'v': out += '\v'; break;
        case 'x':
        case 'u':
        case 'U': {
          int digits = e == 'x' ? 2 : e == 'u' ? 4 : 8;
          uint32_t cp = 0;
          for (int k = 0; k < digits; ++k) {
            int h = i < n ? hex_value(src_[i]) : -1;
            if (h < 0) fail(std::string("truncated \\") + e + " escape in string", q);
            cp = cp * 16 + static_cast<uint32_t>(h);
            ++i;
          }
          if (cp > 0x10ffff) fail("illegal Unicode character in string", q);
          append_utf8(out, cp);
          break;
        }
        default:
          if (e >= '0' && e <= '7') {
            uint32_t cp = static_cast<uint32_t>(e - '0');
            for (int k = 0; k < 2 && i < n && src_[i] >= '0' && src_[i] <= '7'; ++k, ++i)
              cp = cp * 8 + static_cast<uint32_t>(src_[i] - '0');
            append_utf8(out, cp);
          } else {
            out += '\\';  // unknown escapes stay as written
            out += e;
          }
      }
    }
    emit(TokenType::kString, std::move(out), q);
    return i + 1;
  }

  Budget& budget_;
  std::string src_;
  std::vector<Token> tokens_;
  size_t line_pos_ = 0;
  int line_ = 1;
};

}  // namespace

std::vector<Token> tokenize(const std::string& source, Budget& budget) {
  return Lexer(source, budget).run();
}

}  // namespace kiln::tokenizer::jinja
