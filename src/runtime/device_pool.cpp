#include "runtime/device_pool.h"

#include <cstdlib>
#include <map>
#include <mutex>

namespace mn::runtime {

namespace {

using DeviceMap = std::map<std::pair<std::string, int>, std::shared_ptr<vk::Device>>;

std::mutex& pool_mutex() {
  static auto* m = new std::mutex;  // NOLINT(cppcoreguidelines-owning-memory): outlives exit
  return *m;
}

// Devices stay alive for the whole process once made: sessions come and go (a test binary
// makes hundreds), and re-creating Vulkan instances that often is slow and, on NVIDIA's
// driver, eventually fails. The map is never destroyed by static destruction: a function-local
// static map is torn down after the handlers the driver registered while the first device was
// made, and destroying a device after NVIDIA's driver has torn itself down crashes the process
// at exit. Instead `release_devices` runs from an atexit handler registered after the first
// device exists, so it runs before the driver's own (handlers run in reverse order).
DeviceMap& devices() {
  static auto* d = new DeviceMap;  // NOLINT(cppcoreguidelines-owning-memory): see above
  return *d;
}

void release_devices() {
  DeviceMap doomed;
  {
    std::lock_guard lock(pool_mutex());
    doomed.swap(devices());
  }
  doomed.clear();  // saves pipeline caches and destroys devices no session holds any more
}

}  // namespace

std::shared_ptr<vk::Device> shared_device(const std::string& selector,
                                          std::optional<bool> validation) {
  std::lock_guard lock(pool_mutex());
  const auto key = std::pair{selector, validation ? int(*validation) : -1};
  if (auto d = devices()[key]) return d;
  vk::DeviceOptions options;
  if (!selector.empty()) options.selector = selector;
  options.validation = validation;
  auto d = std::make_shared<vk::Device>(options);
  devices()[key] = d;
  static const bool registered = std::atexit(release_devices) == 0;
  (void)registered;
  return d;
}

}  // namespace mn::runtime
