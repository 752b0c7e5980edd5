#pragma once
// Causal-LM fine-tuning of Hugging Face models (full or LoRA): token data from plain text or
// JSON lines, a training session (forward, backward, optimizer update in one submission), a
// shuffled deterministic batch order, checkpoints with exact resume, and saving as a Hugging
// Face directory or a PEFT adapter directory.
#include <cstdint>
#include <filesystem>
#include <functional>
#include <map>
#include <memory>
#include <string>
#include <vector>

#include <meganeura/array.h>
#include <meganeura/causal_lm.h>
#include <meganeura/distributed.h>
#include <meganeura/hf.h>
#include <meganeura/optimizer.h>
#include <meganeura/train.h>

namespace mn {

class Session;
class Tokenizer;

// ---------------------------------------------------------------------------------------------
// Data: fixed-length examples of input ids and labels (labels -100 where no loss is taken; the
// model shifts them, so labels[i] is the target of the logits at i - 1).

constexpr int32_t kIgnoreLabel = -100;

struct LmExamples {
  int64_t sequence = 0;
  std::vector<int32_t> input_ids;  // [count, sequence]
  std::vector<int32_t> labels;     // [count, sequence]
  // Examples dropped because no label had a token before it within `sequence` tokens (a chat
  // whose replies were truncated away, a one-token window).
  int64_t skipped = 0;
  int64_t count() const {
    return sequence > 0 ? static_cast<int64_t>(input_ids.size()) / sequence : 0;
  }
};

// Plain text. Documents are separated by blank lines: each is encoded on its own (with the
// tokenizer's special tokens, e.g. Llama 3's bos) and followed by eos, and the token stream is
// cut into windows of `sequence` tokens; the last partial window is padded (pad id, else eos)
// with labels -100. A window of a single token (nothing to predict) is dropped.
// Throws FormatError naming the file when it is missing, unreadable or holds no tokens.
LmExamples load_text_examples(const std::filesystem::path& file, const Tokenizer& tokenizer,
                              int64_t sequence);

// JSON lines: {"text": "..."} (every token trained) or {"messages": [{"role", "content"}, ...]}
// formatted with the chat template, labels only on the assistant replies (the tokens each
// assistant turn adds to the formatted conversation). Each line is one example, truncated or
// padded (labels -100) to `sequence`. Blank lines are skipped; a malformed line is a
// FormatError naming the file and the line number. Examples left with no label to predict are
// dropped; no example at all is an error.
LmExamples load_jsonl_examples(const std::filesystem::path& file, const Tokenizer& tokenizer,
                               int64_t sequence);

// The order examples are visited in: a fresh permutation every epoch, a function of the seed
// and the epoch only, so a position (epoch, index) is all a checkpoint needs to continue.
struct ExamplePosition {
  int64_t epoch = 0;
  int64_t index = 0;  // next example of the epoch's permutation
};
std::vector<int64_t> epoch_order(int64_t count, uint64_t seed, int64_t epoch);

// ---------------------------------------------------------------------------------------------
// Training.

struct FinetuneOptions {
  std::filesystem::path model_dir;
  std::filesystem::path text;  // one of text and jsonl
  std::filesystem::path jsonl;
  int64_t sequence = 128;
  int64_t batch = 1;
  int64_t epochs = 1;
  int64_t steps = 0;  // > 0: this many updates instead of `epochs` passes
  // lr (peak), schedule, accumulate and clip_grad_norm live here.
  Optimizer optimizer = Optimizer::adamw({.lr = 1e-4, .weight_decay = 0.0});
  DType dtype = DType::f32;
  LoraOptions lora;            // rank 0: full fine-tuning
  bool merge_lora = false;     // save W + (alpha/r)·B·A as a full model instead of the adapters
  std::filesystem::path save;  // Hugging Face directory or adapter directory
  std::filesystem::path checkpoint;  // written every checkpoint_every updates and at the end
  int64_t checkpoint_every = 0;      // 0: only at the end
  std::filesystem::path resume;
  std::string device;
  uint64_t seed = 0;  // data order and adapter initialization
  struct Progress {
    int64_t step = 0, steps = 0;
    double loss = 0, lr = 0, tokens_per_second = 0, seconds = 0;
  };
  std::function<void(const Progress&)> on_progress;
  // Data-parallel over the ranks (docs/distributed.md): `batch` is each rank's micro-batch, a
  // micro-batch of the data is batch × ranks examples (rank r taking the r-th share), the
  // gradients are averaged over the ranks before every update, losses and token rates are the
  // ranks'. Rank 0 writes checkpoints and `save`; a checkpoint resumes with any number of ranks
  // whose micro-batches add up to the same.
  std::shared_ptr<Communicator> communicator;
  // After every update, the ranks' parameters and optimizer states compared by checksum
  // (TrainerOptions::check_ranks).
  bool check_ranks = false;
};

struct FinetuneResult {
  int64_t steps = 0;             // updates made in this run's life (resumed ones included)
  double final_loss = 0;         // loss of the last update
  std::vector<double> losses;    // loss of every update this run made
  double tokens_per_second = 0;  // trained (non-ignored) tokens per second
  std::string device;
};

class Finetuner {
 public:
  // Checks every option and output path, loads the model, tokenizer and data, builds the
  // training session and applies `resume`. Throws mn::Error (FormatError for files) naming
  // the option, file or checkpoint field that is wrong.
  explicit Finetuner(FinetuneOptions options);
  ~Finetuner();
  Finetuner(const Finetuner&) = delete;
  Finetuner& operator=(const Finetuner&) = delete;

