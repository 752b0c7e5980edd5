// Chat formatting for the two template families the supported models use. We do not run Jinja:
// the template's text tells which family it is (tokenizer_config.cpp), and the family's layout
// is written here.
#include "io/tokenizer_impl.h"

namespace mn {

std::string Tokenizer::format_chat(std::span<const ChatMessage> messages,
                                   bool add_generation_prompt) const {
  const io::TokenizerConfig& c = impl_->config;
  std::string out;
  switch (c.chat_style) {
    case io::ChatStyle::chatml:
      if (c.default_system && !messages.empty() && messages.front().role != "system") {
        out += "<|im_start|>system\n" + *c.default_system + "<|im_end|>\n";
      }
      for (const auto& m : messages) {
        out += "<|im_start|>" + m.role + "\n" + m.content + "<|im_end|>\n";
      }
      if (add_generation_prompt) out += "<|im_start|>assistant\n";
      return out;
    case io::ChatStyle::llama3:
      if (c.template_writes_bos) out += c.bos_text;
      for (const auto& m : messages) {
        out += "<|start_header_id|>" + m.role + "<|end_header_id|>\n\n" + m.content + "<|eot_id|>";
      }
      if (add_generation_prompt) out += "<|start_header_id|>assistant<|end_header_id|>\n\n";
      return out;
    case io::ChatStyle::none: break;
  }
  throw UnsupportedTokenizerError(
      (c.source.empty() ? impl_->source + " (no tokenizer_config.json)" : c.source) + ": chat_template " +
      (c.chat_template.empty() ? std::string("is missing")
                               : "is neither ChatML (<|im_start|>) nor Llama 3 "
                                 "(<|start_header_id|>); other templates") +
      (c.chat_template.empty() ? " (format_chat needs tokenizer_config.json's chat_template)"
                               : " are not supported"));
}

std::vector<int32_t> Tokenizer::encode_chat(std::span<const ChatMessage> messages,
                                            bool add_generation_prompt) const {
  return encode(format_chat(messages, add_generation_prompt), false);
}

}  // namespace mn
