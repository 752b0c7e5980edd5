#include "runtime/device_pool.h"

#include <map>
#include <mutex>

namespace mn::runtime {

std::shared_ptr<vk::Device> shared_device(const std::string& selector,
                                          std::optional<bool> validation) {
  static std::mutex mutex;
  // Devices stay alive for the whole process once made: sessions come and go (a test binary
  // makes hundreds), and re-creating Vulkan instances that often is slow and, on NVIDIA's
  // driver, eventually fails.
  static std::map<std::pair<std::string, int>, std::shared_ptr<vk::Device>> devices;
  std::lock_guard lock(mutex);
  const auto key = std::pair{selector, validation ? int(*validation) : -1};
  if (auto d = devices[key]) return d;
  vk::DeviceOptions options;
  if (!selector.empty()) options.selector = selector;
  options.validation = validation;
  auto d = std::make_shared<vk::Device>(options);
  devices[key] = d;
  return d;
}

}  // namespace mn::runtime
