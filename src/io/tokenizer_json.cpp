// tokenizer.json: the Hugging Face `tokenizers` serialization, for byte-level BPE models.
#include <algorithm>

#include "io/byte_level.h"
#include "io/json_walker.h"
#include "io/tokenizer_impl.h"

namespace mn::io {
namespace {

using nlohmann::json;

// GPT-2's pre-tokenizer pattern, which ByteLevel with use_regex applies.
constexpr std::string_view kGpt2Pattern =
    R"('s|'t|'re|'ve|'m|'ll|'d| ?\p{L}+| ?\p{N}+| ?[^\s\p{L}\p{N}]+|\s+(?!\S)|\s+)";

class TokenizerJsonParser {
 public:
  TokenizerJsonParser(const std::string& source, Tokenizer::Impl& out) : f_(source), out_(out) {}

  void parse(std::string_view text) {
    const json root = f_.parse(text);
    f_.object(root, "(root)");
    if (f_.optional(root, "truncation")) unsupported("truncation", "set (only null)");
    parse_model(f_.required(root, "(root)", "model"));
    if (const json* a = f_.optional(root, "added_tokens")) parse_added_tokens(*a);
    if (const json* n = f_.optional(root, "normalizer")) parse_normalizer(*n, "normalizer");
    parse_pre_tokenizer(root);
    if (const json* p = f_.optional(root, "post_processor")) parse_post(*p, "post_processor");
    parse_decoder(root);
    build_id_tables();
  }

 private:
  [[noreturn]] void unsupported(const std::string& path, const std::string& what) const {
    throw UnsupportedTokenizerError(f_.source() + ": " + path + " " + what + " is not supported");
  }

  std::string type_of(const json& j, const std::string& path) const {
    return f_.string(f_.required(j, path, "type"), path + ".type");
  }

  void parse_model(const json& model) {
    f_.object(model, "model");
    const json* type = f_.optional(model, "type");
    if (type && f_.string(*type, "model.type") != "BPE") {
      unsupported("model.type", "\"" + type->get<std::string>() + "\" (only BPE)");
    }
    if (const json* d = f_.optional(model, "dropout")) {
      if (!d->is_number() || d->get<double>() != 0) unsupported("model.dropout", "other than null");
    }
    for (const char* affix : {"continuing_subword_prefix", "end_of_word_suffix"}) {
      const json* a = f_.optional(model, affix);
      if (a && f_.string(*a, std::string("model.") + affix) != "") {
        unsupported(std::string("model.") + affix, "\"" + a->get<std::string>() + "\"");
      }
    }
    if (f_.boolean(model, "model", "byte_fallback", false))
      unsupported("model.byte_fallback", "true");
    const bool ignore_merges = f_.boolean(model, "model", "ignore_merges", false);

    std::unordered_map<std::string, int32_t> vocab;
    const json& v = f_.object(f_.required(model, "model", "vocab"), "model.vocab");
    vocab.reserve(v.size());
    for (const auto& [tok, id] : v.items())
      vocab.emplace(tok, f_.id(id, "model.vocab[\"" + tok + "\"]"));

    std::optional<std::string> unk;
    if (const json* u = f_.optional(model, "unk_token")) unk = f_.string(*u, "model.unk_token");
    out_.bpe = std::make_unique<Bpe>(std::move(vocab), parse_merges(model), ignore_merges, unk,
                                     f_.source());
  }

  std::vector<std::pair<std::string, std::string>> parse_merges(const json& model) const {
    const json& m = f_.required(model, "model", "merges");
    if (!m.is_array()) f_.fail("model.merges", "expected an array");
    std::vector<std::pair<std::string, std::string>> merges;
    merges.reserve(m.size());
    for (size_t i = 0; i < m.size(); ++i) {
      const std::string path = "model.merges[" + std::to_string(i) + "]";
      if (m[i].is_string()) {  // "a b"
        const std::string s = m[i].get<std::string>();
        const size_t sp = s.find(' ');
        if (sp == std::string::npos || s.find(' ', sp + 1) != std::string::npos) {
          f_.fail(path, "expected two tokens separated by one space, got \"" + s + "\"");
        }
        merges.emplace_back(s.substr(0, sp), s.substr(sp + 1));
      } else if (m[i].is_array() && m[i].size() == 2) {  // ["a", "b"]
        merges.emplace_back(f_.string(m[i][0], path + "[0]"), f_.string(m[i][1], path + "[1]"));
      } else {
        f_.fail(path, "expected \"a b\" or [\"a\", \"b\"]");
      }
    }
    return merges;
  }

