#pragma once
// Chat templates without Jinja: the template text of tokenizer_config.json tells which family it
// belongs to and which of the family's options it uses, and the family's layout is written in
// C++ (chat_format.cpp).
#include <optional>
#include <span>
#include <string>

#include <meganeura/tokenizer.h>

namespace mn::io {

enum class ChatStyle { none, chatml, llama3 };

struct ChatTemplate {
  std::string text;
  ChatStyle style = ChatStyle::none;
  bool writes_bos = false;    // {{ bos_token }}
  bool trim_content = false;  // Llama 3: message['content'] | trim
  // ChatML (SmolLM2-Instruct, Qwen 2.5): the system message written when there is none.
  std::optional<std::string> default_system;
  // Llama 3.1 and later: a system header always written, with the knowledge cutoff and a date
  // (the template's date_string default, or today's date where it calls strftime_now).
  std::optional<std::string> knowledge_cutoff;
  std::string date_default;
  bool date_from_clock = false;
};

ChatTemplate analyze_chat_template(std::string text);

// The template's output; `bos` is what {{ bos_token }} writes.
std::string render_chat(const ChatTemplate& t, const std::string& bos,
                        std::span<const ChatMessage> messages, bool add_generation_prompt);

}  // namespace mn::io
