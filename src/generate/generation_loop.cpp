// The prefill / decode loop over a TokenModel.
#include <algorithm>
#include <chrono>
#include <optional>
#include <string>

#include <meganeura/error.h>
#include <meganeura/generate.h>

#include "generate/text_stream.h"

namespace mn {

const char* finish_reason_name(FinishReason r) {
  switch (r) {
    case FinishReason::stop_token:
      return "stop_token";
    case FinishReason::stop_string:
      return "stop_string";
    case FinishReason::length:
      return "length";
  }
  return "?";
}

std::vector<int32_t> TokenModel::run_chain(std::span<const int32_t>, std::span<const int32_t>,
                                           std::span<const int32_t>, const SamplingOptions&,
                                           uint64_t) {
  throw Error(chain_length() == 0 ? "TokenModel::run_chain: this model offers no decode chains"
                                  : "TokenModel::run_chain: takes one token per sequence (" +
                                        std::to_string(batch()) + ")");
}

namespace {

using Clock = std::chrono::steady_clock;
double ms_since(Clock::time_point t) {
  return std::chrono::duration<double, std::milli>(Clock::now() - t).count();
}

struct Sequence {
  const std::vector<int32_t>* prompt = nullptr;
  int64_t start = 0;  // cache position of the prompt's first token
  GeneratedSequence out;
  std::optional<gen::TextStream> text;
  bool done = false;

