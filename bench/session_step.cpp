// The host's cost of one small step from C++: set an input, step (submit and wait), read the
// output, for a graph whose kernels take next to nothing (one 16 x 16 Linear). Its counterpart
// bench/session_step.py runs the same loop through the Python package and reports the
// difference, what calling from Python adds per step.
#include <chrono>
#include <cstdio>
#include <iostream>
#include <vector>

#include <CLI/CLI.hpp>

#include <meganeura/nn.h>
#include <meganeura/session.h>

#include "bench_util.h"

int main(int argc, char** argv) {
  CLI::App app{"bench_session_step"};
  int steps = 2000, rounds = 5;
  std::string device;
  app.add_option("--steps", steps, "steps per round")->check(CLI::PositiveNumber);
  app.add_option("--rounds", rounds, "timed rounds (the median is reported)")
      ->check(CLI::PositiveNumber);
  app.add_option("--device", device);
  CLI11_PARSE(app, argc, argv);

  auto linear = std::make_shared<mn::nn::Linear>(16, 16);
  mn::Graph g;
  g.output("y", linear->forward(g.input("x", {1, 16})));
  auto session = mn::build_session(g, {.device = device});
  std::vector<float> x(16, 0.5f);
  auto loop = [&](int n) {
    float sink = 0;
    for (int i = 0; i < n; ++i) {
      session->set("x", x);
      session->step();
      sink += session->get_f32("y")[0];
    }
    return sink;
  };
  loop(50);  // warm-up: first submissions, page faults
  std::vector<double> us;
  for (int r = 0; r < rounds; ++r) {
    const auto start = std::chrono::steady_clock::now();
    loop(steps);
    const std::chrono::duration<double, std::micro> took = std::chrono::steady_clock::now() - start;
    us.push_back(took.count() / steps);
  }
  nlohmann::json j = {{"bench", "session_step"},
                      {"caller", "c++"},
                      {"device", session->device_name()},
                      {"steps", steps},
                      {"rounds", rounds},
                      {"us_per_step_median", mn::bench::median(us)},
                      {"us_per_step_min", *std::min_element(us.begin(), us.end())}};
  std::cout << j.dump() << std::endl;
}
