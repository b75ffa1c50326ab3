// Datasets for causal-LM training: load text files, tokenize, truncate or pack, then collate padded
// batches in a seeded order.
//
// Files (see docs/notes/training.md, "Data"):
//  - `.jsonl`: one JSON object a line, either {"text": ...} or {"prompt": ..., "completion": ...}.
//    For prompt/completion the loss covers only the completion: the prompt's labels are -100, and
//    the completion is followed by EOS (as TRL's SFT does) when an EOS id is given. Empty lines are
//    skipped. A line that is not JSON, not an object, or lacks the field is a kiln::Error naming
//    file:line, or (skip_bad_lines) a warning on stderr and the line is skipped.
//  - `.txt` (any other extension): one example per non-empty line, as the "text" loader of
//    Transformers' run_clm.py gives (it keeps empty lines; kiln drops them, as they hold no label).
//  - Texts are truncated to max_length tokens (keeping the start). With packing, every example is
//    followed by EOS and the token stream is cut into blocks of exactly max_length tokens; the last
//    partial block is dropped, as run_clm's group_texts does. Packed blocks attend across example
//    boundaries (no per-document mask), again as run_clm.
//  - A dataset with no examples is a kiln::Error naming the file.
//
// Batches (DataLoader): i32 host tensors [B, L]; L = max_length (padding "max_length": one shape for
// the whole run, so one compiled train graph) or the longest example of the batch ("longest").
// Right padding with pad_token_id, attention_mask 0 and labels -100 on padding. The order is a
// Fisher-Yates shuffle driven by std::mt19937_64 seeded with seed + epoch: deterministic on every
// platform and across resumes, but not PyTorch's RandomSampler order.
//
// Example:
//   kiln::training::DataOptions opt;  opt.max_length = 128;  opt.pad_token_id = 151643;
//   auto ds = kiln::training::Dataset::from_file("train.jsonl", tokenize, opt);
//   kiln::training::DataLoader loader(ds, /*batch_size=*/8, /*shuffle=*/true, /*seed=*/42,
//                                     /*drop_last=*/false);
//   kiln::training::TrainBatch b = loader.batch(/*epoch=*/0, /*index=*/0);
#pragma once

#include <cstdint>
#include <functional>
#include <memory>
#include <string>
#include <vector>

#include "kiln/training/trainable_model.h"

namespace kiln::training {

using TokenizeFn = std::function<std::vector<int32_t>(const std::string&)>;

struct DataOptions {
  int64_t max_length = 512;
  std::string padding = "max_length";  // max_length | longest
  bool packing = false;
  bool skip_bad_lines = false;
  int32_t pad_token_id = 0;
  int32_t eos_token_id = -1;  // < 0: none (packing then is an error)
};

// One raw record of a data file; `line` is 1-based.
struct TextRecord {
  std::string text;        // "text" records
  std::string prompt;      // prompt/completion records (is_pair)
  std::string completion;
  bool is_pair = false;
  int64_t line = 0;
};

// Reads a .jsonl or .txt file into records (no tokenization). Errors name file:line.
std::vector<TextRecord> read_records(const std::string& path, bool skip_bad_lines);

// One tokenized example: labels are ids, or -100 where no loss applies (prompt tokens).
struct Example {
  std::vector<int32_t> input_ids;
  std::vector<int32_t> labels;
};

class Dataset {
 public:
  Dataset() = default;
  Dataset(std::vector<Example> examples, DataOptions options, std::string source);

  static Dataset from_file(const std::string& path, const TokenizeFn& tokenize,
                           const DataOptions& options);
  // Tokenizes, truncates or packs records; `source` names the data in errors.
  static Dataset from_records(const std::vector<TextRecord>& records, const TokenizeFn& tokenize,
                              const DataOptions& options, const std::string& source);

  int64_t size() const { return int64_t(examples_.size()); }
  const Example& operator[](int64_t i) const { return examples_[size_t(i)]; }
  const std::vector<Example>& examples() const { return examples_; }
  const DataOptions& options() const { return options_; }
  const std::string& source() const { return source_; }

 private:
  std::vector<Example> examples_;
  DataOptions options_;
  std::string source_;
};

// Pads examples into a batch (see the header comment for the layout).
TrainBatch collate(const std::vector<const Example*>& examples, const DataOptions& options);

// Random access to the batches of each epoch: batch(e, i) is a pure function of (seed, e, i), so a
// resumed run sees exactly the batches the interrupted one would have.
class DataLoader {
 public:
  DataLoader(std::shared_ptr<const Dataset> dataset, int64_t batch_size, bool shuffle, uint64_t seed,
             bool drop_last);
  int64_t num_batches() const;
  int64_t batch_size() const { return batch_size_; }
  // Example indices in the order epoch `epoch` visits them.
  std::vector<int64_t> epoch_order(int64_t epoch) const;
  TrainBatch batch(int64_t epoch, int64_t index) const;
  // Same as batch() with a precomputed epoch_order().
  TrainBatch batch(const std::vector<int64_t>& order, int64_t index) const;
  const Dataset& dataset() const { return *dataset_; }

 private:
  std::shared_ptr<const Dataset> dataset_;
  int64_t batch_size_;
  bool shuffle_;
  uint64_t seed_;
  bool drop_last_;
};

// Deterministic Fisher-Yates over [0, n) with std::mt19937_64(seed) and unbiased bounded draws
// (std::shuffle's draws are implementation-defined, so it is not used).
std::vector<int64_t> seeded_permutation(int64_t n, uint64_t seed);

}  // namespace kiln::training