  int64_t next_position() const {
    return start + static_cast<int64_t>(prompt->size() + out.tokens.size()) - 1;
  }
};

void check_request(const TokenModel& model, const std::vector<std::vector<int32_t>>& prompts,
                   std::span<const int64_t> start, const StopOptions& stop,
                   const GenerateCallbacks& cb) {
  const auto batch = static_cast<size_t>(model.batch());
  if (prompts.empty() || prompts.size() > batch) {
    throw Error("generate: " + std::to_string(prompts.size()) + " prompts for a model of batch " +
                std::to_string(batch) + " (give 1 to " + std::to_string(batch) + ")");
  }
  if (!start.empty() && start.size() != prompts.size()) {
    throw Error("generate: " + std::to_string(start.size()) + " start positions for " +
                std::to_string(prompts.size()) + " prompts");
  }
  if (stop.max_new_tokens < 1) {
    throw Error("generate: max_new_tokens must be at least 1 (got " +
                std::to_string(stop.max_new_tokens) + ")");
  }
  if (!stop.stop_strings.empty() && !cb.decode) {
    throw Error("generate: stop strings need a decode callback (the tokenizer)");
  }
  for (size_t i = 0; i < prompts.size(); ++i) {
    const int64_t s = start.empty() ? 0 : start[i];
    const auto len = static_cast<int64_t>(prompts[i].size());
    if (len == 0) throw Error("generate: prompt " + std::to_string(i) + " is empty");
    if (s < 0) throw Error("generate: negative start position for prompt " + std::to_string(i));
    // The last generated token is sampled but never run through the model.
    if (s + len + stop.max_new_tokens - 1 > model.max_context()) {
      throw Error("generate: prompt " + std::to_string(i) + " (" + std::to_string(len) +
                  " tokens from position " + std::to_string(s) + ") plus " +
                  std::to_string(stop.max_new_tokens) + " new tokens exceeds the context of " +
                  std::to_string(model.max_context()) + " tokens");
    }
  }
}

// Records a sampled token and marks the sequence done when it ends it.
void accept(Sequence& s, int64_t index, int32_t token, const StopOptions& stop,
            const GenerateCallbacks& cb) {
  s.out.tokens.push_back(token);
  const bool stop_token =
      std::find(stop.stop_ids.begin(), stop.stop_ids.end(), token) != stop.stop_ids.end();
  const bool length = static_cast<int64_t>(s.out.tokens.size()) >= stop.max_new_tokens;
  if (cb.decode) {
    std::string fresh = s.text->update(cb.decode(s.out.tokens), stop_token || length);
    if (cb.on_text && !fresh.empty()) cb.on_text(index, fresh);
    s.out.text = s.text->text();
  }
  if (cb.decode && s.text->stopped()) {
    s.out.finish = FinishReason::stop_string;
    s.done = true;
  } else if (stop_token) {
    s.out.finish = FinishReason::stop_token;
    s.done = true;
  } else if (length) {
    s.out.finish = FinishReason::length;
    s.done = true;
  }
}

// Runs every prompt through the model, block by block; each sequence's first generated token is
// sampled in the block that holds its last prompt token.
void prefill(TokenModel& model, std::vector<Sequence>& seqs, const SamplingOptions& sampling,
             const StopOptions& stop, const GenerateCallbacks& cb) {
  const int64_t batch = model.batch(), block = model.prefill_block();
  int64_t longest = 0;
  for (const Sequence& s : seqs) longest = std::max<int64_t>(longest, s.prompt->size());
  std::vector<int32_t> tokens(batch * block), positions(batch * block), last(batch);
  for (int64_t begin = 0; begin < longest; begin += block) {
    for (int64_t b = 0; b < batch; ++b) {
      const Sequence* s = b < static_cast<int64_t>(seqs.size()) ? &seqs[b] : nullptr;
      const int64_t len = s ? static_cast<int64_t>(s->prompt->size()) : 0;
      for (int64_t i = 0; i < block; ++i) {
        const int64_t p = begin + i;
        // Padding repeats the last prompt token at later positions: those cache rows are
        // rewritten by decoding before any query can see them.
        const int64_t src = std::min(p, std::max<int64_t>(len - 1, 0));
        tokens[b * block + i] = s ? (*s->prompt)[src] : 0;
        const int64_t pos = (s ? s->start : 0) + p;
        positions[b * block + i] = static_cast<int32_t>(std::min(pos, model.max_context() - 1));
      }
      last[b] = static_cast<int32_t>(std::clamp<int64_t>(len - 1 - begin, 0, block - 1));
    }
    const std::vector<int32_t> next =
        model.run(tokens, positions, last, sampling, static_cast<uint64_t>(begin));
    for (size_t b = 0; b < seqs.size(); ++b) {
      const int64_t len = static_cast<int64_t>(seqs[b].prompt->size());
      if (len - 1 >= begin && len - 1 < begin + block) accept(seqs[b], b, next[b], stop, cb);
    }
  }
}

// The decode steps of the next call: the model's chain where every sequence is still running
// and has at least that many tokens to come (a chain's later steps feed each sequence its own
// sampled token, which a finished sequence must not get), else one. A sequence that stops inside
// the chain has its later tokens dropped; the cache rows they wrote lie past its end, within the
// context (its remaining tokens fit there).
int64_t chain_steps(const TokenModel& model, const std::vector<Sequence>& seqs,
                    const StopOptions& stop) {
  const int64_t chain = model.chain_length();
  if (chain < 2) return 1;
  for (const Sequence& s : seqs) {
    if (s.done || stop.max_new_tokens - static_cast<int64_t>(s.out.tokens.size()) < chain) return 1;
  }
  return chain;
}

}  // namespace

std::vector<GeneratedSequence> generate(TokenModel& model,
                                        const std::vector<std::vector<int32_t>>& prompts,
                                        const SamplingOptions& sampling, const StopOptions& stop,
                                        const GenerateCallbacks& cb,
                                        std::span<const int64_t> start, GenerateStats* stats) {
  check_request(model, prompts, start, stop, cb);
  std::vector<Sequence> seqs(prompts.size());
  for (size_t i = 0; i < prompts.size(); ++i) {
    seqs[i].prompt = &prompts[i];
    seqs[i].start = start.empty() ? 0 : start[i];
    if (cb.decode) seqs[i].text.emplace(stop.stop_strings);
  }
  GenerateStats st;
  for (const auto& p : prompts) st.prompt_tokens += static_cast<int64_t>(p.size());

  auto t0 = Clock::now();
  prefill(model, seqs, sampling, stop, cb);
  st.prefill_ms = ms_since(t0);

  const int64_t batch = model.batch();
  std::vector<int32_t> tokens(batch, 0), positions(batch, 0), last(batch, 0);
  // The random stream of decode step k never meets a prefill block's (counters start past them).
  const uint64_t first_counter = static_cast<uint64_t>(model.max_context());
  t0 = Clock::now();
  for (uint64_t step = 0;;) {
    bool any = false;
    for (size_t b = 0; b < seqs.size(); ++b) {
      if (seqs[b].done) continue;
      any = true;
      tokens[b] = seqs[b].out.tokens.back();
      positions[b] = static_cast<int32_t>(seqs[b].next_position());
    }
    if (!any) break;
    const int64_t chain = chain_steps(model, seqs, stop);
    const std::vector<int32_t> next =
        chain > 1 ? model.run_chain(tokens, positions, last, sampling, first_counter + step)
                  : model.run(tokens, positions, last, sampling, first_counter + step);
    step += static_cast<uint64_t>(chain);
    st.decode_steps += chain;
    for (int64_t r = 0; r < chain; ++r) {
      for (size_t b = 0; b < seqs.size(); ++b) {
        if (!seqs[b].done) accept(seqs[b], static_cast<int64_t>(b), next[r * batch + b], stop, cb);
      }
    }
  }
  st.decode_ms = ms_since(t0);

  std::vector<GeneratedSequence> out;
  for (Sequence& s : seqs) {
    st.generated_tokens += static_cast<int64_t>(s.out.tokens.size());
    out.push_back(std::move(s.out));
  }
  if (stats) *stats = st;
  return out;
}

}  // namespace mn
