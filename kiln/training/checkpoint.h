// Checkpoint folders in Transformers' layout, written atomically.
//
// output_dir/checkpoint-N/ holds:
//   config.json, generation_config.json, model.safetensors   (TrainableModel::save_pretrained)
//   optimizer.safetensors   AdamW exp_avg / exp_avg_sq per parameter name, f32; step in metadata
//   scheduler.json          the LR schedule and the scheduler steps taken
//   trainer_state.json      Transformers' TrainerState (global_step, epoch, log_history, ...)
//   rng_state.json          kiln's data-order state (seed, epoch, batch position) and the running
//                           loss sums, so a resumed run logs exactly what an uninterrupted one does
//   training_args.json      TrainingArguments::to_json()
//   tokenizer files         copied from the tokenizer folder, when one was given
// Transformers' own optimizer.pt / scheduler.pt / rng_state.pth are PyTorch pickles; kiln writes
// the same state as safetensors and JSON (Transformers ignores files it does not know).
//
// Atomicity: the folder is built as checkpoint-N.tmp-<pid>, every file and the folder are fsynced,
// then it is renamed to checkpoint-N. A failure at any point removes the temporary folder and leaves
// every earlier checkpoint untouched.
//
// Example:
//   write_folder_atomic(out + "/checkpoint-10", [&](const std::string& tmp) { ...write files... });
//   require_complete_checkpoint(out + "/checkpoint-10");   // kiln::Error naming a missing file
#pragma once

#include <cstdint>
#include <functional>
#include <string>
#include <utility>
#include <vector>

namespace kiln::training {

inline constexpr const char* kTrainerStateFile = "trainer_state.json";
inline constexpr const char* kOptimizerFile = "optimizer.safetensors";
inline constexpr const char* kSchedulerFile = "scheduler.json";
inline constexpr const char* kRngStateFile = "rng_state.json";
inline constexpr const char* kTrainingArgsFile = "training_args.json";
inline constexpr const char* kTrainLogFile = "train_log.jsonl";

// Tokenizer files copied into checkpoints and saved models when present in the source folder.
extern const std::vector<std::string> kTokenizerFiles;

std::string checkpoint_name(int64_t step);  // "checkpoint-N"

// checkpoint-N folders directly under output_dir, sorted by N (temporary folders excluded).
std::vector<std::pair<int64_t, std::string>> list_checkpoints(const std::string& output_dir);

// The newest checkpoint folder under output_dir, or "" when there is none.
std::string last_checkpoint(const std::string& output_dir);

// Builds `dir` atomically: fill(tmp) writes into an empty temporary sibling folder, which is then
// fsynced and renamed over `dir` (an existing `dir` is replaced). Any exception from fill removes the
// temporary folder and propagates (non-kiln exceptions become kiln::Error naming `dir`).
void write_folder_atomic(const std::string& dir, const std::function<void(const std::string&)>& fill);

// Deletes the oldest checkpoints so that at most `limit` remain; returns the deleted folders.
std::vector<std::string> prune_checkpoints(const std::string& output_dir, int64_t limit);

// kiln::Error naming the first missing file of a resumable checkpoint folder.
void require_complete_checkpoint(const std::string& dir);

// Copies the files of kTokenizerFiles that exist in src_dir into dst_dir; returns how many.
int copy_tokenizer_files(const std::string& src_dir, const std::string& dst_dir);

}  // namespace kiln::training
