// Pattern parsing (recursive descent into a small syntax tree) and compilation into the
// backtracking program run by regex_match.cpp.
#include <memory>
#include <optional>

#include <meganeura/tokenizer.h>

#include "io/regex.h"
#include "io/utf8.h"

namespace mn::io {

struct RegexNode {
  enum class Kind {
    empty,
    character,
    klass,
    any,
    concat,
    alternation,
    repeat,
    lookahead,
    negative_lookahead,
    atomic,
    begin,
    end
  };
  Kind kind = Kind::empty;
  char32_t cp = 0;
  bool fold = false;
  uint32_t klass = 0;
  std::vector<std::unique_ptr<RegexNode>> children;
  uint32_t min = 0, max = 0;  // repeat; max == kUnbounded for no limit
  bool greedy = true;
};

namespace {

constexpr uint32_t kUnbounded = UINT32_MAX;
constexpr uint32_t kMaxRepeat = 1000;
// Repetition counts multiply when nested ((a{1000}){1000}); real pre-tokenizer patterns compile
// to a few hundred instructions.
constexpr size_t kMaxProgram = 100000;

using NodePtr = std::unique_ptr<RegexNode>;

NodePtr node(RegexNode::Kind k) {
  auto n = std::make_unique<RegexNode>();
  n->kind = k;
  return n;
}

bool can_be_empty(const RegexNode& n) {
  switch (n.kind) {
    case RegexNode::Kind::character:
    case RegexNode::Kind::klass:
    case RegexNode::Kind::any:
      return false;
    case RegexNode::Kind::concat:
      for (const auto& c : n.children) {
        if (!can_be_empty(*c)) return false;
      }
      return true;
    case RegexNode::Kind::alternation:
      for (const auto& c : n.children) {
        if (can_be_empty(*c)) return true;
      }
      return false;
    case RegexNode::Kind::repeat:
      return n.min == 0 || can_be_empty(*n.children[0]);
    case RegexNode::Kind::atomic:
      return can_be_empty(*n.children[0]);
    default:
      return true;
  }
}

}  // namespace

class RegexCompiler {
 public:
  RegexCompiler(std::string_view pattern, Regex& re) : re_(re) {
    re_.pattern_ = std::string(pattern);
    try {
      p_ = decode_utf8(pattern, "regex").cps;
    } catch (const FormatError&) {
      fail("the pattern is not valid UTF-8", 0);
    }
  }

  void run() {
    NodePtr root = parse_alternation();
    if (pos_ < p_.size()) fail("unbalanced ')'", pos_);
    emit_node(*root);
    re_.prog_.push_back({RegexInst::Op::match});
  }

 private:
  [[noreturn]] void fail(const std::string& what, size_t at) const {
    throw RegexError("regex \"" + re_.pattern_ + "\": " + what + " at position " +
                     std::to_string(at));
  }
  bool done() const { return pos_ >= p_.size(); }
  char32_t peek() const { return p_[pos_]; }
  bool eat(char32_t c) {
    if (!done() && peek() == c) {
      ++pos_;
      return true;
    }
    return false;
  }

  // ---- parsing ----

  NodePtr parse_alternation() {
    auto alt = node(RegexNode::Kind::alternation);
    alt->children.push_back(parse_concat());
    while (eat('|')) alt->children.push_back(parse_concat());
    if (alt->children.size() == 1) return std::move(alt->children[0]);
    return alt;
  }

  NodePtr parse_concat() {
    auto cat = node(RegexNode::Kind::concat);
    while (!done() && peek() != '|' && peek() != ')') {
      NodePtr atom = parse_atom();
      if (!atom) continue;  // an inline flag group such as (?i)
      cat->children.push_back(parse_quantifiers(std::move(atom)));
    }
    if (cat->children.size() == 1) return std::move(cat->children[0]);
    return cat;
  }

  std::optional<uint32_t> parse_number() {
    size_t start = pos_;
    uint64_t v = 0;
    while (!done() && peek() >= '0' && peek() <= '9') {
      v = v * 10 + (peek() - '0');
      if (v > kMaxRepeat) fail("repetition count above " + std::to_string(kMaxRepeat), start);
      ++pos_;
    }
    if (pos_ == start) return std::nullopt;
    return static_cast<uint32_t>(v);
  }