  // One optimizer update (`accumulate` micro-batches); returns its loss (their mean).
  double step();
  // Updates until total_steps(), writing checkpoints as asked, then the checkpoint and the
  // saved model.
  FinetuneResult run();

  void save_checkpoint(const std::filesystem::path& file) const;
  // The Hugging Face directory (full, or merged with --merge-lora) or the PEFT adapter one.
  void save(const std::filesystem::path& dir) const;

  int64_t global_step() const;
  int64_t total_steps() const;
  const LmConfig& config() const;
  const LmExamples& examples() const;
  Session& session();
  // The parameters the optimizer updates (all, or the LoRA adapters).
  std::vector<std::string> trained_parameters() const;

  struct Impl;

 private:
  std::unique_ptr<Impl> impl_;
};

// PEFT adapter directory: adapter_config.json and adapter_model.safetensors with the adapters
// under "base_model.model.<name>". `base_model` is written as base_model_name_or_path.
void save_lora_adapter(const std::filesystem::path& dir, const Session& session,
                       const LmConfig& config, const LoraOptions& lora,
                       const std::string& base_model);

// adapter_config.json of a PEFT LoRA directory (r, lora_alpha, target_modules as a list);
// FormatError naming the file and field otherwise.
LoraOptions load_lora_config(const std::filesystem::path& dir);
// Uploads adapter_model.safetensors into a session whose graph was built with that
// configuration (CausalLmOptions::lora): every adapter present with its shape, no other tensor.
void load_lora_adapter(Session& session, const std::filesystem::path& dir);

// Adds (alpha/r)·B·A of a PEFT adapter directory to the weights of a session holding the base
// model (its graph has no adapters): every projection the adapter's configuration targets
// must have both matrices, of the config's shapes, and every tensor of the file must be used;
// FormatError naming the file and tensor otherwise. The session then runs the merged model (in
// its storage dtype, as PEFT's merge_and_unload gives in that dtype).
void merge_lora_adapter(Session& session, const LmConfig& config, const std::filesystem::path& dir);

// W + (alpha/r)·B·A for every adapted projection, with every other parameter as the session
// holds it, by Hugging Face name (f32 values).
std::map<std::string, Array> merged_lora_parameters(const Session& session, const LmConfig& config,
                                                    const LoraOptions& lora);

}  // namespace mn
