#include <iostream>
#include <nlohmann/json.hpp>

#include "kiln/core/device.h"
#include "tools/cli/command.h"

KILN_COMMAND(devices, "List the devices kiln can run on") {
  auto json = std::make_shared<bool>(false);
  cmd.add_flag("--json", *json, "Print one JSON object");
  return [json] {
    auto devices = kiln::available_devices();
    if (*json) {
      nlohmann::json out;
      out["devices"] = nlohmann::json::array();
      for (const auto& d : devices)
        out["devices"].push_back({{"device", d.device.str()}, {"description", d.description}});
      out["cuda_available"] = kiln::is_available("cuda");
      std::cout << out.dump() << "\n";
    } else {
      for (const auto& d : devices) std::cout << d.device.str() << "\t" << d.description << "\n";
      if (!kiln::is_available("cuda"))
        std::cout << "(cuda: not available; this build has no CUDA backend)\n";
    }
    return 0;
  };
}
