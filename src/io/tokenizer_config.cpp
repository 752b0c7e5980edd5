// tokenizer_config.json (transformers): bos/eos/pad tokens, add_bos_token,
// clean_up_tokenization_spaces, the chat template.
#include "io/json_walker.h"
#include "io/tokenizer_impl.h"

namespace mn::io {
namespace {

using nlohmann::json;

// A token given as "text", {"content": "text", ...} or null.
std::optional<std::string> token_text(const JsonWalker& f, const json& cfg, const char* name) {
  const json* t = f.optional(cfg, name);
  if (!t) return std::nullopt;
  if (t->is_object())
    return f.string(f.required(*t, name, "content"), std::string(name) + ".content");
  return f.string(*t, name);
}

std::optional<int32_t> token_id(const JsonWalker& f, const json& cfg, const char* name,
                                const Tokenizer::Impl& impl) {
  auto text = token_text(f, cfg, name);
  if (!text) return std::nullopt;
  auto id = impl.find(*text);
  if (!id) f.fail(name, "\"" + *text + "\" is not a token of the tokenizer");
  return id;
}

// chat_template is a string, or a list of {"name", "template"} of which "default" is used.
std::string chat_template(const JsonWalker& f, const json& cfg) {
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

}  // namespace

void parse_tokenizer_config(std::string_view text, const std::string& source,
                            Tokenizer::Impl& out) {
  const JsonWalker f(source);
  const json cfg = f.parse(text);
  f.object(cfg, "(root)");
  TokenizerConfig& c = out.config;
  c.source = source;
  c.bos_id = token_id(f, cfg, "bos_token", out);
  c.eos_id = token_id(f, cfg, "eos_token", out);
  c.pad_id = token_id(f, cfg, "pad_token", out);
  c.bos_text = token_text(f, cfg, "bos_token").value_or("");
  c.add_bos_token = f.boolean(cfg, "(root)", "add_bos_token", false);
  c.clean_up_spaces = f.boolean(cfg, "(root)", "clean_up_tokenization_spaces", false);
  c.chat = analyze_chat_template(chat_template(f, cfg));
}

}  // namespace mn::io
