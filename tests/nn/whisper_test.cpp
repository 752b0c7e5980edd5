// Whisper's encoder against transformers' WhisperEncoder (tests/fixtures/whisper/
// make_whisper_fixture.py: d_model 32, 2 layers, 4 heads, 50 positions, on real log-mel
// features): the state_dict loads strictly by transformers' keys, the output and every
// parameter's gradient match, the sinusoidal positions are transformers' own, and bad sizes and
// inputs say what is wrong.
#include <gtest/gtest.h>

#include <cmath>

#include <meganeura/error.h>
#include <meganeura/graph.h>
#include <meganeura/nn.h>
#include <meganeura/optimizer.h>
#include <meganeura/session.h>
#include <meganeura/speech.h>
#include <meganeura/data.h>
#include <meganeura/tensor_data.h>

#include "support/module_gradients.h"
#include "support/random_fill.h"

namespace mn {
namespace {

std::filesystem::path fixture(const std::string& name) {
  return std::filesystem::path(MN_SOURCE_DIR) / "tests/fixtures/whisper" / name;
}

const speech::WhisperEncoderConfig kSmall{.num_mel_bins = 80, .d_model = 32, .layers = 2,
                                          .heads = 4, .ffn_dim = 64, .max_source_positions = 50};

TEST(WhisperEncoder, OutputAndGradientsMatchTransformers) {
  const SafetensorsReader io(fixture("encoder_io.safetensors"));
  auto enc = speech::whisper_encoder(kSmall);
  enc->eval();
  Graph g;
  Tensor y = enc->forward(g.input("x", {1, 80, 100}));
  g.output("y", y);
  add_training_step(sum(y * g.constant(io.array("loss_weight"))), Optimizer::sgd(), {}, true);
  auto s = build_session(g);
  nn::load_state_dict(*enc, *s, fixture("encoder.safetensors"));
  s->set("x", io.array("x"));
  s->set_scalar(StepInputs::lr, 0.0);
  s->set_scalar(StepInputs::step, 1.0);
  s->step();
  EXPECT_LT(testing::scaled_error(s->get("y"), io.array("y")), 1e-4);
  EXPECT_EQ(testing::expect_gradients_match(*s, *enc, io, 1e-3), 36);
}

TEST(WhisperEncoder, PositionsAreTransformersSinusoids) {
  const Array want = SafetensorsReader(fixture("encoder.safetensors")).array("embed_positions.weight");
  EXPECT_LT(testing::scaled_error(initialize(Init::sinusoids(), {50, 32}), want), 2e-6);  // f32 tables
}

TEST(WhisperEncoder, SizesAndBadInputs) {
  EXPECT_EQ(speech::whisper_encoder_config("base").d_model, 512);
  EXPECT_EQ(speech::whisper_encoder_config("tiny").layers, 4);
  try {
    speech::whisper_encoder_config("huge");
    ADD_FAILURE();
  } catch (const Error& e) {
    EXPECT_NE(std::string(e.what()).find("unknown size 'huge'"), std::string::npos) << e.what();
  }
  speech::WhisperEncoderConfig odd = kSmall;
  odd.heads = 5;
  EXPECT_THROW(speech::whisper_encoder(odd), Error);
  auto enc = speech::whisper_encoder(kSmall);
  Graph g;
  try {
    enc->forward(g.input("x", {1, 80, 3000}));
    ADD_FAILURE();
  } catch (const ShapeError& e) {
    EXPECT_NE(std::string(e.what()).find("[N, 80, 100]"), std::string::npos) << e.what();
  }
}

}  // namespace
}  // namespace mn
