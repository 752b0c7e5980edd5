// RNN, GRU and LSTM unrolled over their (static) sequence: the input projections of every step
// as one matmul, then per step the recurrent product and the gates in graph ops. Forward,
// reverse and bidirectional; both layouts; initial states, biases, peepholes, clip, and the
// Sigmoid/Tanh/Relu activations. sequence_lens must be the whole sequence for every batch row.
#include <onnx/onnx_pb.h>

#include <algorithm>

#include "onnx_import/import_context.h"
#include "onnx_import/tensor_proto.h"

namespace mn::onnx {

namespace {

enum class Cell { rnn, gru, lstm };

using Activation = Tensor (*)(Tensor);

Activation activation_named(NodeContext& c, const std::string& name) {
  if (name == "Sigmoid") return [](Tensor x) { return sigmoid(x); };
  if (name == "Tanh") return [](Tensor x) { return tanh(x); };
  if (name == "Relu") return [](Tensor x) { return relu(x); };
  c.unsupported("activation '" + name + "' (supported: Sigmoid, Tanh, Relu)");
}

struct Recurrence {
  Cell cell;
  int gates;  // 1, 3, 4
  int64_t hidden = 0, seq = 0, batch = 0, input = 0;
  int directions = 1;
  bool reverse = false, bidirectional = false, batch_first = false, linear_before_reset = false;
  std::optional<double> clip;
  std::vector<Activation> f;  // per direction: the cell's activations in ONNX order
};

Recurrence recurrence(NodeContext& c, Cell cell) {
  Recurrence r;
  r.cell = cell;
  r.gates = cell == Cell::rnn ? 1 : cell == Cell::gru ? 3 : 4;
  const std::string dir = c.attr_string("direction", "forward");
  if (dir != "forward" && dir != "reverse" && dir != "bidirectional") c.fail("unknown direction '" + dir + "'");
  r.bidirectional = dir == "bidirectional";
  r.reverse = dir == "reverse";
  r.directions = r.bidirectional ? 2 : 1;
  r.batch_first = c.attr_int("layout", 0) != 0;
  r.linear_before_reset = c.attr_int("linear_before_reset", 0) != 0;
  if (c.attr_int("input_forget", 0) != 0) c.unsupported("input_forget = 1");
  if (c.has_attr("clip")) r.clip = c.attr_float("clip", 0.0);
  if (c.has_attr("activation_alpha") || c.has_attr("activation_beta")) {
    c.unsupported("activation_alpha / activation_beta");
  }
  const Shape& x = c.shape(0);
  if (x.size() != 3) c.fail("X must be 3-D");
  r.seq = r.batch_first ? x[1] : x[0];
  r.batch = r.batch_first ? x[0] : x[1];
  r.input = x[2];
  const Shape& w = c.shape(1);
  if (w.size() != 3 || w[0] != r.directions || w[2] != r.input || w[1] % r.gates != 0) {
    c.fail("W must be [" + std::to_string(r.directions) + ", " + std::to_string(r.gates) +
           "*hidden_size, " + std::to_string(r.input) + "]");
  }
  r.hidden = c.attr_int("hidden_size", w[1] / r.gates);
  if (r.hidden * r.gates != w[1]) c.fail("hidden_size disagrees with W");
  const int64_t D = r.directions, GH = r.gates * r.hidden;
  auto expect = [&](size_t i, const char* name, const Shape& want) {
    if (c.has(i) && c.shape(i) != want) {
      c.fail(std::string(name) + " has shape " + shape_str(c.shape(i)) + ", expected " + shape_str(want));
    }
  };
  expect(2, "R", {D, GH, r.hidden});
  expect(3, "B", {D, 2 * GH});
  const Shape state = r.batch_first ? Shape{r.batch, D, r.hidden} : Shape{D, r.batch, r.hidden};
  expect(5, "initial_h", state);
  if (cell == Cell::lstm) {
    expect(6, "initial_c", state);
    expect(7, "P", {D, 3 * r.hidden});
  }
  if (!c.has(2)) c.fail("R is missing");
  const std::vector<std::string> defaults =
      cell == Cell::rnn ? std::vector<std::string>{"Tanh"}
      : cell == Cell::gru ? std::vector<std::string>{"Sigmoid", "Tanh"}
                          : std::vector<std::string>{"Sigmoid", "Tanh", "Tanh"};
  std::vector<std::string> names;
  if (const auto* a = c.attr("activations")) {
    for (const auto& s : a->strings()) names.push_back(s);
  }
  if (names.empty()) {
    for (int d = 0; d < r.directions; ++d) names.insert(names.end(), defaults.begin(), defaults.end());
  }
  if (names.size() != defaults.size() * static_cast<size_t>(r.directions)) c.fail("wrong number of activations");
  for (const auto& n : names) r.f.push_back(activation_named(c, n));
  if (c.has(4)) {  // sequence_lens: only the full length is supported
    for (int64_t len : c.known_ints(4, "sequence_lens")) {
      if (len != r.seq) c.unsupported("sequence_lens shorter than the sequence");
    }
  }
  return r;
}

// Slice `d` along `axis` of an operand with a directions axis, without that axis.
Tensor direction(Tensor t, int d, int axis = 0) {
  Shape s = t.shape();
  s.erase(s.begin() + axis);
  return reshape(slice(t, axis, d, d + 1), s);
}

Tensor gate(Tensor all, int64_t hidden, int k) { return slice(all, -1, k * hidden, (k + 1) * hidden); }

struct DirectionResult {
  std::vector<Tensor> h;  // per time step, [batch, hidden], in time order
  Tensor last_h, last_c;
};

DirectionResult run_direction(NodeContext& c, const Recurrence& r, Tensor x_steps, int d) {
  Graph& g = c.graph();
  const int64_t H = r.hidden, G = r.gates;
  Tensor w = direction(c.in(1), d);  // [G*H, input]
  Tensor rw = direction(c.in(2), d);  // [G*H, H]
  Tensor wb, rb;
  if (c.has(3)) {
    Tensor b = direction(c.in(3), d);  // [2*G*H]
    wb = slice(b, 0, 0, G * H);
    rb = slice(b, 0, G * H, 2 * G * H);
  }
  // Input projections of every step at once: [seq, batch, G*H].
  Tensor xw = matmul(x_steps, w, false, true);
  if (wb.valid()) xw = xw + wb;
  // Initial states are [directions, batch, hidden], [batch, directions, hidden] in layout 1.
  const int state_axis = r.batch_first ? 1 : 0;
  Tensor h = c.has(5) ? direction(c.in(5), d, state_axis) : broadcast_to(g.scalar(0.0, xw.dtype()), {r.batch, H});
  Tensor cell = r.cell == Cell::lstm && c.has(6) ? direction(c.in(6), d, state_axis)
                                                 : broadcast_to(g.scalar(0.0, xw.dtype()), {r.batch, H});
  Tensor p;
  if (r.cell == Cell::lstm && c.has(7)) p = direction(c.in(7), d);  // [3*H]: i, o, f
  const size_t a0 = static_cast<size_t>(d) * (r.f.size() / static_cast<size_t>(r.directions));
  auto clipped = [&](Tensor t) { return r.clip ? clamp(t, -*r.clip, *r.clip) : t; };
  DirectionResult out;
  out.h.resize(static_cast<size_t>(r.seq));
  const bool backward = r.reverse || d == 1;
  for (int64_t i = 0; i < r.seq; ++i) {
    const int64_t t = backward ? r.seq - 1 - i : i;
    Tensor xt = reshape(slice(xw, 0, t, t + 1), {r.batch, G * H});
    if (r.cell == Cell::gru) {
      // z and r from x and h; the candidate's recurrent term depends on linear_before_reset.
      Tensor rz = matmul(h, slice(rw, 0, 0, 2 * H), false, true);
      if (rb.valid()) rz = rz + slice(rb, 0, 0, 2 * H);
      Tensor z = r.f[a0](clipped(gate(xt, H, 0) + gate(rz, H, 0)));
      Tensor rr = r.f[a0](clipped(gate(xt, H, 1) + gate(rz, H, 1)));
      Tensor rh_w = slice(rw, 0, 2 * H, 3 * H);
      Tensor rh_b = rb.valid() ? slice(rb, 0, 2 * H, 3 * H) : Tensor{};
      Tensor rec = r.linear_before_reset
                       ? rr * (rh_b.valid() ? matmul(h, rh_w, false, true) + rh_b : matmul(h, rh_w, false, true))
                       : (rh_b.valid() ? matmul(rr * h, rh_w, false, true) + rh_b : matmul(rr * h, rh_w, false, true));
      Tensor cand = r.f[a0 + 1](clipped(gate(xt, H, 2) + rec));
      h = (1.0 - z) * cand + z * h;
    } else {
      Tensor pre = xt + matmul(h, rw, false, true);
      if (rb.valid()) pre = pre + rb;
      if (r.cell == Cell::rnn) {
        h = r.f[a0](clipped(pre));
      } else {  // gates i, o, f, c; peepholes i, o, f
        Tensor pi = gate(pre, H, 0), po = gate(pre, H, 1), pf = gate(pre, H, 2), pc = gate(pre, H, 3);
        if (p.valid()) {
          pi = pi + gate(p, H, 0) * cell;
          pf = pf + gate(p, H, 2) * cell;
        }
        Tensor it = r.f[a0](clipped(pi)), ft = r.f[a0](clipped(pf)), ct = r.f[a0 + 1](clipped(pc));
        cell = ft * cell + it * ct;
        if (p.valid()) po = po + gate(p, H, 1) * cell;
        Tensor ot = r.f[a0](clipped(po));
        h = ot * r.f[a0 + 2](cell);
      }
    }
    out.h[static_cast<size_t>(t)] = h;
  }
  out.last_h = h;
  out.last_c = cell;
  return out;
}

void convert_recurrent(NodeContext& c, Cell cell) {
  const Recurrence r = recurrence(c, cell);
  Tensor x = c.in(0);
  if (!is_float(x.dtype())) c.fail("X must be a float tensor");
  Tensor x_steps = r.batch_first ? permute(x, {1, 0, 2}) : x;  // [seq, batch, input]
  std::vector<DirectionResult> dirs;
  for (int d = 0; d < r.directions; ++d) dirs.push_back(run_direction(c, r, x_steps, d));
  const int64_t H = r.hidden;
  if (c.wants(0)) {
    // Y: [seq, directions, batch, hidden] (layout 1: [batch, seq, directions, hidden]).
    std::vector<Tensor> steps;
    for (int64_t t = 0; t < r.seq; ++t) {
      std::vector<Tensor> per_dir;
      for (const auto& d : dirs) per_dir.push_back(reshape(d.h[static_cast<size_t>(t)], {1, 1, r.batch, H}));
      steps.push_back(per_dir.size() == 1 ? per_dir[0] : concat(per_dir, 1));
    }
    Tensor y = steps.size() == 1 ? steps[0] : concat(steps, 0);
    c.out(0, r.batch_first ? permute(y, {2, 0, 1, 3}) : y, c.type(0));
  }
  auto stacked = [&](Tensor DirectionResult::*field) {
    std::vector<Tensor> v;
    for (const auto& d : dirs) v.push_back(reshape(d.*field, {1, r.batch, H}));
    Tensor s = v.size() == 1 ? v[0] : concat(v, 0);  // [directions, batch, hidden]
    return r.batch_first ? permute(s, {1, 0, 2}) : s;
  };
  if (c.wants(1)) c.out(1, stacked(&DirectionResult::last_h), c.type(0));
  if (cell == Cell::lstm && c.wants(2)) c.out(2, stacked(&DirectionResult::last_c), c.type(0));
}

}  // namespace

void add_recurrent_converters(ConverterTable& t) {
  t.add("RNN", [](NodeContext& c) { convert_recurrent(c, Cell::rnn); });
  t.add("GRU", [](NodeContext& c) { convert_recurrent(c, Cell::gru); });
  t.add("LSTM", [](NodeContext& c) { convert_recurrent(c, Cell::lstm); });
}

}  // namespace mn::onnx
