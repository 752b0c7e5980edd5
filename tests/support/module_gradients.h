#pragma once
// A module's parameter gradients against a fixture's, as the model tests compare them.
#include <gtest/gtest.h>

#include <algorithm>
#include <cmath>
#include <string>
#include <vector>

#include <meganeura/data.h>
#include <meganeura/nn.h>
#include <meganeura/session.h>

#include "support/random_fill.h"

namespace mn::testing {

// Each parameter's gradient that the session outputs ("grad/<graph name>": add_training_step
// with output_gradients) within `tolerance` (scaled error) of the fixture's "grad.<key>".
// Keys ending in one of `zero_suffixes` have a gradient that is zero in exact arithmetic (a
// key bias shifts every score of a softmax row alike): theirs must stay below `tolerance` in
// absolute value, as rounding is all the fixture and the session hold. Returns how many were
// compared.
inline int expect_gradients_match(const Session& s, const nn::Module& m,
                                  const SafetensorsReader& fixture, double tolerance,
                                  const std::vector<std::string>& zero_suffixes = {}) {
  int compared = 0;
  for (const nn::StateEntry& e : m.named_parameters()) {
    const Array got = s.get("grad/" + e.graph_name), want = fixture.array("grad." + e.key);
    EXPECT_EQ(got.shape, want.shape) << e.key;
    if (got.shape != want.shape) continue;
    const bool zero = std::any_of(zero_suffixes.begin(), zero_suffixes.end(), [&](const auto& z) {
      return e.key.ends_with(z);
    });
    if (zero) {
      for (double v : got.data) EXPECT_LT(std::abs(v), tolerance) << "gradient of " << e.key;
    } else {
      EXPECT_LT(scaled_error(got, want), tolerance) << "gradient of " << e.key;
    }
    ++compared;
  }
  return compared;
}

}  // namespace mn::testing
