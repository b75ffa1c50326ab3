// Devices and the device registry.
//
// A Device is a kind plus an index. `cpu` is always present; `cuda` is registered by the CUDA backend
// when it is built and a GPU is present (today it is not built, so it reports 0 devices).
//
// Example:
//   if (kiln::is_available("cuda")) ...
//   kiln::Device d = kiln::resolve_device_map("auto");  // best available: cuda:0, else cpu
#pragma once

#include <string>
#include <vector>

namespace kiln {

enum class DeviceKind { cpu, cuda };

struct Device {
  DeviceKind kind = DeviceKind::cpu;
  int index = 0;
  std::string str() const;  // "cpu", "cuda:0"
  bool operator==(const Device&) const = default;
};

struct DeviceInfo {
  Device device;
  std::string description;  // e.g. "2 cores, AVX-512 BF16"
};

bool is_available(const std::string& kind);
int device_count(const std::string& kind);
std::vector<DeviceInfo> available_devices();

// Resolves a Transformers-style device_map string: "cpu", "cuda", "cuda:N" or "auto".
// Unknown or absent devices throw kiln::Error naming `where` and listing the available devices.
Device resolve_device_map(const std::string& device_map, const std::string& where = "device_map");

}  // namespace kiln
