#include "io/json_fields.h"

#include <meganeura/error.h>

#include <cerrno>
#include <cmath>
#include <cstdint>
#include <cstring>
#include <fstream>
#include <sstream>

namespace mn::io {

using json = nlohmann::json;

std::string read_text_file(const std::filesystem::path& path) {
  std::ifstream f(path, std::ios::binary);
  if (!f) throw FormatError(path.string() + ": cannot open: " + std::strerror(errno));
  std::ostringstream out;
  out << f.rdbuf();
  if (f.bad()) throw FormatError(path.string() + ": read error");
  return out.str();
}

JsonFields::JsonFields(const std::string& text, std::string file) : file_(std::move(file)) {
  try {
    j_ = json::parse(text);
  } catch (const json::exception& err) {
    throw FormatError(file_ + ": invalid JSON: " + err.what());
  }
  if (!j_.is_object()) throw FormatError(file_ + ": the top level is not a JSON object");
}

JsonFields::JsonFields(json object, std::string file, std::string prefix)
    : j_(std::move(object)), file_(std::move(file)), prefix_(std::move(prefix)) {}

void JsonFields::fail(const std::string& key, const std::string& what) const {
  throw FormatError(file_ + ": field \"" + prefix_ + key + "\" " + what);
}

const json* JsonFields::find(const std::string& key) const {
  auto it = j_.find(key);
  if (it == j_.end() || it->is_null()) return nullptr;
  return &*it;
}

bool JsonFields::has(const std::string& key) const { return find(key) != nullptr; }

namespace {

// The value as an int64 when it is one: an integer within int64, or an integral float within
// it (some writers emit 8192.0).
std::optional<int64_t> int64_value(const json& v) {
  if (v.is_number_unsigned()) {
    const uint64_t u = v.get<uint64_t>();
    if (u > static_cast<uint64_t>(INT64_MAX)) return std::nullopt;
    return static_cast<int64_t>(u);
  }
  if (v.is_number_integer()) return v.get<int64_t>();
  if (v.is_number_float()) {
    const double d = v.get<double>();
    // [-2^63, 2^63): converting anything outside (or NaN) to int64 is undefined.
    if (!(d >= -9223372036854775808.0 && d < 9223372036854775808.0)) return std::nullopt;
    if (d == std::trunc(d)) return static_cast<int64_t>(d);
  }
  return std::nullopt;
}

}  // namespace

int64_t JsonFields::as_int(const std::string& key, const json& v) const {
  if (const auto i = int64_value(v)) return *i;
  fail(key, "must be an integer (within int64), got " + v.dump());
}

int64_t JsonFields::required_int(const std::string& key) const {
  const json* v = find(key);
  if (!v) fail(key, "is missing");
  return as_int(key, *v);
}

std::optional<int64_t> JsonFields::optional_int(const std::string& key) const {
  const json* v = find(key);
  if (!v) return std::nullopt;
  return as_int(key, *v);
}

std::optional<double> JsonFields::optional_number(const std::string& key) const {
  const json* v = find(key);
  if (!v) return std::nullopt;
  if (!v->is_number()) fail(key, "must be a number, got " + v->dump());
  return v->get<double>();
}

std::optional<bool> JsonFields::optional_bool(const std::string& key) const {
  const json* v = find(key);
  if (!v) return std::nullopt;
  if (!v->is_boolean()) fail(key, "must be true or false, got " + v->dump());
  return v->get<bool>();
}

std::optional<std::string> JsonFields::optional_string(const std::string& key) const {
  const json* v = find(key);
  if (!v) return std::nullopt;
  if (!v->is_string()) fail(key, "must be a string, got " + v->dump());
  return v->get<std::string>();
}

std::vector<int64_t> JsonFields::int_or_list(const std::string& key) const {
  const json* v = find(key);
  if (!v) return {};
  if (!v->is_array()) return {as_int(key, *v)};
  std::vector<int64_t> out;
  for (const json& e : *v) {
    const auto i = e.is_number_integer() ? int64_value(e) : std::nullopt;
    if (!i) fail(key, "must be an integer or a list of integers (within int64)");
    out.push_back(*i);
  }
  return out;
}

std::optional<JsonFields> JsonFields::optional_object(const std::string& key) const {
  const json* v = find(key);
  if (!v) return std::nullopt;
  if (!v->is_object()) fail(key, "must be an object or null, got " + v->dump());
  return JsonFields(*v, file_, prefix_ + key + ".");
}

int64_t positive_size(const JsonFields& f, const std::string& key,
                      std::optional<int64_t> fallback) {
  std::optional<int64_t> v = f.optional_int(key);
  if (!v) v = fallback;
  if (!v) f.fail(key, "is missing");
  if (*v <= 0) f.fail(key, "must be positive, got " + std::to_string(*v));
  if (*v > INT32_MAX) {
    f.fail(key, "must be at most 2147483647 (sizes, token ids and positions are i32), got " +
                    std::to_string(*v));
  }
  return *v;
}

}  // namespace mn::io
