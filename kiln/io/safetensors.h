// safetensors read and write.
//
// Format: 8-byte little-endian header length N, N bytes of JSON mapping each tensor name to
// {"dtype", "shape", "data_offsets": [begin, end]} (offsets relative to the data that follows the
// header), an optional "__metadata__" string map, then the data.
//
// Reading memory-maps the file; tensors are zero-copy, read-only views that keep the mapping alive.
// Every structural problem (truncated file, absurd header length, offsets overlapping or running past
// the file, a shape that disagrees with its byte length, an unknown dtype) is a kiln::Error naming the
// file and the tensor.
//
// Example:
//   auto f = kiln::io::SafetensorsFile::open("model.safetensors");
//   kiln::Tensor w = f->tensor("model.embed_tokens.weight");
#pragma once

#include <map>
#include <memory>
#include <string>
#include <utility>
#include <vector>

#include "kiln/core/tensor.h"

namespace kiln::io {

// The reference implementation refuses headers above 100 MB before allocating; so does kiln.
constexpr uint64_t kMaxSafetensorsHeader = 100'000'000;

struct TensorInfo {
  std::string name;
  std::string dtype_str;  // as written in the file, e.g. "BF16"
  Shape shape;
  uint64_t begin = 0, end = 0;  // byte offsets into the data section
};

class SafetensorsFile {
 public:
  // The file is memory-mapped; `populate` reads all of it in at once (MAP_POPULATE: faulting pages
  // in one by one costs 7-16 us each on these VMs). Without it, pages are read as they are touched
  // or through Storage::populate, so a reader that converts as it goes never has the whole file
  // resident beside its converted copy.
  static std::shared_ptr<SafetensorsFile> open(const std::string& path, bool populate = true);
  // Parses from memory (used by the fuzz target and tests); `where` names the source in errors.
  static std::shared_ptr<SafetensorsFile> from_buffer(std::shared_ptr<Storage> buffer,
                                                      const std::string& where);

  const std::string& path() const { return path_; }
  bool contains(const std::string& name) const { return infos_.count(name) != 0; }
  const TensorInfo& info(const std::string& name) const;
  std::vector<std::string> names() const;
  const std::map<std::string, std::string>& metadata() const { return metadata_; }
  // A zero-copy view (F32, BF16, F16, I32, I64, BOOL); other dtypes are an error naming the tensor.
  Tensor tensor(const std::string& name) const;

 private:
  std::string path_;
  std::shared_ptr<Storage> buffer_;
  uint64_t data_start_ = 0;
  std::map<std::string, TensorInfo> infos_;
  std::map<std::string, std::string> metadata_;
};

// Writes tensors (any host dtype kiln supports) atomically: temporary file, fsync, rename.
void save_safetensors(const std::string& path,
                      const std::vector<std::pair<std::string, Tensor>>& tensors,
                      const std::map<std::string, std::string>& metadata = {{"format", "pt"}});

// A checkpoint folder: model.safetensors, or sharded through model.safetensors.index.json.
class CheckpointReader {
 public:
  explicit CheckpointReader(const std::string& dir, bool populate = true);  // see open()
  bool contains(const std::string& name) const { return where_.count(name) != 0; }
  const TensorInfo& info(const std::string& name) const;
  Tensor tensor(const std::string& name) const;  // kiln::Error naming tensor and folder if absent
  std::vector<std::string> names() const;
  const std::string& dir() const { return dir_; }

 private:
  std::string dir_;
  std::vector<std::shared_ptr<SafetensorsFile>> files_;
  std::map<std::string, size_t> where_;
};

}  // namespace kiln::io