  // {m}, {m,}, {m,n}; nullopt (position restored) when the brace is not a quantifier, which
  // then is a literal '{' as in Oniguruma.
  std::optional<std::pair<uint32_t, uint32_t>> parse_braces() {
    const size_t start = pos_;
    ++pos_;  // '{'
    auto lo = parse_number();
    if (!lo) {
      pos_ = start;
      return std::nullopt;
    }
    uint32_t hi = *lo;
    if (eat(',')) {
      auto h = parse_number();
      hi = h ? *h : kUnbounded;
    }
    if (!eat('}')) {
      pos_ = start;
      return std::nullopt;
    }
    if (hi < *lo) fail("repetition {m,n} with n < m", start);
    return std::make_pair(*lo, hi);
  }

  NodePtr parse_quantifiers(NodePtr atom) {
    while (!done()) {
      const size_t at = pos_;
      uint32_t lo, hi;
      if (peek() == '?') {
        lo = 0, hi = 1, ++pos_;
      } else if (peek() == '*') {
        lo = 0, hi = kUnbounded, ++pos_;
      } else if (peek() == '+') {
        lo = 1, hi = kUnbounded, ++pos_;
      } else if (peek() == '{') {
        auto b = parse_braces();
        if (!b) return atom;
        lo = b->first, hi = b->second;
      } else {
        return atom;
      }
      if (atom->kind == RegexNode::Kind::begin || atom->kind == RegexNode::Kind::end ||
          atom->kind == RegexNode::Kind::lookahead ||
          atom->kind == RegexNode::Kind::negative_lookahead) {
        fail("quantifier on an assertion", at);
      }
      if (hi == kUnbounded && can_be_empty(*atom)) {
        fail("unbounded quantifier on an expression that can match empty", at);
      }
      auto rep = node(RegexNode::Kind::repeat);
      rep->min = lo, rep->max = hi;
      rep->children.push_back(std::move(atom));
      if (eat('?')) {
        rep->greedy = false;
        atom = std::move(rep);
      } else if (eat('+')) {
        auto at_node = node(RegexNode::Kind::atomic);
        at_node->children.push_back(std::move(rep));
        atom = std::move(at_node);
      } else {
        atom = std::move(rep);
      }
    }
    return atom;
  }

  NodePtr parse_group() {
    const size_t open = pos_ - 1;
    // The parser and the emitter recurse per level: a pattern of thousands of '(' would
    // overflow the stack. Tokenizers' patterns nest a few levels.
    if (depth_ == kMaxGroupDepth) {
      fail("groups nested deeper than " + std::to_string(kMaxGroupDepth), open);
    }
    ++depth_;
    struct Leave {
      int& depth;
      ~Leave() { --depth; }
    } leave{depth_};
    RegexNode::Kind wrap = RegexNode::Kind::empty;
    const bool saved_fold = fold_;
    if (eat('?')) {
      if (done()) fail("unterminated group", open);
      if (eat(':')) {
      } else if (eat('=')) {
        wrap = RegexNode::Kind::lookahead;
      } else if (eat('!')) {
        wrap = RegexNode::Kind::negative_lookahead;
      } else if (eat('>')) {
        wrap = RegexNode::Kind::atomic;
      } else {
        bool on = true;
        while (!done() && peek() != ':' && peek() != ')') {
          if (eat('-')) {
            on = false;
          } else if (eat('i')) {
            fold_ = on;
          } else {
            fail("unsupported group flag or syntax '(?" + std::string(1, char(peek())) + "'", pos_);
          }
        }
        if (eat(')')) return nullptr;  // (?i): applies to the rest of the enclosing group
        if (!eat(':')) fail("unterminated group", open);
      }
    }
    NodePtr inner = parse_alternation();
    fold_ = saved_fold;
    if (!eat(')')) fail("missing ')'", open);
    if (wrap == RegexNode::Kind::empty) return inner;
    auto n = node(wrap);
    n->children.push_back(std::move(inner));
    return n;
  }

  NodePtr char_node(char32_t c) {
    auto n = node(RegexNode::Kind::character);
    // ASCII characters other than letters have no case variants: compare them exactly.
    const bool ascii_letter = (c >= 'a' && c <= 'z') || (c >= 'A' && c <= 'Z');
    n->fold = fold_ && (c >= 128 || ascii_letter);
    n->cp = n->fold ? fold_case(c) : c;
    return n;
  }

  NodePtr class_node(CharClass cls) {
    cls.fold = fold_;
    cls.finish();
    re_.classes_.push_back(std::move(cls));
    auto n = node(RegexNode::Kind::klass);
    n->klass = static_cast<uint32_t>(re_.classes_.size() - 1);
    return n;
  }

