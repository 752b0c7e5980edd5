#pragma once
// A module's parameter gradients against a fixture's, as the model tests compare them.
#include <gtest/gtest.h>

#include <meganeura/data.h>
#include <meganeura/nn.h>
#include <meganeura/session.h>

#include "support/random_fill.h"

namespace mn::testing {

// Each parameter's gradient that the session outputs ("grad/<graph name>": add_training_step
// with output_gradients) within `tolerance` (scaled error) of the fixture's "grad.<key>".
// Returns how many were compared.
inline int expect_gradients_match(const Session& s, const nn::Module& m,
                                  const SafetensorsReader& fixture, double tolerance) {
  int compared = 0;
  for (const nn::StateEntry& e : m.named_parameters()) {
    const Array got = s.get("grad/" + e.graph_name), want = fixture.array("grad." + e.key);
    EXPECT_EQ(got.shape, want.shape) << e.key;
    if (got.shape != want.shape) continue;
    EXPECT_LT(scaled_error(got, want), tolerance) << "gradient of " << e.key;
    ++compared;
  }
  return compared;
}

}  // namespace mn::testing
