// `mn ops [--json]`: every op of the op table with what it has.
#include <cstdio>
#include <iostream>
#include <memory>

#include <nlohmann/json.hpp>

#include "commands.h"
#include "ir/op_def.h"
#include "schedule/lowering.h"

namespace mn::cli {

namespace {

struct OpRow {
  const OpDef* def;
  bool reference, backward, differentiable, decomposition, gpu;
};

std::vector<OpRow> op_rows() {
  std::vector<OpRow> rows;
  for (const OpDef* d : all_op_defs()) {
    rows.push_back({d, static_cast<bool>(d->eval) || d->archetype == Archetype::source,
                    static_cast<bool>(d->vjp), d->differentiable, static_cast<bool>(d->decompose),
                    schedule::has_gpu_lowering(d->name)});
  }
  return rows;
}

void print_json() {
  nlohmann::json ops = nlohmann::json::array();
  for (const OpRow& r : op_rows()) {
    ops.push_back({{"name", r.def->name},
                   {"reference", r.reference},
                   {"backward", r.backward},
                   {"differentiable", r.differentiable},
                   {"decomposition", r.decomposition},
                   {"gpu", r.gpu},
                   {"archetype", archetype_name(r.def->archetype)},
                   {"internal", r.def->internal},
                   {"summary", r.def->summary}});
  }
  std::cout << nlohmann::json{{"ops", ops}}.dump(2) << '\n';
}

void print_text() {
  auto yes = [](bool b) { return b ? "yes" : "-"; };
  std::printf("%-32s %-14s %-9s %-8s %-9s %-5s %s\n", "op", "archetype", "reference", "backward",
              "decompose", "gpu", "summary");
  for (const OpRow& r : op_rows()) {
    const char* backward = r.differentiable ? yes(r.backward) : "n/a";
    std::printf("%-32s %-14s %-9s %-8s %-9s %-5s %s%s\n", r.def->name.c_str(),
                archetype_name(r.def->archetype), yes(r.reference), backward, yes(r.decomposition),
                yes(r.gpu), r.def->internal ? "(internal) " : "", r.def->summary.c_str());
  }
}

}  // namespace

void add_ops_command(CLI::App& app) {
  auto* cmd = app.add_subcommand("ops", "list the ops of the op table and what each has");
  auto json = std::make_shared<bool>(false);
  cmd->add_flag("--json", *json, "print one JSON object {\"ops\": [...]}");
  cmd->callback([json] {
    if (*json)
      print_json();
    else
      print_text();
  });
}

}  // namespace mn::cli
