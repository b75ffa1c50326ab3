#include "kiln/core/device.h"

#include <unistd.h>

#include <fstream>

#include "kiln/core/error.h"
#include "kiln/core/threads.h"

namespace kiln {

namespace {

std::string cpu_description() {
  std::string model;
  std::ifstream f("/proc/cpuinfo");
  std::string line;
  bool bf16 = false, avx512 = false;
  while (std::getline(f, line)) {
    if (model.empty() && line.rfind("model name", 0) == 0) {
      auto p = line.find(':');
      if (p != std::string::npos) model = line.substr(p + 2);
    }
    if (line.rfind("flags", 0) == 0) {
      avx512 = line.find("avx512f") != std::string::npos;
      bf16 = line.find("avx512_bf16") != std::string::npos;
    }
  }
  std::string d = std::to_string(num_threads()) + " threads";
  if (!model.empty()) d += ", " + model;
  if (avx512) d += bf16 ? ", AVX-512 BF16" : ", AVX-512";
  return d;
}

// The CUDA backend is not built yet; when it is, it registers its device count here.
int cuda_device_count() { return 0; }

std::string available_list() {
  std::string s;
  for (const auto& d : available_devices()) s += (s.empty() ? "" : ", ") + d.device.str();
  return s;
}

}  // namespace

std::string Device::str() const {
  return kind == DeviceKind::cpu ? "cpu" : "cuda:" + std::to_string(index);
}

int device_count(const std::string& kind) {
  if (kind == "cpu") return 1;
  if (kind == "cuda") return cuda_device_count();
  return 0;
}

bool is_available(const std::string& kind) { return device_count(kind) > 0; }

std::vector<DeviceInfo> available_devices() {
  std::vector<DeviceInfo> out;
  out.push_back({Device{DeviceKind::cpu, 0}, cpu_description()});
  for (int i = 0; i < cuda_device_count(); ++i) out.push_back({Device{DeviceKind::cuda, i}, "CUDA"});
  return out;
}

Device resolve_device_map(const std::string& device_map, const std::string& where) {
  if (device_map == "auto") {
    if (cuda_device_count() > 0) return Device{DeviceKind::cuda, 0};
    return Device{DeviceKind::cpu, 0};
  }
  if (device_map == "cpu") return Device{DeviceKind::cpu, 0};
  if (device_map == "neuron" || device_map.rfind("neuron:", 0) == 0 || device_map == "xla")
    throw Error(where, "'" + device_map +
                           "' is not supported by kiln (AWS Neuron devices are not a kiln backend); "
                           "available devices: " + available_list());
  if (device_map == "cuda" || device_map.rfind("cuda:", 0) == 0) {
    int index = 0;
    if (device_map.size() > 5) {
      try {
        size_t used = 0;
        index = std::stoi(device_map.substr(5), &used);
        if (used != device_map.size() - 5 || index < 0) throw std::invalid_argument("");
      } catch (const std::exception&) {
        throw Error(where, "malformed device '" + device_map + "' (expected cuda or cuda:N)");
      }
    }
    if (index >= cuda_device_count())
      throw Error(where, "device '" + device_map + "' is not available" +
                             (cuda_device_count() == 0
                                  ? " (this kiln has no CUDA backend or no GPU is present)"
                                  : "") +
                             "; available devices: " + available_list());
    return Device{DeviceKind::cuda, index};
  }
  throw Error(where, "unknown device '" + device_map +
                         "' (expected auto, cpu, cuda or cuda:N); available devices: " +
                         available_list());
}

}  // namespace kiln
