// train_ddpm: DDPM's noise-prediction training of a U-Net and sampling from it, in one session
// of two programs ("train": loss, backward and update in one submission; "sample": one denoising
// step) that share the U-Net's weights by name.
#include <chrono>
#include <random>
#include <string>

#include <meganeura/diffusion.h>
#include <meganeura/error.h>
#include <meganeura/ops.h>

namespace mn::diffusion {

namespace {

void check_options(const Dataset& images, const DdpmTrainOptions& o) {
  auto fail = [](const std::string& what) { throw Error("train_ddpm: " + what); };
  if (o.batch < 1) fail("DdpmTrainOptions::batch is " + std::to_string(o.batch) + ", expected >= 1");
  if (o.epochs < 1) fail("DdpmTrainOptions::epochs is " + std::to_string(o.epochs) + ", expected >= 1");
  if (o.samples < 0) fail("DdpmTrainOptions::samples is negative");
  o.optimizer.validate("train_ddpm");
  if (o.optimizer.lr == 0) fail("the optimizer's lr is 0 (nothing would train)");
  if (images.sample_shape.size() != 3 || images.sample_shape[0] != o.unet.in_channels) {
    fail("the images are " + shape_str(images.sample_shape) + " each, expected [" +
         std::to_string(o.unet.in_channels) + ", H, W] (the nchw layout)");
  }
  if (images.size() < o.batch) {
    fail(std::to_string(images.size()) + " images are fewer than a batch of " +
         std::to_string(o.batch));
  }
}

double seconds_since(std::chrono::steady_clock::time_point t0) {
  return std::chrono::duration<double>(std::chrono::steady_clock::now() - t0).count();
}

Array normal_array(const Shape& shape, std::mt19937_64& rng) {
  std::normal_distribution<double> normal;
  Array a(shape, DType::f32);
  for (double& v : a.data) v = normal(rng);
  return a;
}

}  // namespace

DdpmTrainResult train_ddpm(const Dataset& images, const DdpmTrainOptions& o) {
  check_options(images, o);
  DdpmTrainResult result;
  result.unet = std::make_shared<UNet2DModel>(o.unet);
  UNet2DModel& unet = *result.unet;
  unet.seed(o.seed);
  Shape batch_shape{o.batch};
  batch_shape.insert(batch_shape.end(), images.sample_shape.begin(), images.sample_shape.end());

  Graph train;
  Tensor loss = ddpm_loss(unet, o.schedule, train.input("x0", batch_shape),
                          train.input("noise", batch_shape), train.input("t", {o.batch}, DType::i32));
  add_training_step(loss, o.optimizer);
  Graph sample;
  Shape sample_shape = batch_shape;
  sample_shape[0] = std::max<int64_t>(o.samples, 1);
  add_sampling_step(sample, unet, sample_shape, o.sampler.clip_sample);
  std::shared_ptr<Session> session =
      build_session({{"train", &train, std::vector<std::string>{"loss"}}, {"sample", &sample, {}}},
                    o.session);
  result.session = session;
  result.device = session->device_name();

  DataLoader loader(std::make_shared<Dataset>(images),
                    {.batch_size = o.batch, .shuffle = true, .seed = o.seed, .drop_last = true});
  const int64_t per_epoch = loader.batches_per_epoch();
  OptimizerStepper stepper(o.optimizer, per_epoch * o.epochs);
  std::mt19937_64 rng(o.seed ^ 0x9e3779b97f4a7c15ull);
  std::uniform_int_distribution<int32_t> timestep(0, static_cast<int32_t>(o.schedule.steps() - 1));
  const auto t0 = std::chrono::steady_clock::now();
  for (int64_t epoch = 0; epoch < o.epochs; ++epoch) {
    double sum = 0;
    for (int64_t step = 1; step <= per_epoch; ++step) {
      Batch b = loader.next();
      Array x0 = b.inputs_array();
      for (double& v : x0.data) v = 2.0 * v - 1.0;
      Array t({o.batch}, DType::i32);
      for (double& v : t.data) v = timestep(rng);
      session->set("train", "x0", x0);
      session->set("train", "noise", normal_array(batch_shape, rng));
      session->set("train", "t", t);
      stepper.set_inputs(*session);
      session->step("train");
      stepper.advance();
      const double l = session->get("train", "loss").data.at(0);
      if (!std::isfinite(l)) {
        throw Error("train_ddpm: the loss is " + std::to_string(l) + " at epoch " +
                    std::to_string(epoch + 1) + " step " + std::to_string(step) +
                    " (try a lower learning rate)");
      }
      sum += l;
      ++result.steps;
      result.final_loss = sum / static_cast<double>(step);
      result.seconds = seconds_since(t0);
      result.samples_per_second =
          static_cast<double>(result.steps * o.batch) / std::max(result.seconds, 1e-9);
      if (o.on_progress) {
        o.on_progress({epoch, o.epochs, step, per_epoch, result.final_loss, result.seconds,
                       result.samples_per_second});
      }
    }
  }
  if (o.samples > 0) {
    const auto s0 = std::chrono::steady_clock::now();
    result.samples = run_sampler(*session, "sample", sampler_steps(o.schedule, o.sampler),
                                 normal_array(sample_shape, rng),
                                 [&](size_t) { return normal_array(sample_shape, rng); });
    for (double& v : result.samples.data) v = std::clamp(v, -1.0, 1.0);
    result.sampling_seconds = seconds_since(s0);
  }
  return result;
}

}  // namespace mn::diffusion
