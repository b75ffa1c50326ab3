// Byte-pair-encoding model of tokenizer.json ("model": {"type": "BPE", ...}), as Hugging Face
// tokenizers' BPE: each piece is split into characters (with continuing_subword_prefix /
// end_of_word_suffix, byte_fallback to <0xXX> tokens, unk_token with fuse_unk), then the adjacent
// pair of lowest merge rank is merged repeatedly (leftmost first among equal ranks) until no pair
// has a merge. The merge loop is O(n log n) per piece (a heap over a linked list of symbols) with a
// quadratic-but-allocation-free path for short pieces; both give identical results. Results of
// short pieces are memoized in a per-thread cache (BPE is a pure function of the piece).
// Thread-safe: tokenize() touches no shared mutable state.
//
// Example:
//   auto bpe = BpeModel::from_json(tj.doc["model"], tj, "tokenizer.json");
//   std::vector<int32_t> ids;
//   bpe->tokenize("Ġhello", ids);
#pragma once

#include <cstdint>
#include <memory>
#include <optional>
#include <string>
#include <string_view>
#include <vector>

#include <nlohmann/json.hpp>

#include "kiln/tokenizer/tokenizer_json.h"

namespace kiln::tokenizer {

// Open-addressing hash map from strings (stored once in an arena) to int32 ids.
class StringIdMap {
 public:
  void reserve(size_t n);
  // Inserts or overwrites; returns the stored key (valid while the map lives and is not grown
  // past its reserve... use key_at() with the returned offset for a stable view).
  uint32_t set(std::string_view key, int32_t value);
  std::optional<int32_t> get(std::string_view key) const;
  // get() for n keys at once (-1 when absent), prefetching the table so lookups overlap their
  // cache misses; loading tokenizer.json is bound by these misses.
  void get_many(const std::string_view* keys, size_t n, int32_t* out) const;
  size_t size() const { return count_; }
  // The key stored at arena offset `offset` with length `length`.
  std::string_view key_at(uint32_t offset, uint32_t length) const {
    return std::string_view(arena_).substr(offset, length);
  }

 private:
  struct Slot {
    uint32_t tag = 0;  // high bits of the hash
    uint32_t offset = 0, length = 0;
    int32_t value = -1;  // -1: empty
  };
  void grow();
  std::vector<Slot> slots_;
  std::string arena_;
  size_t count_ = 0;
};

class BpeModel {
 public:
  BpeModel();

  // `model` is the "model" object of tokenizer.json; vocab/merges come from `tj` when streamed.
  static std::unique_ptr<BpeModel> from_json(const nlohmann::json& model, TokenizerJson& tj,
                                             const std::string& where);

  // Appends the ids for one pre-tokenized piece to `out`.
  void tokenize(std::string_view piece, std::vector<int32_t>& out) const;

  std::optional<int32_t> token_to_id(std::string_view token) const { return vocab_.get(token); }
  // The token string of `id`, or nullopt when the id is not in the vocabulary.
  std::optional<std::string_view> id_to_token(int32_t id) const {
    if (id < 0 || size_t(id) >= id_to_token_.size() || id_to_token_[size_t(id)].second == kNoToken)
      return std::nullopt;
    const auto& [offset, length] = id_to_token_[size_t(id)];
    return vocab_.key_at(offset, length);
  }
  size_t vocab_size() const { return vocab_.size(); }
  int32_t max_id() const { return int32_t(id_to_token_.size()) - 1; }

  // Merges `symbols` in place. force_heap picks the heap path even for short inputs (for tests).
  void merge(std::vector<int32_t>& symbols, bool force_heap = false) const;

 private:
  struct MergeEntry {
    int32_t rank;
    int32_t new_id;
  };
  // Open addressing on (left id, right id) keys.
  const MergeEntry* find_merge(int32_t a, int32_t b) const {
    uint64_t key = (uint64_t(uint32_t(a)) << 32) | uint32_t(b);
    size_t mask = merge_keys_.size() - 1;
    size_t i = size_t(mix(key)) & mask;
    while (true) {
      uint64_t k = merge_keys_[i];
      if (k == key) return &merge_values_[i];
      if (k == kEmptyKey) return nullptr;
      i = (i + 1) & mask;
    }
  }
  void insert_merge(int32_t a, int32_t b, MergeEntry e);
  static uint64_t mix(uint64_t x) {
    x ^= x >> 33;
    x *= 0xff51afd7ed558ccdull;
    x ^= x >> 33;
    x *= 0xc4ceb9fe1a85ec53ull;
    x ^= x >> 33;
    return x;
  }
  static constexpr uint64_t kEmptyKey = ~uint64_t(0);

  void initial_symbols(std::string_view piece, std::vector<int32_t>& symbols) const;
  void merge_small(int32_t* ids, size_t& n) const;
  void merge_heap(std::vector<int32_t>& symbols) const;

  static constexpr uint32_t kNoToken = ~uint32_t(0);
  StringIdMap vocab_;
  std::vector<std::pair<uint32_t, uint32_t>> id_to_token_;  // (arena offset, length) in vocab_
  std::vector<uint64_t> merge_keys_;
  std::vector<MergeEntry> merge_values_;
  std::vector<int32_t> char_ids_;  // id of the one-character token for cp < 0x10000, else -1
  std::string prefix_, suffix_;    // continuing_subword_prefix, end_of_word_suffix ("" = none)
  std::optional<std::string> unk_token_;
  std::optional<int32_t> unk_id_;
  bool fuse_unk_ = false, byte_fallback_ = false, ignore_merges_ = false;
  int32_t byte_ids_[256];
  uint64_t instance_;  // identifies this model to the per-thread piece cache  // ids of "<0xXX>" tokens (byte_fallback), -1 when missing
};

}  // namespace kiln::tokenizer
