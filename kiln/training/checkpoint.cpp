#include "kiln/training/checkpoint.h"

#include <fcntl.h>
#include <unistd.h>

#include <algorithm>
#include <cerrno>
#include <cstring>
#include <filesystem>

#include "kiln/core/error.h"

namespace fs = std::filesystem;

namespace kiln::training {

const std::vector<std::string> kTokenizerFiles = {
    "tokenizer.json",  "tokenizer_config.json", "special_tokens_map.json", "added_tokens.json",
    "vocab.json",      "merges.txt",            "chat_template.jinja",     "chat_template.json",
    "tokenizer.model"};

namespace {

void fsync_path(const std::string& path, bool directory) {
  int fd = ::open(path.c_str(), directory ? (O_RDONLY | O_DIRECTORY) : O_RDONLY);
  if (fd < 0) throw Error(path, std::string("cannot open to fsync: ") + std::strerror(errno));
  int rc = ::fsync(fd);
  int err = errno;
  ::close(fd);
  if (rc != 0) throw Error(path, std::string("fsync failed: ") + std::strerror(err));
}

// Parses N out of "checkpoint-N"; -1 for anything else.
int64_t parse_checkpoint_step(const std::string& name) {
  const std::string prefix = "checkpoint-";
  if (name.rfind(prefix, 0) != 0 || name.size() == prefix.size()) return -1;
  std::string digits = name.substr(prefix.size());
  if (!std::all_of(digits.begin(), digits.end(), [](char c) { return c >= '0' && c <= '9'; }))
    return -1;
  if (digits.size() > 18) return -1;
  return std::stoll(digits);
}

}  // namespace

std::string checkpoint_name(int64_t step) { return "checkpoint-" + std::to_string(step); }

std::vector<std::pair<int64_t, std::string>> list_checkpoints(const std::string& output_dir) {
  std::vector<std::pair<int64_t, std::string>> out;
  std::error_code ec;
  if (!fs::is_directory(output_dir, ec)) return out;
  for (const auto& entry : fs::directory_iterator(output_dir, ec)) {
    if (!entry.is_directory(ec)) continue;
    int64_t step = parse_checkpoint_step(entry.path().filename().string());
    if (step >= 0) out.emplace_back(step, entry.path().string());
  }
  std::sort(out.begin(), out.end());
  return out;
}

std::string last_checkpoint(const std::string& output_dir) {
  auto all = list_checkpoints(output_dir);
  return all.empty() ? std::string() : all.back().second;
}

void write_folder_atomic(const std::string& dir,
                         const std::function<void(const std::string&)>& fill) {
  fs::path final_path(dir);
  fs::path parent = final_path.parent_path().empty() ? fs::path(".") : final_path.parent_path();
  std::string pid = std::to_string(::getpid());
  fs::path tmp = parent / (final_path.filename().string() + ".tmp-" + pid);
  std::error_code ec;
  fs::create_directories(parent, ec);
  if (ec) throw Error(parent.string(), "cannot create folder: " + ec.message());
  fs::remove_all(tmp, ec);
  fs::create_directory(tmp, ec);
  if (ec) throw Error(tmp.string(), "cannot create folder: " + ec.message());
  try {
    fill(tmp.string());
    for (const auto& entry : fs::recursive_directory_iterator(tmp))
      if (entry.is_regular_file()) fsync_path(entry.path().string(), false);
    fsync_path(tmp.string(), true);
  } catch (const Error&) {
    fs::remove_all(tmp, ec);
    throw;
  } catch (const std::exception& e) {
    fs::remove_all(tmp, ec);
    throw Error(dir, std::string("writing the folder failed: ") + e.what());
  }
  // rename(2) cannot replace a non-empty folder: move the old one aside first, then drop it.
  fs::path old = parent / (final_path.filename().string() + ".old-" + pid);
  bool had_old = fs::exists(final_path, ec);
  if (had_old) {
    fs::remove_all(old, ec);
    fs::rename(final_path, old, ec);
    if (ec) {
      fs::remove_all(tmp, ec);
      throw Error(dir, "cannot move the existing folder aside: " + ec.message());
    }
  }
  fs::rename(tmp, final_path, ec);
  if (ec) {
    std::string msg = ec.message();
    if (had_old) fs::rename(old, final_path, ec);
    fs::remove_all(tmp, ec);
    throw Error(dir, "cannot rename the new folder into place: " + msg);
  }
  if (had_old) fs::remove_all(old, ec);
  fsync_path(parent.string(), true);
}

std::vector<std::string> prune_checkpoints(const std::string& output_dir, int64_t limit) {
  std::vector<std::string> removed;
  if (limit < 1) return removed;
  auto all = list_checkpoints(output_dir);
  for (size_t i = 0; i + size_t(limit) < all.size(); ++i) {
    std::error_code ec;
    fs::remove_all(all[i].second, ec);
    if (ec) throw Error(all[i].second, "cannot delete old checkpoint: " + ec.message());
    removed.push_back(all[i].second);
  }
  return removed;
}

void require_complete_checkpoint(const std::string& dir) {
  std::error_code ec;
  if (!fs::is_directory(dir, ec)) throw Error(dir, "checkpoint folder does not exist");
  for (const char* f : {kTrainerStateFile, kOptimizerFile, kSchedulerFile, kRngStateFile,
                        "config.json"})
    if (!fs::is_regular_file(fs::path(dir) / f, ec))
      throw Error(dir, std::string("incomplete checkpoint: ") + f + " is missing");
  if (!fs::is_regular_file(fs::path(dir) / "model.safetensors", ec) &&
      !fs::is_regular_file(fs::path(dir) / "model.safetensors.index.json", ec))
    throw Error(dir, "incomplete checkpoint: model.safetensors is missing");
}

int copy_tokenizer_files(const std::string& src_dir, const std::string& dst_dir) {
  int copied = 0;
  for (const auto& name : kTokenizerFiles) {
    fs::path src = fs::path(src_dir) / name;
    std::error_code ec;
    if (!fs::is_regular_file(src, ec)) continue;
    fs::copy_file(src, fs::path(dst_dir) / name, fs::copy_options::overwrite_existing, ec);
    if (ec) throw Error(src.string(), "cannot copy tokenizer file: " + ec.message());
    ++copied;
  }
  return copied;
}

}  // namespace kiln::training
