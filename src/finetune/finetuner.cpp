// The fine-tuning loop: a causal LM with its loss and optimizer update in one session, fed
// shuffled batches of token examples; checkpoints hold what exact resume needs (the trained
// parameters, the optimizer state, the update count and the data position). Data-parallel
// (a communicator), the session runs the backward pass ("train") and the update ("update")
// as two programs, the ranks averaging the gradients between them.
#include <algorithm>
#include <chrono>
#include <cmath>
#include <set>

#include <meganeura/error.h>
#include <meganeura/finetune.h>
#include <meganeura/session.h>
#include <meganeura/tokenizer.h>

#include "finetune/finetune_checks.h"
#include "train/data_parallel.h"

namespace mn {

namespace fs = std::filesystem;
using Clock = std::chrono::steady_clock;

struct Finetuner::Impl {
  FinetuneOptions o;
  HfModel model;
  LmExamples data;
  CausalLm lm;
  std::unique_ptr<Session> session;
  std::vector<std::string> trained;  // parameters the optimizer updates
  std::vector<std::string> inputs;   // of the session
  int64_t global_step = 0;
  int64_t total = 0;
  ExamplePosition pos;
  std::vector<int64_t> order;  // of pos.epoch
  int64_t order_epoch = -1;
  int64_t tokens = 0;  // trained tokens fed so far by this object (every rank's)
  // Data-parallel: the ranks, the step's split, the tensors checkpoints leave out.
  std::shared_ptr<Communicator> comm;
  SplitTrainingStep split;
  std::set<std::string> transient;

  int ranks() const { return comm ? comm->size() : 1; }
  int rank() const { return comm ? comm->rank() : 0; }

  explicit Impl(FinetuneOptions options) : o(std::move(options)), comm(o.communicator) {
    finetune::check_options(o);
    model = load_hf_model(o.model_dir);
    const Tokenizer tok = Tokenizer::from_dir(o.model_dir);
    data = o.text.empty() ? load_jsonl_examples(o.jsonl, tok, o.sequence)
                          : load_text_examples(o.text, tok, o.sequence);
    check_vocabulary();
    build();
    const int64_t rows = o.batch * ranks();  // a micro-batch of the data
    const int64_t batches = (data.count() + rows - 1) / rows;
    total =
        o.steps > 0 ? o.steps : std::max<int64_t>(1, o.epochs * batches / o.optimizer.accumulate);
    if (!o.resume.empty()) resume(o.resume);
  }

  // A tokenizer with more ids than the embedding has rows would index past the table.
  void check_vocabulary() const {
    const auto largest = std::max_element(data.input_ids.begin(), data.input_ids.end());
    if (*largest >= model.config.vocab_size) {
      const fs::path& file = o.text.empty() ? o.jsonl : o.text;
      throw FormatError(file.string() + ": token id " + std::to_string(*largest) +
                        " is outside the model's vocabulary of " +
                        std::to_string(model.config.vocab_size) + " (" +
                        (o.model_dir / "config.json").string() + ")");
    }
  }

  void build() {
    CausalLmOptions lo;
    lo.batch = o.batch;
    lo.sequence = o.sequence;
    lo.dtype = o.dtype;
    lo.with_loss = true;
    lo.logits_output = false;  // only the loss is read: the logits stay scratch of the step
    lo.seed = o.seed;
    lo.lora = o.lora;
    lo.lora.seed = o.seed;
    lm = build_causal_lm(model.config, lo);
    std::vector<Tensor> params;  // empty: all of them
    if (o.lora.enabled()) {
      for (NodeId id : lm.graph->parameters()) {
        if (is_lora_parameter(lm.graph->node(id).name)) params.push_back(lm.graph->tensor(id));
      }
    }
    SessionOptions so;
    so.device = o.device;
    // The base weights come from the model's files; adapters keep their initializers.
    for (const ParameterSpec& p : lm_parameters(model.config)) so.preset.insert(p.name);
    if (comm) {
      so.exportable_memory = train::reduces_in_place(*comm);
      // The loss is a mean over trained tokens: each rank's gradient is weighted by its share
      // of them, so the ranks' mean is the gradient of the whole micro-batch's mean.
      split = split_training_step(lm.loss, o.optimizer, params, /*weighted=*/true);
      transient = train::transient_sums(split, o.optimizer);
      session = build_session(
          {{"train", lm.graph.get(), std::vector<std::string>{"loss"}},
           {"update", split.update.get(), std::vector<std::string>{}}},
          so);
    } else {
      add_training_step(lm.loss, o.optimizer, params);
      session = build_session(*lm.graph, so);
    }
    load_weights(*session, model);
    // Every rank from rank 0's adapters (the base weights are the files').
    if (comm) train::broadcast_persistents(*session, *comm);
    for (const std::string& n : session->parameter_names()) {
      if (!o.lora.enabled() || is_lora_parameter(n)) trained.push_back(n);
    }
    inputs = session->input_names(session->program_names().front());
  }

