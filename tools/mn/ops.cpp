#include "commands.h"

namespace mn::cli {
void add_ops_command(CLI::App& app) {
  app.add_subcommand("ops", "list the ops of the op table");
}
}  // namespace mn::cli
