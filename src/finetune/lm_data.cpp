// Token examples for causal-LM fine-tuning: plain text cut into windows, JSON lines of texts or
// chats (loss on the assistant replies only), and the per-epoch shuffled order.
#include <algorithm>
#include <random>
#include <span>
#include <string>
#include <string_view>

#include <nlohmann/json.hpp>

#include <meganeura/error.h>
#include <meganeura/finetune.h>
#include <meganeura/tokenizer.h>

#include "io/json_fields.h"

namespace mn {

namespace {

void check_sequence(int64_t sequence) {
  if (sequence < 2) {
    throw Error(
        "fine-tuning: the sequence must hold at least 2 tokens (one to predict from and one to "
        "predict), got " +
        std::to_string(sequence));
  }
}

int32_t padding_id(const Tokenizer& tok) {
  if (auto p = tok.pad_id()) return *p;
  if (auto e = tok.eos_id()) return *e;
  return 0;
}

// Appends one example of `sequence` tokens: ids and labels truncated, or padded with labels
// -100. Returns false (appending nothing) when no label has a token before it to predict from.
bool append_example(LmExamples& out, std::vector<int32_t> ids, std::vector<int32_t> labels,
                    int32_t pad) {
  const auto L = static_cast<size_t>(out.sequence);
  ids.resize(L, pad);
  labels.resize(L, kIgnoreLabel);
  if (std::all_of(labels.begin() + 1, labels.end(), [](int32_t l) { return l == kIgnoreLabel; })) {
    ++out.skipped;
    return false;
  }
  out.input_ids.insert(out.input_ids.end(), ids.begin(), ids.end());
  out.labels.insert(out.labels.end(), labels.begin(), labels.end());
  return true;
}

// Paragraphs separated by lines that are empty or hold only whitespace.
std::vector<std::string> documents(const std::string& text) {
  std::vector<std::string> docs;
  std::string current, line;
  size_t begin = 0;
  auto flush = [&] {
    if (!current.empty()) docs.push_back(current);
    current.clear();
  };
  while (begin <= text.size()) {
    size_t end = text.find('\n', begin);
    if (end == std::string::npos) end = text.size();
    line = text.substr(begin, end - begin);
    if (line.find_first_not_of(" \t\r") == std::string::npos) {
      flush();
    } else {
      if (!current.empty()) current += '\n';
      current += line;
    }
    begin = end + 1;
  }
  flush();
  return docs;
}

[[noreturn]] void line_error(const std::filesystem::path& file, size_t line,
                             const std::string& what) {
  throw FormatError(file.string() + ":" + std::to_string(line) + ": " + what);
}

std::string string_field(const nlohmann::json& o, const char* key,
                         const std::filesystem::path& file, size_t line, const std::string& where) {
  auto it = o.find(key);
  if (it == o.end() || !it->is_string())
    line_error(file, line, where + "'" + key + "' must be a string");
  return it->get<std::string>();
}

std::vector<ChatMessage> chat_messages(const nlohmann::json& list,
                                       const std::filesystem::path& file, size_t line) {
  if (!list.is_array() || list.empty())
    line_error(file, line, "'messages' must be a non-empty list");
  std::vector<ChatMessage> messages;
  for (size_t i = 0; i < list.size(); ++i) {
    const std::string where = "messages[" + std::to_string(i) + "]: ";
    if (!list[i].is_object()) line_error(file, line, where + "not an object");
    ChatMessage m{string_field(list[i], "role", file, line, where),
                  string_field(list[i], "content", file, line, where)};
    if (m.role != "system" && m.role != "user" && m.role != "assistant")
      line_error(file, line, where + "unknown role '" + m.role + "' (system, user, assistant)");
    messages.push_back(std::move(m));
  }
  return messages;
}

// The chat's ids, labelled on the tokens each assistant turn adds to the formatted
// conversation after the generation prompt that precedes it.
void chat_example(const Tokenizer& tok, const std::vector<ChatMessage>& messages,
                  std::vector<int32_t>& ids, std::vector<int32_t>& labels) {
  ids = tok.encode_chat(messages, false);
  labels.assign(ids.size(), kIgnoreLabel);
  for (size_t i = 0; i < messages.size(); ++i) {
    if (messages[i].role != "assistant") continue;
    std::span<const ChatMessage> before(messages.data(), i), through(messages.data(), i + 1);
    const size_t begin = tok.encode_chat(before, true).size();
    const size_t end = std::min(tok.encode_chat(through, false).size(), ids.size());
    for (size_t t = begin; t < end; ++t) labels[t] = ids[t];
  }
}

}  // namespace

LmExamples load_text_examples(const std::filesystem::path& file, const Tokenizer& tok,
                              int64_t sequence) {
  check_sequence(sequence);
  const std::string text = io::read_text_file(file);
  std::vector<int32_t> stream;
  for (const std::string& doc : documents(text)) {
    const std::vector<int32_t> ids = tok.encode(doc, true);
    stream.insert(stream.end(), ids.begin(), ids.end());
    if (auto eos = tok.eos_id()) stream.push_back(*eos);
  }
  LmExamples out;
  out.sequence = sequence;
  const int32_t pad = padding_id(tok);
  const auto L = static_cast<size_t>(sequence);
  for (size_t begin = 0; begin < stream.size(); begin += L) {
    const size_t end = std::min(stream.size(), begin + L);
    std::vector<int32_t> ids(stream.begin() + static_cast<std::ptrdiff_t>(begin),
                             stream.begin() + static_cast<std::ptrdiff_t>(end));
    append_example(out, ids, ids, pad);
  }
  if (out.count() == 0)
    throw FormatError(file.string() + ": no text to train on (fewer than 2 tokens)");
  return out;
}

LmExamples load_jsonl_examples(const std::filesystem::path& file, const Tokenizer& tok,
                               int64_t sequence) {
  check_sequence(sequence);
  const std::string text = io::read_text_file(file);
  LmExamples out;
  out.sequence = sequence;
  const int32_t pad = padding_id(tok);
  size_t begin = 0, line = 0;
  while (begin < text.size()) {
    size_t end = text.find('\n', begin);
    if (end == std::string::npos) end = text.size();
    const std::string_view row(text.data() + begin, end - begin);
    begin = end + 1;
    ++line;
    if (row.find_first_not_of(" \t\r") == std::string_view::npos) continue;
    nlohmann::json j;
    try {
      j = nlohmann::json::parse(row);
    } catch (const nlohmann::json::exception& e) {
      line_error(file, line, std::string("invalid JSON: ") + e.what());
    }
    if (!j.is_object()) line_error(file, line, "not a JSON object");
    std::vector<int32_t> ids, labels;
    if (j.contains("messages")) {
      chat_example(tok, chat_messages(j["messages"], file, line), ids, labels);
    } else if (j.contains("text")) {
      ids = tok.encode(string_field(j, "text", file, line, ""), true);
      labels = ids;
    } else {
      line_error(file, line, "an object with \"text\" or \"messages\" was expected");
    }
    append_example(out, std::move(ids), std::move(labels), pad);
  }
  if (out.count() == 0) throw FormatError(file.string() + ": no example with a token to train on");
  return out;
}

std::vector<int64_t> epoch_order(int64_t count, uint64_t seed, int64_t epoch) {
  std::vector<int64_t> order(static_cast<size_t>(count));
  for (int64_t i = 0; i < count; ++i) order[static_cast<size_t>(i)] = i;
  // Fisher-Yates with mt19937_64 draws reduced by modulo: the same order on every platform
  // (std::shuffle and the distributions are implementation-defined).
  std::mt19937_64 rng(seed * 0x9E3779B97F4A7C15ULL + static_cast<uint64_t>(epoch) + 1);
  for (int64_t i = count - 1; i > 0; --i) {
    const auto j = static_cast<int64_t>(rng() % static_cast<uint64_t>(i + 1));
    std::swap(order[static_cast<size_t>(i)], order[static_cast<size_t>(j)]);
  }
  return order;
}

}  // namespace mn
