// DDPM's training loss and the DDPM / DDIM samplers as diffusers' schedulers compute them
// (schedulers/scheduling_ddpm.py, scheduling_ddim.py): the schedule and each step's coefficients
// on the host in float64, the U-Net and the update on the GPU.
#include <cmath>
#include <string>
#include <vector>

#include <meganeura/diffusion.h>
#include <meganeura/error.h>
#include <meganeura/ops.h>
#include <meganeura/session.h>

namespace mn::diffusion {

namespace {

NoiseSchedule from_betas(std::vector<double> betas) {
  NoiseSchedule s;
  double product = 1.0;
  for (double b : betas) {
    if (!(b > 0.0 && b < 1.0)) {
      throw Error("NoiseSchedule: beta " + std::to_string(b) + " is outside (0, 1)");
    }
    product *= 1.0 - b;
    s.alphas_cumprod.push_back(product);
  }
  s.betas = std::move(betas);
  return s;
}

void check_steps(int64_t steps) {
  if (steps < 2) {
    throw Error("NoiseSchedule: " + std::to_string(steps) + " steps, expected at least 2");
  }
}

// ᾱ at timestep t, or 1 before the first (diffusers' `one` and set_alpha_to_one).
double alpha_at(const NoiseSchedule& s, int64_t t) {
  return t >= 0 ? s.alphas_cumprod[static_cast<size_t>(t)] : 1.0;
}

}  // namespace

NoiseSchedule NoiseSchedule::linear(int64_t steps, double beta_start, double beta_end) {
  check_steps(steps);
  std::vector<double> betas(static_cast<size_t>(steps));
  for (int64_t i = 0; i < steps; ++i) {
    betas[static_cast<size_t>(i)] =
        beta_start + (beta_end - beta_start) * static_cast<double>(i) / static_cast<double>(steps - 1);
  }
  return from_betas(std::move(betas));
}

NoiseSchedule NoiseSchedule::scaled_linear(int64_t steps, double beta_start, double beta_end) {
  check_steps(steps);
  if (!(beta_start > 0) || !(beta_end > 0)) {
    throw Error("NoiseSchedule: scaled_linear needs positive betas");
  }
  std::vector<double> betas(static_cast<size_t>(steps));
  const double a = std::sqrt(beta_start), b = std::sqrt(beta_end);
  for (int64_t i = 0; i < steps; ++i) {
    const double r = a + (b - a) * static_cast<double>(i) / static_cast<double>(steps - 1);
    betas[static_cast<size_t>(i)] = r * r;
  }
  return from_betas(std::move(betas));
}

Tensor ddpm_loss(UNet2DModel& unet, const NoiseSchedule& schedule, Tensor x0, Tensor noise,
                 Tensor timesteps) {
  if (!x0.valid() || !noise.valid() || !timesteps.valid()) {
    throw Error("ddpm_loss: an input is an invalid Tensor");
  }
  if (noise.type() != x0.type()) {
    throw ShapeError("ddpm_loss: the noise " + noise.type().str() + " differs from the images " +
                     x0.type().str());
  }
  if (x0.rank() != 4 || timesteps.dtype() != DType::i32 || timesteps.shape() != Shape{x0.shape()[0]}) {
    throw ShapeError("ddpm_loss: expected images [B, C, H, W] and i32 timesteps [B], got " +
                     x0.type().str() + " and " + timesteps.type().str());
  }
  Graph& g = x0.graph();
  const int64_t b = x0.shape()[0];
  std::vector<double> signal, noise_scale;
  for (double a : schedule.alphas_cumprod) {
    signal.push_back(std::sqrt(a));
    noise_scale.push_back(std::sqrt(1.0 - a));
  }
  const auto steps = schedule.steps();
  auto pick = [&](std::vector<double> table) {
    Tensor t = take(g.constant(Array({steps}, x0.dtype(), std::move(table))), timesteps, 0);
    return reshape(t, {b, 1, 1, 1});
  };
  Tensor x_t = pick(std::move(signal)) * x0 + pick(std::move(noise_scale)) * noise;
  return mse_loss(unet.forward(x_t, cast(timesteps, x0.dtype())), noise);
}

std::vector<SamplerStep> sampler_steps(const NoiseSchedule& schedule,
                                       const SamplerOptions& options) {
  const int64_t total = schedule.steps();
  if (options.steps < 1 || options.steps > total) {
    throw Error("sampler: " + std::to_string(options.steps) + " inference steps, expected 1 to " +
                std::to_string(total) + " (the schedule's length)");
  }
  if (!(options.eta >= 0.0)) throw Error("sampler: eta must be >= 0");
  const int64_t ratio = total / options.steps;  // "leading" spacing
  std::vector<SamplerStep> steps;
  for (int64_t i = options.steps - 1; i >= 0; --i) {
    const int64_t t = i * ratio, prev = t - ratio;
    const double a_t = alpha_at(schedule, t), a_prev = alpha_at(schedule, prev);
    const double beta_t = 1.0 - a_t, beta_prev = 1.0 - a_prev;
    const double current_alpha = a_t / a_prev, current_beta = 1.0 - current_alpha;
    SamplerStep s;
    s.timestep = t;
    s.sqrt_one_minus_alpha = std::sqrt(beta_t);
    s.inv_sqrt_alpha = 1.0 / std::sqrt(a_t);
    if (options.kind == SamplerKind::ddpm) {
      // The posterior mean of x_{t-1} given x̂0 and x_t, and its "fixed_small" variance.
      s.c0 = std::sqrt(a_prev) * current_beta / beta_t;
      s.c1 = std::sqrt(current_alpha) * beta_prev / beta_t;
      s.sigma = t > 0 ? std::sqrt(std::max(beta_prev / beta_t * current_beta, 1e-20)) : 0.0;
    } else {
      const double variance = beta_prev / beta_t * (1.0 - a_t / a_prev);
      s.sigma = options.eta * std::sqrt(variance);
      s.c0 = std::sqrt(a_prev);
      s.c2 = std::sqrt(std::max(1.0 - a_prev - s.sigma * s.sigma, 0.0));
    }
    steps.push_back(s);
  }
  return steps;
}

void add_sampling_step(Graph& g, UNet2DModel& unet, const Shape& shape, bool clip_sample) {
  if (shape.size() != 4 || shape[1] != unet.config().in_channels ||
      unet.config().in_channels != unet.config().out_channels) {
    throw ShapeError("add_sampling_step: the sample must be [B, " +
                     std::to_string(unet.config().in_channels) + ", H, W] of a U-Net whose " +
                     "output has its channels, got " + shape_str(shape));
  }
  Tensor x = g.state("sample", shape);
  Tensor t = g.input("timestep", {});
  Tensor k = g.input("step_coefficients", {6});
  Tensor z = g.input("step_noise", shape);
  auto coefficient = [&](int64_t i) { return slice(k, 0, i, i + 1); };
  Tensor eps = unet.forward(x, broadcast_to(t, {shape[0]}));
  Tensor x0 = (x - coefficient(0) * eps) * coefficient(1);
  if (clip_sample) x0 = clamp(x0, -1.0, 1.0);
  g.assign(x, coefficient(2) * x0 + coefficient(3) * x + coefficient(4) * eps +
                  coefficient(5) * z);
}

Array run_sampler(Session& session, const std::string& program,
                  const std::vector<SamplerStep>& steps, const Array& initial,
                  const std::function<Array(size_t)>& step_noise) {
  session.set(program, "sample", initial);
  session.set(program, "step_noise", Array(initial.shape, initial.dtype));
  for (size_t i = 0; i < steps.size(); ++i) {
    const SamplerStep& s = steps[i];
    session.set(program, "timestep", Array::scalar(static_cast<double>(s.timestep)));
    session.set(program, "step_coefficients",
                Array({6}, DType::f32,
                      {s.sqrt_one_minus_alpha, s.inv_sqrt_alpha, s.c0, s.c1, s.c2, s.sigma}));
    if (s.sigma != 0.0) {
      Array z = step_noise(i);
      if (z.shape != initial.shape) {
        throw ShapeError("run_sampler: step " + std::to_string(i) + "'s noise is " +
                         shape_str(z.shape) + ", expected " + shape_str(initial.shape));
      }
      session.set(program, "step_noise", z);
    }
    session.step(program);
  }
  return session.get(program, "sample");
}

}  // namespace mn::diffusion
