// Generation with a KV cache on the GPU against transformers: the four fixture models (made by
// tests/fixtures/lm/make_models.py) continue two prompts greedily exactly as transformers'
// generate() did, alone and batched, and the cached step's logits equal full recomputation.
#include <gtest/gtest.h>

#include <algorithm>
#include <cmath>

#include <meganeura/causal_lm.h>
#include <meganeura/data.h>
#include <meganeura/generate.h>
#include <meganeura/hf.h>
#include <meganeura/reference.h>
#include <meganeura/session.h>
#include <meganeura/tokenizer.h>

#include "support/scoped_env.h"
#include "support/tensor_cores.h"

namespace mn {
namespace {

const std::filesystem::path kLm = std::filesystem::path(MN_SOURCE_DIR) / "tests/fixtures/lm";

std::vector<int32_t> ids_of(const Array& a) {
  std::vector<int32_t> v;
  for (double x : a.data) v.push_back(static_cast<int32_t>(x));
  return v;
}

struct Case {
  std::vector<int32_t> prompt, continuation;
  std::string text;
};

std::vector<Case> cases_of(const std::string& name) {
  SafetensorsReader r(kLm / "reference" / (name + ".safetensors"));
  std::vector<Case> out;
  for (int i = 0; i < 2; ++i) {
    const std::string k = std::to_string(i);
    Case c{ids_of(r.array("prompt_" + k)), ids_of(r.array("greedy_" + k)),
           r.metadata().at("prompt_text_" + k)};
    c.continuation.erase(c.continuation.begin(), c.continuation.begin() + c.prompt.size());
    out.push_back(std::move(c));
  }
  return out;
}

// transformers stops after the eos token of generation_config.json, as we are asked to.
StopOptions stop_for(const HfModel& m) {
  StopOptions stop;
  stop.max_new_tokens = 16;
  for (int64_t id : m.generation.eos_token_id) stop.stop_ids.push_back(static_cast<int32_t>(id));
  return stop;
}

std::unique_ptr<LmRunner> runner_for(const HfModel& m, int64_t batch, int64_t block) {
  LmRunnerOptions o;
  o.batch = batch;
  o.max_context = 64;
  o.prefill_block = block;
  return LmRunner::create(m, o);
}

class LmGenerate : public ::testing::TestWithParam<std::string> {};

TEST_P(LmGenerate, TokenizerEncodesThePromptsAsTransformers) {
  const Tokenizer tok = Tokenizer::from_dir(kLm / "models" / GetParam());
  for (const Case& c : cases_of(GetParam())) EXPECT_EQ(tok.encode(c.text), c.prompt) << c.text;
}

TEST_P(LmGenerate, GreedyMatchesTransformersTokenForToken) {
  const HfModel model = load_hf_model(kLm / "models" / GetParam());
  // A block shorter than the prompts: the prompt runs in several prefill calls.
  auto runner = runner_for(model, 1, 8);
  for (const Case& c : cases_of(GetParam())) {
    const auto out = generate(*runner, {c.prompt}, {}, stop_for(model));
    EXPECT_EQ(out[0].tokens, c.continuation) << c.text;
  }
}

// A cache of 1024 slots splits a decoding query's keys over several workgroups, whose partials
// the output projection combines (schedule/attention_partials.h) in the two-program session
// (prefill and decode sharing one arena); with the switch off the attention combines them. Both
// continue as transformers did.
TEST_P(LmGenerate, GreedyMatchesTransformersOverALongCache) {
  const HfModel model = load_hf_model(kLm / "models" / GetParam());
  for (const char* partials : {"1", "0"}) {
    testing::ScopedEnv env("MN_ATTENTION_PARTIALS_IN_PRODUCTS", partials);
    LmRunnerOptions o;
    o.max_context = 1024;
    o.prefill_block = 8;
    o.profile = true;
    auto runner = LmRunner::create(model, o);
    for (const Case& c : cases_of(GetParam())) {
      const auto out = generate(*runner, {c.prompt}, {}, stop_for(model));
      EXPECT_EQ(out[0].tokens, c.continuation) << c.text << ", switch " << partials;
    }
    size_t combined = 0;
    for (const KernelTime& k : runner->profile("decode")) {
      combined += k.name.find("prologue[attention_combine]") != std::string::npos;
    }
    EXPECT_EQ(combined > 0, std::string_view(partials) == "1") << "switch " << partials;
  }
}

TEST_P(LmGenerate, PromptsOfDifferentLengthsInOneBatch) {
  const HfModel model = load_hf_model(kLm / "models" / GetParam());
  auto runner = runner_for(model, 2, 16);
  const std::vector<Case> cases = cases_of(GetParam());
  ASSERT_NE(cases[0].prompt.size(), cases[1].prompt.size());
  const auto out =
      generate(*runner, {cases[0].prompt, cases[1].prompt}, {}, stop_for(model));
  EXPECT_EQ(out[0].tokens, cases[0].continuation);
  EXPECT_EQ(out[1].tokens, cases[1].continuation);
}

INSTANTIATE_TEST_SUITE_P(Fixtures, LmGenerate,
                         ::testing::Values("llama_tied", "llama_bf16_sharded", "qwen2_tiny",
                                           "qwen3_tiny"));

// The cached step's logits after each token equal the logits of the whole sequence computed at
// once (no cache), position by position: within f32's rounding, or f16's where sessions multiply
// f32 operands on tensor cores (the whole sequence's products round them to f16: 2e-4 to 9e-4
// of the logits' scale on the H100 and H200).
TEST(LmStep, CachedLogitsEqualFullRecomputation) {
  const double tolerance = testing::sessions_use_tensor_cores() ? 2e-3 : 1e-5;
  const HfModel model = load_hf_model(kLm / "models" / "qwen3_tiny");
  const std::vector<int32_t> seq = {5, 17, 300, 42, 9, 600, 77, 3, 250, 11};
  const auto L = static_cast<int64_t>(seq.size());
  CausalLmOptions full;
  full.sequence = L;
  CausalLm whole = build_causal_lm(model.config, full);
  auto s = build_session(*whole.graph);
  load_weights(*s, model);
  s->set("input_ids", seq);
  s->step();
  const Array expected = s->get("logits");  // [1, L, V]
  const int64_t V = model.config.vocab_size;

  LmStepOptions o;
  o.max_context = 16;
  CausalLm step = build_lm_step(model.config, o);
  auto d = build_session(*step.graph);
  load_weights(*d, model);
  double scale = 0;
  for (double x : expected.data) scale = std::max(scale, std::abs(x));
  for (int64_t i = 0; i < L; ++i) {
    d->set("input_ids", std::vector<int32_t>{seq[i]});
    d->set("positions", std::vector<int32_t>{static_cast<int32_t>(i)});
    d->set("last", std::vector<int32_t>{0});
    d->set_scalar("temperature", 0.0);
    d->set_scalar("top_k", 0);
    d->set_scalar("top_p", 1.0);
    d->set_scalar("seed", 0);
    d->set_scalar("step", 0);
    d->step();
    const Array got = d->get("logits");
    double err = 0;
    for (int64_t v = 0; v < V; ++v) err = std::max(err, std::abs(got.data[v] - expected.data[i * V + v]));
    EXPECT_LE(err / scale, tolerance) << "position " << i;
    // Greedy sampling on the device picks the largest logit.
    const auto top = std::max_element(got.data.begin(), got.data.end()) - got.data.begin();
    EXPECT_EQ(d->get("next").data[0], static_cast<double>(top));
  }
}

// 16-bit KV caches (LmStepOptions::cache_dtype): the states hold half the bytes, and the cached
// step's logits equal the float64 reference's of the same step graph (which rounds the keys and
// values to the cache's dtype as they are written) over a prompt and several decode steps, and
// stay within that rounding of the f32 cache's.
TEST(LmStep, SixteenBitCachesMatchTheReference) {
  // As above: the prefill's products on tensor cores round f32 operands to f16 (1.7e-3 of the
  // logits' scale on the H100), and the caches keep what they wrote.
  const double tolerance = testing::sessions_use_tensor_cores() ? 4e-3 : 1e-4;
  const HfModel model = load_hf_model(kLm / "models" / "qwen3_tiny");
  const std::vector<int32_t> prompt = {5, 17, 300, 42}, decoded = {9, 600, 77, 3};
  auto logits_of = [&](DType cache, bool on_device) {
    LmStepOptions o;
    o.max_context = 16;
    o.block = 4;
    o.cache_dtype = cache;
    CausalLm prefill = build_lm_step(model.config, o);
    o.block = 1;
    CausalLm decode = build_lm_step(model.config, o);
    std::vector<SessionProgram> programs{{"prefill", prefill.graph.get(), std::nullopt},
                                         {"decode", decode.graph.get(), std::nullopt}};
    auto s = build_session(programs);
    load_weights(*s, model);
    const std::string k_cache = "model.layers.0.self_attn.k_cache";
    EXPECT_EQ(s->type_of(k_cache).dtype, cache);
    // The reference runs the same graphs over the session's weights and zeroed caches.
    reference::Feeds persistent;
    for (const std::string& name : s->parameter_names()) persistent[name] = s->get(name);
    for (const std::string& name : s->state_names()) persistent[name] = s->get(name);
    std::vector<Array> out;
    auto run = [&](std::string_view program, const Graph& g, std::vector<int32_t> ids,
                   int32_t first) {
      std::vector<int32_t> positions;
      for (size_t i = 0; i < ids.size(); ++i) positions.push_back(first + static_cast<int32_t>(i));
      reference::Feeds feeds{
          {"input_ids", Array({1, static_cast<int64_t>(ids.size())}, DType::i32,
                              std::vector<double>(ids.begin(), ids.end()))},
          {"positions", Array({1, static_cast<int64_t>(ids.size())}, DType::i32,
                              std::vector<double>(positions.begin(), positions.end()))},
          {"last", Array({1}, DType::i32, {static_cast<double>(ids.size() - 1)})},
          {"temperature", Array::full({}, 0.0)},
          {"top_k", Array::full({}, 0.0, DType::i32)},
          {"top_p", Array::full({}, 1.0)},
          {"seed", Array::full({}, 0.0, DType::u32)},
          {"step", Array::full({}, 0.0, DType::u32)}};
      if (on_device) {
        for (const auto& [name, value] : feeds) s->set(program, name, value);
        s->step(program);
        out.push_back(s->get(program, "logits"));
      } else {
        out.push_back(reference::run_step(g, feeds, persistent).at("logits"));
      }
    };
    run("prefill", *prefill.graph, prompt, 0);
    for (size_t i = 0; i < decoded.size(); ++i) {
      run("decode", *decode.graph, {decoded[i]}, static_cast<int32_t>(prompt.size() + i));
    }
    return std::make_pair(out, s->memory().arena_bytes);
  };
  const auto [f32, f32_bytes] = logits_of(DType::f32, true);
  for (DType cache : {DType::bf16, DType::f16}) {
    SCOPED_TRACE(dtype_name(cache));
    const auto [got, bytes] = logits_of(cache, true);
    const auto [want, unused] = logits_of(cache, false);
    EXPECT_LT(bytes, f32_bytes);
    ASSERT_EQ(got.size(), want.size());
    for (size_t i = 0; i < got.size(); ++i) {
      double scale = 0, err = 0, from_f32 = 0;
      for (double x : want[i].data) scale = std::max(scale, std::abs(x));
      for (size_t v = 0; v < got[i].data.size(); ++v) {
        err = std::max(err, std::abs(got[i].data[v] - want[i].data[v]));
        from_f32 = std::max(from_f32, std::abs(got[i].data[v] - f32[i].data[v]));
      }
      EXPECT_LE(err / scale, tolerance) << "step " << i;
      // Keys and values rounded to 8 or 11 bits: a few of their units, not more.
      EXPECT_LE(from_f32 / scale, 0x1p-5) << "step " << i;
    }
  }
}

TEST(LmStep, RejectsAnIntegerCache) {
  const HfModel model = load_hf_model(kLm / "models" / "llama_tied");
  LmStepOptions o;
  o.max_context = 8;
  o.cache_dtype = DType::i32;
  try {
    build_lm_step(model.config, o);
    ADD_FAILURE() << "accepted an i32 cache";
  } catch (const Error& e) {
    EXPECT_NE(std::string(e.what()).find("cache_dtype must be f32, f16 or bf16, got i32"),
              std::string::npos)
        << e.what();
  }
}

TEST(LmRunner, RejectsBadOptions) {
  const HfModel model = load_hf_model(kLm / "models" / "llama_tied");
  auto expect_error = [&](LmRunnerOptions o, const std::string& what) {
    try {
      LmRunner::create(model, o);
      ADD_FAILURE() << "accepted " << what;
    } catch (const Error& e) {
      EXPECT_NE(std::string(e.what()).find(what), std::string::npos) << e.what();
    }
  };
  expect_error({.batch = 0}, "batch");
  expect_error({.max_context = -4}, "max_context");
  expect_error({.prefill_block = -1}, "prefill_block");
  expect_error({.max_context = 16, .prefill_block = 32}, "exceeds the context of 16");
  expect_error({.dtype = DType::i32}, "dtype");
  expect_error({.cache_dtype = DType::u32}, "KV cache's dtype must be f32, f16 or bf16");
  expect_error({.precision = DType::i32}, "precision must be f32, bf16 or f16");
  expect_error({.decode_chain = -2}, "decode_chain must be at least 0 (got -2)");
}

// Decode steps chained into one submission (LmRunnerOptions::decode_chain) give the tokens of
// single steps, greedy and sampled, for a batch of two prompts whose chains end at different
// points (a chain of 3 leaves single steps at the end; the default of 8 runs two chains).
TEST(LmDecodeChain, GivesTheTokensOfSingleSteps) {
  const HfModel model = load_hf_model(kLm / "models" / "qwen3_tiny");
  const std::vector<Case> cases = cases_of("qwen3_tiny");
  const std::vector<std::vector<int32_t>> prompts = {cases[0].prompt, cases[1].prompt};
  StopOptions stop;
  stop.max_new_tokens = 20;
  const SamplingOptions hot{.temperature = 1.3, .top_k = 40, .top_p = 0.95, .seed = 11};
  std::vector<std::vector<GeneratedSequence>> outs;
  for (int64_t chain : {1, 3, 0}) {
    LmRunnerOptions o;
    o.batch = 2;
    o.max_context = 64;
    o.prefill_block = 16;
    o.decode_chain = chain;
    o.time_steps = true;
    auto runner = LmRunner::create(model, o);
    EXPECT_EQ(runner->chain_length(), chain == 1 ? 0 : chain == 0 ? 8 : chain);
    for (const SamplingOptions& s : {SamplingOptions{}, hot}) {
      outs.push_back(generate(*runner, prompts, s, stop));
    }
    EXPECT_EQ(runner->chain_gpu_ms() > 0, chain != 1) << "chain " << chain;
  }
  for (size_t i = 2; i < outs.size(); ++i) {
    for (size_t b = 0; b < 2; ++b) {
      EXPECT_EQ(outs[i][b].tokens, outs[i % 2][b].tokens) << "run " << i << ", sequence " << b;
    }
  }
  EXPECT_NE(outs[0][0].tokens, outs[1][0].tokens);  // sampling changed something
}

// A prompt's logits with the products in bf16 (SessionOptions::precision) stay within bf16's
// rounding of f32's; and a runner in bf16 generates.
TEST(LmStep, Bf16ProductsStayNearF32) {
  const HfModel model = load_hf_model(kLm / "models" / "qwen3_tiny");
  std::vector<int32_t> seq(16);
  for (size_t i = 0; i < seq.size(); ++i) seq[i] = static_cast<int32_t>((37 * i + 5) % 600);
  CausalLmOptions full;
  full.sequence = static_cast<int64_t>(seq.size());
  auto logits = [&](DType precision) {
    CausalLm whole = build_causal_lm(model.config, full);
    SessionOptions so;
    so.precision = precision;
    auto s = build_session(*whole.graph, so);
    load_weights(*s, model);
    s->set("input_ids", seq);
    s->step();
    return s->get("logits").data;
  };
  const std::vector<double> f32 = logits(DType::f32), bf16 = logits(DType::bf16);
  double scale = 0, err = 0;
  for (double x : f32) scale = std::max(scale, std::abs(x));
  for (size_t i = 0; i < f32.size(); ++i) err = std::max(err, std::abs(bf16[i] - f32[i]));
  // Two layers of products rounded to bf16 (2^-9 each) against f32: a few units.
  EXPECT_LE(err / scale, 0x1p-5);
  EXPECT_GT(err / scale, 1e-6);

  LmRunnerOptions o;
  o.max_context = 64;
  o.prefill_block = 16;
  o.precision = DType::bf16;
  auto runner = LmRunner::create(model, o);
  StopOptions stop;
  stop.max_new_tokens = 6;
  const auto out = generate(*runner, {seq}, {}, stop);
  EXPECT_EQ(out[0].tokens.size(), 6u);
}

// Sampling on the device: seeded runs repeat, seeds differ, top_k = 1 is greedy.
TEST(LmSampling, SeededTopKTopP) {
  const HfModel model = load_hf_model(kLm / "models" / "llama_tied");
  auto runner = runner_for(model, 1, 8);
  const std::vector<int32_t> prompt = {5, 17, 300, 42};
  StopOptions stop;
  stop.max_new_tokens = 12;
  auto run = [&](SamplingOptions s) { return generate(*runner, {prompt}, s, stop)[0].tokens; };
  const auto greedy = run({});
  const SamplingOptions hot{.temperature = 1.5, .top_k = 0, .top_p = 1.0, .seed = 7};
  EXPECT_EQ(run(hot), run(hot));
  EXPECT_NE(run(hot), run({.temperature = 1.5, .seed = 8}));
  EXPECT_NE(run(hot), greedy);
  EXPECT_EQ(run({.temperature = 1.5, .top_k = 1, .seed = 7}), greedy);
  EXPECT_EQ(run({.temperature = 1.5, .top_p = 1e-6, .seed = 7}), greedy);
}

}  // namespace
}  // namespace mn
