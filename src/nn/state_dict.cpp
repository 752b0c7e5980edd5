// state_dict / load_state_dict between a module's slots and a Session, as arrays or through
// safetensors files in PyTorch's dtypes. Loading is strict: every key of the module once, no
// other, each with its shape and dtype, all checked before any value is written.
#include <set>
#include <vector>

#include <meganeura/nn.h>
#include <meganeura/session.h>

#include "ir/quoted_list.h"

namespace mn::nn {

namespace {

std::string context(const Module& m, const std::string& what) { return what + " of " + m.where(); }

// Missing and unexpected keys, all of them in one message.
void check_keys(const Module& m, const std::string& what, const std::vector<StateEntry>& entries,
                const std::set<std::string>& keys) {
  std::vector<std::string> missing, unexpected;
  std::set<std::string> known;
  for (const StateEntry& e : entries) {
    known.insert(e.key);
    if (!keys.count(e.key)) missing.push_back(e.key);
  }
  for (const std::string& k : keys) {
    if (!known.count(k)) unexpected.push_back(k);
  }
  if (missing.empty() && unexpected.empty()) return;
  std::string msg = context(m, what) + ":";
  if (!missing.empty()) msg += " missing keys " + quoted_list(missing) + ";";
  if (!unexpected.empty()) msg += " unexpected keys " + quoted_list(unexpected) + ";";
  msg.pop_back();
  throw Error(msg);
}

// The session must hold the entry's tensor: a module whose forward() no graph of the session
// called has no tensors there.
void require_in_session(const Module& m, const std::string& what, const Session& s,
                        const StateEntry& e) {
  const std::vector<std::string> names = e.slot.buffer ? s.state_names() : s.parameter_names();
  for (const std::string& n : names) {
    if (n == e.graph_name) return;
  }
  throw Error(context(m, what) + ": '" + e.key + "' (graph tensor '" + e.graph_name +
              "') is not in the session: no graph of it called this module's forward()");
}

void check_shape(const Module& m, const std::string& what, const StateEntry& e,
                 const Shape& shape) {
  if (shape != e.slot.type.shape) {
    throw ShapeError(context(m, what) + ": '" + e.key + "' has shape " + shape_str(shape) +
                     ", the module expects " + shape_str(e.slot.type.shape));
  }
}

}  // namespace

StateDict state_dict(const Module& m, const Session& s) {
  StateDict out;
  for (const StateEntry& e : m.state_entries()) {
    require_in_session(m, "state_dict", s, e);
    out[e.key] = s.get(e.graph_name);
  }
  return out;
}

void load_state_dict(const Module& m, Session& s, const StateDict& values) {
  const std::string what = "load_state_dict";
  const std::vector<StateEntry> entries = m.state_entries();
  std::set<std::string> keys;
  for (const auto& [k, v] : values) keys.insert(k);
  check_keys(m, what, entries, keys);
  for (const StateEntry& e : entries) {
    const Array& a = values.at(e.key);
    check_shape(m, what, e, a.shape);
    if (a.dtype != e.slot.type.dtype) {
      throw Error(context(m, what) + ": '" + e.key + "' is " + dtype_name(a.dtype) +
                  ", the module expects " + dtype_name(e.slot.type.dtype));
    }
    require_in_session(m, what, s, e);
  }
  for (const StateEntry& e : entries) s.set(e.graph_name, values.at(e.key));
}

void save_state_dict(const Module& m, const Session& s, const std::filesystem::path& path) {
  const StateDict values = state_dict(m, s);
  std::vector<RawTensor> raw;
  std::vector<TensorView> views;
  const std::vector<StateEntry> entries = m.state_entries();
  raw.reserve(entries.size());
  for (const StateEntry& e : entries) {
    raw.push_back(
        from_array(values.at(e.key), e.slot.file_type, "save_state_dict: '" + e.key + "'"));
  }
  for (size_t i = 0; i < entries.size(); ++i) views.push_back(view(entries[i].key, raw[i]));
  // safetensors.torch.save_file writes this metadata; its loaders expect it.
  write_safetensors(path, views, {{"format", "pt"}});
}

void load_state_dict(const Module& m, Session& s, const std::filesystem::path& path) {
  const std::string what = "load_state_dict('" + path.string() + "')";
  SafetensorsReader reader(path);
  const std::vector<StateEntry> entries = m.state_entries();
  std::set<std::string> keys;
  for (const SafetensorsEntry& e : reader.entries()) keys.insert(e.name);
  check_keys(m, what, entries, keys);
  StateDict values;
  for (const StateEntry& e : entries) {
    const SafetensorsEntry& f = reader.entry(e.key);
    if (f.type != e.slot.file_type) {
      throw Error(context(m, what) + ": '" + e.key + "' is " + elem_type_name(f.type) +
                  ", the module expects " + elem_type_name(e.slot.file_type));
    }
    check_shape(m, what, e, f.shape);
    Array a = to_array(reader.raw(e.key), path.string() + ": '" + e.key + "'");
    a.dtype = e.slot.type.dtype;  // I64 counts read as i32, the buffer's dtype
    values[e.key] = std::move(a);
  }
  load_state_dict(m, s, values);
}

}  // namespace mn::nn
