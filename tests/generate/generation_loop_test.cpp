// The prefill/decode loop against a model kept on the host: a cache of tokens by position, and
// a next token that is a function of every cached token the query may see.
#include <gtest/gtest.h>

#include <map>
#include <meganeura/error.h>
#include <meganeura/generate.h>

#include "generate/text_stream.h"

namespace mn {
namespace {

// next = (Σ cache[0..pos] · (j + 1)) mod vocab; a stale or missing cache row changes the result.
class HostModel : public TokenModel {
 public:
  HostModel(int64_t batch, int64_t context, int64_t block, int32_t vocab)
      : batch_(batch), context_(context), block_(block), vocab_(vocab),
        cache_(batch, std::vector<int32_t>(context, -1)) {}
  int64_t batch() const override { return batch_; }
  int64_t max_context() const override { return context_; }
  int64_t prefill_block() const override { return block_; }
  std::vector<int32_t> run(std::span<const int32_t> tokens, std::span<const int32_t> positions,
                           std::span<const int32_t> last, const SamplingOptions&,
                           uint64_t) override {
    const int64_t block = static_cast<int64_t>(tokens.size()) / batch_;
    ++calls;
    for (int64_t b = 0; b < batch_; ++b)
      for (int64_t i = 0; i < block; ++i)
        cache_[b].at(positions[b * block + i]) = tokens[b * block + i];
    std::vector<int32_t> next(batch_);
    for (int64_t b = 0; b < batch_; ++b) {
      const int32_t pos = positions[b * block + last[b]];
      next[b] = expected_next(cache_[b], pos, vocab_);
    }
    return next;
  }
  static int32_t expected_next(const std::vector<int32_t>& seq, int64_t pos, int32_t vocab) {
    int64_t h = 0;
    for (int64_t j = 0; j <= pos; ++j) h += static_cast<int64_t>(seq[j]) * (j + 1);
    return static_cast<int32_t>(h % vocab);
  }
  int calls = 0;

 private:
  int64_t batch_, context_, block_;
  int32_t vocab_;
  std::vector<std::vector<int32_t>> cache_;
};

// A model offering chains of `chain` decode steps, run as a device runs them: every sequence
// (finished or padding ones too) fed its own sampled token at the next position.
class ChainedHostModel : public HostModel {
 public:
  ChainedHostModel(int64_t batch, int64_t context, int64_t block, int32_t vocab, int64_t chain)
      : HostModel(batch, context, block, vocab), chain_(chain) {}
  int64_t chain_length() const override { return chain_; }
  std::vector<int32_t> run_chain(std::span<const int32_t> tokens,
                                 std::span<const int32_t> positions, std::span<const int32_t> last,
                                 const SamplingOptions& sampling, uint64_t counter) override {
    ++chains;
    std::vector<int32_t> t(tokens.begin(), tokens.end()), p(positions.begin(), positions.end());
    std::vector<int32_t> out;
    for (int64_t r = 0; r < chain_; ++r) {
      t = run(t, p, last, sampling, counter + static_cast<uint64_t>(r));
      out.insert(out.end(), t.begin(), t.end());
      for (int32_t& x : p) ++x;
    }
    return out;
  }
  int chains = 0;