  void parse_added_tokens(const json& a) {
    if (!a.is_array()) f_.fail("added_tokens", "expected an array");
    std::vector<AddedToken> raw, normalized;
    for (size_t i = 0; i < a.size(); ++i) {
      const std::string path = "added_tokens[" + std::to_string(i) + "]";
      AddedToken t;
      t.id = f_.id(f_.required(a[i], path, "id"), path + ".id");
      t.content = f_.string(f_.required(a[i], path, "content"), path + ".content");
      if (t.content.empty()) f_.fail(path + ".content", "empty token");
      // As in `tokenizers`: content that the model's vocabulary has keeps the vocabulary's id.
      auto in_vocab = out_.bpe->vocab().find(t.content);
      if (in_vocab != out_.bpe->vocab().end()) t.id = in_vocab->second;
      t.special = f_.boolean(a[i], path, "special", false);
      t.single_word = f_.boolean(a[i], path, "single_word", false);
      t.lstrip = f_.boolean(a[i], path, "lstrip", false);
      t.rstrip = f_.boolean(a[i], path, "rstrip", false);
      t.normalized = f_.boolean(a[i], path, "normalized", !t.special);
      added_.push_back(t);
      (t.normalized ? normalized : raw).push_back(t);
    }
    out_.raw_added = AddedTokenMatcher(std::move(raw));
    out_.normalized_added = AddedTokenMatcher(std::move(normalized));
  }

  void parse_normalizer(const json& n, const std::string& path) {
    const std::string type = type_of(n, path);
    if (type == "NFC") {
      out_.nfc = true;
    } else if (type == "Sequence") {
      const json& list = f_.required(n, path, "normalizers");
      if (!list.is_array()) f_.fail(path + ".normalizers", "expected an array");
      for (size_t i = 0; i < list.size(); ++i) {
        parse_normalizer(list[i], path + ".normalizers[" + std::to_string(i) + "]");
      }
    } else {
      unsupported(path + ".type", "\"" + type + "\" (only NFC and Sequence)");
    }
  }

  std::shared_ptr<const Regex> compile(std::string_view pattern, const std::string& path) const {
    try {
      return std::make_shared<const Regex>(Regex::compile(pattern));
    } catch (const RegexError& e) {
      throw RegexError(f_.source() + ": " + path + ": " + e.what());
    }
  }

  // A Split pattern given as a literal string: the same characters, escaped.
  static std::string escape_literal(const std::string& s) {
    std::string out;
    for (char c : s) {
      if (std::string_view("\\^$.|?*+()[]{}").find(c) != std::string_view::npos) out += '\\';
      out += c;
    }
    return out;
  }

  void parse_pre_step(const json& p, const std::string& path) {
    const std::string type = type_of(p, path);
    if (type == "Sequence") {
      const json& list = f_.required(p, path, "pretokenizers");
      if (!list.is_array()) f_.fail(path + ".pretokenizers", "expected an array");
      for (size_t i = 0; i < list.size(); ++i) {
        parse_pre_step(list[i], path + ".pretokenizers[" + std::to_string(i) + "]");
      }
    } else if (type == "Split") {
      parse_split(p, path);
    } else if (type == "Digits") {
      // Numeric characters (Rust's char::is_numeric: the N categories) isolated one by one or
      // in runs (SmolLM2 and StarCoder isolate each digit).
      const bool individual = f_.boolean(p, path, "individual_digits", false);
      out_.pre_tokenizer.push_back(
          {PreTokenizerStep::Kind::split, compile(individual ? "\\p{N}" : "\\p{N}+", path)});
    } else if (type == "ByteLevel") {
      PreTokenizerStep s{PreTokenizerStep::Kind::byte_level};
      s.add_prefix_space = f_.boolean(p, path, "add_prefix_space", true);
      if (f_.boolean(p, path, "use_regex", true)) s.regex = compile(kGpt2Pattern, path);
      out_.pre_tokenizer.push_back(std::move(s));
    } else {
      unsupported(path + ".type", "\"" + type + "\" (only ByteLevel, Split, Digits and Sequence)");
    }
  }