  NodePtr parse_atom() {
    const size_t at = pos_;
    const char32_t c = p_[pos_++];
    switch (c) {
      case '(':
        return parse_group();
      case '[':
        return class_node(parse_class(at));
      case '.':
        return node(RegexNode::Kind::any);
      case '^':
        return node(RegexNode::Kind::begin);
      case '$':
        return node(RegexNode::Kind::end);
      case '*':
      case '+':
      case '?':
        fail("quantifier without an operand", at);
      case '\\': {
        CharClass cls;
        if (parse_class_escape(cls)) return class_node(std::move(cls));
        return char_node(parse_char_escape(at));
      }
      default:
        return char_node(c);
    }
  }

  uint32_t parse_hex(size_t digits, size_t at) {
    uint32_t v = 0;
    for (size_t i = 0; i < digits; ++i) {
      if (done()) fail("truncated hexadecimal escape", at);
      char32_t h = p_[pos_++];
      int d = h >= '0' && h <= '9'   ? int(h - '0')
              : h >= 'a' && h <= 'f' ? int(h - 'a' + 10)
              : h >= 'A' && h <= 'F' ? int(h - 'A' + 10)
                                     : -1;
      if (d < 0) fail("bad hexadecimal digit", pos_ - 1);
      v = v * 16 + static_cast<uint32_t>(d);
    }
    return v;
  }

  // After a backslash: the escapes that stand for one character.
  char32_t parse_char_escape(size_t at) {
    if (done()) fail("trailing backslash", at);
    const char32_t c = p_[pos_++];
    switch (c) {
      case 'n':
        return '\n';
      case 'r':
        return '\r';
      case 't':
        return '\t';
      case 'f':
        return '\f';
      case 'v':
        return '\v';
      case 'a':
        return '\a';
      case 'e':
        return 0x1B;
      case '0':
        return 0;
      case 'u':
        return parse_hex(4, at);
      case 'x': {
        if (!eat('{')) return parse_hex(2, at);
        uint32_t v = 0;
        size_t n = 0;
        while (!eat('}')) {
          if (++n > 6) fail("bad \\x{...} escape", at);
          v = v * 16 + parse_hex(1, at);
        }
        if (n == 0 || v > 0x10FFFF) fail("bad \\x{...} escape", at);
        return v;
      }
      default:
        if (c < 128 &&
            !((c >= 'a' && c <= 'z') || (c >= 'A' && c <= 'Z') || (c >= '0' && c <= '9'))) {
          return c;  // an escaped punctuation character stands for itself
        }
        fail("unsupported escape '\\" + std::string(1, char(c < 128 ? c : '?')) + "'", at);
    }
  }

  // After a backslash: \p{..} \P{..} \pX \s \S \d \D \w \W into `cls`; false (nothing consumed)
  // for any other escape.
  bool parse_class_escape(CharClass& cls) {
    if (done()) return false;
    const size_t at = pos_ - 1;
    switch (p_[pos_]) {
      case 's':
        cls.space = true;
        break;
      case 'S':
        cls.not_space = true;
        break;
      case 'd':
        cls.digit = true;
        break;
      case 'D':
        cls.not_digit = true;
        break;
      case 'w':
        cls.word = true;
        break;
      case 'W':
        cls.not_word = true;
        break;
      case 'p':
      case 'P': {
        const bool negate = p_[pos_] == 'P';
        ++pos_;
        std::string name;
        if (eat('{')) {
          while (!done() && peek() != '}') name.push_back(static_cast<char>(p_[pos_++]));
          if (!eat('}')) fail("unterminated \\p{", at);
        } else if (!done()) {
          name.push_back(static_cast<char>(p_[pos_++]));
        }
        const bool caret = !name.empty() && name[0] == '^';
        auto mask = category_mask(caret ? name.substr(1) : name);
        if (!mask) fail("unsupported Unicode property '" + name + "'", at);
        (negate != caret ? cls.not_categories : cls.categories) |= *mask;
        return true;
      }
      default:
        return false;
    }
    ++pos_;
    return true;
  }

  // One member of a bracket class (after '[', at pos_): a character or an escape; returns the
  // character, or nullopt when the escape was a set added to `cls`.
  std::optional<char32_t> parse_class_char(CharClass& cls, size_t open) {
    if (done()) fail("missing ']'", open);
    const size_t at = pos_;
    const char32_t c = p_[pos_++];
    if (c == '[') fail("nested classes and POSIX classes are not supported", at);
    if (c != '\\') return c;
    if (parse_class_escape(cls)) return std::nullopt;
    return parse_char_escape(at);
  }