  bool has_input(const std::string& name) const {
    return std::find(inputs.begin(), inputs.end(), name) != inputs.end();
  }

  // This rank's share of the next micro-batch: examples in the epoch's order (the micro-batch
  // of the data is every rank's share together); the epoch's last batch is completed with
  // ignored rows (padding labels) rather than examples of the next epoch. Returns each rank's
  // trained tokens.
  std::vector<int64_t> next_batch(std::vector<int32_t>& ids, std::vector<int32_t>& labels) {
    const auto L = static_cast<size_t>(o.sequence);
    ids.assign(static_cast<size_t>(o.batch) * L, data.input_ids[0]);
    labels.assign(ids.size(), kIgnoreLabel);
    if (order_epoch != pos.epoch) {
      order = epoch_order(data.count(), o.seed, pos.epoch);
      order_epoch = pos.epoch;
    }
    const int64_t first = rank() * o.batch;  // this rank's rows of the micro-batch
    std::vector<int64_t> counts(static_cast<size_t>(ranks()), 0);
    for (int64_t row = 0; row < o.batch * ranks() && pos.index < data.count();
         ++row, ++pos.index) {
      const auto src = static_cast<size_t>(order[static_cast<size_t>(pos.index)]) * L;
      counts[static_cast<size_t>(row / o.batch)] += trained_tokens(&data.labels[src], o.sequence);
      if (row < first || row >= first + o.batch) continue;
      const auto at = static_cast<std::ptrdiff_t>((row - first) * static_cast<int64_t>(L));
      std::copy_n(data.input_ids.begin() + static_cast<std::ptrdiff_t>(src), L, ids.begin() + at);
      std::copy_n(data.labels.begin() + static_cast<std::ptrdiff_t>(src), L, labels.begin() + at);
    }
    if (pos.index >= data.count()) pos = {pos.epoch + 1, 0};
    return counts;
  }

  // Tokens of one example whose label is trained (the first position predicts nothing).
  static int64_t trained_tokens(const int32_t* labels, int64_t sequence) {
    int64_t n = 0;
    for (int64_t i = 1; i < sequence; ++i) n += labels[i] != kIgnoreLabel;
    return n;
  }

  double step() {
    const int k = o.optimizer.accumulate;
    const double lr = o.optimizer.lr_at(global_step, total);
    std::vector<int32_t> ids, labels;
    double loss = 0;
    for (int micro = 0; micro < k; ++micro) {
      const std::vector<int64_t> counts = next_batch(ids, labels);
      int64_t all = 0;
      for (int64_t c : counts) all += c;
      tokens += all;
      session->set("input_ids", ids);
      session->set("labels", labels);
      if (comm) {
        // Every rank reads the whole micro-batch's counts: no communication for the weights.
        const double own = static_cast<double>(counts[static_cast<size_t>(rank())]);
        const double share = all > 0 ? own * ranks() / static_cast<double>(all) : 1.0;
        session->set("train", "grad_weight", Array::scalar(share));
        session->step("train");
        // A rank without trained tokens has a NaN mean and no gradient: it adds nothing.
        const double mean = session->get("train", "loss").data[0];
        loss += own > 0 ? mean * share : 0.0;
        continue;
      }
      for (const auto& [name, value] : step_scalars(o.optimizer, lr, global_step + 1)) {
        if (has_input(name)) session->set_scalar(name, value);
      }
      if (has_input(StepInputs::apply))
        session->set_scalar(StepInputs::apply, micro == k - 1 ? 1.0 : 0.0);
      session->step();
      loss += session->get("loss").data[0];
    }
    if (comm) {
      // The micro-batches' losses (weighted means: their sum over the ranks is the whole
      // micro-batch's mean) and the ranks' mean gradients, then the update every rank makes.
      std::vector<double> sums = {loss};
      comm->all_reduce_sum(sums);
      loss = sums[0] / ranks();
      train::update_over_ranks(*session, split, o.optimizer, lr, global_step + 1, *comm,
                               o.check_ranks);
    }
    ++global_step;
    return loss / k;
  }

