#include "kiln/tokenizer/bpe.h"

#include <algorithm>
#include <atomic>
#include <unordered_map>
#include <climits>
#include <cstring>
#include <queue>

#include "kiln/core/error.h"
#include "kiln/core/threads.h"
#include "kiln/tokenizer/unicode.h"

namespace kiln::tokenizer {

namespace {

uint64_t hash_bytes(std::string_view s) {
  // FNV-1a over 8-byte words, then a final mix; tokens are short.
  uint64_t h = 0xcbf29ce484222325ull ^ s.size();
  size_t i = 0;
  for (; i + 8 <= s.size(); i += 8) {
    uint64_t w;
    std::memcpy(&w, s.data() + i, 8);
    h = (h ^ w) * 0x100000001b3ull;
    h ^= h >> 29;
  }
  uint64_t tail = 0;
  std::memcpy(&tail, s.data() + i, s.size() - i);
  h = (h ^ tail) * 0x100000001b3ull;
  h ^= h >> 32;
  h *= 0xd6e8feb86659fd93ull;
  h ^= h >> 32;
  return h;
}

}  // namespace

void StringIdMap::reserve(size_t n) {
  size_t cap = 16;
  while (cap * 2 < n * 3) cap <<= 1;  // load factor at most 2/3
  if (cap <= slots_.size()) return;
  std::vector<Slot> old = std::move(slots_);
  slots_.assign(cap, Slot{});
  for (const Slot& s : old) {
    if (s.value < 0) continue;
    size_t i = size_t(hash_bytes(key_at(s.offset, s.length))) & (cap - 1);
    while (slots_[i].value >= 0) i = (i + 1) & (cap - 1);
    slots_[i] = s;
  }
}

void StringIdMap::grow() { reserve(std::max<size_t>(16, count_ * 2 + 2)); }

void StringIdMap::get_many(const std::string_view* keys, size_t n, int32_t* out) const {
  constexpr size_t kBatch = 32;
  if (slots_.empty()) {
    for (size_t k = 0; k < n; ++k) out[k] = -1;
    return;
  }
  const size_t mask = slots_.size() - 1;
  uint64_t h[kBatch];
  for (size_t base = 0; base < n; base += kBatch) {
    size_t m = std::min(kBatch, n - base);
    for (size_t k = 0; k < m; ++k) {
      h[k] = hash_bytes(keys[base + k]);
      __builtin_prefetch(&slots_[size_t(h[k]) & mask]);
    }
    for (size_t k = 0; k < m; ++k) {
      const std::string_view key = keys[base + k];
      uint32_t tag = uint32_t(h[k] >> 32);
      size_t i = size_t(h[k]) & mask;
      int32_t found = -1;
      while (slots_[i].value >= 0) {
        const Slot& sl = slots_[i];
        if (sl.tag == tag && sl.length == key.size() &&
            std::memcmp(arena_.data() + sl.offset, key.data(), key.size()) == 0) {
          found = sl.value;
          break;
        }
        i = (i + 1) & mask;
      }
      out[base + k] = found;
    }
  }
}

uint32_t StringIdMap::set(std::string_view key, int32_t value) {
  KILN_CHECK(value >= 0, "StringIdMap values must be non-negative");
  if ((count_ + 1) * 3 > slots_.size() * 2) grow();
  uint64_t h = hash_bytes(key);
  uint32_t tag = uint32_t(h >> 32);
  size_t mask = slots_.size() - 1;
  size_t i = size_t(h) & mask;
  while (slots_[i].value >= 0) {
    Slot& s = slots_[i];
    if (s.tag == tag && s.length == key.size() &&
        std::memcmp(arena_.data() + s.offset, key.data(), key.size()) == 0) {
      s.value = value;
      return s.offset;
    }
    i = (i + 1) & mask;
  }
  KILN_CHECK(arena_.size() + key.size() < UINT32_MAX, "vocabulary too large");
  uint32_t offset = uint32_t(arena_.size());
  slots_[i] = Slot{tag, offset, uint32_t(key.size()), value};
  arena_.append(key);
  ++count_;
  return offset;
}

std::optional<int32_t> StringIdMap::get(std::string_view key) const {
  if (slots_.empty()) return std::nullopt;
  uint64_t h = hash_bytes(key);
  uint32_t tag = uint32_t(h >> 32);
  size_t mask = slots_.size() - 1;
  size_t i = size_t(h) & mask;
  while (slots_[i].value >= 0) {
    const Slot& s = slots_[i];
    if (s.tag == tag && s.length == key.size() &&
        std::memcmp(arena_.data() + s.offset, key.data(), key.size()) == 0)
      return s.value;
    i = (i + 1) & mask;
  }
  return std::nullopt;
}

std::unique_ptr<BpeModel> BpeModel::from_json(const nlohmann::json& model, TokenizerJson& tj,
                                              const std::string& where) {
  const std::string w = where + ": model";
  auto m = std::make_unique<BpeModel>();
  auto opt_string = [&](const char* field) -> std::optional<std::string> {
    auto it = model.find(field);
    if (it == model.end() || it->is_null()) return std::nullopt;
    if (!it->is_string()) throw Error(w + "." + field, "expected a string or null");
    return it->get<std::string>();
  };
  auto opt_bool = [&](const char* field) {
    auto it = model.find(field);
    if (it == model.end() || it->is_null()) return false;
    if (!it->is_boolean()) throw Error(w + "." + field, "expected true or false");
    return it->get<bool>();
  };
  if (model.contains("dropout") && !model["dropout"].is_null()) {
    // Dropout makes encoding random; inference tokenizers never set it.
    throw Error(w + ".dropout", "BPE dropout is not supported (expected null)");
  }
  m->prefix_ = opt_string("continuing_subword_prefix").value_or("");
  m->suffix_ = opt_string("end_of_word_suffix").value_or("");
  m->unk_token_ = opt_string("unk_token");
  m->fuse_unk_ = opt_bool("fuse_unk");
  m->byte_fallback_ = opt_bool("byte_fallback");
  m->ignore_merges_ = opt_bool("ignore_merges");

  // Vocabulary (streamed into tj by the SAX reader, or from a DOM object).
  TokenizerJson::Strings dom_tokens;
  std::vector<int64_t> dom_ids;
  if (!tj.vocab_streamed) {
    auto it = model.find("vocab");
    if (it == model.end() || !it->is_object())
      throw Error(w + ".vocab", "expected an object of token -> id");
    for (auto& [k, v] : it->items()) {
      if (!v.is_number_integer()) throw Error(w + ".vocab." + k, "expected an integer id");
      dom_tokens.push(k);
      dom_ids.push_back(v.get<int64_t>());
    }
  }
  const auto& tokens = tj.vocab_streamed ? tj.vocab_tokens : dom_tokens;
  const auto& ids = tj.vocab_streamed ? tj.vocab_ids : dom_ids;
  KILN_CHECK(tokens.size() == ids.size(), "vocab reader out of step");
  int64_t max_id = -1;
  for (size_t k = 0; k < ids.size(); ++k) {
    if (ids[k] < 0 || ids[k] > INT32_MAX - 1)
      throw Error(w + ".vocab." + std::string(tokens[k]),
                  "id " + std::to_string(ids[k]) + " out of range");
    max_id = std::max(max_id, ids[k]);
  }
  if (max_id > int64_t(ids.size()) * 4 + 1024)
    throw Error(w + ".vocab", "ids are too sparse (max id " + std::to_string(max_id) + " for " +
                                  std::to_string(ids.size()) + " entries)");
  m->vocab_.reserve(ids.size());
  m->id_to_token_.assign(size_t(max_id + 1), {0, kNoToken});
  m->char_ids_.assign(0x10000, -1);
  for (size_t k = 0; k < ids.size(); ++k) {
    std::string_view tok = tokens[k];
    int32_t id = int32_t(ids[k]);
    uint32_t offset = m->vocab_.set(tok, id);
    m->id_to_token_[size_t(id)] = {offset, uint32_t(tok.size())};
    // One-character tokens, for the per-character lookup of initial_symbols().
    if (!tok.empty() && tok.size() <= 3 && utf8_len(static_cast<unsigned char>(tok[0])) == tok.size() &&
        utf8_invalid_at(tok) == kNpos) {
      size_t i = 0;
      char32_t cp = utf8_next(tok, i);
      m->char_ids_[cp] = id;
    }
  }
  if (m->unk_token_) m->unk_id_ = m->vocab_.get(*m->unk_token_);
  for (int b = 0; b < 256; ++b) {
    char name[8];
    std::snprintf(name, sizeof(name), "<0x%02X>", b);
    m->byte_ids_[b] = m->vocab_.get(name).value_or(-1);
  }

  // Merges.
  TokenizerJson::Strings dom_sides;
  if (!tj.merges_streamed) {
    auto it = model.find("merges");
    if (it != model.end() && !it->is_null()) {
      if (!it->is_array()) throw Error(w + ".merges", "expected an array");
      for (size_t r = 0; r < it->size(); ++r) {
        const auto& e = (*it)[r];
        std::string loc = w + ".merges[" + std::to_string(r) + "]";
        if (e.is_string()) {
          std::string s = e.get<std::string>();
          size_t sp = s.find(' ');
          if (sp == std::string::npos || s.find(' ', sp + 1) != std::string::npos)
            throw Error(loc, "a merge string must be two tokens separated by one space");
          dom_sides.push(std::string_view(s).substr(0, sp));
          dom_sides.push(std::string_view(s).substr(sp + 1));
        } else if (e.is_array() && e.size() == 2 && e[0].is_string() && e[1].is_string()) {
          dom_sides.push(e[0].get<std::string>());
          dom_sides.push(e[1].get<std::string>());
        } else {
          throw Error(loc, "expected a \"a b\" string or a [a, b] array");
        }
      }
    }
  }
  const auto& sides = tj.merges_streamed ? tj.merge_sides : dom_sides;
  const size_t n_merges = sides.size() / 2;
  size_t cap = 16;
  while (cap * 2 < n_merges * 3 + 2) cap <<= 1;
  m->merge_keys_.assign(cap, kEmptyKey);
  m->merge_values_.assign(cap, MergeEntry{0, 0});
  // Resolve the token ids of every merge (read-only lookups, in parallel and batched), then insert.
  std::vector<int32_t> side_ids(2 * n_merges), new_ids(n_merges);
  const BpeModel& cm = *m;
  parallel_for(
      int64_t(n_merges),
      [&](int64_t begin, int64_t end) {
        constexpr size_t kChunk = 256;
        std::vector<std::string_view> keys(2 * kChunk);
        std::vector<std::string> joined(kChunk);
        for (size_t r0 = size_t(begin); r0 < size_t(end); r0 += kChunk) {
          size_t n = std::min(kChunk, size_t(end) - r0);
          for (size_t k = 0; k < 2 * n; ++k) keys[k] = sides[2 * r0 + k];
          cm.vocab_.get_many(keys.data(), 2 * n, side_ids.data() + 2 * r0);
          for (size_t k = 0; k < n; ++k) {
            std::string_view a = keys[2 * k], b = keys[2 * k + 1];
            joined[k].assign(a);
            // The merged token drops the right side's continuing_subword_prefix, as HF does.
            if (b.size() >= cm.prefix_.size()) joined[k].append(b.substr(cm.prefix_.size()));
            keys[k] = joined[k];
          }
          cm.vocab_.get_many(keys.data(), n, new_ids.data() + r0);
        }
      },
      4096);
  for (size_t r = 0; r < n_merges; ++r) {
    int32_t ia = side_ids[2 * r], ib = side_ids[2 * r + 1], inew = new_ids[r];
    if (ia < 0 || ib < 0 || inew < 0 || sides[2 * r + 1].size() < m->prefix_.size()) {
      std::string a(sides[2 * r]), b(sides[2 * r + 1]);
      std::string loc = w + ".merges[" + std::to_string(r) + "]";
      if (ia < 0) throw Error(loc, "token \"" + a + "\" is not in the vocabulary");
      if (ib < 0) throw Error(loc, "token \"" + b + "\" is not in the vocabulary");
      if (b.size() < m->prefix_.size()) throw Error(loc, "token \"" + b + "\" lacks the prefix");
      throw Error(loc, "merged token \"" + a + b.substr(m->prefix_.size()) +
                           "\" is not in the vocabulary");
    }
    if (r + 8 < n_merges) {
      int32_t pa = side_ids[2 * (r + 8)], pb = side_ids[2 * (r + 8) + 1];
      uint64_t key = (uint64_t(uint32_t(pa)) << 32) | uint32_t(pb);
      __builtin_prefetch(&m->merge_keys_[size_t(mix(key)) & (cap - 1)]);
    }
    m->insert_merge(ia, ib, MergeEntry{int32_t(r), inew});  // a repeated pair: last one wins
  }
  return m;
}

void BpeModel::insert_merge(int32_t a, int32_t b, MergeEntry e) {
  uint64_t key = (uint64_t(uint32_t(a)) << 32) | uint32_t(b);
  size_t mask = merge_keys_.size() - 1;
  size_t i = size_t(mix(key)) & mask;
  while (merge_keys_[i] != kEmptyKey && merge_keys_[i] != key) i = (i + 1) & mask;
  merge_keys_[i] = key;
  merge_values_[i] = e;
}

void BpeModel::initial_symbols(std::string_view piece, std::vector<int32_t>& symbols) const {
  const bool plain = prefix_.empty() && suffix_.empty();
  int32_t pending_unk = -1;  // unk id waiting to be pushed; fused runs collapse into one
  std::string s;
  size_t i = 0;
  bool first = true;
  while (i < piece.size()) {
    size_t start = i;
    char32_t cp = utf8_next(piece, i);
    bool last = i >= piece.size();
    int32_t id = -1;
    if (plain && cp < 0x10000) {
      id = char_ids_[cp];
      if (id < 0) s.assign(piece.substr(start, i - start));
    } else {
      s.clear();
      if (!first) s += prefix_;
      s.append(piece.substr(start, i - start));
      if (last) s += suffix_;
      id = vocab_.get(s).value_or(-1);
    }
    first = false;
    if (id >= 0) {
      if (pending_unk >= 0) {
        symbols.push_back(pending_unk);
        pending_unk = -1;
      }
      symbols.push_back(id);
      continue;
    }
    if (byte_fallback_) {
      bool all = true;
      for (char c : s) all = all && byte_ids_[static_cast<unsigned char>(c)] >= 0;
      if (all) {
        // HF adds byte tokens without flushing a pending unk first; keep its order.
        for (char c : s) symbols.push_back(byte_ids_[static_cast<unsigned char>(c)]);
        continue;
      }
    }
    if (unk_token_) {
      if (!unk_id_)
        throw Error("tokenizer.json: model.unk_token",
                    "unk token \"" + *unk_token_ + "\" is not in the vocabulary");
      if (pending_unk >= 0 && !fuse_unk_) symbols.push_back(pending_unk);
      pending_unk = *unk_id_;
    }
    // Without an unk token the character is dropped, as HF does.
  }
  if (pending_unk >= 0) symbols.push_back(pending_unk);
}

void BpeModel::merge_small(int32_t* ids, size_t& n) const {
  // Quadratic scan over at most 64 symbols, with plain loops (short arrays: cheaper than memmove).
  constexpr int32_t kNone = INT32_MAX;
  int32_t ranks[64], new_ids[64];
  auto pair_at = [&](size_t k) {
    const MergeEntry* e = find_merge(ids[k], ids[k + 1]);
    ranks[k] = e ? e->rank : kNone;
    new_ids[k] = e ? e->new_id : -1;
  };
  for (size_t k = 0; k + 1 < n; ++k) pair_at(k);
  while (n > 1) {
    size_t best = 0;
    for (size_t k = 1; k + 1 < n; ++k)
      if (ranks[k] < ranks[best]) best = k;
    if (ranks[best] == kNone) break;
    ids[best] = new_ids[best];
    for (size_t k = best + 1; k + 1 < n; ++k) ids[k] = ids[k + 1];
    for (size_t k = best + 1; k + 2 < n; ++k) {
      ranks[k] = ranks[k + 1];
      new_ids[k] = new_ids[k + 1];
    }
    --n;
    if (best > 0) pair_at(best - 1);
    if (best + 1 < n) pair_at(best);
  }
}

void BpeModel::merge_heap(std::vector<int32_t>& symbols) const {
  const size_t n = symbols.size();
  std::vector<int32_t> prev(n), next(n);
  std::vector<bool> alive(n, true);
  for (size_t k = 0; k < n; ++k) {
    prev[k] = int32_t(k) - 1;
    next[k] = k + 1 < n ? int32_t(k + 1) : -1;
  }
  struct Item {
    int32_t rank, pos, new_id;
    bool operator<(const Item& o) const {  // max-heap: invert to pop lowest rank, then lowest pos
      return rank != o.rank ? rank > o.rank : pos > o.pos;
    }
  };
  std::vector<Item> storage;
  storage.reserve(n);
  std::priority_queue<Item> queue(std::less<Item>(), std::move(storage));
  for (size_t k = 0; k + 1 < n; ++k)
    if (const MergeEntry* e = find_merge(symbols[k], symbols[k + 1]))
      queue.push({e->rank, int32_t(k), e->new_id});
  while (!queue.empty()) {
    Item top = queue.top();
    queue.pop();
    size_t p = size_t(top.pos);
    if (!alive[p] || next[p] < 0) continue;
    size_t q = size_t(next[p]);
    // Stale entry: the pair at p changed since it was queued.
    const MergeEntry* e = find_merge(symbols[p], symbols[q]);
    if (e == nullptr || e->new_id != top.new_id) continue;
    symbols[p] = top.new_id;
    alive[q] = false;
    next[p] = next[q];
    if (next[q] >= 0) prev[size_t(next[q])] = int32_t(p);
    if (prev[p] >= 0) {
      size_t l = size_t(prev[p]);
      if (const MergeEntry* le = find_merge(symbols[l], symbols[p]))
        queue.push({le->rank, int32_t(l), le->new_id});
    }
    if (next[p] >= 0) {
      if (const MergeEntry* re = find_merge(symbols[p], symbols[size_t(next[p])]))
        queue.push({re->rank, int32_t(p), re->new_id});
    }
  }
  size_t out = 0;
  for (size_t k = 0; k < n; ++k)
    if (alive[k]) symbols[out++] = symbols[k];
  symbols.resize(out);
}

void BpeModel::merge(std::vector<int32_t>& symbols, bool force_heap) const {
  if (symbols.size() < 2) return;
  if (!force_heap && symbols.size() <= 64) {
    size_t n = symbols.size();
    merge_small(symbols.data(), n);
    symbols.resize(n);
  } else {
    merge_heap(symbols);
  }
}

namespace {

std::atomic<uint64_t> next_instance{1};

// Per-thread memo of piece -> ids. BPE is a pure function of the piece, so the memo never changes
// results; being thread_local it needs no locks. It belongs to one model at a time (instance id)
// and is dropped when full.
struct PieceCache {
  struct Hash {
    using is_transparent = void;
    size_t operator()(std::string_view s) const { return std::hash<std::string_view>()(s); }
  };
  struct Eq {
    using is_transparent = void;
    bool operator()(std::string_view a, std::string_view b) const { return a == b; }
  };
  uint64_t owner = 0;
  std::unordered_map<std::string, std::pair<uint32_t, uint32_t>, Hash, Eq> map;
  std::vector<int32_t> pool;
};

}  // namespace

BpeModel::BpeModel() : instance_(next_instance.fetch_add(1)) {}

void BpeModel::tokenize(std::string_view piece, std::vector<int32_t>& out) const {
  if (piece.empty()) return;
  if (ignore_merges_) {
    if (auto id = vocab_.get(piece)) {
      out.push_back(*id);
      return;
    }
  }
  constexpr size_t kMaxCachedPiece = 48, kMaxEntries = 1 << 16;
  thread_local PieceCache cache;
  const bool cacheable = piece.size() <= kMaxCachedPiece;
  if (cacheable) {
    if (cache.owner != instance_ || cache.map.size() >= kMaxEntries) {
      cache.map.clear();
      cache.pool.clear();
      cache.owner = instance_;
    }
    auto it = cache.map.find(piece);
    if (it != cache.map.end()) {
      auto [off, len] = it->second;
      out.insert(out.end(), cache.pool.begin() + off, cache.pool.begin() + off + len);
      return;
    }
  }
  thread_local std::vector<int32_t> symbols;
  symbols.clear();
  initial_symbols(piece, symbols);
  merge(symbols);
  out.insert(out.end(), symbols.begin(), symbols.end());
  if (cacheable) {
    cache.map.emplace(std::string(piece),
                      std::make_pair(uint32_t(cache.pool.size()), uint32_t(symbols.size())));
    cache.pool.insert(cache.pool.end(), symbols.begin(), symbols.end());
  }
}

}  // namespace kiln::tokenizer
