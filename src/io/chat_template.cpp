#include "io/chat_template.h"

namespace mn::io {
namespace {

bool has(const std::string& t, std::string_view s) { return t.find(s) != std::string::npos; }

// The inside of a Jinja string literal from `from` up to `stop` (exclusive), escapes resolved;
// nullopt if the stretch is not plain literal text (a quote or an expression in it).
std::optional<std::string> literal_until(const std::string& t, size_t from, std::string_view stop) {
  const size_t end = t.find(stop, from);
  if (end == std::string::npos) return std::nullopt;
  std::string out;
  for (size_t i = from; i < end; ++i) {
    const char c = t[i];
    if (c == '\'' || c == '"' || c == '{' || c == '}') return std::nullopt;
    if (c == '\\' && i + 1 < end) {
      const char e = t[++i];
      out += e == 'n' ? '\n' : e == 't' ? '\t' : e;
    } else {
      out += c;
    }
  }
  return out;
}

// Skips a newline written raw or as the escape \n at `at`; npos if neither is there.
size_t after_newline(const std::string& t, size_t at) {
  if (t.compare(at, 1, "\n") == 0) return at + 1;
  if (t.compare(at, 2, "\\n") == 0) return at + 2;
  return std::string::npos;
}

// '<|im_start|>system\n<text><|im_end|>' as one literal: SmolLM2-Instruct writes it with a raw
// newline, Qwen 2.5 with the escape.
std::optional<std::string> default_system_prompt(const std::string& t) {
  const std::string head = "<|im_start|>system";
  for (size_t at = t.find(head); at != std::string::npos; at = t.find(head, at + 1)) {
    const size_t text = after_newline(t, at + head.size());
    if (text == std::string::npos) continue;
    if (auto literal = literal_until(t, text, "<|im_end|>")) return literal;
  }
  return std::nullopt;
}

// "Cutting Knowledge Date: December 2023\n" as a literal.
std::optional<std::string> knowledge_cutoff(const std::string& t) {
  const std::string head = "Cutting Knowledge Date: ";
  const size_t at = t.find(head);
  if (at == std::string::npos) return std::nullopt;
  for (std::string_view stop : {"\\n", "\n"}) {
    auto literal = literal_until(t, at + head.size(), stop);
    if (literal && literal->find('\n') == std::string::npos) return literal;
  }
  return std::nullopt;
}

// set date_string = "26 Jul 2024"
std::string date_default(const std::string& t) {
  const std::string head = "date_string = \"";
  const size_t at = t.find(head);
  if (at == std::string::npos) return {};
  return literal_until(t, at + head.size(), "\"").value_or("");
}

}  // namespace

ChatTemplate analyze_chat_template(std::string text) {
  ChatTemplate c;
  c.text = std::move(text);
  const std::string& t = c.text;
  c.writes_bos = has(t, "bos_token");
  if (has(t, "<|start_header_id|>") && has(t, "<|end_header_id|>") && has(t, "<|eot_id|>")) {
    c.style = ChatStyle::llama3;
    c.trim_content = has(t, "| trim") || has(t, "|trim");
    c.knowledge_cutoff = knowledge_cutoff(t);
    c.date_default = date_default(t);
    c.date_from_clock = has(t, "strftime_now");
  } else if (has(t, "<|im_start|>") && has(t, "<|im_end|>")) {
    c.style = ChatStyle::chatml;
    c.default_system = default_system_prompt(t);
  }
  return c;
}

}  // namespace mn::io
