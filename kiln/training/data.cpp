#include "kiln/training/data.h"

#include <algorithm>
#include <cctype>
#include <limits>
#include <fstream>
#include <iostream>
#include <random>

#include "kiln/core/error.h"
#include "kiln/io/json.h"

namespace kiln::training {

namespace {

bool ends_with(const std::string& s, const std::string& suffix) {
  return s.size() >= suffix.size() && s.compare(s.size() - suffix.size(), suffix.size(), suffix) == 0;
}

bool is_blank(const std::string& s) {
  return std::all_of(s.begin(), s.end(), [](unsigned char c) { return std::isspace(c); });
}

// Parses one .jsonl line into a record; returns an error message (empty on success).
std::string parse_jsonl_line(const std::string& line, TextRecord& rec) {
  io::Json j = io::Json::parse(line, nullptr, /*allow_exceptions=*/false);
  if (j.is_discarded()) return "not valid JSON";
  if (!j.is_object()) return std::string("expected a JSON object, got ") + j.type_name();
  auto str = [&](const char* key, std::string& out) -> std::string {
    const auto& v = j.at(key);
    if (!v.is_string())
      return std::string("field \"") + key + "\" must be a string, got " + v.type_name();
    out = v.get<std::string>();
    return "";
  };
  if (j.contains("text")) return str("text", rec.text);
  if (j.contains("prompt") || j.contains("completion")) {
    if (!j.contains("prompt")) return "has \"completion\" but no \"prompt\" field";
    if (!j.contains("completion")) return "has \"prompt\" but no \"completion\" field";
    rec.is_pair = true;
    std::string err = str("prompt", rec.prompt);
    return err.empty() ? str("completion", rec.completion) : err;
  }
  return "missing field \"text\" (or \"prompt\" and \"completion\")";
}

}  // namespace

std::vector<TextRecord> read_records(const std::string& path, bool skip_bad_lines) {
  std::ifstream in(path, std::ios::binary);
  if (!in) throw Error(path, "cannot open data file");
  bool jsonl = ends_with(path, ".jsonl") || ends_with(path, ".json");
  std::vector<TextRecord> out;
  std::string line;
  int64_t lineno = 0;
  while (std::getline(in, line)) {
    ++lineno;
    if (!line.empty() && line.back() == '\r') line.pop_back();
    if (is_blank(line)) continue;
    TextRecord rec;
    rec.line = lineno;
    if (!jsonl) {
      rec.text = line;
      out.push_back(std::move(rec));
      continue;
    }
    std::string err = parse_jsonl_line(line, rec);
    if (!err.empty()) {
      std::string where = path + ":" + std::to_string(lineno);
      if (!skip_bad_lines) throw Error(where, err + " (skip_bad_lines=true skips such lines)");
      std::cerr << "kiln: warning: [" << where << "] " << err << "; line skipped\n";
      continue;
    }
    out.push_back(std::move(rec));
  }
  if (in.bad()) throw Error(path, "read error");
  return out;
}

Dataset::Dataset(std::vector<Example> examples, DataOptions options, std::string source)
    : examples_(std::move(examples)), options_(std::move(options)), source_(std::move(source)) {}

Dataset Dataset::from_file(const std::string& path, const TokenizeFn& tokenize,
                           const DataOptions& options) {
  return from_records(read_records(path, options.skip_bad_lines), tokenize, options, path);
}

Dataset Dataset::from_records(const std::vector<TextRecord>& records, const TokenizeFn& tokenize,
                              const DataOptions& options, const std::string& source) {
  if (options.max_length < 2)
    throw Error("max_length", "must be at least 2, got " + std::to_string(options.max_length));
  if (options.packing && options.eos_token_id < 0)
    throw Error("packing", "packing joins texts with EOS, but the tokenizer has no EOS token");
  std::vector<Example> examples;
  std::vector<int32_t> stream_ids, stream_labels;  // packing
  for (const auto& rec : records) {
    Example ex;
    if (rec.is_pair) {
      ex.input_ids = tokenize(rec.prompt);
      ex.labels.assign(ex.input_ids.size(), -100);
      std::vector<int32_t> c = tokenize(rec.completion);
      if (options.eos_token_id >= 0) c.push_back(options.eos_token_id);
      ex.input_ids.insert(ex.input_ids.end(), c.begin(), c.end());
      ex.labels.insert(ex.labels.end(), c.begin(), c.end());
    } else {
      ex.input_ids = tokenize(rec.text);
      ex.labels = ex.input_ids;
    }
    if (ex.input_ids.empty()) continue;
    if (options.packing) {
      stream_ids.insert(stream_ids.end(), ex.input_ids.begin(), ex.input_ids.end());
      stream_labels.insert(stream_labels.end(), ex.labels.begin(), ex.labels.end());
      if (!rec.is_pair) {  // a pair already ends with EOS
        stream_ids.push_back(options.eos_token_id);
        stream_labels.push_back(options.eos_token_id);
      }
      continue;
    }
    if (int64_t(ex.input_ids.size()) > options.max_length) {
      ex.input_ids.resize(size_t(options.max_length));
      ex.labels.resize(size_t(options.max_length));
    }
    examples.push_back(std::move(ex));
  }
  if (options.packing) {
    size_t block = size_t(options.max_length);
    for (size_t b = 0; b + block <= stream_ids.size(); b += block) {
      Example ex;
      ex.input_ids.assign(stream_ids.begin() + b, stream_ids.begin() + b + block);
      ex.labels.assign(stream_labels.begin() + b, stream_labels.begin() + b + block);
      examples.push_back(std::move(ex));
    }
    if (examples.empty() && !records.empty())
      throw Error(source, "packing: the texts hold " + std::to_string(stream_ids.size()) +
                              " tokens, less than one block of max_length=" +
                              std::to_string(options.max_length));
  }
  if (examples.empty()) throw Error(source, "the dataset is empty (no non-empty examples)");
  return Dataset(std::move(examples), options, source);
}

TrainBatch collate(const std::vector<const Example*>& examples, const DataOptions& options) {
  KILN_CHECK(!examples.empty(), "collate needs at least one example");
  int64_t len = options.max_length;
  if (options.padding == "longest") {
    len = 0;
    for (const Example* e : examples) len = std::max<int64_t>(len, int64_t(e->input_ids.size()));
  }
  int64_t b = int64_t(examples.size());
  TrainBatch out;
  out.input_ids = Tensor::empty({b, len}, DType::i32);
  out.attention_mask = Tensor::empty({b, len}, DType::i32);
  out.labels = Tensor::empty({b, len}, DType::i32);
  int32_t* ids = out.input_ids.data<int32_t>();
  int32_t* mask = out.attention_mask.data<int32_t>();
  int32_t* labels = out.labels.data<int32_t>();
  for (int64_t i = 0; i < b; ++i) {
    const Example& e = *examples[size_t(i)];
    int64_t n = std::min<int64_t>(len, int64_t(e.input_ids.size()));
    for (int64_t t = 0; t < len; ++t) {
      bool real = t < n;
      ids[i * len + t] = real ? e.input_ids[size_t(t)] : options.pad_token_id;
      mask[i * len + t] = real ? 1 : 0;
      labels[i * len + t] = real ? e.labels[size_t(t)] : -100;
    }
  }
  return out;
}

std::vector<int64_t> seeded_permutation(int64_t n, uint64_t seed) {
  std::vector<int64_t> p(size_t(std::max<int64_t>(n, 0)));
  for (int64_t i = 0; i < n; ++i) p[size_t(i)] = i;
  std::mt19937_64 rng(seed);
  for (int64_t i = n - 1; i > 0; --i) {
    // Unbiased draw in [0, i] by rejection, spelled out so every platform agrees.
    uint64_t range = uint64_t(i) + 1;
    const uint64_t max = std::numeric_limits<uint64_t>::max();
    uint64_t limit = max - max % range;
    uint64_t r;
    do {
      r = rng();
    } while (r >= limit);
    std::swap(p[size_t(i)], p[size_t(r % range)]);
  }
  return p;
}

DataLoader::DataLoader(std::shared_ptr<const Dataset> dataset, int64_t batch_size, bool shuffle,
                       uint64_t seed, bool drop_last)
    : dataset_(std::move(dataset)),
      batch_size_(batch_size),
      shuffle_(shuffle),
      seed_(seed),
      drop_last_(drop_last) {
  KILN_CHECK(dataset_ != nullptr && batch_size_ >= 1, "DataLoader needs a dataset and batch >= 1");
}

int64_t DataLoader::num_batches() const {
  int64_t n = dataset_->size();
  return drop_last_ ? n / batch_size_ : (n + batch_size_ - 1) / batch_size_;
}

std::vector<int64_t> DataLoader::epoch_order(int64_t epoch) const {
  if (shuffle_) return seeded_permutation(dataset_->size(), seed_ + uint64_t(epoch));
  std::vector<int64_t> p(size_t(dataset_->size()));
  for (size_t i = 0; i < p.size(); ++i) p[i] = int64_t(i);
  return p;
}

TrainBatch DataLoader::batch(int64_t epoch, int64_t index) const {
  return batch(epoch_order(epoch), index);
}

TrainBatch DataLoader::batch(const std::vector<int64_t>& order, int64_t index) const {
  KILN_CHECK(index >= 0 && index < num_batches(), "batch index ", index, " out of range");
  int64_t begin = index * batch_size_;
  int64_t end = std::min<int64_t>(begin + batch_size_, int64_t(order.size()));
  std::vector<const Example*> ex;
  for (int64_t i = begin; i < end; ++i) ex.push_back(&(*dataset_)[order[size_t(i)]]);
  return collate(ex, dataset_->options());
}

}  // namespace kiln::training
