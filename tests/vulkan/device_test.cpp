#include <gtest/gtest.h>

#include <cstdlib>
#include <string>
#include <thread>

#include <meganeura/error.h>

#include "support/expect_error.h"
#include "support/scoped_env.h"
#include "support/scratch_dir.h"
#include "vulkan/arena.h"
#include "vulkan/buffer.h"
#include "vulkan/check.h"
#include "vulkan/instance.h"
#include "vulkan_test.h"

namespace mn::vk {
namespace {

using testing::joined;
using testing::validated_options;

DeviceCapabilities fake(uint32_t index, std::string name, VkPhysicalDeviceType type,
                        bool usable = true) {
  DeviceCapabilities d;
  d.index = index;
  d.name = std::move(name);
  d.device_type = type;
  d.type = device_type_name(type);
  d.usable = usable;
  if (!usable) d.unusable_reason = "Vulkan 1.1.0 is older than 1.2";
  return d;
}

const std::vector<DeviceCapabilities> kMachine = {
    fake(0, "llvmpipe (LLVM 15.0.6, 256 bits)", VK_PHYSICAL_DEVICE_TYPE_CPU),
    fake(1, "Intel(R) UHD Graphics 620", VK_PHYSICAL_DEVICE_TYPE_INTEGRATED_GPU),
    fake(2, "NVIDIA H200", VK_PHYSICAL_DEVICE_TYPE_DISCRETE_GPU),
    fake(3, "Old Radeon", VK_PHYSICAL_DEVICE_TYPE_DISCRETE_GPU, false),
};

TEST(DeviceSelection, PrefersDiscreteThenIntegratedThenCpu) {
  EXPECT_EQ(select_device(kMachine, ""), 2u);
  std::vector<DeviceCapabilities> no_discrete = {kMachine[0], kMachine[1], kMachine[3]};
  EXPECT_EQ(select_device(no_discrete, ""), 1u);
  std::vector<DeviceCapabilities> cpu_only = {kMachine[0]};
  EXPECT_EQ(select_device(cpu_only, ""), 0u);
}

// One process per GPU: the local rank of a multi-process job picks among the devices of the
// preferred kind; a selector still wins.
TEST(DeviceSelection, LocalRankPicksItsOwnDevice) {
  const std::vector<DeviceCapabilities> node = {
      fake(0, "llvmpipe (LLVM 15.0.6, 256 bits)", VK_PHYSICAL_DEVICE_TYPE_CPU),
      fake(1, "NVIDIA H200", VK_PHYSICAL_DEVICE_TYPE_DISCRETE_GPU),
      fake(2, "Old Radeon", VK_PHYSICAL_DEVICE_TYPE_DISCRETE_GPU, false),
      fake(3, "NVIDIA H200", VK_PHYSICAL_DEVICE_TYPE_DISCRETE_GPU),
  };
  {
    const mn::testing::ScopedEnv rank("OMPI_COMM_WORLD_LOCAL_RANK", "1");
    EXPECT_EQ(select_device(node, ""), 3u);
    EXPECT_EQ(select_device(node, "0"), 0u);
  }
  {
    const mn::testing::ScopedEnv rank("LOCAL_RANK", "2");  // more ranks than GPUs: shared
    EXPECT_EQ(select_device(node, ""), 1u);
    EXPECT_EQ(select_device({node[0]}, ""), 0u);
  }
  const mn::testing::ScopedEnv bad("SLURM_LOCALID", "first");
  try {
    select_device(node, "");
    FAIL() << "no error";
  } catch (const DeviceError& e) {
    EXPECT_NE(std::string(e.what()).find("SLURM_LOCALID is 'first'"), std::string::npos) << e.what();
  }
}

TEST(DeviceSelection, ByIndexOrNameSubstring) {
  EXPECT_EQ(select_device(kMachine, "0"), 0u);
  EXPECT_EQ(select_device(kMachine, "1"), 1u);
  EXPECT_EQ(select_device(kMachine, "h200"), 2u);
  EXPECT_EQ(select_device(kMachine, "LLVMPIPE"), 0u);
}

TEST(DeviceSelection, NoMatchListsTheDevices) {
  for (const char* selector : {"7", "radeon 9000", "3"}) {
    try {
      select_device(kMachine, selector);
      FAIL() << "selector " << selector << " matched";
    } catch (const DeviceError& e) {
      const std::string what = e.what();
      EXPECT_NE(what.find("llvmpipe"), std::string::npos) << what;
      EXPECT_NE(what.find("NVIDIA H200"), std::string::npos) << what;
      EXPECT_NE(what.find("unusable"), std::string::npos) << what;
    }
  }
  EXPECT_THROW(select_device({}, ""), DeviceError);
}

TEST(Device, CreatesOnLavapipeWithValidation) {
  const test::ScratchDir scratch("vulkan-create");
  const std::filesystem::path& dir = scratch.path();
  Device device(validated_options(dir));
  const DeviceCapabilities& caps = device.capabilities();
  EXPECT_TRUE(device.validation_enabled());
  EXPECT_TRUE(caps.usable);
  EXPECT_FALSE(caps.name.empty());
  EXPECT_GE(caps.api_version, static_cast<uint32_t>(VK_API_VERSION_1_2));
  EXPECT_GT(caps.compute.subgroup_size, 0u);
  EXPECT_GE(caps.compute.max_workgroup_invocations, 128u);
  EXPECT_GE(caps.compute.shared_memory_bytes, 16384u);
  EXPECT_GE(caps.buffers.max_storage_buffer_range, 1u << 27);
  EXPECT_NE(device.handle(), VK_NULL_HANDLE);
  EXPECT_NE(device.queue(), VK_NULL_HANDLE);
  if (caps.device_type == VK_PHYSICAL_DEVICE_TYPE_CPU) {
    // lavapipe: what the tests below rely on.
    EXPECT_EQ(caps.buffers.max_storage_buffer_range, 128u << 20);
    EXPECT_TRUE(caps.timestamps.supported);
    EXPECT_GT(caps.timestamps.period_ns, 0.0);
    EXPECT_TRUE(caps.memory.unified);
  }
  EXPECT_EQ(device.validation_message_count(), 0u) << joined(device.validation_messages());
}

// MN_VALIDATION: 1 on, 0 or unset off; anything else is an error naming it ("false" turned
// the layer on, as any value but 0 did).
TEST(Device, ValidationSwitchFromTheEnvironment) {
  for (const auto& [value, want] :
       {std::pair<const char*, bool>{nullptr, false}, {"0", false}, {"1", true}}) {
    mn::testing::ScopedEnv env("MN_VALIDATION", value);
    EXPECT_EQ(validation_requested_by_env(), want) << (value ? value : "unset");
  }
  for (const char* bad : {"false", "yes", "2"}) {
    mn::testing::ScopedEnv env("MN_VALIDATION", bad);
    mn::expect_error<Error>([] { validation_requested_by_env(); }, {"MN_VALIDATION", bad});
  }
}

TEST(Device, SelectorOptionAndEnvironment) {
  const test::ScratchDir scratch("vulkan-select");
  const std::filesystem::path& dir = scratch.path();
  std::string name;
  {
    Device first(validated_options(dir));
    name = first.capabilities().name;
  }
  auto options = validated_options(dir);
  options.selector = "0";
  EXPECT_EQ(Device(options).capabilities().index, 0u);

  // MN_DEVICE is read when no selector is given.
  {
    const mn::testing::ScopedEnv env("MN_DEVICE", name.substr(0, 4));
    EXPECT_EQ(Device(validated_options(dir)).capabilities().name, name);
  }
  const mn::testing::ScopedEnv env("MN_DEVICE", "no-such-device-anywhere");
  try {
    Device device(validated_options(dir));
    ADD_FAILURE() << "MN_DEVICE=no-such-device-anywhere selected " << device.capabilities().name;
  } catch (const DeviceError& e) {
    EXPECT_NE(std::string(e.what()).find(name), std::string::npos) << e.what();
  }
}

TEST(Device, ValidationMessagesFailTheOperation) {
  const test::ScratchDir scratch("vulkan-invalid");
  const std::filesystem::path& dir = scratch.path();
  Device device(validated_options(dir));
  // A buffer without usage flags breaks VUID-VkBufferCreateInfo-usage-requiredbitmask.
  VkBufferCreateInfo info{VK_STRUCTURE_TYPE_BUFFER_CREATE_INFO};
  info.size = 256;
  info.usage = 0;
  VkBuffer buffer = VK_NULL_HANDLE;
  const VkResult result = vkCreateBuffer(device.handle(), &info, nullptr, &buffer);
  if (result == VK_SUCCESS) vkDestroyBuffer(device.handle(), buffer, nullptr);
  EXPECT_GE(device.validation_message_count(), 1u);
  try {
    device.check_validation("an invalid buffer creation");
    FAIL() << "no validation message";
  } catch (const DeviceError& e) {
    EXPECT_NE(std::string(e.what()).find("usage"), std::string::npos) << e.what();
    EXPECT_NE(std::string(e.what()).find("an invalid buffer creation"), std::string::npos);
  }
  // Reported once: the next check passes.
  EXPECT_NO_THROW(device.check_validation("nothing"));
}

// Messages raised on several threads at once (kernels created in parallel) name what each
// thread was doing, whichever thread's check reports them.
TEST(Device, ValidationMessagesNameTheirThreadsScope) {
  const test::ScratchDir scratch("vulkan-invalid-threads");
  Device device(validated_options(scratch.path()));
  auto invalid_buffer = [&](const std::string& what) {
    const ValidationScope scope(what);
    VkBufferCreateInfo info{VK_STRUCTURE_TYPE_BUFFER_CREATE_INFO};
    info.size = 256;
    info.usage = 0;  // VUID-VkBufferCreateInfo-usage-requiredbitmask
    VkBuffer buffer = VK_NULL_HANDLE;
    if (vkCreateBuffer(device.handle(), &info, nullptr, &buffer) == VK_SUCCESS) {
      vkDestroyBuffer(device.handle(), buffer, nullptr);
    }
  };
  std::thread a(invalid_buffer, "creating kernel 'a'"), b(invalid_buffer, "creating kernel 'b'");
  a.join();
  b.join();
  invalid_buffer("outer");  // and on this thread, its scope gone afterwards
  try {
    device.check_validation("two threads");
    FAIL() << "no validation message";
  } catch (const DeviceError& e) {
    const std::string what = e.what();
    for (const char* scope : {"(creating kernel 'a')", "(creating kernel 'b')", "(outer)"}) {
      EXPECT_NE(what.find(scope), std::string::npos) << scope << " in " << what;
    }
  }
  EXPECT_EQ(ValidationScope::current(), nullptr);
}

// The barrier tests rely on synchronization validation reporting missing barriers.
TEST(Device, SynchronizationValidationSeesMissingBarriers) {
  const test::ScratchDir scratch("vulkan-sync");
  const std::filesystem::path& dir = scratch.path();
  Device device(validated_options(dir));
  Arena arena(device, 4096);
  const VkBuffer buffer = arena.chunk(0).handle();
  try {
    device.run_commands(
        [&](VkCommandBuffer cmd) {
          vkCmdFillBuffer(cmd, buffer, 0, 1024, 1);
          vkCmdFillBuffer(cmd, buffer, 512, 1024, 2);  // overlaps, no barrier
        },
        "two unordered fills");
    FAIL() << "no hazard reported";
  } catch (const DeviceError& e) {
    EXPECT_NE(std::string(e.what()).find("SYNC-HAZARD-WRITE-AFTER-WRITE"), std::string::npos)
        << e.what();
  }
  // With a barrier between them: silent.
  device.run_commands(
      [&](VkCommandBuffer cmd) {
        vkCmdFillBuffer(cmd, buffer, 0, 1024, 1);
        VkMemoryBarrier barrier{VK_STRUCTURE_TYPE_MEMORY_BARRIER};
        barrier.srcAccessMask = VK_ACCESS_TRANSFER_WRITE_BIT;
        barrier.dstAccessMask = VK_ACCESS_TRANSFER_WRITE_BIT;
        vkCmdPipelineBarrier(cmd, VK_PIPELINE_STAGE_TRANSFER_BIT, VK_PIPELINE_STAGE_TRANSFER_BIT, 0,
                             1, &barrier, 0, nullptr, 0, nullptr);
        vkCmdFillBuffer(cmd, buffer, 512, 1024, 2);
      },
      "two ordered fills");
}

TEST(Device, VulkanErrorsNameTheCall) {
  try {
    check(VK_ERROR_OUT_OF_DEVICE_MEMORY, "vkAllocateMemory");
    FAIL();
  } catch (const DeviceError& e) {
    EXPECT_NE(std::string(e.what()).find("vkAllocateMemory"), std::string::npos);
    EXPECT_NE(std::string(e.what()).find("VK_ERROR_OUT_OF_DEVICE_MEMORY"), std::string::npos);
  }
  EXPECT_NO_THROW(check(VK_SUCCESS, "vkAnything"));
}

}  // namespace
}  // namespace mn::vk
