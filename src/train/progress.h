#pragma once
// The Trainer's progress: a bar redrawn in place on a terminal, or JSON lines.
#include <chrono>
#include <cstdint>
#include <ostream>

#include <meganeura/trainer.h>

namespace mn::train {

class ProgressPrinter {
 public:
  // `stream` null: standard error, a bar when it is a terminal (for Progress::automatic).
  ProgressPrinter(TrainerOptions::Progress mode, std::ostream* stream, int64_t log_every);
  void on_event(const TrainEvent& e);
  // Ends a bar's line (after the run, or before an error is shown).
  void finish();

 private:
  void bar(const TrainEvent& e);
  void json(const TrainEvent& e);

  TrainerOptions::Progress mode_;
  std::ostream* out_;
  int64_t log_every_;
  bool line_open_ = false;
  std::chrono::steady_clock::time_point last_draw_{};
};

}  // namespace mn::train
