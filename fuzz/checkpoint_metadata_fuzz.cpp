// The metadata of checkpoints (a safetensors header's __metadata__): the training checkpoint's
// format, model, optimizer, batch and data position checked against a run, and a fine-tuning
// checkpoint's fields and position.
#include <meganeura/data.h>

#include "finetune/finetune_checks.h"
#include "harness.h"
#include "train/checkpoint.h"

namespace mn::fuzz {
namespace {

// The run the seeds (fuzz/make_corpus.py) were written for: an MLP of batch 16 trained with
// Adam, 4 batches per epoch, 40 steps; a fine-tuning run over 10 examples.
constexpr int64_t kPerEpoch = 4, kTotal = 40, kExamples = 10;

void check_training(const std::map<std::string, std::string>& meta) {
  const train::RunShape run{"fuzz.safetensors",
                            {{"model", "mlp"}, {"optimizer", "adam"}, {"batch", "16"}},
                            kPerEpoch,
                            kTotal,
                            kTotal / kPerEpoch};
  const train::ResumePoint r = train::resume_point(meta, run);
  require(r.global_step >= 0 && r.global_step < kTotal, "resume_point: step outside the run");
  require(r.next.step >= 0 && r.next.step < kPerEpoch, "resume_point: batch outside the epoch");
}

void check_finetuning(const std::map<std::string, std::string>& meta) {
  finetune::check_resume_fields(
      "fuzz.safetensors", meta,
      {{"format", "meganeura-finetune-1"}, {"seq", "16"}, {"batch", "2"}});
  const finetune::CheckpointPosition p =
      finetune::checkpoint_position("fuzz.safetensors", meta, kExamples);
  require(p.global_step >= 0 && p.next.epoch >= 0, "checkpoint_position: a negative count");
  require(p.next.index >= 0 && p.next.index < kExamples, "checkpoint_position: index outside");
}

void fuzz_checkpoint_metadata(std::span<const uint8_t> data) {
  parse_or_refuse([&] {
    const SafetensorsReader r =
        SafetensorsReader::from_bytes(std::vector<uint8_t>(data.begin(), data.end()), "fuzz");
    parse_or_refuse([&] { check_training(r.metadata()); });
    parse_or_refuse([&] { check_finetuning(r.metadata()); });
  });
}

const Registration registered("checkpoint_metadata", fuzz_checkpoint_metadata);

}  // namespace
}  // namespace mn::fuzz
