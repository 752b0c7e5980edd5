// Language models from Python: Hugging Face tokenizers, generation with a KV cache on the
// device (batches of prompts, streaming, stop texts) and chat conversations that keep the cache
// across turns. Defaults come from the model's generation_config.json, as `mn generate` does.
#include <meganeura/chat.h>
#include <meganeura/generate.h>
#include <meganeura/generation_options.h>
#include <meganeura/hf.h>
#include <meganeura/tokenizer.h>

#include <algorithm>

#include "bindings.h"

namespace mn::python {

namespace {

std::vector<ChatMessage> messages_of(const py::handle& messages) {
  std::vector<ChatMessage> out;
  for (const auto& m : messages) {
    if (py::isinstance<py::dict>(m)) {
      auto d = m.cast<py::dict>();
      if (!d.contains("role") || !d.contains("content")) {
        throw Error("chat message: expected {'role': ..., 'content': ...}, got " +
                    py::repr(m).cast<std::string>());
      }
      out.push_back({d["role"].cast<std::string>(), d["content"].cast<std::string>()});
    } else {
      auto [role, content] = m.cast<std::pair<std::string, std::string>>();
      out.push_back({role, content});
    }
  }
  return out;
}

// A Hugging Face causal LM on a device with its tokenizer: the model files stay open, the
// weights live in the session.
struct LanguageModel {
  HfModel model;
  Tokenizer tokenizer;
  std::unique_ptr<LmRunner> runner;
  GenerateStats last;
};

GenerationRequest request_of(int64_t max_new_tokens, std::optional<double> temperature,
                             std::optional<int64_t> top_k, std::optional<double> top_p,
                             uint64_t seed, std::vector<std::string> stop) {
  return {.temperature = temperature,
          .top_p = top_p,
          .top_k = top_k,
          .seed = seed,
          .max_new_tokens = max_new_tokens,
          .stop = std::move(stop)};
}

// Sampling and stopping of a request, resolved against the model's generation_config.json;
// `room`: the context left after the longest prompt.
std::pair<SamplingOptions, StopOptions> resolve(const LanguageModel& lm,
                                                const GenerationRequest& request, int64_t room) {
  return {resolve_sampling(request, lm.model.generation),
          resolve_stop(request, lm.model.generation, lm.tokenizer, room)};
}

// Callbacks that decode generated ids with the model's tokenizer.
GenerateCallbacks decoding(const LanguageModel& lm) {
  GenerateCallbacks cb;
  cb.decode = [&lm](std::span<const int32_t> t) { return generated_text(lm.tokenizer, t); };
  return cb;
}

// Prompts given as one text, texts, or token id lists; with chat, texts become a user turn
// (after the system message) laid out by the model's chat template.
std::vector<std::vector<int32_t>> encode_prompts(const LanguageModel& lm,
                                                 const std::vector<py::object>& prompts, bool chat,
                                                 const std::optional<std::string>& system) {
  std::vector<std::vector<int32_t>> out;
  for (const auto& p : prompts) {
    if (py::isinstance<py::str>(p)) {
      const auto text = p.cast<std::string>();
      if (text.empty()) throw Error("LanguageModel.generate: a prompt is empty");
      if (chat) {
        std::vector<ChatMessage> messages;
        if (system) messages.push_back({"system", *system});
        messages.push_back({"user", text});
        out.push_back(lm.tokenizer.encode_chat(messages, true));
      } else {
        out.push_back(lm.tokenizer.encode(text));
      }
    } else {
      if (chat) throw Error("LanguageModel.generate: chat=True takes texts, not token ids");
      out.push_back(p.cast<std::vector<int32_t>>());
      if (out.back().empty()) throw Error("LanguageModel.generate: a prompt is empty");
    }
  }
  return out;
}

py::object generate_texts(LanguageModel& lm, const py::object& prompts, int64_t max_new_tokens,
                          std::optional<double> temperature, std::optional<int64_t> top_k,
                          std::optional<double> top_p, uint64_t seed,
                          std::vector<std::string> stop, bool chat,
                          const std::optional<std::string>& system, const py::object& on_text) {
  const bool single = py::isinstance<py::str>(prompts);
  std::vector<py::object> list;
  if (single) {
    list.push_back(prompts);
  } else {
    for (const auto& p : prompts) list.push_back(py::reinterpret_borrow<py::object>(p));
  }
  const auto ids = encode_prompts(lm, list, chat, system);
  size_t longest = 0;
  for (const auto& p : ids) longest = std::max(longest, p.size());
  const auto request = request_of(max_new_tokens, temperature, top_k, top_p, seed, std::move(stop));
  const auto [sampling, stops] =
      resolve(lm, request, lm.runner->max_context() - static_cast<int64_t>(longest) + 1);
  GenerateCallbacks cb = decoding(lm);
  if (!on_text.is_none()) {
    cb.on_text = [&on_text](int64_t index, std::string_view text) {
      py::gil_scoped_acquire hold;
      on_text(index, py::str(text.data(), text.size()));
    };
  }
  std::vector<GeneratedSequence> out;
  {
    py::gil_scoped_release release;
    out = generate(*lm.runner, ids, sampling, stops, cb, {}, &lm.last);
  }
  py::list results;
  for (auto& s : out) {
    py::dict r;
    r["text"] = py::str(s.text);
    r["tokens"] = s.tokens;
    r["finish"] = finish_reason_name(s.finish);
    results.append(r);
  }
  return single ? py::object(results[0]) : py::object(results);
}

void bind_tokenizer(py::module_& lm) {
  py::class_<Tokenizer>(lm, "Tokenizer", "A Hugging Face tokenizer.json (byte-level BPE).")
      .def_static("from_dir", &Tokenizer::from_dir, py::arg("dir"),
                  "tokenizer.json and tokenizer_config.json of a model directory.")
      .def_static(
          "from_file",
          [](const std::filesystem::path& json, const std::optional<std::filesystem::path>& config) {
            return Tokenizer::from_file(json, config.value_or(std::filesystem::path()));
          },
          py::arg("tokenizer_json"), py::arg("config") = py::none())
      .def(
          "encode",
          [](const Tokenizer& t, const std::string& text, bool add_special_tokens) {
            return t.encode(text, add_special_tokens);
          },
          py::arg("text"), py::arg("add_special_tokens") = true)
      .def(
          "decode",
          [](const Tokenizer& t, const std::vector<int32_t>& ids, bool skip_special_tokens) {
            return t.decode(ids, skip_special_tokens);
          },
          py::arg("ids"), py::arg("skip_special_tokens") = false)
      .def(
          "format_chat",
          [](const Tokenizer& t, const py::object& messages, bool add_generation_prompt) {
            return t.format_chat(messages_of(messages), add_generation_prompt);
          },
          py::arg("messages"), py::arg("add_generation_prompt") = true,
          "The chat template's text (ChatML or Llama 3) of [{'role', 'content'}, ...].")
      .def(
          "encode_chat",
          [](const Tokenizer& t, const py::object& messages, bool add_generation_prompt) {
            return t.encode_chat(messages_of(messages), add_generation_prompt);
          },
          py::arg("messages"), py::arg("add_generation_prompt") = true)
      .def_property_readonly("vocab_size", &Tokenizer::vocab_size)
      .def("token_id", &Tokenizer::token_id, py::arg("token"))
      .def("token", &Tokenizer::token, py::arg("id"))
      .def_property_readonly("bos_id", &Tokenizer::bos_id)
      .def_property_readonly("eos_id", &Tokenizer::eos_id)
      .def_property_readonly("pad_id", &Tokenizer::pad_id)
      .def_property_readonly("stop_ids", &Tokenizer::stop_ids);
}

void bind_language_model(py::module_& lm) {
  py::class_<LanguageModel>(lm, "LanguageModel",
                            "A Hugging Face causal LM (Llama, Qwen2, Qwen3 directories) on a "
                            "device, with a KV cache for `batch` sequences.")
      .def(py::init([](const std::filesystem::path& dir, const py::object& dtype,
                       const py::object& precision, const std::string& device, int64_t batch,
                       int64_t max_context, const std::optional<std::filesystem::path>& adapter,
                       int64_t decode_chain) {
             LmRunnerOptions o;
             o.dtype = to_dtype(dtype, "LanguageModel dtype");
             o.precision = to_dtype(precision, "LanguageModel precision");
             if (!is_float(o.dtype) || !is_float(o.precision)) {
               throw Error("LanguageModel: dtype and precision must be f32, f16 or bf16");
             }
             if (batch < 1) throw Error("LanguageModel: batch must be >= 1");
             if (max_context < 0) throw Error("LanguageModel: max_context must be >= 0");
             o.batch = batch;
             o.max_context = max_context;
             o.decode_chain = decode_chain;  // the runner rejects a negative one
             o.device = device;
             o.adapter = adapter.value_or(std::filesystem::path());
             auto m = std::make_unique<LanguageModel>(
                 LanguageModel{load_hf_model(dir), Tokenizer::from_dir(dir), nullptr, {}});
             py::gil_scoped_release release;
             m->runner = LmRunner::create(m->model, o);
             return m;
           }),
           py::arg("dir"), py::kw_only(), py::arg("dtype") = DType::f32,
           py::arg("precision") = DType::f32, py::arg("device") = "", py::arg("batch") = 1,
           py::arg("max_context") = 0, py::arg("adapter") = py::none(), py::arg("decode_chain") = 0,
           "max_context 0: the model's, at most 2048; adapter: a PEFT LoRA directory merged "
           "into the weights; decode_chain: decode steps in one GPU submission (0: 8, 1: one "
           "a token).")
      .def("generate", &generate_texts, py::arg("prompts"), py::kw_only(),
           py::arg("max_new_tokens") = 0, py::arg("temperature") = py::none(),
           py::arg("top_k") = py::none(), py::arg("top_p") = py::none(), py::arg("seed") = 0,
           py::arg("stop") = std::vector<std::string>{}, py::arg("chat") = false,
           py::arg("system") = py::none(), py::arg("on_text") = py::none(),
           "Continues a prompt (text or token ids; a list of them runs as one batch): "
           "{'text', 'tokens', 'finish'} per prompt. Sampling left unset follows "
           "generation_config.json; on_text(index, text) receives the text as it is final.")
      .def_property_readonly(
          "tokenizer", [](const LanguageModel& m) -> const Tokenizer& { return m.tokenizer; },
          py::return_value_policy::reference_internal)
      .def_property_readonly("device_name",
                             [](const LanguageModel& m) { return m.runner->device_name(); })
      .def_property_readonly("batch", [](const LanguageModel& m) { return m.runner->batch(); })
      .def_property_readonly("max_context",
                             [](const LanguageModel& m) { return m.runner->max_context(); })
      .def_property_readonly(
          "architecture",
          [](const LanguageModel& m) { return architecture_name(m.model.config.architecture); })
      .def_property_readonly("last_stats", [](const LanguageModel& m) {
        py::dict d;
        d["prompt_tokens"] = m.last.prompt_tokens;
        d["generated_tokens"] = m.last.generated_tokens;
        d["prefill_ms"] = m.last.prefill_ms;
        d["decode_ms"] = m.last.decode_ms;
        d["decode_steps"] = m.last.decode_steps;
        return d;
      });
}

// A conversation and the model whose cache it keeps (held alive by it).
struct Chat {
  LanguageModel* model;
  Conversation conversation;
};

void bind_conversation(py::module_& lm) {
  py::class_<Chat>(lm, "Conversation",
                   "A chat with a batch-1 LanguageModel that keeps its KV cache across turns (a "
                   "turn runs only its new tokens).")
      .def(py::init([](LanguageModel& m, const std::string& system) {
             if (m.runner->batch() != 1) throw Error("Conversation: the model's batch must be 1");
             return std::make_unique<Chat>(Chat{&m, Conversation(*m.runner, m.tokenizer, system)});
           }),
           py::arg("model"), py::arg("system") = "", py::keep_alive<1, 2>())
      .def(
          "reply",
          [](Chat& c, const std::string& user, int64_t max_new_tokens,
             std::optional<double> temperature, std::optional<int64_t> top_k,
             std::optional<double> top_p, uint64_t seed) {
            LanguageModel& m = *c.model;
            const auto request = request_of(max_new_tokens, temperature, top_k, top_p, seed, {});
            const auto [sampling, stops] = resolve(m, request, m.runner->max_context() / 2);
            py::gil_scoped_release release;
            return c.conversation.reply(user, sampling, stops, decoding(m)).text;
          },
          py::arg("user"), py::kw_only(), py::arg("max_new_tokens") = 0,
          py::arg("temperature") = py::none(), py::arg("top_k") = py::none(),
          py::arg("top_p") = py::none(), py::arg("seed") = 0, "The reply to `user`'s message.")
      .def("reset", [](Chat& c) { c.conversation.reset(); })
      .def_property_readonly("messages",
                             [](const Chat& c) {
                               py::list out;
                               for (const auto& m : c.conversation.messages()) {
                                 py::dict d;
                                 d["role"] = m.role;
                                 d["content"] = m.content;
                                 out.append(d);
                               }
                               return out;
                             })
      .def_property_readonly("cached_tokens",
                             [](const Chat& c) { return c.conversation.cached_tokens(); })
      .def_property_readonly("last_turn_new_tokens",
                             [](const Chat& c) { return c.conversation.last_turn_new_tokens(); });
}

}  // namespace

void bind_lm(py::module_& lm) {
  bind_tokenizer(lm);
  bind_language_model(lm);
  bind_conversation(lm);
}

}  // namespace mn::python
