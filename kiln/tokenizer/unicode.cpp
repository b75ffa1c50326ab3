#include "kiln/tokenizer/unicode.h"

#include <unicode/normalizer2.h>
#include <unicode/bytestream.h>
#include <unicode/uchar.h>
#include <unicode/ustring.h>
#include <unicode/locid.h>
#include <unicode/unistr.h>

#include <vector>

#include "kiln/core/error.h"

namespace kiln::tokenizer {

namespace {

// Allowed range of the second byte after lead byte c (the rest are always 80..BF); Unicode
// Table 3-7 "Well-Formed UTF-8 Byte Sequences". Returns the total length, 0 for an invalid lead.
inline int utf8_expect(unsigned char c, unsigned char& lo, unsigned char& hi) {
  lo = 0x80;
  hi = 0xBF;
  if (c < 0x80) return 1;
  if (c < 0xC2) return 0;
  if (c < 0xE0) return 2;
  if (c < 0xF0) {
    if (c == 0xE0) lo = 0xA0;
    if (c == 0xED) hi = 0x9F;
    return 3;
  }
  if (c < 0xF5) {
    if (c == 0xF0) lo = 0x90;
    if (c == 0xF4) hi = 0x8F;
    return 4;
  }
  return 0;
}

// Length of the valid prefix of the sequence at s[i] (== its full length when complete).
inline int utf8_valid_prefix(std::string_view s, size_t i, int& full) {
  unsigned char lo, hi;
  full = utf8_expect(static_cast<unsigned char>(s[i]), lo, hi);
  if (full <= 1) return full;
  int k = 1;
  while (k < full && i + k < s.size()) {
    unsigned char b = static_cast<unsigned char>(s[i + k]);
    if (k == 1 ? (b < lo || b > hi) : (b < 0x80 || b > 0xBF)) break;
    ++k;
  }
  return k;
}

}  // namespace

size_t utf8_invalid_at(std::string_view s) {
  size_t i = 0, n = s.size();
  while (i < n) {
    // Fast path over ASCII, 8 bytes at a time.
    while (i + 8 <= n) {
      uint64_t w;
      __builtin_memcpy(&w, s.data() + i, 8);
      if (w & 0x8080808080808080ull) break;
      i += 8;
    }
    if (i >= n) break;
    if (static_cast<unsigned char>(s[i]) < 0x80) {
      ++i;
      continue;
    }
    int full;
    int k = utf8_valid_prefix(s, i, full);
    if (full == 0 || k != full) return i;
    i += size_t(k);
  }
  return kNpos;
}

void utf8_append(std::string& out, char32_t cp) {
  if (cp < 0x80) {
    out.push_back(static_cast<char>(cp));
  } else if (cp < 0x800) {
    out.push_back(static_cast<char>(0xC0 | (cp >> 6)));
    out.push_back(static_cast<char>(0x80 | (cp & 0x3F)));
  } else if (cp < 0x10000) {
    out.push_back(static_cast<char>(0xE0 | (cp >> 12)));
    out.push_back(static_cast<char>(0x80 | ((cp >> 6) & 0x3F)));
    out.push_back(static_cast<char>(0x80 | (cp & 0x3F)));
  } else {
    out.push_back(static_cast<char>(0xF0 | (cp >> 18)));
    out.push_back(static_cast<char>(0x80 | ((cp >> 12) & 0x3F)));
    out.push_back(static_cast<char>(0x80 | ((cp >> 6) & 0x3F)));
    out.push_back(static_cast<char>(0x80 | (cp & 0x3F)));
  }
}

std::string utf8_lossy(std::string_view s) {
  std::string out;
  out.reserve(s.size());
  size_t i = 0;
  while (i < s.size()) {
    int full;
    int k = utf8_valid_prefix(s, i, full);
    if (full != 0 && k == full) {
      out.append(s.data() + i, size_t(k));
      i += size_t(k);
    } else {
      out += "\xEF\xBF\xBD";  // one U+FFFD per maximal invalid subpart
      i += size_t(k > 0 ? k : 1);
    }
  }
  return out;
}

size_t utf8_incomplete_tail(std::string_view s) {
  size_t n = s.size();
  for (size_t back = 1; back <= 3 && back <= n; ++back) {
    size_t i = n - back;
    unsigned char c = static_cast<unsigned char>(s[i]);
    if (c >= 0x80 && c < 0xC0) continue;  // continuation byte: look further back
    int full;
    int k = utf8_valid_prefix(s, i, full);
    return (full > 1 && size_t(k) == back && k < full) ? back : 0;
  }
  return 0;
}

namespace {
inline int8_t general_category(char32_t cp) { return u_charType(static_cast<UChar32>(cp)); }
}  // namespace

bool is_letter(char32_t cp) {
  if (cp < 0x80) return (cp | 0x20) >= 'a' && (cp | 0x20) <= 'z';
  return (U_GET_GC_MASK(static_cast<UChar32>(cp)) & U_GC_L_MASK) != 0;
}

bool is_number(char32_t cp) {
  if (cp < 0x80) return cp >= '0' && cp <= '9';
  return (U_GET_GC_MASK(static_cast<UChar32>(cp)) & U_GC_N_MASK) != 0;
}

bool is_whitespace(char32_t cp) {
  if (cp < 0x80) return cp == ' ' || (cp >= 0x09 && cp <= 0x0D);
  return u_isUWhiteSpace(static_cast<UChar32>(cp));
}

bool is_word_char(char32_t cp) {
  UChar32 c = static_cast<UChar32>(cp);
  if (u_hasBinaryProperty(c, UCHAR_ALPHABETIC) || u_hasBinaryProperty(c, UCHAR_JOIN_CONTROL))
    return true;
  int8_t gc = general_category(cp);
  return (U_MASK(gc) & (U_GC_M_MASK | U_GC_ND_MASK | U_GC_PC_MASK)) != 0;
}

bool is_punctuation(char32_t cp) {
  if (cp < 0x80) return cp > 0x20 && cp < 0x7F && !(is_letter(cp) || is_number(cp));
  return (U_GET_GC_MASK(static_cast<UChar32>(cp)) & U_GC_P_MASK) != 0;
}

std::string normalize(std::string_view s, NormForm form) {
  bool ascii = true;
  for (char c : s)
    if (static_cast<unsigned char>(c) >= 0x80) {
      ascii = false;
      break;
    }
  if (ascii) return std::string(s);  // ASCII is stable under every normalization form
  UErrorCode status = U_ZERO_ERROR;
  const icu::Normalizer2* norm = nullptr;
  switch (form) {
    case NormForm::NFC: norm = icu::Normalizer2::getNFCInstance(status); break;
    case NormForm::NFD: norm = icu::Normalizer2::getNFDInstance(status); break;
    case NormForm::NFKC: norm = icu::Normalizer2::getNFKCInstance(status); break;
    case NormForm::NFKD: norm = icu::Normalizer2::getNFKDInstance(status); break;
  }
  if (U_FAILURE(status) || norm == nullptr)
    throw Error("ICU", std::string("cannot load normalizer: ") + u_errorName(status));
  icu::StringPiece piece(s.data(), static_cast<int32_t>(s.size()));
  if (norm->isNormalizedUTF8(piece, status) && U_SUCCESS(status)) return std::string(s);
  status = U_ZERO_ERROR;
  std::string out;
  icu::StringByteSink<std::string> sink(&out, static_cast<int32_t>(s.size()) + 16);
  norm->normalizeUTF8(0, piece, sink, nullptr, status);
  if (U_FAILURE(status)) throw Error("ICU", std::string("normalization failed: ") + u_errorName(status));
  return out;
}

std::string to_lower(std::string_view s) {
  bool ascii = true;
  for (char c : s)
    if (static_cast<unsigned char>(c) >= 0x80) {
      ascii = false;
      break;
    }
  if (ascii) {
    std::string out(s);
    for (char& c : out)
      if (c >= 'A' && c <= 'Z') c = static_cast<char>(c + 32);
    return out;
  }
  icu::UnicodeString u = icu::UnicodeString::fromUTF8(icu::StringPiece(s.data(), int32_t(s.size())));
  u.toLower(icu::Locale::getRoot());
  std::string out;
  u.toUTF8String(out);
  return out;
}

const std::array<char32_t, 256>& byte_to_char() {
  static const std::array<char32_t, 256> table = [] {
    std::array<char32_t, 256> t{};
    // Printable bytes map to themselves; the other 68 go to U+0100 + n in byte order.
    char32_t next = 0x100;
    for (int b = 0; b < 256; ++b) {
      bool printable = (b >= 0x21 && b <= 0x7E) || (b >= 0xA1 && b <= 0xAC) || (b >= 0xAE);
      t[b] = printable ? char32_t(b) : next++;
    }
    return t;
  }();
  return table;
}

int char_to_byte(char32_t cp) {
  static const std::vector<int16_t> table = [] {
    std::vector<int16_t> t(0x144, -1);
    const auto& fwd = byte_to_char();
    for (int b = 0; b < 256; ++b) t[fwd[b]] = int16_t(b);
    return t;
  }();
  return cp < table.size() ? table[cp] : -1;
}

}  // namespace kiln::tokenizer
