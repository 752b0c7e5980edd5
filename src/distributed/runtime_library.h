#pragma once
// What the engines' run-time libraries (Open MPI, the CUDA driver, NCCL) share: opening one by
// its name or an environment variable's, binding its entry points, and loading it once per
// process with a failure remembered for every later use.
#include <dlfcn.h>

#include <cstdlib>
#include <functional>
#include <mutex>
#include <string>

#include <meganeura/error.h>

namespace mn::dist {

struct OpenedLibrary {
  void* handle = nullptr;
  std::string file;  // as opened: the default or $env_var
  std::string missing_why;  // dlerror() when it could not be opened
};

// dlopen of $env_var, else `default_file`.
inline OpenedLibrary open_library(const char* env_var, const char* default_file, int flags) {
  const char* env = std::getenv(env_var);
  OpenedLibrary l;
  l.file = env && *env ? env : default_file;
  l.handle = dlopen(l.file.c_str(), flags);
  if (!l.handle) {
    const char* why = dlerror();
    l.missing_why = why ? why : "?";
  }
  return l;
}

// `fn` bound to the entry point `name`, or an mn::Error "<what> '<file>' has no symbol <name>
// (<hint>)".
template <typename F>
void bind(const OpenedLibrary& l, const char* name, F& fn, const char* what, const char* hint) {
  fn = reinterpret_cast<F>(dlsym(l.handle, name));
  if (!fn) {
    throw Error(std::string(what) + " '" + l.file + "' has no symbol " + name + " (" + hint + ")");
  }
}

// load() run once per process; its mn::Error is thrown again on every later call.
template <typename Library>
const Library& load_once(const std::function<Library()>& load) {
  static std::once_flag once;
  static Library lib;
  static std::string failure;
  std::call_once(once, [&] {
    try {
      lib = load();
    } catch (const Error& e) {
      failure = e.what();
    }
  });
  if (!failure.empty()) throw Error(failure);
  return lib;
}

}  // namespace mn::dist
