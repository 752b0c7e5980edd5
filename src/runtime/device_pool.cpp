#include "runtime/device_pool.h"

#include <map>
#include <mutex>

namespace mn::runtime {

std::shared_ptr<vk::Device> shared_device(const std::string& selector,
                                          std::optional<bool> validation) {
  static std::mutex mutex;
  static std::map<std::pair<std::string, int>, std::weak_ptr<vk::Device>> devices;
  std::lock_guard lock(mutex);
  const auto key = std::pair{selector, validation ? int(*validation) : -1};
  if (auto d = devices[key].lock()) return d;
  vk::DeviceOptions options;
  if (!selector.empty()) options.selector = selector;
  options.validation = validation;
  auto d = std::make_shared<vk::Device>(options);
  devices[key] = d;
  return d;
}

}  // namespace mn::runtime
