// Unicode helpers for the tokenizer: UTF-8 decoding and encoding, the character classes the
// pre-tokenizer regexes use (\p{L}, \p{N}, \s as Oniguruma defines them), ICU normalization forms,
// lowercase, lossy UTF-8 decoding (one U+FFFD per maximal invalid subpart, like Rust's
// from_utf8_lossy), and the GPT-2 byte <-> character table of the ByteLevel components.
//
// Example:
//   size_t bad = kiln::tokenizer::utf8_invalid_at(text);     // npos when valid
//   std::string nfc = kiln::tokenizer::normalize(text, kiln::tokenizer::NormForm::NFC);
//   std::string shown = kiln::tokenizer::utf8_lossy(bytes);
#pragma once

#include <array>
#include <cstdint>
#include <string>
#include <string_view>

namespace kiln::tokenizer {

inline constexpr size_t kNpos = std::string_view::npos;

// Index of the first byte of the first invalid UTF-8 sequence, or kNpos when `s` is valid UTF-8
// (no overlongs, no surrogates, nothing above U+10FFFF).
size_t utf8_invalid_at(std::string_view s);

// Decodes the code point starting at s[i] (s must be valid UTF-8) and advances i past it.
inline char32_t utf8_next(std::string_view s, size_t& i) {
  unsigned char c = static_cast<unsigned char>(s[i]);
  if (c < 0x80) {
    ++i;
    return c;
  }
  if (c < 0xE0) {
    char32_t cp = ((c & 0x1Fu) << 6) | (static_cast<unsigned char>(s[i + 1]) & 0x3Fu);
    i += 2;
    return cp;
  }
  if (c < 0xF0) {
    char32_t cp = ((c & 0x0Fu) << 12) | ((static_cast<unsigned char>(s[i + 1]) & 0x3Fu) << 6) |
                  (static_cast<unsigned char>(s[i + 2]) & 0x3Fu);
    i += 3;
    return cp;
  }
  char32_t cp = ((c & 0x07u) << 18) | ((static_cast<unsigned char>(s[i + 1]) & 0x3Fu) << 12) |
                ((static_cast<unsigned char>(s[i + 2]) & 0x3Fu) << 6) |
                (static_cast<unsigned char>(s[i + 3]) & 0x3Fu);
  i += 4;
  return cp;
}

// Length in bytes of the UTF-8 sequence that starts with lead byte c (1 for invalid leads).
inline size_t utf8_len(unsigned char c) {
  if (c < 0xC0) return 1;
  if (c < 0xE0) return 2;
  if (c < 0xF0) return 3;
  return 4;
}

void utf8_append(std::string& out, char32_t cp);

// Decodes bytes as UTF-8, replacing each maximal invalid subpart with one U+FFFD.
std::string utf8_lossy(std::string_view bytes);
// Length of the longest suffix of `bytes` that is an incomplete (but so far valid) UTF-8 sequence.
size_t utf8_incomplete_tail(std::string_view bytes);

// Character classes, as the Oniguruma regexes of tokenizer.json see them.
bool is_letter(char32_t cp);      // \p{L}: general category Lu, Ll, Lt, Lm, Lo
bool is_number(char32_t cp);      // \p{N}: Nd, Nl, No
bool is_whitespace(char32_t cp);  // \s: Unicode White_Space
bool is_word_char(char32_t cp);   // \w (Rust regex): Alphabetic, M, Nd, Pc, Join_Control
bool is_punctuation(char32_t cp); // ASCII punctuation or general category P*

enum class NormForm { NFC, NFD, NFKC, NFKD };
// `s` must be valid UTF-8. Returns s itself (copied) when already normalized.
std::string normalize(std::string_view s, NormForm form);
// Full Unicode lowercase (root locale, with final-sigma context), like Rust's str::to_lowercase.
std::string to_lower(std::string_view s);

// GPT-2 byte-level table: byte b <-> code point byte_to_char()[b].
const std::array<char32_t, 256>& byte_to_char();
// Inverse: the byte for code point cp, or -1 when cp is not one of the 256 byte characters.
int char_to_byte(char32_t cp);

}  // namespace kiln::tokenizer
