#include "train/checkpoint.h"

#include <charconv>
#include <cmath>
#include <map>
#include <set>
#include <string>

namespace mn::train {

namespace {

[[noreturn]] void mismatch(const RunShape& o, const std::string& what) {
  throw Error("cannot resume from '" + o.resume.string() + "': " + what);
}

const std::string& meta_field(const Meta& meta, const RunShape& o, const std::string& key) {
  auto it = meta.find(key);
  if (it == meta.end()) {
    throw FormatError("cannot resume from '" + o.resume.string() +
                      "': checkpoint metadata lacks '" + key + "'");
  }
  return it->second;
}

// The whole text as a decimal integer, nothing before or after it.
int64_t meta_int(const Meta& meta, const RunShape& o, const std::string& key) {
  const std::string& text = meta_field(meta, o, key);
  int64_t v = 0;
  const auto [end, ec] = std::from_chars(text.data(), text.data() + text.size(), v);
  if (ec != std::errc() || end != text.data() + text.size() || text.empty()) {
    throw FormatError("cannot resume from '" + o.resume.string() + "': checkpoint metadata '" +
                      key + "' is '" + text + "', expected an integer");
  }
  return v;
}

void expect_field(const Meta& meta, const RunShape& o, const std::string& key,
                  const std::string& expected) {
  const std::string& found = meta_field(meta, o, key);
  if (found != expected) {
    mismatch(o,
             "'" + key + "' is '" + found + "' in the checkpoint, this run has '" + expected + "'");
  }
}

void check_format(const Meta& meta, const RunShape& o) {
  auto it = meta.find("format");
  const std::string family = "meganeura-checkpoint-";
  if (it == meta.end() || it->second.rfind(family, 0) != 0) {
    throw FormatError("cannot resume from '" + o.resume.string() +
                      "': not a meganeura training checkpoint (no 'format' " + family +
                      "N in its metadata)");
  }
  if (it->second != kCheckpointFormat && it->second != kCheckpointFormatInOut) {
    mismatch(o, "checkpoint format '" + it->second + "', this build reads '" +
                    std::string(kCheckpointFormat) + "' and '" + kCheckpointFormatInOut + "'");
  }
}

// A fully connected weight of format 1 ("fc2.weight") or its optimizer state
// ("fc2.weight/exp_avg"): stored [in, out] there.
bool stored_in_out(const std::string& name, const Array& current) {
  const std::string base = name.substr(0, name.find('/'));
  const std::string suffix = ".weight";
  return current.rank() == 2 && base.rfind("fc", 0) == 0 && base.size() > suffix.size() &&
         base.compare(base.size() - suffix.size(), suffix.size(), suffix) == 0;
}

Array transposed(const Array& a) {
  const int64_t rows = a.shape[0], cols = a.shape[1];
  Array t({cols, rows}, a.dtype);
  for (int64_t i = 0; i < rows; ++i) {
    for (int64_t j = 0; j < cols; ++j)
      t.data[static_cast<size_t>(j * rows + i)] = a.data[static_cast<size_t>(i * cols + j)];
  }
  return t;
}

// Every tensor the session keeps, with the checkpoint's dtype and shape; nothing else.
void load_tensors(const SafetensorsReader& reader, Session& s, const RunShape& o) {
  const bool in_out = reader.metadata().at("format") == kCheckpointFormatInOut;
  std::vector<std::string> names = s.parameter_names();
  for (const std::string& n : s.state_names()) {
    if (!o.transient.count(n)) names.push_back(n);
  }
  const std::set<std::string> wanted(names.begin(), names.end());
  for (const SafetensorsEntry& e : reader.entries()) {
    if (!wanted.count(e.name)) mismatch(o, "tensor '" + e.name + "' is not part of this run");
  }
  for (const std::string& n : names) {
    if (!reader.contains(n)) mismatch(o, "the checkpoint lacks tensor '" + n + "'");
    const SafetensorsEntry& e = reader.entry(n);
    const Array current = s.get(n);
    const ElemType want = elem_type_for(current.dtype);
    if (e.type != want) {
      mismatch(o, "tensor '" + n + "' is " + elem_type_name(e.type) + ", expected " +
                      elem_type_name(want));
    }
    Shape expected = current.shape;
    if (in_out && stored_in_out(n, current)) std::swap(expected[0], expected[1]);
    if (e.shape != expected) {
      mismatch(o, "tensor '" + n + "' has shape " + shape_str(e.shape) + ", expected " +
                      shape_str(expected));
    }
  }
  for (const std::string& n : names) {
    Array a = reader.array(n);
    s.set(n, in_out && stored_in_out(n, a) ? transposed(a) : a);
  }
}

// `a` itself, or an mn::Error naming the first NaN or Inf in it.
Array require_finite(Array a, const std::string& name, const char* kind, int64_t global_step) {
  for (size_t i = 0; i < a.data.size(); ++i) {
    if (std::isfinite(a.data[i])) continue;
    throw Error("training diverged: " + std::string(kind) + " '" + name + "' holds " +
                std::to_string(a.data[i]) + " at element " + std::to_string(i) + " after step " +
                std::to_string(global_step) + " (lower the learning rate?)");
  }
  return a;
}

}  // namespace

void save_checkpoint(const std::filesystem::path& path, Session& s, const Meta& identity,
                     int64_t global_step, DataLoader::Position next, const Meta& extra,
                     const std::set<std::string>& transient) {
  // One read of every tensor, checked as it is read: a diverged run is never saved.
  std::map<std::string, Array> arrays;
  for (const std::string& n : s.parameter_names()) {
    arrays[n] = require_finite(s.get(n), n, "parameter", global_step);
  }
  for (const std::string& n : s.state_names()) {
    if (transient.count(n)) continue;
    arrays[n] = require_finite(s.get(n), n, "optimizer state", global_step);
  }
  Meta meta = extra;
  for (const auto& [key, value] : identity) meta[key] = value;
  meta["format"] = kCheckpointFormat;
  meta["global_step"] = std::to_string(global_step);
  meta["next_epoch"] = std::to_string(next.epoch);
  meta["next_step"] = std::to_string(next.step);
  save_safetensors(path, arrays, meta);
}

ResumePoint load_checkpoint(Session& s, const RunShape& run) {
  SafetensorsReader reader(run.resume);
  const ResumePoint r = resume_point(reader.metadata(), run);
  load_tensors(reader, s, run);
  return r;
}

ResumePoint resume_point(const Meta& meta, const RunShape& o) {
  check_format(meta, o);
  for (const auto& [key, value] : o.identity) expect_field(meta, o, key, value);
  const int64_t per_epoch = o.per_epoch, total = o.total;
  ResumePoint r;
  r.meta = meta;
  r.global_step = meta_int(meta, o, "global_step");
  r.next = {meta_int(meta, o, "next_epoch"), meta_int(meta, o, "next_step")};
  if (r.global_step < 0) mismatch(o, "'global_step' is " + std::to_string(r.global_step));
  int64_t position = 0;  // the step the data position stands for (no overflow past int64)
  if (r.next.epoch < 0 || r.next.step < 0 || r.next.step >= per_epoch ||
      __builtin_mul_overflow(r.next.epoch, per_epoch, &position) ||
      __builtin_add_overflow(position, r.next.step, &position) || position != r.global_step) {
    mismatch(o, "the data position (epoch " + std::to_string(r.next.epoch) + ", batch " +
                    std::to_string(r.next.step) + ") is not step " + std::to_string(r.global_step) +
                    " of a data set of " + std::to_string(per_epoch) +
                    " batches per epoch (was it saved with another data set size?)");
  }
  if (r.global_step >= total) {
    mismatch(o, "the checkpoint has already run " + std::to_string(r.global_step) +
                    " steps, and this run has " + std::to_string(total) + " (" +
                    std::to_string(o.epochs) +
                    " epochs): nothing left to train; raise the number of epochs to continue");
  }
  return r;
}

void check_finite(Session& s, int64_t global_step) {
  for (const std::string& n : s.parameter_names()) {
    require_finite(s.get(n), n, "parameter", global_step);
  }
  for (const std::string& n : s.state_names()) {
    require_finite(s.get(n), n, "optimizer state", global_step);
  }
}

}  // namespace mn::train
