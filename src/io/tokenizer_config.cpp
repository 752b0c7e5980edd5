// tokenizer_config.json (transformers): bos/eos/pad tokens, add_bos_token, the chat template.
#include "io/json_fields.h"
#include "io/tokenizer_impl.h"

namespace mn::io {
namespace {

using nlohmann::json;

// A token given as "text", {"content": "text", ...} or null.
std::optional<std::string> token_text(const JsonFields& f, const json& cfg, const char* name) {
  const json* t = f.optional(cfg, name);
  if (!t) return std::nullopt;
  if (t->is_object()) return f.string(f.required(*t, name, "content"), std::string(name) + ".content");
  return f.string(*t, name);
}

std::optional<int32_t> token_id(const JsonFields& f, const json& cfg, const char* name,
                                const Tokenizer::Impl& impl) {
  auto text = token_text(f, cfg, name);
  if (!text) return std::nullopt;
  auto id = impl.find(*text);
  if (!id) f.fail(name, "\"" + *text + "\" is not a token of the tokenizer");
  return id;
}

// chat_template is a string, or a list of {"name", "template"} of which "default" is used.
std::string chat_template(const JsonFields& f, const json& cfg) {
  const json* t = f.optional(cfg, "chat_template");
  if (!t) return {};
  if (t->is_string()) return t->get<std::string>();
  if (!t->is_array()) f.fail("chat_template", "expected a string or a list of named templates");
  for (size_t i = 0; i < t->size(); ++i) {
    const std::string path = "chat_template[" + std::to_string(i) + "]";
    if (f.string(f.required((*t)[i], path, "name"), path + ".name") == "default") {
      return f.string(f.required((*t)[i], path, "template"), path + ".template");
    }
  }
  f.fail("chat_template", "no template named \"default\"");
}

// The text between `from` and the next "<|im_end|>" if it is the inside of one Jinja string
// literal (no quote, no expression), with its escapes resolved.
std::optional<std::string> literal_until_im_end(const std::string& t, size_t from) {
  const size_t end = t.find("<|im_end|>", from);
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

// ChatML templates of SmolLM2-Instruct and Qwen 2.5 write a fixed system message when the
// conversation has none: '<|im_start|>system\n<text><|im_end|>' as one string literal.
std::optional<std::string> default_system_prompt(const std::string& t) {
  const std::string head = "<|im_start|>system";
  for (size_t at = t.find(head); at != std::string::npos; at = t.find(head, at + 1)) {
    size_t text = at + head.size();
    if (t.compare(text, 1, "\n") == 0) {
      text += 1;
    } else if (t.compare(text, 2, "\\n") == 0) {
      text += 2;
    } else {
      continue;
    }
    if (auto literal = literal_until_im_end(t, text)) return literal;
  }
  return std::nullopt;
}

}  // namespace

void parse_tokenizer_config(std::string_view text, const std::string& source,
                            Tokenizer::Impl& out) {
  const JsonFields f(source);
  const json cfg = f.parse(text);
  f.object(cfg, "(root)");
  TokenizerConfig& c = out.config;
  c.source = source;
  c.bos_id = token_id(f, cfg, "bos_token", out);
  c.eos_id = token_id(f, cfg, "eos_token", out);
  c.pad_id = token_id(f, cfg, "pad_token", out);
  c.bos_text = token_text(f, cfg, "bos_token").value_or("");
  c.add_bos_token = f.boolean(cfg, "(root)", "add_bos_token", false);
  c.chat_template = chat_template(f, cfg);
  const std::string& t = c.chat_template;
  if (t.find("<|start_header_id|>") != std::string::npos &&
      t.find("<|end_header_id|>") != std::string::npos && t.find("<|eot_id|>") != std::string::npos) {
    c.chat_style = ChatStyle::llama3;
  } else if (t.find("<|im_start|>") != std::string::npos &&
             t.find("<|im_end|>") != std::string::npos) {
    c.chat_style = ChatStyle::chatml;
    c.default_system = default_system_prompt(t);
  }
  c.template_writes_bos = t.find("bos_token") != std::string::npos;
}

}  // namespace mn::io
