// Device-side index checks: a kernel meeting an out-of-range index (take, scatter_add, one_hot,
// class targets, cache positions) records it, and the wait for the step throws IndexError
// naming the op, the element, the value, where the indices come from and the valid range, as
// the reference's error does; the next good step runs clean. A training step with a bad label
// leaves that row out, so the parameters stay finite (equal to the step with the label
// ignored). Off, the kernels keep their silent zero-or-skip behaviour.
#include <gtest/gtest.h>

#include <cmath>
#include <functional>
#include <string>
#include <vector>

#include <nlohmann/json.hpp>

#include <meganeura/autodiff.h>
#include <meganeura/causal_lm.h>
#include <meganeura/hf.h>
#include <meganeura/ops.h>
#include <meganeura/optimizer.h>
#include <meganeura/reference.h>
#include <meganeura/session.h>

#include "support/random_fill.h"
#include "support/scoped_env.h"

namespace mn {
namespace {

// The IndexError of one step (empty: none), checking that it is one.
std::string step_error(Session& s, const reference::Feeds& feeds, const std::string& program = "") {
  for (const auto& [name, value] : feeds) {
    if (program.empty()) {
      s.set(name, value);
    } else {
      s.set(program, name, value);
    }
  }
  try {
    if (program.empty()) {
      s.step();
    } else {
      s.step(program);
    }
  } catch (const IndexError& e) {
    return e.what();
  }
  return "";
}

void expect_parts(const std::string& msg, const std::vector<std::string>& parts) {
  EXPECT_FALSE(msg.empty()) << "no IndexError";
  for (const std::string& p : parts) EXPECT_NE(msg.find(p), std::string::npos) << p << "\n" << msg;
}

Array ints(Shape shape, std::vector<double> values) {
  return Array(std::move(shape), DType::i32, std::move(values));
}

struct Embedding {
  Graph g;
  Embedding() {
    Tensor table = g.parameter("table", {10, 4}, Init::uniform(-1, 1, 3));
    g.output("rows", take(table, g.input("ids", {2, 3}, DType::i32), 0));
  }
};

// Host-mapped arena (lavapipe, resizable BAR) and staging copies (a discrete GPU without it).
TEST(IndexCheck, TakeNamesTheElementValueSourceAndRange) {
  for (const char* map : {"1", "0"}) {
    SCOPED_TRACE(std::string("MN_MAP_ARENA=") + map);
    testing::ScopedEnv env("MN_MAP_ARENA", map);
    Embedding m;
    auto s = build_session(m.g);
    expect_parts(step_error(*s, {{"ids", ints({2, 3}, {0, 9, 3, 4, 12, 1})}}),
                 {"program 'step': take: index 12 at element 4 of the indices (input 'ids') is out "
                  "of range [0, 10) along axis 0 of shape [10, 4]",
                  "(output 'rows')", "nothing outside its tensors"});
    // The bad row read zeros; the others their rows.
    const Array table = s->get("table");
    const Array rows = s->get("rows");
    for (int k = 0; k < 4; ++k) {
      EXPECT_EQ(rows.data[4 * 4 + k], 0.0);
      EXPECT_EQ(rows.data[1 * 4 + k], table.data[9 * 4 + k]);
    }
    expect_parts(step_error(*s, {{"ids", ints({2, 3}, {0, -3, 3, 4, 5, 1})}}),
                 {"index -3 at element 1 of the indices"});
    // The slot was cleared: a good step runs, and gives the reference's rows.
    const reference::Feeds good{{"ids", ints({2, 3}, {9, 8, 0, 0, 1, 2})}};
    EXPECT_EQ(step_error(*s, good), "");
    reference::Feeds feeds = good;
    feeds["table"] = table;
    EXPECT_EQ(s->get("rows").data, reference::evaluate(m.g, feeds).at("rows").data);
  }
}

struct OpCase {
  std::string name;                   // starts with the op
  std::function<void(Graph&)> build;  // inputs "x" (float, when used) and "idx"
  Shape x_shape;
  Array idx;
  std::vector<std::string> parts;
};

TEST(IndexCheck, EveryOpReadingIndicesIsChecked) {
  auto rng = testing::rng_for("index-check/ops");
  std::vector<double> big_idx(16384, 1.0);
  big_idx[9000] = 8;  // the float-atomic scatter_add path, where the device has float atomics
  std::vector<double> many_targets(2048, 3.0);
  many_targets[1500] = 20;  // per-row kernel and a summing kernel
  const std::vector<OpCase> cases = {
      {"take_middle_axis",
       [](Graph& g) {
         g.output("y", take(g.input("x", {3, 5, 2}), g.input("idx", {4}, DType::i32), 1));
       },
       {3, 5, 2},
       ints({4}, {0, 4, 5, 1}),
       {"take: index 5 at element 2 of the indices (input 'idx') is out of range [0, 5) along "
        "axis 1 of shape [3, 5, 2]"}},
      {"scatter_add",
       [](Graph& g) {
         g.output("y", scatter_add(g.input("x", {6, 2}), g.input("idx", {4}, DType::i32),
                                   g.input("upd", {4, 2}), 0));
       },
       {6, 2},
       ints({4}, {0, 5, 1, 6}),
       {"scatter_add: index 6 at element 3 of the indices (input 'idx') is out of range [0, 6) "
        "along axis 0 of shape [6, 2]"}},
      {"scatter_add_many",
       [](Graph& g) {
         g.output("y", scatter_add(g.input("x", {8, 1}), g.input("idx", {16384}, DType::i32),
                                   g.input("upd", {16384, 1}), 0));
       },
       {8, 1},
       ints({16384}, big_idx),
       {"scatter_add: index 8 at element 9000 of the indices", "[0, 8)"}},
      {"one_hot",
       [](Graph& g) { g.output("y", one_hot(g.input("idx", {5}, DType::i32), 3)); },
       {},
       ints({5}, {0, 1, 2, 2, 3}),
       {"one_hot: index 3 at element 4 of the indices (input 'idx') is out of range [0, 3)"}},
      {"cross_entropy",
       [](Graph& g) {
         g.output("y", cross_entropy(g.input("x", {4, 3}), g.input("idx", {4}, DType::i32)));
       },
       {4, 3},
       ints({4}, {0, 2, 7, -100}),
       {"cross_entropy: target value 7 at element 2 of the target (input 'idx') is out of range "
        "[0, 3) and is not ignore_index (-100)"}},
      {"cross_entropy_many_classes",  // a workgroup per row
       [](Graph& g) {
         g.output("y", cross_entropy(g.input("x", {2, 100}), g.input("idx", {2}, DType::i32),
                                     {Reduction::none}));
       },
       {2, 100},
       ints({2}, {5, -2}),
       {"cross_entropy: target value -2 at element 1 of the target", "[0, 100)"}},
      {"cross_entropy_many_rows",
       [](Graph& g) {
         g.output("y", cross_entropy(g.input("x", {2048, 20}), g.input("idx", {2048}, DType::i32)));
       },
       {2048, 20},
       ints({2048}, many_targets),
       {"cross_entropy: target value 20 at element 1500 of the target", "[0, 20)"}},
      {"nll_loss",
       [](Graph& g) {
         g.output("y",
                  nll_loss(g.input("x", {3, 4}), g.input("idx", {3}, DType::i32), Reduction::sum));
       },
       {3, 4},
       ints({3}, {4, 0, 1}),
       {"nll_loss: target value 4 at element 0 of the target (input 'idx') is out of range [0, "
        "4)"}},
      {"cache_write",
       [](Graph& g) {
         Tensor cache = g.state("cache", {2, 8, 4});
         g.assign(cache,
                  cache_write(cache, g.input("x", {2, 3, 4}), g.input("idx", {3}, DType::i32)));
       },
       {2, 3, 4},
       ints({3}, {5, 6, 8}),
       {"cache_write: position 8 at element 2 of the positions (input 'idx') is out of range "
        "[0, 8) for a cache of shape [2, 8, 4]"}},
  };
  for (const OpCase& c : cases) {
    SCOPED_TRACE(c.name);
    Graph g;
    c.build(g);
    reference::Feeds feeds{{"idx", c.idx}};
    if (!c.x_shape.empty()) feeds["x"] = testing::random_array(rng, {c.x_shape, DType::f32});
    if (g.find_input("upd")) {
      feeds["upd"] = testing::random_array(rng, g.node(*g.find_input("upd")).type);
    }
    // The reference raises the same error.
    try {
      reference::Feeds persistent = reference::initial_parameters(g);
      reference::run_step(g, feeds, persistent);
      ADD_FAILURE() << "the reference accepted the indices";
    } catch (const IndexError& e) {
      EXPECT_EQ(std::string(e.what()).rfind(c.parts[0].substr(0, c.parts[0].find(':')), 0), 0u)
          << e.what();
    }
    auto s = build_session(g);
    expect_parts(step_error(*s, feeds), c.parts);
  }
}

// The MLP step of a classifier with one bad label: the gradients and the update leave its row
// out, as the reference's step does with that label ignored.
TEST(IndexCheck, TrainingWithABadLabelKeepsTheUpdateFinite) {
  for (const Optimizer& opt : {Optimizer::sgd(), Optimizer::adam()}) {
    SCOPED_TRACE(opt.kind == Optimizer::Kind::sgd ? "sgd" : "adam");
    Graph g;
    Tensor x = g.input("x", {4, 6});
    Tensor y = g.input("y", {4}, DType::i32);
    Tensor w = g.parameter("w", {6, 5}, Init::kaiming_uniform(7));
    add_training_step(cross_entropy(matmul(x, w), y), opt);
    auto rng = testing::rng_for("index-check/training");
    reference::Feeds feeds{{"x", testing::random_array(rng, {{4, 6}, DType::f32})},
                           {"y", ints({4}, {1, 9, 2, 0})}};
    for (const auto& [n, v] : step_scalars(opt, 0.05, 1)) feeds[n] = Array::scalar(v);
    auto s = build_session(g);
    expect_parts(
        step_error(*s, feeds),
        {"cross_entropy: target value 9 at element 1 of the target (input 'y')", "[0, 5)"});
    reference::Feeds ignored = feeds;
    ignored["y"] = ints({4}, {1, -100, 2, 0});
    reference::Feeds persistent = reference::initial_parameters(g);
    const auto want = reference::run_step(g, ignored, persistent);
    for (const std::string& name : s->parameter_names()) {
      const Array got = s->get(name);
      for (double v : got.data) ASSERT_TRUE(std::isfinite(v)) << name;
      EXPECT_LE(testing::relative_error(got, persistent.at(name)), 1e-5) << name;
    }
    EXPECT_LE(testing::relative_error(s->get("loss"), want.at("loss")), 1e-5);
  }
}

// Only the backward kernels read the targets when the loss itself is not computed.
TEST(IndexCheck, BackwardKernelsCheckTheirTargets) {
  for (const char* op : {"cross_entropy", "nll_loss"}) {
    SCOPED_TRACE(op);
    for (Shape shape : {Shape{4, 3}, Shape{300, 300}}) {  // one workgroup, or many
      Graph g;
      Tensor z = g.input("z", shape);
      Tensor t = g.input("t", {shape[0]}, DType::i32);
      Tensor loss = std::string(op) == "cross_entropy" ? cross_entropy(z, t) : nll_loss(z, t);
      g.output("dz", gradients(loss, {z})[0]);
      auto rng = testing::rng_for("index-check/backward");
      std::vector<double> targets(static_cast<size_t>(shape[0]), 1.0);
      targets[2] = static_cast<double>(shape[1]);
      const reference::Feeds feeds{{"z", testing::random_array(rng, {shape, DType::f32})},
                                   {"t", ints({shape[0]}, targets)}};
      auto s = build_session(g);
      expect_parts(step_error(*s, feeds),
                   {std::string(op) + "_backward: target value " + std::to_string(shape[1]) +
                    " at element 2 of the target (input 't')"});
      // Its gradient row is zero, the others finite.
      const Array dz = s->get("dz");
      for (int64_t c = 0; c < shape[1]; ++c)
        EXPECT_EQ(dz.data[static_cast<size_t>(2 * shape[1] + c)], 0.0);
      for (double v : dz.data) ASSERT_TRUE(std::isfinite(v));
    }
  }
}

// The embedding lookup of the causal LMs names the token ids and the vocabulary.
TEST(IndexCheck, CausalLmTokenOutsideTheVocabulary) {
  nlohmann::json j = {{"architectures", {"LlamaForCausalLM"}},
                      {"vocab_size", 37},
                      {"hidden_size", 16},
                      {"intermediate_size", 24},
                      {"num_hidden_layers", 1},
                      {"num_attention_heads", 4},
                      {"num_key_value_heads", 2}};
  CausalLmOptions o;
  o.batch = 2;
  o.sequence = 4;
  o.dtype = DType::bf16;
  CausalLm lm = build_causal_lm(parse_lm_config(j.dump()), o);
  auto s = build_session(*lm.graph);
  expect_parts(step_error(*s, {{"input_ids", ints({2, 4}, {1, 2, 3, 4, 5, 37, 6, 7})}}),
               {"take: index 37 at element 5 of the indices (input 'input_ids') is out of range "
                "[0, 37) along axis 0 of shape [37, 16]"});
  EXPECT_EQ(step_error(*s, {{"input_ids", ints({2, 4}, {1, 2, 3, 4, 5, 36, 6, 7})}}), "");
}

// Two lookups, the second over the first's rows: each has its slot, and with both bad the
// error names the first in dispatch order.
TEST(IndexCheck, TheFirstNodeInDispatchOrderIsNamed) {
  Graph g;
  Tensor table = g.parameter("table", {6, 3}, Init::uniform(-1, 1, 2));
  Tensor rows = take(table, g.input("a", {4}, DType::i32));  // [4, 3]
  g.output("picked", take(rows, g.input("b", {2}, DType::i32), 1));
  auto s = build_session(g);
  const Array good_a = ints({4}, {0, 1, 2, 3}), good_b = ints({2}, {0, 2});
  EXPECT_EQ(step_error(*s, {{"a", good_a}, {"b", good_b}}), "");
  expect_parts(step_error(*s, {{"a", good_a}, {"b", ints({2}, {0, 3})}}),
               {"take: index 3 at element 1 of the indices (input 'b') is out of range [0, 3)"});
  expect_parts(step_error(*s, {{"a", ints({4}, {0, 6, 2, 3})}, {"b", ints({2}, {0, 3})}}),
               {"take: index 6 at element 1 of the indices (input 'a') is out of range [0, 6)"});
  EXPECT_EQ(step_error(*s, {{"a", good_a}, {"b", good_b}}), "");
}

// Each program has its own slots, and the error names the program.
TEST(IndexCheck, NamesTheProgram) {
  Graph a, b;
  for (Graph* g : {&a, &b}) {
    Tensor table = g->parameter("table", {5, 2}, Init::uniform(-1, 1, 1));
    g->output("rows", take(table, g->input("ids", {3}, DType::i32)));
  }
  auto s = build_session({{"first", &a, std::nullopt}, {"second", &b, std::nullopt}});
  EXPECT_EQ(step_error(*s, {{"ids", ints({3}, {0, 1, 2})}}, "first"), "");
  expect_parts(step_error(*s, {{"ids", ints({3}, {0, 5, 2})}}, "second"),
               {"program 'second': take: index 5 at element 1"});
  EXPECT_EQ(step_error(*s, {{"ids", ints({3}, {4, 1, 2})}}, "first"), "");
}

// Off (the option or MN_CHECK_INDICES=0), nothing is raised: take reads zeros, a bad target's
// loss row is NaN.
TEST(IndexCheck, OffKeepsTheSilentBehaviour) {
  Graph g;
  Tensor table = g.parameter("table", {3, 2}, Init::ones());
  Tensor idx = g.input("idx", {2}, DType::i32);
  g.output("rows", take(table, idx));
  g.output("ce", cross_entropy(g.input("z", {2, 3}), idx, {Reduction::none}));
  const reference::Feeds feeds{{"idx", ints({2}, {1, 3})},
                               {"z", Array({2, 3}, DType::f32, {1, 2, 3, 4, 5, 6})}};
  auto expect_silent = [&](Session& s) {
    EXPECT_EQ(step_error(s, feeds), "");
    EXPECT_EQ(s.get("rows").data, (std::vector<double>{1, 1, 0, 0}));
    EXPECT_TRUE(std::isfinite(s.get("ce").data[0]));
    EXPECT_TRUE(std::isnan(s.get("ce").data[1]));
  };
  SessionOptions off;
  off.check_indices = false;
  expect_silent(*build_session(g, off));
  {
    testing::ScopedEnv env("MN_CHECK_INDICES", "0");
    expect_silent(*build_session(g));
  }
  // On (the default), the bad row's loss is left out: 0 with no reduction.
  auto s = build_session(g);
  expect_parts(step_error(*s, feeds), {"index 3 at element 1"});
  EXPECT_EQ(s->get("ce").data[1], 0.0);
}

}  // namespace
}  // namespace mn
