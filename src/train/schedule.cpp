#include <cmath>
#include <numbers>

#include <meganeura/optimizer.h>

namespace mn {

double LrSchedule::lr_at(double base_lr, int64_t t, int64_t total) const {
  if (warmup > 0 && t < warmup)
    return base_lr * static_cast<double>(t + 1) / static_cast<double>(warmup);
  const int64_t after = t - warmup;
  switch (kind) {
    case Kind::constant:
      return base_lr;
    case Kind::step:
      return base_lr *
             std::pow(gamma, static_cast<double>(after / std::max<int64_t>(1, step_size)));
    case Kind::cosine: {
      const double span = static_cast<double>(std::max<int64_t>(1, total - warmup));
      const double progress = std::min(1.0, static_cast<double>(after) / span);
      return min_lr + 0.5 * (base_lr - min_lr) * (1.0 + std::cos(std::numbers::pi * progress));
    }
  }
  return base_lr;
}

LrSchedule::Kind schedule_from_name(const std::string& name) {
  if (name == "constant") return LrSchedule::Kind::constant;
  if (name == "step") return LrSchedule::Kind::step;
  if (name == "cosine") return LrSchedule::Kind::cosine;
  throw Error("unknown learning-rate schedule '" + name + "' (expected constant, step or cosine)");
}

}  // namespace mn
