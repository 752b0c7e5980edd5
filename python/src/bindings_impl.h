#pragma once
// Templates declared in bindings.h.
#include <memory>

namespace mn::python {

template <class T>
py::array_t<T> adopt_vector(std::vector<T>&& values, const Shape& shape) {
  auto* owned = new std::vector<T>(std::move(values));
  py::capsule release(owned, [](void* p) { delete static_cast<std::vector<T>*>(p); });
  std::vector<py::ssize_t> dims(shape.begin(), shape.end());
  return py::array_t<T>(dims, owned->data(), release);
}

}  // namespace mn::python
