// Attention forward and backward for training: scaled_dot_product_attention (causal, grouped
// key/value heads) and the gradients of q, k and v from a given dout, as one session step,
// timed with GPU timestamps (median of --reps steps after warm-up). With the gradient kernels
// the step runs the forward kernel, attention_lse, the delta = rowsum(dout * out) reduction and
// attention_grad_q/k/v.
// MN_ATTENTION_BACKWARD=kernels times the gradient kernels, =graph the graph ops (matmuls and a
// softmax over the Lq x Lk scores); unset, the vjp chooses (README). One JSON line per case with
// "gpu_ms_median", "tflops" (forward + backward at 3.5 times the forward's 4·B·Hq·L²·D, halved
// when causal: the convention of FlashAttention's benchmarks), the arena and the kernels. The
// copies of the results to the host are not in "gpu_ms_median" ("transfer_ms" apart).
// PyTorch counterpart: bench/attention_train.py.
//
// --arena BxL (e.g. 8x512, repeatable) instead plans a training step (AdamW) of a causal LM of
// SmolLM2-135M's shape (build_causal_lm: 30 layers, 9 heads over 3 key/value heads of 64) at
// batch B and sequence L, without running it, once with attention's backward in graph ops
// (MN_ATTENTION_BACKWARD=graph) and once with the gradient kernels (=kernels), and prints both
// arenas and what fills them at their peaks. It needs no GPU.
//
// Usage: bench_attention_train [--batch N] [--lengths 512,2048] [--dims 64,128] [--reps N]
//                              [--device D] [--small] [--arena BxL]...
//                              [--forward] [--dtype f32|f16|bf16] [--plan-device NAME]
// --small: batch 1, length 128 and 2 reps, for CPU devices.
// --plan-device default|h200: each case's launches as a session would plan them for that device
// (bench/plan_device.h), by kernel name and in dispatch order, instead of run.
// --forward: the forward alone (no gradients; "tflops" is the forward's). --dtype f32|f16|bf16:
// q, k, v, dout and the results in that dtype (f32 unless given; 16-bit operands take the
// tensor-core training kernels where the device has bf16 matrices). MN_COOP_ATTENTION=0 keeps
// attention off the tensor cores.
#include <cstdio>
#include <cstdlib>
#include <cstring>
#include <random>
#include <sstream>
#include <string>
#include <vector>

#include <nlohmann/json.hpp>

#include <meganeura/autodiff.h>
#include <meganeura/causal_lm.h>
#include <meganeura/graph.h>
#include <meganeura/ops.h>
#include <meganeura/optimizer.h>
#include <meganeura/session.h>

#include "bench_util.h"
#include "plan/step_plan.h"
#include "plan_device.h"
#include "plan_memory.h"

