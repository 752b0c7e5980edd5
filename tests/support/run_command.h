#pragma once
// Runs the `mn` command line (or any command) as a user would, for tests of its exit codes and
// output.
#include <sys/wait.h>
#include <unistd.h>

#include <array>
#include <cstdio>
#include <string>
#include <vector>

namespace mn::test {

struct CommandResult {
  int exit_code = -1;
  std::string out;  // standard output
  std::string err;  // standard error
};

// Runs `command` through the shell with `stdin_text` on standard input. Standard error is
// captured through a temporary file.
inline CommandResult run_shell(const std::string& command_line, const std::string& stdin_text = {}) {
  char err_path[] = "/tmp/mn_test_stderr_XXXXXX";
  const int fd = mkstemp(err_path);
  if (fd >= 0) close(fd);
  char in_path[] = "/tmp/mn_test_stdin_XXXXXX";
  const int in_fd = mkstemp(in_path);
  if (in_fd >= 0) {
    if (write(in_fd, stdin_text.data(), stdin_text.size()) < 0) {}
    close(in_fd);
  }
  const std::string command = command_line + " <" + in_path + " 2>" + err_path;
  CommandResult r;
  if (FILE* p = popen(command.c_str(), "r")) {
    std::array<char, 4096> buf;
    size_t n;
    while ((n = fread(buf.data(), 1, buf.size(), p)) > 0) r.out.append(buf.data(), n);
    const int status = pclose(p);
    r.exit_code = WIFEXITED(status) ? WEXITSTATUS(status) : -1;
  }
  if (FILE* f = std::fopen(err_path, "rb")) {
    std::array<char, 4096> buf;
    size_t n;
    while ((n = std::fread(buf.data(), 1, buf.size(), f)) > 0) r.err.append(buf.data(), n);
    std::fclose(f);
  }
  std::remove(err_path);
  std::remove(in_path);
  return r;
}

// Runs `build/bin/mn <args>` (args are shell words: quote them).
inline CommandResult run_mn(const std::string& args, const std::string& stdin_text = {}) {
  return run_shell(std::string(MN_BINARY_DIR) + "/mn " + args, stdin_text);
}

// A shell word holding `s` exactly.
inline std::string shell_quoted(const std::string& s) {
  std::string q = "'";
  for (char c : s) q += c == '\'' ? std::string("'\\''") : std::string(1, c);
  return q + "'";
}

// The same with each argument passed as one word, whatever it contains.
inline CommandResult run_mn(const std::vector<std::string>& args, const std::string& stdin_text = {}) {
  std::string words;
  for (const std::string& a : args) words += (words.empty() ? "" : " ") + shell_quoted(a);
  return run_mn(words, stdin_text);
}

// The last line of a command's standard output (its JSON summary).
inline std::string last_line(const std::string& out) {
  std::string s = out;
  while (!s.empty() && s.back() == '\n') s.pop_back();
  const size_t nl = s.rfind('\n');
  return nl == std::string::npos ? s : s.substr(nl + 1);
}

}  // namespace mn::test
