#pragma once
// Every user-facing failure is an mn::Error whose message says what was wrong and where.
#include <stdexcept>
#include <string>

namespace mn {

class Error : public std::runtime_error {
 public:
  explicit Error(const std::string& what) : std::runtime_error(what) {}
};

// Shape or dtype inference rejected an op's inputs.
class ShapeError : public Error {
 public:
  using Error::Error;
};

// A file (model, checkpoint, data set) is malformed or missing.
class FormatError : public Error {
 public:
  using Error::Error;
};

// The GPU layer failed: no device, a Vulkan call failed, a shader did not compile.
class DeviceError : public Error {
 public:
  using Error::Error;
};

}  // namespace mn
