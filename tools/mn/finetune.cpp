// `mn finetune`: causal-LM fine-tuning of a Hugging Face model directory, full or LoRA.
#include <cstdio>
#include <memory>
#include <optional>
#include <sstream>

#include <nlohmann/json.hpp>

#include <meganeura/finetune.h>

#include "commands.h"
#include "ranks.h"

namespace mn::cli {

namespace {

struct FinetuneArgs {
  FinetuneOptions o;
  std::string dtype = "f32";
  std::string schedule = "constant";
  std::string optimizer = "adamw";
  std::optional<int64_t> lora_rank;
  std::string lora_targets;
  std::string distributed = "auto";
  bool json = false;
};

std::vector<std::string> split_targets(const std::string& list) {
  std::vector<std::string> out;
  std::stringstream in(list);
  std::string item;
  while (std::getline(in, item, ',')) {
    if (item.empty()) throw Error("--lora-targets: an empty name in '" + list + "'");
    out.push_back(item);
  }
  return out;
}

FinetuneOptions options_from(FinetuneArgs& a) {
  FinetuneOptions o = a.o;
  if (a.dtype == "f32") {
    o.dtype = DType::f32;
  } else if (a.dtype == "bf16") {
    o.dtype = DType::bf16;
  } else {
    throw Error("--dtype must be f32 or bf16, got '" + a.dtype + "'");
  }
  o.optimizer.kind = optimizer_from_name(a.optimizer);
  o.optimizer.schedule.kind = schedule_from_name(a.schedule);
  if (a.lora_rank) {
    if (*a.lora_rank <= 0)
      throw Error("--lora-rank must be positive, got " + std::to_string(*a.lora_rank));
    o.lora.rank = *a.lora_rank;
  }
  if (!a.lora_targets.empty()) {
    if (!a.lora_rank) throw Error("--lora-targets needs --lora-rank");
    o.lora.targets = split_targets(a.lora_targets);
  }
  return o;
}

void finetune_run(FinetuneArgs& a, FinetuneOptions o);

void run_finetune(FinetuneArgs& a) {
  FinetuneOptions o = options_from(a);
  // Each rank takes --batch / ranks examples of every micro-batch.
  o.communicator = connect_ranks(a.distributed);
  if (o.communicator) o.batch = rank_batch(o.batch, *o.communicator);
  run_on_ranks("mn finetune", o.communicator, [&] { finetune_run(a, std::move(o)); });
}

void finetune_run(FinetuneArgs& a, FinetuneOptions o) {
  const bool lead = !o.communicator || o.communicator->rank() == 0;  // prints
  if (lead) {
    o.on_progress = [](const FinetuneOptions::Progress& p) {
      std::fprintf(stderr, "step %lld/%lld  loss %.4f  lr %.3g  %.0f tokens/s\n",
                   static_cast<long long>(p.step), static_cast<long long>(p.steps), p.loss, p.lr,
                   p.tokens_per_second);
    };
  }
  Finetuner tuner(o);
  if (!lead) {
    tuner.run();
    return;
  }
  const LmExamples& data = tuner.examples();
  std::fprintf(stderr, "%lld examples of %lld tokens, %lld steps\n",
               static_cast<long long>(data.count()), static_cast<long long>(data.sequence),
               static_cast<long long>(tuner.total_steps()));
  if (data.skipped > 0) {
    std::fprintf(stderr, "skipped %lld examples with nothing to train within --seq %lld tokens\n",
                 static_cast<long long>(data.skipped), static_cast<long long>(data.sequence));
  }
  const FinetuneResult r = tuner.run();
  if (!o.save.empty()) std::fprintf(stderr, "saved %s\n", o.save.string().c_str());
  if (a.json) {
    const nlohmann::json j = {{"steps", r.steps},
                              {"final_loss", r.final_loss},
                              {"tokens_per_second", r.tokens_per_second},
                              {"device", r.device},
                              {"lora_rank", o.lora.rank},
                              {"ranks", o.communicator ? o.communicator->size() : 1}};
    std::printf("%s\n", j.dump().c_str());
  }
}

}  // namespace

void add_finetune_command(CLI::App& app) {
  auto a = std::make_shared<FinetuneArgs>();
  auto* cmd = app.add_subcommand("finetune", "fine-tune a Hugging Face causal LM (full or LoRA)");
  FinetuneOptions& o = a->o;
  cmd->add_option("model_dir", o.model_dir, "Hugging Face model directory")->required();
  auto* text = cmd->add_option("--text", o.text, "plain text (documents separated by blank lines)");
  auto* jsonl = cmd->add_option("--jsonl", o.jsonl, "JSON lines of {\"text\"} or {\"messages\"}");
  text->excludes(jsonl);
  cmd->add_option("--seq", o.sequence, "tokens per example")->capture_default_str();
  cmd->add_option("--batch", o.batch, "examples per micro-batch")->capture_default_str();
  auto* epochs =
      cmd->add_option("--epochs", o.epochs, "passes over the data")->capture_default_str();
  auto* steps = cmd->add_option("--steps", o.steps, "optimizer updates (instead of --epochs)");
  epochs->excludes(steps);
  cmd->add_option("--lr", o.optimizer.lr, "peak learning rate")->capture_default_str();
  cmd->add_option("--warmup", o.optimizer.schedule.warmup, "linear warm-up updates")
      ->capture_default_str();
  cmd->add_option("--schedule", a->schedule, "constant or cosine")->capture_default_str();
  cmd->add_option("--optimizer", a->optimizer, "adamw, adam or sgd")->capture_default_str();
  cmd->add_option("--weight-decay", o.optimizer.weight_decay,
                  "weight decay (AdamW: decoupled; Adam, SGD: an L2 penalty)")
      ->capture_default_str();
  cmd->add_option("--accumulate", o.optimizer.accumulate, "micro-batches per update")
      ->capture_default_str();
  cmd->add_option("--clip-grad-norm", o.optimizer.clip_grad_norm, "global L2 norm (0: off)")
      ->capture_default_str();
  cmd->add_option("--dtype", a->dtype, "parameter storage: f32 or bf16")->capture_default_str();
  cmd->add_option("--lora-rank", a->lora_rank, "train LoRA adapters of this rank");
  cmd->add_option("--lora-alpha", o.lora.alpha, "LoRA scale numerator")->capture_default_str();
  cmd->add_option("--lora-targets", a->lora_targets,
                  "comma-separated projections (default q,k,v,o,gate,up,down _proj)");
  cmd->add_flag("--merge-lora", o.merge_lora, "save the base weights with the adapters merged");
  cmd->add_option("--save", o.save, "output directory (Hugging Face model, or PEFT adapter)");
  cmd->add_option("--checkpoint", o.checkpoint, "checkpoint file (safetensors)");
  cmd->add_option("--checkpoint-every", o.checkpoint_every, "updates between checkpoints");
  cmd->add_option("--resume", o.resume, "continue exactly from a checkpoint");
  cmd->add_option("--device", o.device, "device index or name part (see mn devices)");
  cmd->add_option("--seed", o.seed, "data order and adapter initialization")->capture_default_str();
  cmd->add_flag("--json", a->json, "print one JSON summary as the last line");
  cmd->add_flag("--check-ranks", a->o.check_ranks,
                "data-parallel: after every update, check by checksum that every rank holds "
                "rank 0's parameters and optimizer states");
  cmd->add_option("--distributed", a->distributed,
                  "data-parallel engine: auto (MPI under mpirun, NCCL when started by environment: WORLD_SIZE, RANK, MASTER_ADDR, MASTER_PORT), mpi, nccl or none; "
                  "--batch is then all ranks' micro-batch together")
      ->capture_default_str();
  cmd->callback([a] {
    if (a->o.text.empty() && a->o.jsonl.empty()) throw Error("mn finetune: give --text or --jsonl");
    run_finetune(*a);
  });
}

}  // namespace mn::cli
