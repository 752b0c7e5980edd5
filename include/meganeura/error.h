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

// An index outside its range: a gather/take or scatter_add index, a one_hot index, a class
// target of cross_entropy or nll_loss, a KV-cache position. The reference raises it while
// evaluating; a session raises it after the step whose kernels read the index (they never
// touch memory outside their tensors: such an index reads zero or is skipped).
class IndexError : public Error {
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
