// The ONNX backend test suite's node tests (Debian's libonnx-testdata): every model imported,
// run on the device with its test inputs and compared with the expected outputs. Each test is
// passed, failed, or unsupported (the importer refused it with onnx::UnsupportedError: an op,
// attribute value or element type we do not claim). A test fails the suite when it failed
// although every op in it is one the importer supports.
//
// MN_ONNX_NODE_TESTS: the suite's folder (default /usr/share/libonnx-testdata/data/node);
// MN_ONNX_NODE_FILTER: run only tests whose name contains it; MN_ONNX_REPORT: write the per-op
// table there as well.
#include <gtest/gtest.h>

#include <onnx/onnx_pb.h>

#include <algorithm>
#include <cmath>
#include <cstdlib>
#include <filesystem>
#include <fstream>
#include <map>
#include <set>
#include <sstream>

#include <meganeura/onnx.h>
#include <meganeura/session.h>

namespace mn {
namespace {

namespace fs = std::filesystem;

// invalid: the test's data contradicts its own model (an input shaped unlike the model says).
enum class Outcome { passed, failed, unsupported, invalid };

struct Result {
  std::string test;
  std::string op;  // the op the test is about
  Outcome outcome = Outcome::passed;
  std::string detail;
  bool float_only = true;  // inputs and outputs of FLOAT, INT64/INT32 and BOOL only
};

fs::path suite_dir() {
  const char* env = std::getenv("MN_ONNX_NODE_TESTS");
  return env != nullptr ? fs::path(env) : fs::path("/usr/share/libonnx-testdata/data/node");
}

bool close(double got, double want, double rtol, double atol) {
  if (std::isnan(want)) return std::isnan(got);
  if (std::isinf(want)) return got == want;
  return std::abs(got - want) <= atol + rtol * std::abs(want);
}

// Compares an output with the expected tensor; empty when they agree.
std::string compare(const RawTensor& got, const RawTensor& want) {
  if (got.shape != want.shape) {
    return "shape " + shape_str(got.shape) + ", expected " + shape_str(want.shape);
  }
  const bool f16 = want.type == ElemType::f16 || want.type == ElemType::bf16;
  const double rtol = f16 ? 1e-2 : 1e-3;
  const double atol = f16 ? 1e-3 : 1e-5;
  const bool exact = want.type != ElemType::f32 && want.type != ElemType::f16 &&
                     want.type != ElemType::bf16 && want.type != ElemType::f64;
  for (int64_t i = 0; i < want.numel(); ++i) {
    const double g = got.value(i), w = want.value(i);
    if (exact ? g != w : !close(g, w, rtol, atol)) {
      std::ostringstream s;
      s << "element " << i << ": " << g << ", expected " << w;
      return s.str();
    }
  }
  return {};
}

struct Case {
  std::map<std::string, RawTensor> inputs;
  std::map<std::string, RawTensor> outputs;
};

Case read_case(const fs::path& dir) {
  Case c;
  for (const auto& e : fs::directory_iterator(dir)) {
    const std::string f = e.path().filename().string();
    std::string name;
    if (f.rfind("input_", 0) == 0) {
      RawTensor t = onnx::read_tensor_proto(e.path(), &name);
      c.inputs.emplace(name, std::move(t));
    } else if (f.rfind("output_", 0) == 0) {
      RawTensor t = onnx::read_tensor_proto(e.path(), &name);
      c.outputs.emplace(name, std::move(t));
    }
  }
  return c;
}

bool plain_type(ElemType t) {
  return t == ElemType::f32 || t == ElemType::i64 || t == ElemType::i32 || t == ElemType::boolean;
}

// Tests whose expected outputs their own model cannot give, with the reason.
const std::map<std::string, std::string>& data_unlike_model() {
  static const std::map<std::string, std::string> known{
      {"test_adam_multiple",
       "the expected outputs were computed with epsilon 1e-2, which the node does not set "
       "(Adam's schema default is 1e-6)"},
  };
  return known;
}

Result run_test(const fs::path& dir) {
  Result r;
  r.test = dir.filename().string();
  if (auto it = data_unlike_model().find(r.test); it != data_unlike_model().end()) {
    r.outcome = Outcome::invalid;
    r.detail = it->second;
    return r;
  }
  try {
    // Inputs that are not tensors (sequences, optionals) fail to parse: the import says why.
    Case data;
    try {
      data = read_case(dir / "test_data_set_0");
    } catch (const Error&) {
    }
    for (const auto& [n, t] : data.inputs) r.float_only = r.float_only && plain_type(t.type);
    for (const auto& [n, t] : data.outputs) r.float_only = r.float_only && plain_type(t.type);
    const onnx::ModelFile file = onnx::ModelFile::read(dir / "model.onnx");
    for (const auto& declared : file.inputs()) {
      auto it = data.inputs.find(declared.name);
      if (it == data.inputs.end()) continue;
      // BFLOAT16 test data is stored as UINT16 bits.
      if (declared.type == ElemType::bf16 && it->second.type == ElemType::u16) it->second.type = ElemType::bf16;
      const Shape& s = it->second.shape;
      bool agrees = s.size() == declared.shape.size();
      for (size_t a = 0; agrees && a < s.size(); ++a) agrees = declared.shape[a] < 0 || declared.shape[a] == s[a];
      if (!agrees) {
        r.outcome = Outcome::invalid;
        r.detail = "input '" + declared.name + "' has shape " + shape_str(s) + " in the test data";
        return r;
      }
    }
    onnx::ImportOptions options;
    options.input_values = data.inputs;
    for (const auto& [n, t] : data.inputs) options.input_shapes[n] = t.shape;
    onnx::ImportedModel m = file.import(options);
    auto session = build_session(m.graph);
    m.load_weights(*session);
    for (const auto& info : m.inputs) {
      session->set(info.name, onnx::to_graph_value(data.inputs.at(info.name), info, info.name));
    }
    session->step();
    for (const auto& info : m.outputs) {
      auto it = data.outputs.find(info.name);
      if (it == data.outputs.end()) continue;
      RawTensor got = onnx::from_graph_value(session->get(info.name), info, info.name);
      RawTensor want = it->second;
      if (info.type == ElemType::bf16 && want.type == ElemType::u16) want.type = ElemType::bf16;
      std::string diff = compare(got, want);
      if (!diff.empty()) {
        r.outcome = Outcome::failed;
        r.detail = "output '" + info.name + "' " + diff;
        return r;
      }
    }
  } catch (const onnx::UnsupportedError& e) {
    r.outcome = Outcome::unsupported;
    r.detail = e.what();
  } catch (const std::exception& e) {
    r.outcome = Outcome::failed;
    r.detail = e.what();
  }
  return r;
}

// The op type of a model whose nodes are all of one type (empty otherwise).
std::string single_op(const fs::path& model) {
  ::onnx::ModelProto m;
  std::ifstream in(model, std::ios::binary);
  if (!m.ParseFromIstream(&in)) return {};
  std::set<std::string> ops;
  for (const auto& n : m.graph().node()) ops.insert(n.op_type());
  return ops.size() == 1 ? *ops.begin() : std::string{};
}

// The op a test is about: its single node type; an expanded function's test takes the op of the
// test it expands ("Softmax (expanded)").
std::map<std::string, std::string> op_labels(const std::vector<fs::path>& dirs) {
  std::map<std::string, std::string> by_test;
  for (const auto& d : dirs) by_test[d.filename().string()] = single_op(d / "model.onnx");
  std::map<std::string, std::string> out;
  for (const auto& [test, op] : by_test) {
    std::string label = op;
    const auto expanded = test.find("_expanded");
    if (expanded != std::string::npos) {
      auto base = by_test.find(test.substr(0, expanded) + test.substr(expanded + 9));
      label = (base != by_test.end() && !base->second.empty() ? base->second : "(several ops)") + " (expanded)";
    }
    out[test] = label.empty() ? "(several ops)" : label;
  }
  return out;
}

TEST(OnnxNodeSuite, EveryNodeTest) {
  const fs::path root = suite_dir();
  ASSERT_TRUE(fs::is_directory(root))
      << root << " is missing: install Debian's libonnx-testdata (scripts/setup.sh --tests)";
  const char* filter = std::getenv("MN_ONNX_NODE_FILTER");
  std::vector<fs::path> dirs;
  for (const auto& e : fs::directory_iterator(root)) {
    if (!e.is_directory()) continue;
    if (filter != nullptr && e.path().filename().string().find(filter) == std::string::npos) continue;
    dirs.push_back(e.path());
  }
  std::sort(dirs.begin(), dirs.end());
  const std::map<std::string, std::string> labels = op_labels(dirs);

  struct Counts {
    int passed = 0, failed = 0, unsupported = 0, invalid = 0;
  };
  std::map<std::string, Counts> by_op;
  Counts total, plain;
  std::vector<Result> failures;
  for (const auto& dir : dirs) {
    Result r = run_test(dir);
    r.op = labels.at(r.test);
    Counts& c = by_op[r.op];
    auto bump = [&](Counts& k) {
      switch (r.outcome) {
        case Outcome::passed: ++k.passed; break;
        case Outcome::failed: ++k.failed; break;
        case Outcome::unsupported: ++k.unsupported; break;
        case Outcome::invalid: ++k.invalid; break;
      }
    };
    bump(c);
    bump(total);
    if (r.float_only) bump(plain);
    if (r.outcome == Outcome::failed) failures.push_back(r);
    if (r.outcome != Outcome::passed && std::getenv("MN_ONNX_VERBOSE") != nullptr) {
      const char* what = r.outcome == Outcome::failed        ? "FAILED"
                         : r.outcome == Outcome::unsupported ? "unsupported"
                                                             : "invalid";
      std::printf("%s %s: %s\n", what,
                  r.test.c_str(), r.detail.c_str());
    }
  }

  std::ostringstream table;
  auto row = [&](const std::string& label, const Counts& c) {
    table << "| " << label << " | " << c.passed << " | " << c.failed << " | " << c.unsupported
          << " | " << c.invalid << " |\n";
  };
  table << "| op | passed | failed | unsupported | test data unlike its model |\n"
        << "| --- | --- | --- | --- | --- |\n";
  for (const auto& [op, c] : by_op) row(op, c);
  row("all " + std::to_string(dirs.size()) + " tests", total);
  row("of which FLOAT, INT32/INT64, BOOL only", plain);
  std::printf("%s", table.str().c_str());
  if (const char* path = std::getenv("MN_ONNX_REPORT")) std::ofstream(path) << table.str();

  for (const auto& f : failures) ADD_FAILURE() << f.test << " (" << f.op << "): " << f.detail;
}

}  // namespace
}  // namespace mn
