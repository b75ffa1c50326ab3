#include "kiln/io/safetensors.h"

#include <fcntl.h>
#include <sys/mman.h>
#include <sys/stat.h>
#include <unistd.h>

#include <algorithm>
#include <cerrno>
#include <cstring>
#include <filesystem>

#include "kiln/core/error.h"
#include "kiln/io/atomic_file.h"
#include "kiln/io/json.h"

namespace kiln::io {

namespace {

class MmapStorage final : public Storage {
 public:
  MmapStorage(void* ptr, size_t bytes) : ptr_(ptr), bytes_(bytes) {}
  ~MmapStorage() override {
    if (ptr_) munmap(ptr_, bytes_);
  }
  void* data() override { return ptr_; }
  size_t bytes() const override { return bytes_; }
  bool writable() const override { return false; }
  void release_pages(size_t offset, size_t bytes) override {
    const size_t page = size_t(sysconf(_SC_PAGESIZE));
    const size_t begin = (offset + page - 1) / page * page, end = (offset + bytes) / page * page;
    if (end > begin && end <= bytes_) madvise(static_cast<char*>(ptr_) + begin, end - begin, MADV_DONTNEED);
  }
  void populate(size_t offset, size_t bytes) override {
    const size_t page = size_t(sysconf(_SC_PAGESIZE));
    const size_t begin = offset / page * page, end = std::min(bytes_, offset + bytes);
    // Best effort: kernels before 5.14 refuse it, and the pages then fault in as they are read.
    if (end > begin) madvise(static_cast<char*>(ptr_) + begin, end - begin, MADV_POPULATE_READ);
  }

