// `mn`: the meganeura command-line tool.
#include <cstdio>
#include <exception>
#include <string>

#include <meganeura/error.h>

#include "commands.h"

namespace {

// CLI11 reports a misspelt command as "A subcommand is required"; name it instead.
bool unknown_command(CLI::App& app, int argc, char** argv) {
  if (argc < 2 || argv[1][0] == '-') return false;
  std::string known;
  for (const CLI::App* sub : app.get_subcommands({})) {
    if (sub->check_name(argv[1])) return false;
    known += (known.empty() ? "" : ", ") + sub->get_name();
  }
  std::fprintf(stderr, "mn: error: unknown command '%s' (expected one of: %s; see mn --help)\n",
               argv[1], known.c_str());
  return true;
}

}  // namespace

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
  mn::cli::add_classify_command(app);
  mn::cli::add_whisper_encode_command(app);
  mn::cli::add_smolvla_command(app);
  mn::cli::add_run_command(app);
  if (unknown_command(app, argc, argv)) return 1;
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
