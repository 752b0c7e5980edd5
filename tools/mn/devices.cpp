#include "commands.h"

namespace mn::cli {
void add_devices_command(CLI::App& app) {
  app.add_subcommand("devices", "list Vulkan devices and their capabilities");
}
}  // namespace mn::cli
