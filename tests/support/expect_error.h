#pragma once
// Expecting an exception of a given type whose message names what was wrong.
#include <gtest/gtest.h>

#include <initializer_list>
#include <string>
#include <utility>

#include <meganeura/error.h>

namespace mn {

// `f` throws E (or a class derived from it), and its message contains every fragment.
template <class E, class F>
void expect_error(F&& f, std::initializer_list<const char*> fragments) {
  try {
    f();
    ADD_FAILURE() << "no exception";
  } catch (const E& e) {
    for (const char* s : fragments)
      EXPECT_NE(std::string(e.what()).find(s), std::string::npos) << e.what();
  }
}

template <class F>
void expect_shape_error(F&& f, std::initializer_list<const char*> fragments) {
  expect_error<ShapeError>(std::forward<F>(f), fragments);
}

}  // namespace mn
