// The module tree: declarations, names (PyTorch's state_dict keys), modes and the graph tensors
// that a forward() reads.
#include <meganeura/nn.h>

namespace mn::nn {

namespace {

// FNV-1a over the seed's bytes and the name: a parameter's initial values depend only on the
// tree's seed and its own name.
uint64_t name_seed(uint64_t seed, const std::string& name) {
  uint64_t h = 1469598103934665603ull;
  auto mix = [&](uint8_t b) {
    h ^= b;
    h *= 1099511628211ull;
  };
  for (int i = 0; i < 8; ++i) mix(static_cast<uint8_t>(seed >> (8 * i)));
  for (char c : name) mix(static_cast<uint8_t>(c));
  return h;
}

bool is_random(Init::Kind k) {
  return k != Init::Kind::zeros && k != Init::Kind::ones && k != Init::Kind::constant;
}

}  // namespace

std::string Module::path() const {
  if (!parent_) return "";
  const std::string up = parent_->path();
  return up.empty() ? local_name_ : up + "." + local_name_;
}

std::string Module::where() const {
  const std::string p = path();
  return kind_ + (p.empty() ? std::string(" (root)") : " '" + p + "'");
}

Tensor Module::forward(Tensor) {
  throw Error(where() + ": this module has no one-input forward()");
}

Module& Module::train(bool on) {
  training_ = on;
  for (auto& [name, c] : children_) c->train(on);
  return *this;
}

const Module& Module::root() const {
  const Module* m = this;
  while (m->parent_) m = m->parent_;
  return *m;
}

Module& Module::seed(uint64_t s) {
  const_cast<Module&>(root()).seed_ = s;
  return *this;
}

uint64_t Module::seed() const { return root().seed_; }

void Module::check_new_name(const std::string& name) const {
  if (name.empty() || name.find('.') != std::string::npos) {
    throw Error(where() + ": invalid name '" + name + "' (non-empty, without '.')");
  }
  for (const Slot& s : slots_) {
    if (s.name == name) throw Error(where() + ": '" + name + "' is declared twice");
  }
  for (const auto& [n, c] : children_) {
    if (n == name) throw Error(where() + ": '" + name + "' is declared twice");
  }
}

void Module::reset_init(const std::string& name, Init init) {
  for (Slot& s : slots_) {
    if (s.name == name) {
      s.init = init;
      return;
    }
  }
  throw Error(where() + ": no parameter or buffer named '" + name + "'");
}

void Module::register_parameter(std::string name, Shape shape, Init init, DType dtype) {
  check_new_name(name);
  if (!is_float(dtype)) throw Error(where() + ": parameter '" + name + "' must be a float");
  TensorType type{std::move(shape), dtype};
  check_tensor_size(type, where() + " parameter '" + name + "'");
  slots_.push_back(Slot{std::move(name), std::move(type), init, false, elem_type_for(dtype)});
}

void Module::register_buffer(std::string name, Shape shape, Init init, DType dtype,
                             std::optional<ElemType> file_type) {
  check_new_name(name);
  TensorType type{std::move(shape), dtype};
  check_tensor_size(type, where() + " buffer '" + name + "'");
  slots_.push_back(
      Slot{std::move(name), std::move(type), init, true, file_type.value_or(elem_type_for(dtype))});
}

void Module::adopt(const std::string& name, std::shared_ptr<Module> m) {
  if (!m) throw Error(where() + ": child '" + name + "' is null");
  check_new_name(name);
  if (m->parent_) {
    throw Error(where() + ": " + m->where() + " already has a parent (one module, one place)");
  }
  for (const Module* a = this; a; a = a->parent_) {
    if (a == m.get()) throw Error(where() + ": adopting '" + name + "' would make a cycle");
  }
  m->parent_ = this;
  m->local_name_ = name;
  m->train(training_);
  children_.emplace_back(name, std::move(m));
}

std::shared_ptr<Module> Module::child(const std::string& name) const {
  for (const auto& [n, c] : children_) {
    if (n == name) return c;
  }
  throw Error(where() + " has no child '" + name + "'");
}

const Slot& Module::slot(const std::string& name) const {
  for (const Slot& s : slots_) {
    if (s.name == name) return s;
  }
  throw Error(where() + " declares no parameter or buffer '" + name + "'");
}

Tensor Module::tensor(Graph& g, const std::string& name) const {
  const Slot& s = slot(name);
  const std::string p = path();
  const std::string full = p.empty() ? name : p + "." + name;
  if (auto id = g.find_persistent(full)) {
    const Node& n = g.node(*id);
    const bool is_state = n.op_name() == "state";
    if (n.type != s.type || is_state != s.buffer) {
      throw Error(where() + ": the graph already has '" + full + "' as " +
                  (is_state ? "a state " : "a parameter ") + n.type.str() +
                  ", the module declares " + (s.buffer ? "a buffer " : "a parameter ") +
                  s.type.str());
    }
    return g.tensor(*id);
  }
  Init init = s.init;
  if (is_random(init.kind)) init.seed = name_seed(seed() ^ init.seed, full);
  return s.buffer ? g.state(full, s.type.shape, init, s.type.dtype)
                  : g.parameter(full, s.type.shape, init, s.type.dtype);
}

uint64_t Module::op_seed(const std::string& what) const {
  return name_seed(seed(), path() + "#" + what);
}

void Module::collect(const std::string& prefix, const std::string& graph_prefix,
                     std::vector<StateEntry>& out) const {
  for (const Slot& s : slots_) out.push_back({prefix + s.name, graph_prefix + s.name, s});
  for (const auto& [n, c] : children_) c->collect(prefix + n + ".", graph_prefix + n + ".", out);
}

std::vector<StateEntry> Module::state_entries() const {
  std::vector<StateEntry> out;
  const std::string p = path();
  collect("", p.empty() ? "" : p + ".", out);
  return out;
}

std::vector<StateEntry> Module::named_parameters() const {
  std::vector<StateEntry> out;
  for (StateEntry& e : state_entries()) {
    if (!e.slot.buffer) out.push_back(std::move(e));
  }
  return out;
}

std::vector<StateEntry> Module::named_buffers() const {
  std::vector<StateEntry> out;
  for (StateEntry& e : state_entries()) {
    if (e.slot.buffer) out.push_back(std::move(e));
  }
  return out;
}

// ---- containers ----

Sequential::Sequential(std::vector<std::shared_ptr<Module>> modules) : Module("Sequential") {
  for (auto& m : modules) push_back(std::move(m));
}

void Sequential::push_back(std::shared_ptr<Module> m) {
  adopt(std::to_string(size()), std::move(m));
}

std::shared_ptr<Module> Sequential::operator[](size_t i) const {
  if (i >= size()) {
    throw Error(where() + ": index " + std::to_string(i) + " of " + std::to_string(size()));
  }
  return named_children()[i].second;
}

Tensor Sequential::forward(Tensor x) {
  for (const auto& [name, m] : named_children()) x = m->forward(x);
  return x;
}

void ModuleList::push_back(std::shared_ptr<Module> m) {
  adopt(std::to_string(size()), std::move(m));
}

std::shared_ptr<Module> ModuleList::operator[](size_t i) const {
  if (i >= size()) {
    throw Error(where() + ": index " + std::to_string(i) + " of " + std::to_string(size()));
  }
  return named_children()[i].second;
}

}  // namespace mn::nn
