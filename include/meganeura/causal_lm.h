#pragma once
// Decoder-only language models of the Llama family (Llama, Qwen2, Qwen3) built from an
// LmConfig, with Hugging Face's parameter names and [out, in] weight layout, so a checkpoint
// loads one to one (see <meganeura/hf.h>).
#include <cstdint>
#include <functional>
#include <memory>
#include <string>
#include <vector>

#include <meganeura/graph.h>
#include <meganeura/hf.h>
#include <meganeura/models.h>

namespace mn {

// Low-rank adapters (LoRA) around the projections of every decoder layer:
// y = x·Wᵀ + (alpha/rank)·(x·Aᵀ)·Bᵀ, with A [rank, in] initialized as PEFT does
// (kaiming-uniform with a = sqrt(5), i.e. uniform ±1/sqrt(in)) and B [out, rank] zeros, so the
// model starts as the base model. The adapters are f32 parameters named
// "<projection>.lora_A.weight" and "<projection>.lora_B.weight" (e.g.
// "model.layers.0.self_attn.q_proj.lora_A.weight"); the base parameters keep their names.
struct LoraOptions {
  int64_t rank = 0;  // 0: no adapters
  double alpha = 16.0;
  // Projection names (q_proj, k_proj, v_proj, o_proj, gate_proj, up_proj, down_proj).
  std::vector<std::string> targets = default_targets();
  uint64_t seed = 0;  // initialization of the A matrices

  bool enabled() const { return rank > 0; }
  double scale() const { return alpha / static_cast<double>(rank); }
  static std::vector<std::string> default_targets() {
    return {"q_proj", "k_proj", "v_proj", "o_proj", "gate_proj", "up_proj", "down_proj"};
  }
};

// ".lora_A.weight" / ".lora_B.weight": whether a parameter name is an adapter's.
bool is_lora_parameter(const std::string& name);

// Replaces the token embeddings [batch, tokens, hidden] before the first layer (a
// vision-language model puts image features in place of its image tokens).
using EmbeddingSplice = std::function<Tensor(Graph& g, Tensor input_ids, Tensor embeddings)>;

struct CausalLmOptions {
  int64_t batch = 1;
  int64_t sequence = 128;
  // Storage dtype of the parameters (f32, f16 or bf16); activations are computed in f32.
  DType dtype = DType::f32;
  // Adds the input "labels" (i32 [batch, sequence], -100 ignored) and the output "loss": the
  // mean cross-entropy of the logits at position i against labels[i + 1], as transformers
  // computes it when given labels (the shift happens inside: pass labels = input_ids).
  bool with_loss = false;
  // Makes the logits an output ("logits", f32, kept for the host to read). A training step
  // that reads only its loss turns it off: the logits are then scratch of the loss, and the
  // arena does not hold a [batch, sequence, vocab] f32 copy for the whole step (768 MiB for
  // SmolLM2 at 8 x 512). Without the loss there is nothing else to compute: it must stay on.
  bool logits_output = true;
  // Adds the input "positions" (i32 [batch, sequence]) giving each token's position for the
  // rotary embedding; without it, positions are 0 .. sequence-1.
  bool with_positions = false;
  // Initialization of parameters not loaded from a checkpoint (normal(0, 0.02) matrices, norms
  // of ones, zero biases, as transformers initializes them).
  uint64_t seed = 0;
  LoraOptions lora;
  // Where the decoder's parameters live: "model." (a causal LM), "model.text_model." (SmolVLM).
  std::string prefix = "model.";
  EmbeddingSplice splice;  // null: the embeddings as they are
};

// Inputs "input_ids" (i32 [batch, sequence]) and the optional "positions" and "labels"; output
// "logits" (f32 [batch, sequence, vocab]; unless logits_output is off) and, with the loss, "loss".
struct CausalLm {
  std::unique_ptr<Graph> graph;  // owned here: the tensors below point into it
  Tensor input_ids, positions, labels, logits, loss;
};

CausalLm build_causal_lm(const LmConfig& config, const CausalLmOptions& options);

// The Llama config of the built-in transformer's shape (tied embeddings; its batch, sequence and
// seed are the CausalLmOptions' to give): smollm2_135m() gives SmolLM2-135M's config.json.
LmConfig llama_config(const TransformerSpec& spec);

// The rotary inverse frequencies theta^(-2i/head_dim), i < head_dim/2, with Llama 3's rescaling
// applied when the config has it (in double; transformers computes them in f32).
std::vector<double> rope_inv_freq(const LmConfig& config);

// One inference step over a KV cache: a block of tokens per sequence (a prompt chunk, or one
// token while decoding) attends over everything its sequence has cached so far, appends its own
// keys and values to the cache, and samples the token after one chosen position.
struct LmStepOptions {
  int64_t batch = 1;
  int64_t block = 1;         // tokens per sequence in one step
  int64_t max_context = 0;   // cache rows per sequence
  DType dtype = DType::f32;  // storage of the parameters
  // Storage of the KV caches (f32, f16 or bf16): a 16-bit cache holds half the bytes; the
  // block's keys and values are rounded to it as they are written.
  DType cache_dtype = DType::f32;
  std::string prefix = "model.";  // as CausalLmOptions::prefix
  EmbeddingSplice splice;          // as CausalLmOptions::splice
};

// Inputs: "input_ids" and "positions" (i32 [batch, block]: each token's cache row, which is
// also its rotary position; a query sees the rows up to its own), "last" (i32 [batch]: the
// index in the block whose next token is wanted). States "model.layers.N.self_attn.k_cache" and
// ".v_cache" ([batch, kv_heads, max_context, head_dim], of cache_dtype) persist between steps and
// are written in place. Sampling inputs (scalars): "temperature" (f32, 0 greedy), "top_k" (i32, 0
// off), "top_p" (f32, 1 off), "seed" and "step" (u32: the random draw depends only on them and the
// row). Outputs "logits" (f32 [batch, vocab], at `last`) and "next" (i32 [batch], the sampled
// token).
CausalLm build_lm_step(const LmConfig& config, const LmStepOptions& options);

}  // namespace mn
