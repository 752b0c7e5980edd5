#pragma once
// Each subcommand of `mn` lives in its own file and registers itself on the app.
#include <CLI/CLI.hpp>

namespace mn::cli {
void add_devices_command(CLI::App& app);  // devices.cpp
void add_ops_command(CLI::App& app);      // ops.cpp
void add_train_command(CLI::App& app);    // train.cpp
void add_inspect_command(CLI::App& app);  // inspect.cpp
void add_generate_command(CLI::App& app);  // generate.cpp
void add_chat_command(CLI::App& app);      // chat.cpp
void add_finetune_command(CLI::App& app);  // finetune.cpp
void add_classify_command(CLI::App& app);  // classify.cpp
void add_run_command(CLI::App& app);       // run.cpp
void add_whisper_encode_command(CLI::App& app);  // whisper.cpp
void add_smolvla_command(CLI::App& app);         // smolvla.cpp
}  // namespace mn::cli
