// Tokenizer: loading, the encoding pipeline (added tokens, normalizer, pre-tokenizer, BPE,
// post-processor) and decoding.
#include <algorithm>
#include <fstream>
#include <sstream>

#include "io/tokenizer_impl.h"
#include "io/unicode.h"
#include "io/utf8.h"

namespace mn {
namespace {

std::string read_file(const std::filesystem::path& path) {
  std::ifstream f(path, std::ios::binary);
  if (!f) throw FormatError(path.string() + ": cannot open the file (missing or unreadable)");
  std::ostringstream s;
  s << f.rdbuf();
  return s.str();
}

// The pieces of `text` that a Split step makes: its matches and the stretches between them.
void split_isolated(const io::Regex& re, const std::string& text, std::vector<std::string>& out) {
  const io::CodePoints cps = io::decode_utf8(text, "text");
  thread_local std::vector<std::pair<uint32_t, uint32_t>> matches;
  matches.clear();
  re.find_all(cps.cps, matches);
  uint32_t prev = 0;
  auto piece = [&](uint32_t a, uint32_t b) {
    if (b > a) out.emplace_back(text.substr(cps.offsets[a], cps.offsets[b] - cps.offsets[a]));
  };
  for (const auto& [a, b] : matches) {
    piece(prev, a);
    piece(a, b);
    prev = b;
  }
  piece(prev, static_cast<uint32_t>(cps.cps.size()));
}

}  // namespace

std::optional<int32_t> Tokenizer::Impl::find(std::string_view token) const {
  auto a = added_by_content.find(std::string(token));
  if (a != added_by_content.end()) return a->second;
  auto v = bpe->vocab().find(std::string(token));
  if (v != bpe->vocab().end()) return v->second;
  return std::nullopt;
}

// Normalized text without added tokens: pre-tokenizer steps, then BPE on each piece.
void Tokenizer::Impl::encode_plain(std::string_view text, std::vector<int32_t>& ids) const {
  std::vector<std::string> pieces{std::string(text)}, next;
  for (const io::PreTokenizerStep& step : pre_tokenizer) {
    next.clear();
    for (std::string& p : pieces) {
      if (step.add_prefix_space && (p.empty() || p[0] != ' ')) p.insert(p.begin(), ' ');
      if (step.regex) {
        split_isolated(*step.regex, p, next);
      } else {
        next.push_back(std::move(p));
      }
    }
    pieces.swap(next);
  }
  for (const std::string& p : pieces) bpe->encode_piece(p, ids);
}

void Tokenizer::Impl::finish() {
  std::vector<int32_t> stops;
  if (config.eos_id) stops.push_back(*config.eos_id);
  for (const char* name :
       {"<|im_end|>", "<|eot_id|>", "<|eom_id|>", "<|endoftext|>", "<|end_of_text|>"}) {
    if (auto id = find(name)) stops.push_back(*id);
  }
  std::sort(stops.begin(), stops.end());
  stops.erase(std::unique(stops.begin(), stops.end()), stops.end());
  stop_ids = std::move(stops);
}

Tokenizer Tokenizer::from_json(std::string_view tokenizer_json, std::string_view config_json,
                               const std::string& source) {
  auto impl = std::make_shared<Impl>();
  io::parse_tokenizer_json(tokenizer_json, source, *impl);
  if (!config_json.empty()) {
    const std::filesystem::path p(source);
    io::parse_tokenizer_config(config_json, (p.parent_path() / "tokenizer_config.json").string(),
                               *impl);
  }
  impl->finish();
  return Tokenizer(std::move(impl));
}

Tokenizer Tokenizer::from_file(const std::filesystem::path& tokenizer_json,
                               const std::filesystem::path& config) {
  auto impl = std::make_shared<Impl>();
  io::parse_tokenizer_json(read_file(tokenizer_json), tokenizer_json.string(), *impl);
  if (!config.empty()) io::parse_tokenizer_config(read_file(config), config.string(), *impl);
  impl->finish();
  return Tokenizer(std::move(impl));
}

Tokenizer Tokenizer::from_dir(const std::filesystem::path& dir) {
  if (!std::filesystem::is_directory(dir)) {
    throw FormatError(dir.string() +
                      ": not a directory (expected a model directory with tokenizer.json)");
  }
  const auto config = dir / "tokenizer_config.json";
  return from_file(dir / "tokenizer.json",
                   std::filesystem::exists(config) ? config : std::filesystem::path());
}

std::vector<int32_t> Tokenizer::encode(std::string_view text, bool add_special_tokens) const {
  const Impl& m = *impl_;
  io::decode_utf8(text, "Tokenizer::encode: the text");  // rejects invalid UTF-8 up front
  std::vector<int32_t> ids;
  if (add_special_tokens) ids = m.post_prefix;
  auto add_id = [&](int32_t id) { ids.push_back(id); };
  m.raw_added.split(
      text,
      [&](std::string_view piece) {
        const std::string normalized = m.nfc ? io::nfc(piece) : std::string(piece);
        m.normalized_added.split(
            normalized, [&](std::string_view plain) { m.encode_plain(plain, ids); }, add_id);
      },
      add_id);
  if (add_special_tokens) ids.insert(ids.end(), m.post_suffix.begin(), m.post_suffix.end());
  return ids;
}

std::string Tokenizer::decode_bytes(std::span<const int32_t> ids, bool skip_special_tokens) const {
  const Impl& m = *impl_;
  std::string out;
  for (size_t i = 0; i < ids.size(); ++i) {
    const int32_t id = ids[i];
    if (id < 0 || size_t(id) >= m.known.size() || !m.known[id]) {
      throw Error("Tokenizer::decode: id " + std::to_string(id) + " at position " +
                  std::to_string(i) + " is not a token of " + m.source + " (vocabulary size " +
                  std::to_string(m.known.size()) + ")");
    }
    if (skip_special_tokens && m.special[id]) continue;
    out += m.bytes[id];
  }
  return out;
}

std::string Tokenizer::decode(std::span<const int32_t> ids, bool skip_special_tokens) const {
  std::string text = io::utf8_lossy(decode_bytes(ids, skip_special_tokens));
  return impl_->config.clean_up_spaces ? clean_up_tokenization(std::move(text)) : text;
}

bool Tokenizer::cleans_up_spaces() const { return impl_->config.clean_up_spaces; }

namespace {

constexpr std::pair<std::string_view, std::string_view> kCleanUps[] = {
    {" .", "."},   {" ?", "?"},     {" !", "!"},     {" ,", ","},     {" ' ", "'"},
    {" n't", "n't"}, {" 'm", "'m"}, {" 's", "'s"}, {" 've", "'ve"}, {" 're", "'re"},
};

// Where the text can be cleaned now without a later token changing the result: before the
// longest tail that begins (or is) a clean-up pattern, which more text could complete or
// overlap, and before any pattern occurrence that would straddle that point.
size_t settled_prefix(std::string_view text) {
  size_t keep = 0;
  for (const auto& [from, to] : kCleanUps) {
    for (size_t n = std::min(from.size(), text.size()); n > keep; --n) {
      if (text.substr(text.size() - n) == from.substr(0, n)) {
        keep = n;
        break;
      }
    }
  }
  size_t cut = text.size() - keep;
  for (bool moved = true; moved;) {
    moved = false;
    for (const auto& [from, to] : kCleanUps) {
      for (size_t at = text.find(from); at != std::string_view::npos && at < cut; at = text.find(from, at + 1)) {
        if (at + from.size() > cut) {
          cut = at;
          moved = true;
        }
      }
    }
  }
  return cut;
}

}  // namespace

std::string clean_up_tokenization(std::string text) {
  for (const auto& [from, to] : kCleanUps) {
    std::string out;
    size_t start = 0;
    for (size_t at; (at = text.find(from, start)) != std::string::npos; start = at + from.size()) {
      out.append(text, start, at - start);
      out += to;
    }
    out.append(text, start, std::string::npos);
    text = std::move(out);
  }
  return text;
}

int32_t Tokenizer::vocab_size() const { return static_cast<int32_t>(impl_->known.size()); }

std::optional<int32_t> Tokenizer::token_id(std::string_view token) const {
  return impl_->find(token);
}

std::optional<std::string> Tokenizer::token(int32_t id) const {
  if (id < 0 || size_t(id) >= impl_->known.size() || !impl_->known[id]) return std::nullopt;
  return impl_->spelling[id];
}

bool Tokenizer::is_special(int32_t id) const {
  return id >= 0 && size_t(id) < impl_->special.size() && impl_->special[id];
}

std::optional<int32_t> Tokenizer::bos_id() const { return impl_->config.bos_id; }
std::optional<int32_t> Tokenizer::eos_id() const { return impl_->config.eos_id; }
std::optional<int32_t> Tokenizer::pad_id() const { return impl_->config.pad_id; }
bool Tokenizer::add_bos_token() const { return impl_->config.add_bos_token; }
const std::vector<int32_t>& Tokenizer::stop_ids() const { return impl_->stop_ids; }

TokenStream::TokenStream(const Tokenizer& tokenizer, bool skip_special_tokens)
    : tokenizer_(tokenizer), skip_special_(skip_special_tokens) {}

std::string TokenStream::push(int32_t id) {
  const int32_t one[1] = {id};
  pending_ += tokenizer_.decode_bytes(one, skip_special_);
  const size_t complete = io::complete_utf8_prefix(pending_);
  std::string text = io::utf8_lossy(std::string_view(pending_).substr(0, complete));
  pending_.erase(0, complete);
  if (!tokenizer_.cleans_up_spaces()) return text;
  text_ += text;
  const size_t cut = settled_prefix(text_);
  std::string out = clean_up_tokenization(text_.substr(0, cut));
  text_.erase(0, cut);
  return out;
}

std::string TokenStream::flush() {
  std::string out = io::utf8_lossy(pending_);
  pending_.clear();
  if (tokenizer_.cleans_up_spaces()) out = clean_up_tokenization(std::move(text_) + out);
  text_.clear();
  return out;
}

}  // namespace mn