  void parse_split(const json& p, const std::string& path) {
    const json& pattern = f_.object(f_.required(p, path, "pattern"), path + ".pattern");
    std::string regex;
    if (const json* r = f_.optional(pattern, "Regex")) {
      regex = f_.string(*r, path + ".pattern.Regex");
    } else if (const json* s = f_.optional(pattern, "String")) {
      regex = escape_literal(f_.string(*s, path + ".pattern.String"));
    } else {
      f_.fail(path + ".pattern", "expected {\"Regex\": ...} or {\"String\": ...}");
    }
    const std::string behavior = f_.string(f_.required(p, path, "behavior"), path + ".behavior");
    if (behavior != "Isolated")
      unsupported(path + ".behavior", "\"" + behavior + "\" (only Isolated)");
    if (f_.boolean(p, path, "invert", false)) unsupported(path + ".invert", "true");
    out_.pre_tokenizer.push_back(
        {PreTokenizerStep::Kind::split, compile(regex, path + ".pattern")});
  }

  void parse_pre_tokenizer(const json& root) {
    const json* p = f_.optional(root, "pre_tokenizer");
    if (p) parse_pre_step(*p, "pre_tokenizer");
    if (out_.pre_tokenizer.empty() ||
        out_.pre_tokenizer.back().kind != PreTokenizerStep::Kind::byte_level) {
      unsupported("pre_tokenizer", "without ByteLevel as its last step (only byte-level BPE)");
    }
    for (size_t i = 0; i + 1 < out_.pre_tokenizer.size(); ++i) {
      if (out_.pre_tokenizer[i].kind == PreTokenizerStep::Kind::byte_level) {
        unsupported("pre_tokenizer", "with a step after ByteLevel");
      }
    }
  }

  int32_t special_id(const json& specials, const std::string& name, const std::string& path) const {
    const json& entry = f_.required(specials, path + ".special_tokens", name.c_str());
    const json& ids = f_.required(entry, path + ".special_tokens." + name, "ids");
    if (!ids.is_array() || ids.size() != 1) {
      f_.fail(path + ".special_tokens." + name + ".ids", "expected exactly one id");
    }
    return f_.id(ids[0], path + ".special_tokens." + name + ".ids[0]");
  }

  void parse_template(const json& p, const std::string& path) {
    const json& single = f_.required(p, path, "single");
    if (!single.is_array()) f_.fail(path + ".single", "expected an array");
    const json* specials = f_.optional(p, "special_tokens");
    std::vector<int32_t> before, after;
    bool seen_a = false;
    for (size_t i = 0; i < single.size(); ++i) {
      const std::string ipath = path + ".single[" + std::to_string(i) + "]";
      if (const json* s = f_.optional(f_.object(single[i], ipath), "SpecialToken")) {
        const std::string name =
            f_.string(f_.required(*s, ipath + ".SpecialToken", "id"), ipath + ".SpecialToken.id");
        if (!specials) f_.fail(path + ".special_tokens", "missing field");
        (seen_a ? after : before).push_back(special_id(*specials, name, path));
      } else if (f_.optional(single[i], "Sequence")) {
        if (seen_a) unsupported(ipath, "a second sequence in the single template");
        seen_a = true;
      } else {
        f_.fail(ipath, "expected SpecialToken or Sequence");
      }
    }
    if (!seen_a) f_.fail(path + ".single", "no Sequence item");
    // Applied after the processors before it: its tokens wrap theirs.
    out_.post_prefix.insert(out_.post_prefix.begin(), before.begin(), before.end());
    out_.post_suffix.insert(out_.post_suffix.end(), after.begin(), after.end());
  }

