// Files are written to a temporary name in the same folder, flushed, then renamed over the target,
// so an interrupted write never leaves a broken file (see DESIGN.md, "Errors and data safety").
#pragma once

#include <functional>
#include <string>
#include <string_view>

namespace kiln::io {

// Calls write(fd-backed FILE*) on "<path>.tmp.<pid>", fsyncs, renames to path. On any failure the
// temporary is removed, the old file (if any) is untouched, and kiln::Error names the path.
void write_file_atomic(const std::string& path, const std::function<void(std::FILE*)>& write);
void write_file_atomic(const std::string& path, std::string_view contents);

std::string read_file(const std::string& path);  // kiln::Error naming the path when unreadable

}  // namespace kiln::io
