// `mn train`: trains a built-in classifier, or a DDPM U-Net, on Fashion-MNIST.
#include <unistd.h>

#include <cmath>
#include <cstdio>
#include <iostream>
#include <limits>
#include <memory>
#include <optional>
#include <string>

#include <nlohmann/json.hpp>

#include <meganeura/train.h>

#include "commands.h"
#include "ranks.h"
#include "data/atomic_file.h"
#include "train_unet.h"

namespace mn::cli {

namespace {

struct TrainArgs {
  std::string model = "mlp";
  int64_t epochs = 1;
  int64_t batch = 64;
  std::string optimizer = "adam";
  double lr = 0;  // unless given: the optimizer's default
  double momentum = 0.9;
  double weight_decay = 0;  // unless given: the optimizer's default
  std::string schedule = "constant";
  int64_t warmup = 0;
  std::string device;
  std::string save, resume, data;
  int64_t limit = 0;  // unless given: all samples
  int accumulate = 1;
  double clip = 0;
  uint64_t seed = 0;
  bool json = false;
  bool check_numerics = false;
  std::string precision = "f32";
  std::string distributed = "auto";
  bool check_ranks = false;
  // --model unet
  std::string sampler = "ddim";
  int64_t sampling_steps = 50;
  int64_t samples = 16;
  std::string sample_png = "unet-samples.png";
};

std::string format_duration(double s) {
  char buf[32];
  int64_t t = static_cast<int64_t>(s + 0.5);
  std::snprintf(buf, sizeof buf, "%lld:%02lld", static_cast<long long>(t / 60),
                static_cast<long long>(t % 60));
  return buf;
}

void print_progress(const TrainOptions::Progress& p, bool terminal, bool quiet) {
  if (quiet && !p.epoch_done) return;
  FILE* out = stderr;
  if (terminal && !p.epoch_done) {
    const int width = 30;
    const int filled = static_cast<int>(width * p.step / std::max<int64_t>(1, p.steps_per_epoch));
    std::fprintf(out,
                 "\repoch %lld/%lld [%s%s] %lld/%lld loss %.4f acc %.3f %.0f samples/s ETA %s ",
                 static_cast<long long>(p.epoch + 1), static_cast<long long>(p.epochs),
                 std::string(static_cast<size_t>(filled), '#').c_str(),
                 std::string(static_cast<size_t>(width - filled), '.').c_str(),
                 static_cast<long long>(p.step), static_cast<long long>(p.steps_per_epoch), p.loss,
                 p.accuracy, p.samples_per_second, format_duration(p.eta_seconds).c_str());
    std::fflush(out);
    return;
  }
  const bool tenth = p.steps_per_epoch >= 10 && p.step % (p.steps_per_epoch / 10) == 0;
  if (!p.epoch_done && !tenth) return;
  if (terminal) std::fprintf(out, "\r");
  std::fprintf(out,
               "epoch %lld/%lld step %lld/%lld loss %.4f train_acc %.4f %.0f samples/s elapsed %s",
               static_cast<long long>(p.epoch + 1), static_cast<long long>(p.epochs),
               static_cast<long long>(p.step), static_cast<long long>(p.steps_per_epoch), p.loss,
               p.accuracy, p.samples_per_second, format_duration(p.seconds).c_str());
  if (p.epoch_done) std::fprintf(out, " test_acc %.4f", p.test_accuracy);
  std::fprintf(out, "\n");
}

// The value of an option as it was typed, for messages.
std::string typed(const CLI::App& cmd, const std::string& name) {
  const CLI::Option* opt = cmd.get_option(name);
  return opt->results().empty() ? opt->get_default_str() : opt->results().back();
}

void require(bool ok, const CLI::App& cmd, const std::string& name, const std::string& want) {
  if (!ok) throw Error(name + " " + typed(cmd, name) + ": expected " + want);
}

bool given(const CLI::App& cmd, const std::string& name) { return cmd.count(name) > 0; }

// Every value means what it says: a bad one is an error naming the option, never replaced by a
// default or accepted as "off".
void check_args(const TrainArgs& a, const CLI::App& cmd) {
  const auto finite = [](double v) { return std::isfinite(v); };
  require(a.epochs >= 1, cmd, "--epochs", "an integer >= 1");
  require(a.batch >= 1, cmd, "--batch", "an integer >= 1");
  require(!given(cmd, "--lr") || (a.lr > 0 && a.lr <= std::numeric_limits<float>::max()), cmd,
          "--lr", "a positive number representable in f32 (at most 3.4e38)");
  require(finite(a.momentum) && a.momentum >= 0 && a.momentum < 1, cmd, "--momentum",
          "a number in [0, 1)");
  require(!given(cmd, "--weight-decay") || (finite(a.weight_decay) && a.weight_decay >= 0), cmd,
          "--weight-decay", "a finite number >= 0");
  require(finite(a.clip) && a.clip >= 0, cmd, "--clip-grad-norm", "a finite number >= 0 (0: off)");
  require(a.warmup >= 0, cmd, "--warmup", "an integer >= 0");
  require(a.accumulate >= 1, cmd, "--accumulate", "an integer >= 1");
  require(!given(cmd, "--limit") || a.limit >= 1, cmd, "--limit", "an integer >= 1");
  require(a.precision == "f32" || a.precision == "bf16" || a.precision == "f16", cmd, "--precision",
          "f32, bf16 or f16");
  const bool unet = a.model == "unet";
  for (const char* o : {"--sampler", "--sampling-steps", "--samples", "--sample-png"}) {
    require(unet || !given(cmd, o), cmd, o, "only with --model unet");
  }
  require(!unet || !given(cmd, "--resume"), cmd, "--resume",
          "nothing with --model unet (its runs do not resume; --save keeps the weights)");
  require(a.sampler == "ddim" || a.sampler == "ddpm", cmd, "--sampler", "ddim or ddpm");
  require(a.sampling_steps >= 1 && a.sampling_steps <= 1000, cmd, "--sampling-steps",
          "an integer in [1, 1000] (the noise schedule's length)");
  require(a.samples >= 0 && a.samples <= 1024, cmd, "--samples", "an integer in [0, 1024]");
}

// The optimizer the options describe; Adam's learning rate defaults to `adam_lr`.
Optimizer optimizer_of(const TrainArgs& a, const CLI::App& cmd, double adam_lr) {
  Optimizer opt;
  opt.kind = optimizer_from_name(a.optimizer);
  if (opt.kind == Optimizer::Kind::sgd) opt.momentum = a.momentum;
  if (given(cmd, "--weight-decay"))
    opt.weight_decay = a.weight_decay;
  else if (opt.kind == Optimizer::Kind::adamw)
    opt.weight_decay = 0.01;
  opt.accumulate = a.accumulate;
  opt.clip_grad_norm = a.clip;
  opt.lr = given(cmd, "--lr") ? a.lr : (opt.kind == Optimizer::Kind::sgd ? 0.05 : adam_lr);
  opt.schedule.kind = schedule_from_name(a.schedule);
  opt.schedule.warmup = a.warmup;
  return opt;
}

// Checks that need the data set's size (as batches per epoch): the run's length and what
// accumulation can reach.
void check_run(const TrainArgs& a, const CLI::App& cmd, int64_t per_epoch) {
  require(a.epochs <= std::numeric_limits<int64_t>::max() / per_epoch, cmd, "--epochs",
          "at most " + std::to_string(std::numeric_limits<int64_t>::max() / per_epoch) + " with " +
              std::to_string(per_epoch) + " batches per epoch");
  require(a.accumulate <= per_epoch * a.epochs, cmd, "--accumulate",
          "at most the run's " + std::to_string(per_epoch * a.epochs) +
              " batches, or no update would ever happen");
}

void run_train_unet(const TrainArgs& a, const CLI::App& cmd) {
  UnetRun run;
  diffusion::DdpmTrainOptions& o = run.train;
  o.optimizer = optimizer_of(a, cmd, 1e-3);
  o.batch = a.batch;
  o.epochs = a.epochs;
  o.seed = a.seed;
  o.session.device = a.device;
  o.session.precision = dtype_from_name(a.precision);
  if (a.check_numerics) o.session.check_numerics = true;
  o.samples = a.samples;
  o.sampler.kind =
      a.sampler == "ddpm" ? diffusion::SamplerKind::ddpm : diffusion::SamplerKind::ddim;
  o.sampler.steps = a.sampling_steps;
  run.save = a.save;
  run.png = a.sample_png;
  run.json = a.json;
  // Unwritable outputs fail before the data is read and the run is checked against its length.
  if (!run.save.empty()) data::AtomicFile::check_destination(run.save);
  if (!run.png.empty()) data::AtomicFile::check_destination(run.png);
  run.images =
      load_fashion_mnist(Split::train, ImageLayout::nchw, a.data,
                         given(cmd, "--limit") ? std::optional<int64_t>(a.limit) : std::nullopt);
  // The short batch is dropped; fewer images than a batch are train_ddpm's error to name.
  check_run(a, cmd, std::max<int64_t>(run.images.size() / a.batch, 1));
  train_unet(std::move(run));
}

void train_classifier_run(const TrainArgs& a, const CLI::App& cmd,
                          const std::shared_ptr<Communicator>& comm);

void run_train(const TrainArgs& a, const CLI::App& cmd) {
  check_args(a, cmd);
  std::shared_ptr<Communicator> comm = connect_ranks(a.distributed);
  if (comm) {
    require(a.model != "unet", cmd, "--distributed",
            "none with --model unet, which trains on one process (launched by mpirun, give "
            "--distributed none to train it on each)");
    rank_batch(a.batch, *comm);
  }
  if (a.model == "unet") return run_train_unet(a, cmd);
  run_on_ranks("mn train", comm, [&] { train_classifier_run(a, cmd, comm); });
}

void train_classifier_run(const TrainArgs& a, const CLI::App& cmd,
                          const std::shared_ptr<Communicator>& comm) {
  const bool lead = !comm || comm->rank() == 0;  // prints and writes
  // An unwritable checkpoint fails before minutes of loading and training.
  if (!a.save.empty()) data::AtomicFile::check_destination(a.save);
  TrainOptions o;
  o.model.kind = model_from_name(a.model);
  o.model.batch = comm ? rank_batch(a.batch, *comm) : a.batch;
  o.model.seed = a.seed;
  o.communicator = comm;
  o.check_ranks = a.check_ranks;
  o.epochs = a.epochs;
  // Defaults measured on Fashion-MNIST: Adam at 1e-3 for the MLP (0.844 after one epoch), 2e-3
  // for the CNN (0.894 after two; 1e-3 reached 0.874).
  o.optimizer = optimizer_of(a, cmd, o.model.kind == ModelKind::cnn ? 2e-3 : 1e-3);
  o.device = a.device;
  if (a.check_numerics) o.check_numerics = true;
  o.precision = dtype_from_name(a.precision);
  o.save = a.save;
  o.resume = a.resume;
  o.shuffle_seed = a.seed;

  const ImageLayout layout = o.model.kind == ModelKind::mlp ? ImageLayout::flat : ImageLayout::nchw;
  // --limit applies while reading: nothing past the first N samples is read or decompressed.
  std::optional<int64_t> limit;
  if (given(cmd, "--limit")) limit = a.limit;
  auto train = std::make_shared<Dataset>(load_fashion_mnist(Split::train, layout, a.data, limit));
  auto test = std::make_shared<Dataset>(load_fashion_mnist(Split::test, layout, a.data, limit));
  check_run(a, cmd, (train->size() + a.batch - 1) / a.batch);  // short batches kept
  const bool terminal = isatty(fileno(stderr)) != 0;
  if (lead) {
    o.on_progress = [terminal](const TrainOptions::Progress& p) {
      print_progress(p, terminal, false);
    };
    std::fprintf(
        stderr, "training %s on Fashion-MNIST (%lld train, %lld test), %s lr %g, batch %lld%s\n",
        a.model.c_str(), static_cast<long long>(train->size()),
        static_cast<long long>(test->size()), a.optimizer.c_str(), o.optimizer.lr,
        static_cast<long long>(a.batch),
        comm ? (" over " + std::to_string(comm->size()) + " ranks (" + comm->engine() + ")").c_str()
             : "");
  }
  TrainResult r = train_classifier(train, test, o);
  if (!lead) return;
  if (a.json) {
    nlohmann::json j = {{"model", a.model},
                        {"test_accuracy", r.test_accuracy},
                        {"test_loss", r.test_loss},
                        {"final_loss", r.final_loss},
                        {"train_accuracy", r.train_accuracy},
                        {"steps", r.steps},
                        {"seconds", r.seconds},
                        {"samples_per_second", r.samples_per_second},
                        {"device", r.device},
                        {"ranks", comm ? comm->size() : 1}};
    std::cout << j.dump() << std::endl;
  } else {
    std::printf(
        "device %s: test accuracy %.4f, final loss %.4f, %lld steps in %.1f s (%.0f samples/s)\n",
        r.device.c_str(), r.test_accuracy, r.final_loss, static_cast<long long>(r.steps), r.seconds,
        r.samples_per_second);
  }
}

}  // namespace

void add_train_command(CLI::App& app) {
  auto a = std::make_shared<TrainArgs>();
  auto* cmd = app.add_subcommand(
      "train", "train a built-in classifier, or a DDPM U-Net (--model unet), on Fashion-MNIST");
  cmd->add_option("--model", a->model,
                  "mlp, cnn, resnet18, resnet34, resnet50, or unet (DDPM noise prediction, then "
                  "sampling into a PNG)")
      ->capture_default_str();
  cmd->add_option("--epochs", a->epochs, "passes over the training set")->capture_default_str();
  cmd->add_option("--batch", a->batch, "batch size")->capture_default_str();
  cmd->add_option("--optimizer", a->optimizer, "sgd, adam or adamw")->capture_default_str();
  cmd->add_option("--lr", a->lr,
                  "learning rate (default: sgd 0.05; adam/adamw 0.001 for mlp, 0.002 for cnn)");
  cmd->add_option("--momentum", a->momentum, "SGD momentum")->capture_default_str();
  cmd->add_option("--weight-decay", a->weight_decay, "weight decay (default: 0, adamw 0.01)");
  cmd->add_option("--schedule", a->schedule, "constant, step or cosine")->capture_default_str();
  cmd->add_option("--warmup", a->warmup, "linear warm-up steps")->capture_default_str();
  cmd->add_option("--accumulate", a->accumulate, "micro-batches per update (gradient accumulation)")
      ->capture_default_str();
  cmd->add_option("--clip-grad-norm", a->clip, "clip gradients to this global L2 norm (0: off)");
  cmd->add_option("--device", a->device,
                  "device index or name substring (default: $MN_DEVICE or the best)");
  cmd->add_option("--save", a->save, "checkpoint file (safetensors), written after every epoch");
  cmd->add_option("--resume", a->resume, "continue from a checkpoint");
  cmd->add_option("--data", a->data,
                  "Fashion-MNIST folder (default: $MN_FASHION_MNIST_DIR or Debian's)");
  cmd->add_option("--limit", a->limit, "use only the first N samples of each split");
  cmd->add_option("--seed", a->seed, "initialization and shuffling seed")->capture_default_str();
  cmd->add_flag("--json", a->json, "print one JSON object as the last line");
  cmd->add_option("--precision", a->precision,
                  "products in f32, or from bf16 or f16 operands with f32 accumulation and master "
                  "weights (mixed precision)")
      ->capture_default_str();
  cmd->add_flag("--check-numerics", a->check_numerics,
                "after every step, name the first graph node that produced a NaN or Inf "
                "(slow; also $MN_CHECK_NUMERICS=1)");
  cmd->add_option("--distributed", a->distributed,
                  "data-parallel engine: auto (MPI under mpirun, NCCL when started by environment: WORLD_SIZE, RANK, MASTER_ADDR, MASTER_PORT), mpi, nccl or none; "
                  "--batch is then all ranks' batch together")
      ->capture_default_str();
  cmd->add_flag("--check-ranks", a->check_ranks,
                "data-parallel: after every update, check by checksum that every rank holds "
                "rank 0's parameters and optimizer states");
  cmd->add_option("--sampler", a->sampler, "unet: ddim or ddpm")->capture_default_str();
  cmd->add_option("--sampling-steps", a->sampling_steps, "unet: denoising steps of the sampler")
      ->capture_default_str();
  cmd->add_option("--samples", a->samples, "unet: images sampled after training (0: none)")
      ->capture_default_str();
  cmd->add_option("--sample-png", a->sample_png, "unet: the samples as a PNG grid")
      ->capture_default_str();
  cmd->callback([a, cmd] { run_train(*a, *cmd); });
}

}  // namespace mn::cli