  CharClass parse_class(size_t open) {
    CharClass cls;
    cls.negated = eat('^');
    bool first = true;
    while (true) {
      if (done()) fail("missing ']'", open);
      if (peek() == ']' && !first) {
        ++pos_;
        break;
      }
      first = false;
      auto lo = parse_class_char(cls, open);
      if (!lo) continue;
      if (!done() && peek() == '-' && pos_ + 1 < p_.size() && p_[pos_ + 1] != ']') {
        const size_t dash = pos_++;
        auto hi = parse_class_char(cls, open);
        if (!hi || *hi < *lo) fail("bad class range", dash);
        cls.ranges.emplace_back(*lo, *hi);
      } else {
        cls.ranges.emplace_back(*lo, *lo);
      }
    }
    return cls;
  }

  // ---- code generation ----

  uint32_t here() const { return static_cast<uint32_t>(re_.prog_.size()); }
  uint32_t emit(RegexInst::Op op, uint32_t x = 0, uint32_t y = 0) {
    if (re_.prog_.size() >= kMaxProgram) {
      fail("the pattern compiles to more than " + std::to_string(kMaxProgram) +
               " instructions (nested repetition counts multiply)",
           0);
    }
    re_.prog_.push_back({op, x, y});
    return here() - 1;
  }

  void emit_node(const RegexNode& n) {
    using K = RegexNode::Kind;
    using Op = RegexInst::Op;
    switch (n.kind) {
      case K::empty:
        break;
      case K::character:
        emit(n.fold ? Op::character_fold : Op::character, n.cp);
        break;
      case K::klass:
        emit(Op::klass, n.klass);
        break;
      case K::any:
        emit(Op::any);
        break;
      case K::begin:
        emit(Op::begin);
        break;
      case K::end:
        emit(Op::end);
        break;
      case K::concat:
        for (const auto& c : n.children) emit_node(*c);
        break;
      case K::alternation:
        emit_alternation(n);
        break;
      case K::repeat:
        emit_repeat(n);
        break;
      case K::lookahead:
      case K::negative_lookahead:
      case K::atomic: {
        const Op op = n.kind == K::lookahead ? Op::lookahead
                      : n.kind == K::atomic  ? Op::atomic
                                             : Op::negative_lookahead;
        const uint32_t at = emit(op);
        emit_node(*n.children[0]);
        emit(Op::match);
        re_.prog_[at].x = here();
        break;
      }
    }
  }

  void emit_alternation(const RegexNode& n) {
    std::vector<uint32_t> jumps;
    for (size_t i = 0; i < n.children.size(); ++i) {
      if (i + 1 < n.children.size()) {
        const uint32_t split = emit(RegexInst::Op::split);
        re_.prog_[split].x = here();
        emit_node(*n.children[i]);
        jumps.push_back(emit(RegexInst::Op::jump));
        re_.prog_[split].y = here();
      } else {
        emit_node(*n.children[i]);
      }
    }
    for (uint32_t j : jumps) re_.prog_[j].x = here();
  }

  // A split preferring `body` (greedy) or `out` (lazy); targets patched by the caller.
  void patch_split(uint32_t split, uint32_t body, uint32_t out, bool greedy) {
    re_.prog_[split].x = greedy ? body : out;
    re_.prog_[split].y = greedy ? out : body;
  }

  void emit_repeat(const RegexNode& n) {
    const RegexNode& body = *n.children[0];
    for (uint32_t i = 0; i < n.min; ++i) emit_node(body);
    if (n.max == kUnbounded) {
      const uint32_t split = emit(RegexInst::Op::split);
      emit_node(body);
      emit(RegexInst::Op::jump, split);
      patch_split(split, split + 1, here(), n.greedy);
      return;
    }
    std::vector<uint32_t> splits;
    for (uint32_t i = n.min; i < n.max; ++i) {
      splits.push_back(emit(RegexInst::Op::split));
      emit_node(body);
    }
    for (uint32_t s : splits) patch_split(s, s + 1, here(), n.greedy);
  }

  Regex& re_;
  std::vector<char32_t> p_;
  size_t pos_ = 0;
  bool fold_ = false;
  static constexpr int kMaxGroupDepth = 256;
  int depth_ = 0;  // groups open at pos_
};

Regex Regex::compile(std::string_view pattern) {
  Regex re;
  RegexCompiler c(pattern, re);
  c.run();
  return re;
}

}  // namespace mn::io
