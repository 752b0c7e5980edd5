#pragma once
// Walks a parsed JSON document node by node, with errors naming the file and the JSON path
// (tokenizer.json: model.merges[3]). io/json_fields.h reads the flat objects of config files.
#include <optional>
#include <string>

#include <nlohmann/json.hpp>

#include <meganeura/error.h>

namespace mn::io {

class JsonWalker {
 public:
  explicit JsonWalker(std::string source) : source_(std::move(source)) {}

  nlohmann::json parse(std::string_view text) const {
    try {
      return nlohmann::json::parse(text);
    } catch (const nlohmann::json::exception& e) {
      throw FormatError(source_ + ": invalid JSON: " + e.what());
    }
  }

  [[noreturn]] void fail(const std::string& path, const std::string& what) const {
    throw FormatError(source_ + ": " + path + ": " + what);
  }

  const nlohmann::json& object(const nlohmann::json& j, const std::string& path) const {
    if (!j.is_object()) fail(path, "expected an object, got " + std::string(j.type_name()));
    return j;
  }

  const nlohmann::json& required(const nlohmann::json& obj, const std::string& path,
                                 const char* name) const {
    object(obj, path);
    auto it = obj.find(name);
    if (it == obj.end()) fail(path + "." + name, "missing field");
    return *it;
  }

  // The field or nullptr when absent or null.
  const nlohmann::json* optional(const nlohmann::json& obj, const char* name) const {
    auto it = obj.find(name);
    if (it == obj.end() || it->is_null()) return nullptr;
    return &*it;
  }

  std::string string(const nlohmann::json& j, const std::string& path) const {
    if (!j.is_string()) fail(path, "expected a string, got " + std::string(j.type_name()));
    return j.get<std::string>();
  }

  bool boolean(const nlohmann::json& obj, const std::string& path, const char* name,
               bool fallback) const {
    const nlohmann::json* f = optional(obj, name);
    if (!f) return fallback;
    if (!f->is_boolean()) fail(path + "." + name, "expected true or false");
    return f->get<bool>();
  }

  int32_t id(const nlohmann::json& j, const std::string& path) const {
    if (!j.is_number_integer() || j.get<int64_t>() < 0 || j.get<int64_t>() > INT32_MAX) {
      fail(path, "expected a non-negative 32-bit integer id");
    }
    return static_cast<int32_t>(j.get<int64_t>());
  }

  const std::string& source() const { return source_; }

 private:
  std::string source_;
};

}  // namespace mn::io