namespace {

struct Options {
  int64_t batch = 8, heads = 9, kv_heads = 3;
  std::vector<int64_t> lengths{512, 2048}, dims{64, 128};
  int reps = 20;
  std::string device;
  std::vector<std::pair<int64_t, int64_t>> arenas;  // (batch, sequence)
  bool forward = false;
  mn::DType dtype = mn::DType::f32;
  std::string plan_device;  // --plan-device: plan each case for it instead of running
};

std::vector<int64_t> parse_list(const char* s) {
  std::vector<int64_t> v;
  std::stringstream in(s);
  std::string item;
  while (std::getline(in, item, ',')) v.push_back(std::stoll(item));
  return v;
}

mn::Array random_array(const mn::Shape& shape, uint64_t seed) {
  return mn::bench::random_array(shape, seed, mn::bench::Draw::normal);
}

// The form the step's graph holds: the gradient kernels where it has attention_grad_q.
std::string backward_form(const mn::Graph& g) {
  for (const mn::Node& n : g.nodes()) {
    if (n.op_name() == "attention_grad_q") return "gradient kernels";
  }
  return "graph ops";
}

// The shapes of q (and dout) and of k and v.
std::pair<mn::Shape, mn::Shape> case_shapes(const Options& o, int64_t length, int64_t dim) {
  return {{o.batch, o.heads, length, dim}, {o.batch, o.kv_heads, length, dim}};
}

// The case's graph: the forward alone (--forward) or the forward and the gradients of q, k, v.
void build_case(mn::Graph& g, const Options& o, int64_t length, int64_t dim) {
  const auto [qs, kvs] = case_shapes(o, length, dim);
  mn::Tensor q = g.input("q", qs, o.dtype), k = g.input("k", kvs, o.dtype),
             v = g.input("v", kvs, o.dtype);
  mn::Tensor out = mn::scaled_dot_product_attention(q, k, v, {}, /*causal=*/true);
  g.output("out", out);
  if (!o.forward) {
    const std::vector<mn::Tensor> grads =
        mn::gradients(out, {q, k, v}, g.input("dout", qs, o.dtype));
    g.output("dq", grads[0]);
    g.output("dk", grads[1]);
    g.output("dv", grads[2]);
  }
}

// --plan-device: the case's launches as a session would plan them for that device, not run.
void plan_case(const Options& o, int64_t length, int64_t dim) {
  mn::Graph g;
  build_case(g, o, length, dim);
  const std::optional<mn::plan::PlanOptions> po = mn::bench::plan_device(o.plan_device);
  if (!po) throw mn::Error("--plan-device takes default or h200, got '" + o.plan_device + "'");
  const mn::plan::StepPlan plan = mn::plan::make_step_plan(g, *po);
  nlohmann::json j = mn::bench::plan_summary(plan);
  j["order"] = mn::bench::launch_order(plan);
  j.update({{"length", length}, {"head_dim", dim}, {"dtype", mn::dtype_name(o.dtype)}});
  std::printf("%s\n", j.dump().c_str());
  std::fflush(stdout);
}

// One JSON line: the case run and timed.
void run_case(const Options& o, int64_t length, int64_t dim) {
  mn::Graph g;
  build_case(g, o, length, dim);
  const auto [qs, kvs] = case_shapes(o, length, dim);

  mn::SessionOptions so;
  so.device = o.device;
  so.profile = true;
  auto s = mn::build_session(g, so);
  s->set("q", random_array(qs, 1));
  s->set("k", random_array(kvs, 2));
  s->set("v", random_array(kvs, 3));
  if (!o.forward) s->set("dout", random_array(qs, 4));
  const mn::bench::ProfiledSteps steps = mn::bench::profiled_steps(*s, o.reps);
  nlohmann::json kernels = nlohmann::json::array();
  for (const auto& kt : steps.kernels) {
    kernels.push_back({{"name", kt.name}, {"ms", kt.ms}});
    if (!kt.statistics.empty()) kernels.back()["statistics"] = kt.statistics;
  }
  const double median = steps.gpu_ms_median;
  const double forward_flops = 4.0 * static_cast<double>(o.batch * o.heads) *
                               static_cast<double>(length) * static_cast<double>(length) *
                               static_cast<double>(dim) * 0.5;
  const double flops = o.forward ? forward_flops : 3.5 * forward_flops;
  const mn::MemorySummary mem = s->memory();
  nlohmann::json j = {{"case", o.forward ? "attention_forward" : "attention_train"},
                      {"dtype", mn::dtype_name(o.dtype)},
                      {"causal", true},
                      {"batch", o.batch},
                      {"heads", o.heads},
                      {"kv_heads", o.kv_heads},
                      {"length", length},
                      {"head_dim", dim},
                      {"device", s->device_name()},
                      {"gpu_ms_median", median},
                      {"gpu_ms_min", steps.gpu_ms_min},
                      {"gpu_ms_max", steps.gpu_ms_max},
                      {"transfer_ms", steps.transfer_ms},
                      {"tflops", median > 0 ? flops / (median * 1e-3) / 1e12 : 0.0},
                      {"arena_mib", static_cast<double>(mem.arena_bytes) / (1 << 20)},
                      {"dispatches", mem.dispatches},
                      {"kernels", kernels}};
  if (!o.forward) j["attention_backward"] = backward_form(g);
  std::printf("%s\n", j.dump().c_str());
  std::fflush(stdout);
}

void arena_case(int64_t batch, int64_t sequence) {
  for (bool graph_backward : {true, false}) {
    if (graph_backward) {
      setenv("MN_ATTENTION_BACKWARD", "graph", 1);
    } else {
      setenv("MN_ATTENTION_BACKWARD", "kernels", 1);
    }
    mn::CausalLmOptions options;
    options.batch = batch;
    options.sequence = sequence;
    options.with_loss = true;
    mn::CausalLm m = mn::build_causal_lm(mn::llama_config(mn::smollm2_135m()), options);
    mn::add_training_step(m.loss, mn::Optimizer::adamw());
    const mn::plan::StepPlan plan = mn::plan::make_step_plan(*m.graph, mn::plan::PlanOptions{});
    const nlohmann::json j = {
        {"case", "arena"},
        {"model", "smollm2-135m causal_lm, adamw"},
        {"attention_backward", graph_backward ? "graph ops" : "gradient kernels"},
        {"batch", batch},
        {"sequence", sequence},
        {"arena_mib", static_cast<double>(plan.arena_bytes) / (1 << 20)},
        {"dispatches", plan.launches.size()},
        {"memory", mn::bench::peak_fields(plan)}};
    std::printf("%s\n", j.dump().c_str());
    std::fflush(stdout);
  }
  unsetenv("MN_ATTENTION_BACKWARD");
}

}  // namespace