 private:
  int64_t chain_;
};

// What full recomputation gives: each token from the whole sequence before it.
std::vector<int32_t> recompute(std::vector<int32_t> seq, int64_t n, int32_t vocab) {
  std::vector<int32_t> out;
  for (int64_t k = 0; k < n; ++k) {
    const int32_t t = HostModel::expected_next(seq, static_cast<int64_t>(seq.size()) - 1, vocab);
    out.push_back(t);
    seq.push_back(t);
  }
  return out;
}

TEST(GenerationLoop, BatchOfDifferentLengthsMatchesRecomputation) {
  HostModel m(3, 64, 4, 97);
  std::vector<std::vector<int32_t>> prompts = {{5, 6, 7, 8, 9, 10, 11}, {3}, {1, 2, 3, 4}};
  StopOptions stop;
  stop.max_new_tokens = 9;
  GenerateStats stats;
  auto out = generate(m, prompts, {}, stop, {}, {}, &stats);
  ASSERT_EQ(out.size(), 3u);
  for (size_t i = 0; i < prompts.size(); ++i) {
    EXPECT_EQ(out[i].tokens, recompute(prompts[i], 9, 97)) << "sequence " << i;
    EXPECT_EQ(out[i].finish, FinishReason::length);
  }
  EXPECT_EQ(stats.prompt_tokens, 12);
  EXPECT_EQ(stats.generated_tokens, 27);
  EXPECT_EQ(stats.decode_steps, 8);  // the first token of each comes from the prefill
  EXPECT_EQ(m.calls, 2 + 8);         // 7 prompt tokens in blocks of 4
}

TEST(GenerationLoop, ContinuesACacheFromAStartPosition) {
  HostModel m(1, 64, 8, 101);
  StopOptions stop;
  stop.max_new_tokens = 3;
  auto first = generate(m, {{4, 5, 6}}, {}, stop);
  // The next turn starts with the last sampled token, which was never run through the model.
  std::vector<int32_t> turn = {first[0].tokens.back(), 9, 9};
  const int64_t start = 3 + 2;
  auto second = generate(m, {turn}, {}, stop, {}, std::vector<int64_t>{start});
  std::vector<int32_t> all = {4, 5, 6, first[0].tokens[0], first[0].tokens[1]};
  all.insert(all.end(), turn.begin(), turn.end());
  EXPECT_EQ(second[0].tokens, recompute(all, 3, 101));
}

TEST(GenerationLoop, StopsAtAStopTokenAndKeepsIt) {
  HostModel m(1, 64, 4, 97);
  const auto expected = recompute({1, 2, 3}, 10, 97);
  StopOptions stop;
  stop.max_new_tokens = 10;
  stop.stop_ids = {expected[4]};
  auto out = generate(m, {{1, 2, 3}}, {}, stop);
  const auto first = std::find(expected.begin(), expected.end(), expected[4]) - expected.begin();
  EXPECT_EQ(out[0].finish, FinishReason::stop_token);
  EXPECT_EQ(out[0].tokens, std::vector<int32_t>(expected.begin(), expected.begin() + first + 1));
}

TEST(GenerationLoop, StopStringCutsTheTextAndStreamsOnlyFinalText) {
  HostModel m(1, 64, 4, 26);
  const auto expected = recompute({1, 2, 3}, 12, 26);
  std::string letters;
  for (int32_t t : expected) letters += static_cast<char>('a' + t);
  const std::string stop_string = letters.substr(5, 2);
  GenerateCallbacks cb;
  cb.decode = [](std::span<const int32_t> ids) {
    std::string s;
    for (int32_t t : ids) s += static_cast<char>('a' + t);
    return s;
  };
  std::string streamed;
  cb.on_text = [&](int64_t, std::string_view t) { streamed += t; };
  StopOptions stop;
  stop.max_new_tokens = 12;
  stop.stop_strings = {stop_string};
  auto out = generate(m, {{1, 2, 3}}, {}, stop, cb);
  const size_t cut = letters.find(stop_string);
  EXPECT_EQ(out[0].finish, FinishReason::stop_string);
  EXPECT_EQ(out[0].text, letters.substr(0, cut));
  EXPECT_EQ(streamed, out[0].text);
}

// Chains where every sequence runs and has that many tokens to come, single steps after; the
// tokens those give, token for token.
TEST(GenerationLoop, ChainsOfDecodeStepsGiveTheSameTokens) {
  ChainedHostModel m(3, 64, 4, 97, 3);
  std::vector<std::vector<int32_t>> prompts = {{5, 6, 7, 8, 9, 10, 11}, {3}, {1, 2, 3, 4}};
  StopOptions stop;
  stop.max_new_tokens = 9;
  GenerateStats stats;
  auto out = generate(m, prompts, {}, stop, {}, {}, &stats);
  for (size_t i = 0; i < prompts.size(); ++i) {
    EXPECT_EQ(out[i].tokens, recompute(prompts[i], 9, 97)) << "sequence " << i;
  }
  EXPECT_EQ(stats.decode_steps, 8);
  EXPECT_EQ(m.chains, 2);             // 8 decode steps: 3 + 3, then 1 + 1
  EXPECT_EQ(m.calls, 2 + 2 * 3 + 2);  // prefill blocks, the chains' steps, single steps
}

// A sequence stopping inside a chain drops the chain's later tokens; the others go on in single
// steps, as without chains, and no position passes the context (a full one here).
TEST(GenerationLoop, AStopInsideAChainEndsOnlyThatSequence) {
  const std::vector<std::vector<int32_t>> prompts = {{1, 2, 3}, {7, 8}};
  const auto expected = recompute(prompts[0], 12, 97);
  StopOptions stop;
  stop.max_new_tokens = 12;
  stop.stop_ids = {expected[2]};  // the third token: the first chain's second
  HostModel plain(2, 14, 4, 97);
  ChainedHostModel chained(2, 14, 4, 97, 4);
  const auto want = generate(plain, prompts, {}, stop);
  const auto got = generate(chained, prompts, {}, stop);
  ASSERT_EQ(got.size(), want.size());
  for (size_t i = 0; i < want.size(); ++i) {
    EXPECT_EQ(got[i].tokens, want[i].tokens) << "sequence " << i;
    EXPECT_EQ(got[i].finish, want[i].finish) << "sequence " << i;
  }
  EXPECT_EQ(got[0].finish, FinishReason::stop_token);
  EXPECT_EQ(got[0].tokens.size(), 3u);
  EXPECT_EQ(got[1].finish, FinishReason::length);
  EXPECT_EQ(chained.chains, 1);
}

TEST(GenerationLoop, RejectsWhatDoesNotFit) {
  HostModel m(2, 16, 4, 97);
  StopOptions stop;
  stop.max_new_tokens = 8;
  EXPECT_THROW(generate(m, {{1, 2, 3, 4, 5, 6, 7, 8, 9, 10}}, {}, stop), Error);
  EXPECT_THROW(generate(m, {{1}, {2}, {3}}, {}, stop), Error);
  EXPECT_THROW(generate(m, {{}}, {}, stop), Error);
  stop.max_new_tokens = 0;
  EXPECT_THROW(generate(m, {{1}}, {}, stop), Error);
  stop.max_new_tokens = 2;
  stop.stop_strings = {"x"};
  EXPECT_THROW(generate(m, {{1}}, {}, stop), Error);  // no decode callback
  try {
    StopOptions s;
    s.max_new_tokens = 8;
    generate(m, {{1, 2, 3, 4, 5, 6, 7, 8, 9, 10}}, {}, s);
  } catch (const Error& e) {
    EXPECT_NE(std::string(e.what()).find("context of 16"), std::string::npos) << e.what();
  }
}

TEST(TextStream, HoldsBackPartialCharactersAndStopPrefixes) {
  gen::TextStream s({"END"});
  EXPECT_EQ(s.update("ab", false), "ab");
  EXPECT_EQ(s.update("abc\xC3", false), "c");         // half of 'é'
  EXPECT_EQ(s.update("abc\xC3\xA9" "E", false), "\xC3\xA9");  // "E" may start END
  EXPECT_EQ(s.update("abc\xC3\xA9" "EN", false), "");
  EXPECT_EQ(s.update("abc\xC3\xA9" "ENx", false), "ENx");
  EXPECT_EQ(s.update("abc\xC3\xA9" "ENx\xEF\xBF\xBD", false), "");  // U+FFFD: bytes still coming
  EXPECT_EQ(s.update("abc\xC3\xA9" "ENxyEND tail", false), "y");
  EXPECT_TRUE(s.stopped());
  EXPECT_EQ(s.text(), "abc\xC3\xA9" "ENxy");
  EXPECT_EQ(gen::incomplete_utf8_tail("a\xF0\x9F\x98"), 3u);
  EXPECT_EQ(gen::incomplete_utf8_tail("a\xF0\x9F\x98\x80"), 0u);
}

}  // namespace
}  // namespace mn