  void parse_post(const json& p, const std::string& path) {
    const std::string type = type_of(p, path);
    if (type == "ByteLevel") return;  // offsets only
    if (type == "TemplateProcessing") return parse_template(p, path);
    if (type == "Sequence") {
      const json& list = f_.required(p, path, "processors");
      if (!list.is_array()) f_.fail(path + ".processors", "expected an array");
      for (size_t i = 0; i < list.size(); ++i) {
        parse_post(list[i], path + ".processors[" + std::to_string(i) + "]");
      }
      return;
    }
    unsupported(path + ".type",
                "\"" + type + "\" (only ByteLevel, TemplateProcessing and Sequence)");
  }

  void parse_decoder(const json& root) {
    const json* d = f_.optional(root, "decoder");
    if (!d) unsupported("decoder", "null (only ByteLevel)");
    const std::string type = type_of(*d, "decoder");
    if (type != "ByteLevel") unsupported("decoder.type", "\"" + type + "\" (only ByteLevel)");
  }

  // Tables indexed by id: ids are dense in every real vocabulary (a model's embedding has a row
  // per id), so one far past the count of tokens is refused rather than sizing the tables by it
  // (a few bytes of JSON would otherwise ask for gigabytes).
  void build_id_tables() {
    const size_t tokens = out_.bpe->vocab().size() + added_.size();
    const size_t limit = tokens + kUnusedIds;
    auto refuse = [&](const std::string& path, const std::string& token, size_t id) {
      f_.fail(path, "id " + std::to_string(id) + " of \"" + token + "\" lies past " +
                        std::to_string(limit) + ": more than " + std::to_string(kUnusedIds) +
                        " ids beyond the " + std::to_string(tokens) + " tokens would be unused");
    };
    size_t n = 0;
    for (const auto& [tok, id] : out_.bpe->vocab()) {
      if (size_t(id) >= limit) refuse("model.vocab[\"" + tok + "\"]", tok, size_t(id));
      n = std::max(n, size_t(id) + 1);
    }
    for (size_t i = 0; i < added_.size(); ++i) {
      const auto& t = added_[i];
      if (size_t(t.id) >= limit) {
        refuse("added_tokens[" + std::to_string(i) + "].id", t.content, size_t(t.id));
      }
      n = std::max(n, size_t(t.id) + 1);
    }
    out_.spelling.assign(n, {});
    out_.bytes.assign(n, {});
    out_.known.assign(n, 0);
    out_.special.assign(n, 0);
    for (const auto& [tok, id] : out_.bpe->vocab()) {
      out_.spelling[id] = tok;
      out_.bytes[id] = byte_level_decode(tok);
      out_.known[id] = 1;
    }
    for (const auto& t : added_) {
      out_.spelling[t.id] = t.content;
      out_.bytes[t.id] = byte_level_decode(t.content);
      out_.known[t.id] = 1;
      out_.special[t.id] = t.special;
      out_.added_by_content[t.content] = t.id;
    }
    for (int32_t id : out_.post_prefix) check_id(id, "post_processor");
    for (int32_t id : out_.post_suffix) check_id(id, "post_processor");
  }

  void check_id(int32_t id, const std::string& path) const {
    if (size_t(id) >= out_.known.size() || !out_.known[id]) {
      f_.fail(path, "id " + std::to_string(id) + " is neither in model.vocab nor in added_tokens");
    }
  }

  // Ids a vocabulary may leave unused beyond its count of tokens.
  static constexpr size_t kUnusedIds = 65536;

  JsonWalker f_;
  Tokenizer::Impl& out_;
  std::vector<AddedToken> added_;
};

}  // namespace

void parse_tokenizer_json(std::string_view json, const std::string& source, Tokenizer::Impl& out) {
  out.source = source;
  TokenizerJsonParser(source, out).parse(json);
}

}  // namespace mn::io