  void save_checkpoint(const fs::path& file) const {
    if (rank() != 0) return;  // every rank holds the same tensors
    std::map<std::string, Array> arrays;
    for (const std::string& n : trained) arrays[n] = session->get(n);
    for (const std::string& n : session->state_names()) {
      if (!transient.count(n)) arrays[n] = session->get(n);
    }
    std::map<std::string, std::string> meta;
    for (const auto& [key, value] : finetune::resume_fields(o, model.config, data))
      meta[key] = value;
    meta["global_step"] = std::to_string(global_step);
    meta["next_epoch"] = std::to_string(pos.epoch);
    meta["next_index"] = std::to_string(pos.index);
    save_safetensors(file, arrays, meta);
  }

  void resume(const fs::path& file) {
    SafetensorsReader reader(file);
    const auto& meta = reader.metadata();
    finetune::check_resume_fields(file, meta, finetune::resume_fields(o, model.config, data));
    std::vector<std::string> names = trained;
    for (const std::string& n : session->state_names()) {
      if (!transient.count(n)) names.push_back(n);
    }
    for (const std::string& n : names) {
      if (!reader.contains(n))
        throw FormatError(file.string() + ": checkpoint lacks tensor '" + n + "'");
      session->set(n, reader.array(n));
    }
    const finetune::CheckpointPosition at = finetune::checkpoint_position(file, meta, data.count());
    global_step = at.global_step;
    pos = at.next;
  }

  void save(const fs::path& dir) const {
    if (rank() != 0) return;
    if (!o.lora.enabled()) {
      save_hf_model(dir, *session, model.config, saving());
      return;
    }
    if (!o.merge_lora) {
      save_lora_adapter(dir, *session, model.config, o.lora, fs::absolute(o.model_dir).string());
      return;
    }
    // The merged weights go through a plain model's session, which save_hf_model reads.
    CausalLmOptions lo;
    lo.sequence = 2;
    lo.dtype = o.dtype;
    CausalLm plain = build_causal_lm(model.config, lo);
    SessionOptions so;
    so.device = o.device;
    for (const ParameterSpec& p : lm_parameters(model.config)) so.preset.insert(p.name);
    auto s = build_session(*plain.graph, so);
    for (auto& [name, value] : merged_lora_parameters(*session, model.config, o.lora))
      s->set(name, value);
    save_hf_model(dir, *s, model.config, saving());
  }

  HfSaveOptions saving() const {
    HfSaveOptions so;
    so.dtype = o.dtype;
    if (!model.generation.json_text.empty()) so.generation = model.generation;
    so.tokenizer_dir = o.model_dir;
    return so;
  }
};

Finetuner::Finetuner(FinetuneOptions options) : impl_(std::make_unique<Impl>(std::move(options))) {}
Finetuner::~Finetuner() = default;

double Finetuner::step() { return impl_->step(); }
void Finetuner::save_checkpoint(const fs::path& file) const { impl_->save_checkpoint(file); }
void Finetuner::save(const fs::path& dir) const { impl_->save(dir); }
int64_t Finetuner::global_step() const { return impl_->global_step; }
int64_t Finetuner::total_steps() const { return impl_->total; }
const LmConfig& Finetuner::config() const { return impl_->model.config; }
const LmExamples& Finetuner::examples() const { return impl_->data; }
Session& Finetuner::session() { return *impl_->session; }
std::vector<std::string> Finetuner::trained_parameters() const { return impl_->trained; }

FinetuneResult Finetuner::run() {
  Impl& m = *impl_;
  FinetuneResult r;
  r.device = m.session->device_name();
  const auto t0 = Clock::now();
  const int64_t tokens0 = m.tokens;
  while (m.global_step < m.total) {
    const double lr = m.o.optimizer.lr_at(m.global_step, m.total);
    const double loss = m.step();
    r.losses.push_back(loss);
    const double seconds = std::chrono::duration<double>(Clock::now() - t0).count();
    r.tokens_per_second = seconds > 0 ? static_cast<double>(m.tokens - tokens0) / seconds : 0.0;
    if (m.o.on_progress)
      m.o.on_progress({m.global_step, m.total, loss, lr, r.tokens_per_second, seconds});
    if (!m.o.checkpoint.empty() && m.o.checkpoint_every > 0 &&
        m.global_step % m.o.checkpoint_every == 0 && m.global_step < m.total)
      m.save_checkpoint(m.o.checkpoint);
  }
  if (!m.o.checkpoint.empty()) m.save_checkpoint(m.o.checkpoint);
  if (!m.o.save.empty()) m.save(m.o.save);
  r.steps = m.global_step;
  r.final_loss = r.losses.empty() ? 0.0 : r.losses.back();
  return r;
}

}  // namespace mn
