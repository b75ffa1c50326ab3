#include "kiln/io/atomic_file.h"

#include <unistd.h>

#include <cerrno>
#include <cstdio>
#include <cstring>
#include <fstream>
#include <sstream>

#include "kiln/core/error.h"

namespace kiln::io {

void write_file_atomic(const std::string& path, const std::function<void(std::FILE*)>& write) {
  std::string tmp = path + ".tmp." + std::to_string(getpid());
  std::FILE* f = std::fopen(tmp.c_str(), "wb");
  if (!f) throw Error(path, std::string("cannot create temporary file: ") + std::strerror(errno));
  try {
    write(f);
    if (std::fflush(f) != 0 || std::ferror(f))
      throw Error(path, std::string("write failed: ") + std::strerror(errno));
    if (fsync(fileno(f)) != 0)
      throw Error(path, std::string("fsync failed: ") + std::strerror(errno));
  } catch (...) {
    std::fclose(f);
    std::remove(tmp.c_str());
    throw;
  }
  if (std::fclose(f) != 0) {
    std::remove(tmp.c_str());
    throw Error(path, std::string("close failed: ") + std::strerror(errno));
  }
  if (std::rename(tmp.c_str(), path.c_str()) != 0) {
    int err = errno;
    std::remove(tmp.c_str());
    throw Error(path, std::string("rename failed: ") + std::strerror(err));
  }
}

void write_file_atomic(const std::string& path, std::string_view contents) {
  write_file_atomic(path, [&](std::FILE* f) {
    if (!contents.empty() && std::fwrite(contents.data(), 1, contents.size(), f) != contents.size())
      throw Error(path, std::string("write failed: ") + std::strerror(errno));
  });
}

std::string read_file(const std::string& path) {
  std::ifstream in(path, std::ios::binary);
  if (!in) throw Error(path, "cannot open file");
  std::ostringstream ss;
  ss << in.rdbuf();
  return ss.str();
}

}  // namespace kiln::io
