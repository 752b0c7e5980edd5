#include "train/progress.h"

#include <unistd.h>

#include <cmath>
#include <iostream>
#include <string>

#include <fmt/format.h>
#include <nlohmann/json.hpp>

namespace mn::train {

namespace {

std::string duration(double seconds) {
  if (!std::isfinite(seconds) || seconds < 0) return "?";
  const auto s = static_cast<int64_t>(std::llround(seconds));
  return s >= 3600 ? fmt::format("{}:{:02}:{:02}", s / 3600, s / 60 % 60, s % 60)
                   : fmt::format("{}:{:02}", s / 60, s % 60);
}

std::string metric_text(const std::map<std::string, double>& metrics, const char* prefix) {
  std::string out;
  for (const auto& [name, value] : metrics) out += fmt::format(" {}{} {:.4f}", prefix, name, value);
  return out;
}

// JSON has no NaN or infinity: such values are written as null.
nlohmann::json number(double v) { return std::isfinite(v) ? nlohmann::json(v) : nlohmann::json(); }

nlohmann::json metrics_json(const std::map<std::string, double>& metrics) {
  nlohmann::json j = nlohmann::json::object();
  for (const auto& [name, value] : metrics) j[name] = number(value);
  return j;
}

}  // namespace

ProgressPrinter::ProgressPrinter(TrainerOptions::Progress mode, std::ostream* stream,
                                 int64_t log_every)
    : mode_(mode), out_(stream ? stream : &std::cerr), log_every_(log_every) {
  if (mode_ == TrainerOptions::Progress::automatic) {
    const bool terminal = !stream && isatty(STDERR_FILENO);
    mode_ = terminal ? TrainerOptions::Progress::bar : TrainerOptions::Progress::json;
  }
}

void ProgressPrinter::on_event(const TrainEvent& e) {
  if (mode_ == TrainerOptions::Progress::bar) bar(e);
  if (mode_ == TrainerOptions::Progress::json) json(e);
}

void ProgressPrinter::finish() {
  if (line_open_) *out_ << "\n" << std::flush;
  line_open_ = false;
}

void ProgressPrinter::bar(const TrainEvent& e) {
  const auto now = std::chrono::steady_clock::now();
  const bool last = e.kind != TrainEvent::Kind::step || e.step == e.steps_per_epoch;
  if (!last && now - last_draw_ < std::chrono::milliseconds(100)) return;
  last_draw_ = now;
  if (e.kind == TrainEvent::Kind::evaluation) {
    finish();
    *out_ << fmt::format("evaluation at step {}:{}\n", e.global_step,
                         metric_text(e.eval_metrics, "eval_"))
          << std::flush;
    return;
  }
  constexpr int kWidth = 24;
  const int filled = e.steps_per_epoch > 0
                         ? static_cast<int>(kWidth * e.step / e.steps_per_epoch)
                         : 0;
  std::string bar(static_cast<size_t>(filled), '=');
  if (filled < kWidth) bar += '>' + std::string(static_cast<size_t>(kWidth - filled - 1), ' ');
  *out_ << fmt::format("\repoch {}/{} [{}] {}/{}{} {:.0f} samples/s eta {}\x1b[K", e.epoch + 1,
                       e.epochs, bar, e.step, e.steps_per_epoch, metric_text(e.metrics, ""),
                       e.samples_per_second, duration(e.eta_seconds));
  line_open_ = true;
  if (e.kind == TrainEvent::Kind::epoch_end) finish();
  *out_ << std::flush;
}

void ProgressPrinter::json(const TrainEvent& e) {
  if (e.kind == TrainEvent::Kind::step && (log_every_ <= 0 || e.global_step % log_every_ != 0)) {
    return;
  }
  nlohmann::json j = {{"event", train_event_name(e.kind)},
                      {"epoch", e.epoch + 1},
                      {"epochs", e.epochs},
                      {"step", e.step},
                      {"steps_per_epoch", e.steps_per_epoch},
                      {"global_step", e.global_step},
                      {"lr", number(e.lr)},
                      {"loss", number(e.loss)},
                      {"metrics", metrics_json(e.metrics)},
                      {"seconds", number(e.seconds)},
                      {"samples_per_second", number(e.samples_per_second)},
                      {"eta_seconds", number(e.eta_seconds)}};
  if (!e.eval_metrics.empty()) j["eval_metrics"] = metrics_json(e.eval_metrics);
  *out_ << j.dump() << "\n" << std::flush;
}

}  // namespace mn::train
