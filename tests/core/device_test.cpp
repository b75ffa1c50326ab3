#include "kiln/core/device.h"

#include <gtest/gtest.h>

#include "kiln/core/dtype.h"
#include "kiln/core/error.h"

namespace {

std::string error_of(const std::string& map) {
  try {
    kiln::resolve_device_map(map);
  } catch (const kiln::Error& e) {
    return e.what();
  }
  return "";
}

TEST(Devices, CpuAlwaysAndAutoPicksBest) {
  EXPECT_TRUE(kiln::is_available("cpu"));
  EXPECT_EQ(kiln::device_count("cpu"), 1);
  EXPECT_EQ(kiln::resolve_device_map("cpu").str(), "cpu");
  auto best = kiln::resolve_device_map("auto");
  EXPECT_EQ(best.kind, kiln::is_available("cuda") ? kiln::DeviceKind::cuda : kiln::DeviceKind::cpu);
}

TEST(Devices, AbsentOrUnknownDevicesListTheAvailableOnes) {
  if (!kiln::is_available("cuda")) {
    auto e = error_of("cuda");
    EXPECT_NE(e.find("available devices: cpu"), std::string::npos) << e;
    EXPECT_NE(error_of("cuda:3").find("not available"), std::string::npos);
  }
  EXPECT_NE(error_of("tpu").find("unknown device"), std::string::npos);
  EXPECT_NE(error_of("neuron").find("not supported"), std::string::npos);
  EXPECT_NE(error_of("cuda:x").find("malformed"), std::string::npos);
  EXPECT_NE(error_of("tpu").find("[device_map]"), std::string::npos);
}

TEST(DType, Bf16RoundsToNearestEvenAndF16RoundTrips) {
  EXPECT_EQ(kiln::f32_to_bf16(1.0f), 0x3f80);
  EXPECT_EQ(kiln::bf16_to_f32(kiln::f32_to_bf16(1.00390625f)), 1.0f);  // tie -> even
  EXPECT_EQ(kiln::bf16_to_f32(kiln::f32_to_bf16(1.01171875f)), 1.015625f);
  for (float v : {0.0f, 1.0f, -2.5f, 65504.0f, 6.1035156e-05f, 5.9604645e-08f})
    EXPECT_EQ(kiln::f16_to_f32(kiln::f32_to_f16(v)), v) << v;
  EXPECT_THROW(kiln::parse_dtype("int4", "--dtype"), kiln::Error);
}

}  // namespace
