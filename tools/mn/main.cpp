// `mn`: the meganeura command-line tool.
#include <cstdio>
#include <exception>

#include <meganeura/error.h>

#include "commands.h"

int main(int argc, char** argv) {
  CLI::App app{"meganeura: train and run neural networks on any Vulkan GPU", "mn"};
  app.require_subcommand(1);
  mn::cli::add_devices_command(app);
  mn::cli::add_ops_command(app);
  mn::cli::add_train_command(app);
  mn::cli::add_inspect_command(app);
  mn::cli::add_generate_command(app);
  mn::cli::add_chat_command(app);
  mn::cli::add_finetune_command(app);
  try {
    app.parse(argc, argv);
  } catch (const CLI::ParseError& e) {
    return app.exit(e);
  } catch (const mn::Error& e) {
    std::fprintf(stderr, "mn: error: %s\n", e.what());
    return 1;
  } catch (const std::exception& e) {
    std::fprintf(stderr, "mn: internal error: %s\n", e.what());
    return 2;
  }
  return 0;
}