 private:
  void* ptr_;
  size_t bytes_;
};

class EmptyStorage final : public Storage {
 public:
  void* data() override { return nullptr; }
  size_t bytes() const override { return 0; }
};

struct DTypeName {
  const char* name;
  size_t size;
  bool supported;
  DType dtype;
};

const DTypeName kDTypes[] = {
    {"F32", 4, true, DType::f32},       {"BF16", 2, true, DType::bf16},
    {"F16", 2, true, DType::f16},       {"I32", 4, true, DType::i32},
    {"I64", 8, true, DType::i64},       {"BOOL", 1, true, DType::boolean},
    {"F64", 8, false, DType::f32},      {"I8", 1, false, DType::f32},
    {"U8", 1, false, DType::f32},       {"I16", 2, false, DType::f32},
    {"U16", 2, false, DType::f32},      {"U32", 4, false, DType::f32},
    {"U64", 8, false, DType::f32},      {"F8_E4M3", 1, false, DType::f32},
    {"F8_E5M2", 1, false, DType::f32},
};

const DTypeName* find_dtype(const std::string& s) {
  for (const auto& d : kDTypes)
    if (s == d.name) return &d;
  return nullptr;
}

const char* file_dtype_name(DType t) {
  switch (t) {
    case DType::f32: return "F32";
    case DType::bf16: return "BF16";
    case DType::f16: return "F16";
    case DType::i32: return "I32";
    case DType::i64: return "I64";
    case DType::boolean: return "BOOL";
  }
  return "?";
}

}  // namespace

std::shared_ptr<SafetensorsFile> SafetensorsFile::open(const std::string& path, bool populate) {
  int fd = ::open(path.c_str(), O_RDONLY);
  if (fd < 0) throw Error(path, std::string("cannot open safetensors file: ") + std::strerror(errno));
  struct stat st{};
  if (fstat(fd, &st) != 0) {
    ::close(fd);
    throw Error(path, "cannot stat file");
  }
  size_t size = size_t(st.st_size);
  std::shared_ptr<Storage> buffer;
  if (size == 0) {
    buffer = std::make_shared<EmptyStorage>();
  } else {
    // MAP_POPULATE: faulting pages in one by one costs 7-16 us each on these VMs.
    void* p = mmap(nullptr, size, PROT_READ, MAP_PRIVATE | (populate ? MAP_POPULATE : 0), fd, 0);
    if (p == MAP_FAILED) {
      ::close(fd);
      throw Error(path, std::string("mmap failed: ") + std::strerror(errno));
    }
    buffer = std::make_shared<MmapStorage>(p, size);
  }
  ::close(fd);
  return from_buffer(buffer, path);
}

std::shared_ptr<SafetensorsFile> SafetensorsFile::from_buffer(std::shared_ptr<Storage> buffer,
                                                              const std::string& where) {
  auto f = std::shared_ptr<SafetensorsFile>(new SafetensorsFile());
  f->path_ = where;
  f->buffer_ = buffer;
  const size_t size = buffer->bytes();
  const auto* bytes = static_cast<const unsigned char*>(buffer->data());
  if (size < 8)
    throw Error(where, "truncated safetensors file: " + std::to_string(size) +
                           " bytes, shorter than the 8-byte header length");
  uint64_t n = 0;
  for (int i = 7; i >= 0; --i) n = (n << 8) | bytes[i];
  if (n > kMaxSafetensorsHeader)
    throw Error(where, "safetensors header length " + std::to_string(n) +
                           " exceeds the 100 MB limit (corrupt or not a safetensors file)");
  if (8 + n > size)
    throw Error(where, "truncated safetensors file: header claims " + std::to_string(n) +
                           " bytes but the file has " + std::to_string(size - 8) + " after it");
  std::string header(reinterpret_cast<const char*>(bytes + 8), size_t(n));
  Json j;
  try {
    j = Json::parse(header);
  } catch (const Json::exception& e) {
    throw Error(where, std::string("safetensors header is not valid JSON: ") + e.what());
  }
  if (!j.is_object()) throw Error(where, "safetensors header is not a JSON object");
  f->data_start_ = 8 + n;
  const uint64_t data_size = size - f->data_start_;
  std::vector<const TensorInfo*> order;
  for (auto it = j.begin(); it != j.end(); ++it) {
    const std::string& name = it.key();
    const Json& v = it.value();
    if (name == "__metadata__") {
      if (!v.is_object()) throw Error(where + ": __metadata__", "expected an object of strings");
      for (auto m = v.begin(); m != v.end(); ++m) {
        if (!m.value().is_string())
          throw Error(where + ": __metadata__." + m.key(), "expected a string value");
        f->metadata_[m.key()] = m.value().get<std::string>();
      }
      continue;
    }
    const std::string at = where + ": tensor '" + name + "'";
    if (!v.is_object()) throw Error(at, "expected an object with dtype, shape, data_offsets");
    TensorInfo info;
    info.name = name;
    if (!v.contains("dtype") || !v["dtype"].is_string()) throw Error(at, "missing or invalid dtype");
    info.dtype_str = v["dtype"].get<std::string>();
    const DTypeName* dt = find_dtype(info.dtype_str);
    if (!dt) throw Error(at, "unknown dtype '" + info.dtype_str + "'");
    if (!v.contains("shape") || !v["shape"].is_array()) throw Error(at, "missing or invalid shape");
    uint64_t elems = 1;
    for (const auto& d : v["shape"]) {
      if (!d.is_number_unsigned()) throw Error(at, "shape entries must be non-negative integers");
      uint64_t x = d.get<uint64_t>();
      if (x > (uint64_t(1) << 40) || (x && elems > (uint64_t(1) << 50) / x))
        throw Error(at, "shape " + v["shape"].dump() + " is too large");
      elems *= x;
      info.shape.push_back(int64_t(x));
    }
    const Json& off = v.contains("data_offsets") ? v["data_offsets"] : Json();
    if (!off.is_array() || off.size() != 2 || !off[0].is_number_unsigned() ||
        !off[1].is_number_unsigned())
      throw Error(at, "data_offsets must be [begin, end]");
    info.begin = off[0].get<uint64_t>();
    info.end = off[1].get<uint64_t>();
    if (info.begin > info.end) throw Error(at, "data_offsets begin > end");
    if (info.end > data_size)
      throw Error(at, "data_offsets [" + std::to_string(info.begin) + ", " +
                          std::to_string(info.end) + "] run past the end of the data (" +
                          std::to_string(data_size) + " bytes; truncated file?)");
    if (info.end - info.begin != elems * dt->size)
      throw Error(at, "shape " + shape_str(info.shape) + " of " + info.dtype_str + " needs " +
                          std::to_string(elems * dt->size) + " bytes but data_offsets span " +
                          std::to_string(info.end - info.begin));
    auto [pos, inserted] = f->infos_.emplace(name, std::move(info));
    if (!inserted) throw Error(at, "tensor listed twice");
    order.push_back(&pos->second);
  }
  std::sort(order.begin(), order.end(),
            [](const TensorInfo* a, const TensorInfo* b) { return a->begin < b->begin; });
  for (size_t i = 1; i < order.size(); ++i)
    if (order[i]->begin < order[i - 1]->end)
      throw Error(where, "tensors '" + order[i - 1]->name + "' and '" + order[i]->name +
                             "' overlap in the data section");
  return f;
}

const TensorInfo& SafetensorsFile::info(const std::string& name) const {
  auto it = infos_.find(name);
  if (it == infos_.end()) throw Error(path_, "tensor '" + name + "' not found");
  return it->second;
}

std::vector<std::string> SafetensorsFile::names() const {
  std::vector<std::string> out;
  for (const auto& [k, v] : infos_) out.push_back(k);
  return out;
}

Tensor SafetensorsFile::tensor(const std::string& name) const {
  const TensorInfo& i = info(name);
  const DTypeName* dt = find_dtype(i.dtype_str);
  if (!dt->supported)
    throw Error(path_ + ": tensor '" + name + "'",
                "dtype " + i.dtype_str + " is not supported (kiln reads F32, BF16, F16, I32, I64, BOOL)");
  return Tensor(buffer_, size_t(data_start_ + i.begin), i.shape, dt->dtype);
}

void save_safetensors(const std::string& path,
                      const std::vector<std::pair<std::string, Tensor>>& tensors,
                      const std::map<std::string, std::string>& metadata) {
  OrderedJson header = OrderedJson::object();
  if (!metadata.empty()) header["__metadata__"] = metadata;
  uint64_t offset = 0;
  for (const auto& [name, t] : tensors) {
    uint64_t nbytes = t.nbytes();
    header[name] = {{"dtype", file_dtype_name(t.dtype())},
                    {"shape", t.shape()},
                    {"data_offsets", {offset, offset + nbytes}}};
    offset += nbytes;
  }
  std::string h = header.dump();
  while ((8 + h.size()) % 8) h.push_back(' ');  // data section starts 8-byte aligned
  write_file_atomic(path, [&](std::FILE* f) {
    unsigned char len[8];
    uint64_t n = h.size();
    for (int i = 0; i < 8; ++i) len[i] = (n >> (8 * i)) & 0xff;
    bool ok = std::fwrite(len, 1, 8, f) == 8 && std::fwrite(h.data(), 1, h.size(), f) == h.size();
    for (const auto& [name, t] : tensors)
      ok = ok && (t.nbytes() == 0 || std::fwrite(t.raw(), 1, t.nbytes(), f) == t.nbytes());
    if (!ok) throw Error(path, std::string("write failed: ") + std::strerror(errno));
  });
}

CheckpointReader::CheckpointReader(const std::string& dir, bool populate) : dir_(dir) {
  namespace fs = std::filesystem;
  const std::string index = dir + "/model.safetensors.index.json";
  const std::string single = dir + "/model.safetensors";
  if (fs::exists(index)) {
    Json j = load_json(index);
    if (!j.contains("weight_map") || !j["weight_map"].is_object())
      throw Error(index + ": weight_map", "missing or not an object");
    std::map<std::string, size_t> file_index;
    for (auto it = j["weight_map"].begin(); it != j["weight_map"].end(); ++it) {
      if (!it.value().is_string()) throw Error(index + ": weight_map." + it.key(), "expected a file name");
      std::string file = it.value().get<std::string>();
      if (file.find('/') != std::string::npos || file.find("..") != std::string::npos)
        throw Error(index + ": weight_map." + it.key(), "shard name '" + file + "' must be a plain file name");
      auto [pos, inserted] = file_index.emplace(file, files_.size());
      if (inserted) files_.push_back(SafetensorsFile::open(dir + "/" + file, populate));
      if (!files_[pos->second]->contains(it.key()))
        throw Error(dir + "/" + file, "tensor '" + it.key() + "' listed in the index is missing");
      where_[it.key()] = pos->second;
    }
  } else if (fs::exists(single)) {
    files_.push_back(SafetensorsFile::open(single, populate));
    for (const auto& n : files_[0]->names()) where_[n] = 0;
  } else {
    throw Error(dir, "no model.safetensors or model.safetensors.index.json in this folder");
  }
}

const TensorInfo& CheckpointReader::info(const std::string& name) const {
  auto it = where_.find(name);
  if (it == where_.end()) throw Error(dir_, "tensor '" + name + "' is missing from the checkpoint");
  return files_[it->second]->info(name);
}

Tensor CheckpointReader::tensor(const std::string& name) const {
  auto it = where_.find(name);
  if (it == where_.end()) throw Error(dir_, "tensor '" + name + "' is missing from the checkpoint");
  return files_[it->second]->tensor(name);
}

std::vector<std::string> CheckpointReader::names() const {
  std::vector<std::string> out;
  for (const auto& [k, v] : where_) out.push_back(k);
  return out;
}

}  // namespace kiln::io
