#pragma once
// The self-test of the cooperative-matrix matmul kernels on one device: every tile
// configuration, on shapes with ragged edges, both operand orders, the scalar and vector load
// paths and (with 16-bit storage) f16 operands, against exact products computed on the CPU.
#include <cstdint>
#include <string>

#include "codegen/kernel.h"
#include "vulkan/device.h"

namespace mn::runtime {

// A fingerprint of every kernel the self-test runs for these traits (part of the cache key,
// so a changed kernel generator is tested anew).
std::string coop_selftest_fingerprint(const codegen::DeviceTraits& t);

// Bit i set: tile configuration i gave the right products in every case. A kernel that fails
// to compile, to build a pipeline or to run counts as failed. `report`, when given, receives
// one line per case (tile, case, relative error or the error message).
uint32_t run_coop_selftest(vk::Device& dev, const codegen::DeviceTraits& t,
                           std::string* report = nullptr);

// Sets the cooperative-matrix traits of `t` (which holds the device's other traits) for
// `dev`: MN_DISABLE_COOP / MN_COOP, the capability table, and the cached or fresh self-test.
void configure_device_coop(const vk::Device& dev, codegen::DeviceTraits& t);

}  // namespace mn::runtime