int run(int argc, char** argv) {
  Options o;
  for (int i = 1; i < argc; ++i) {
    auto next = [&](const char* flag) -> const char* {
      if (i + 1 >= argc) {
        std::fprintf(stderr, "bench_attention_train: %s needs a value\n", flag);
        std::exit(2);
      }
      return argv[++i];
    };
    if (!std::strcmp(argv[i], "--batch")) {
      o.batch = std::atoll(next("--batch"));
    } else if (!std::strcmp(argv[i], "--lengths")) {
      o.lengths = parse_list(next("--lengths"));
    } else if (!std::strcmp(argv[i], "--dims")) {
      o.dims = parse_list(next("--dims"));
    } else if (!std::strcmp(argv[i], "--reps")) {
      o.reps = std::atoi(next("--reps"));
    } else if (!std::strcmp(argv[i], "--device")) {
      o.device = next("--device");
    } else if (!std::strcmp(argv[i], "--arena")) {
      const std::string v = next("--arena");
      const size_t x = v.find('x');
      if (x == std::string::npos) {
        std::fprintf(stderr, "bench_attention_train: --arena takes BxL, got %s\n", v.c_str());
        return 2;
      }
      o.arenas.emplace_back(std::stoll(v.substr(0, x)), std::stoll(v.substr(x + 1)));
    } else if (!std::strcmp(argv[i], "--forward")) {
      o.forward = true;
    } else if (!std::strcmp(argv[i], "--dtype")) {
      o.dtype = mn::dtype_from_name(next("--dtype"));
    } else if (!std::strcmp(argv[i], "--plan-device")) {
      o.plan_device = next("--plan-device");
    } else if (!std::strcmp(argv[i], "--small")) {
      o.batch = 1;
      o.lengths = {128};
      o.reps = 2;
    } else {
      std::fprintf(stderr, "bench_attention_train: unknown option %s\n", argv[i]);
      return 2;
    }
  }
  if (!o.arenas.empty()) {
    for (const auto& [batch, sequence] : o.arenas) arena_case(batch, sequence);
    return 0;
  }
  for (int64_t length : o.lengths) {
    for (int64_t dim : o.dims) {
      if (o.plan_device.empty()) {
        run_case(o, length, dim);
      } else {
        plan_case(o, length, dim);
      }
    }
  }
  return 0;
}

int main(int argc, char** argv) {
  try {
    return run(argc, argv);
  } catch (const std::exception& e) {
    std::fprintf(stderr, "bench_attention_train: %s\n", e.what());
    return 1;
  }
}
