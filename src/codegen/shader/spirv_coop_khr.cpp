#include "codegen/shader/spirv_coop_khr.h"

#define SPV_ENABLE_UTILITY_CODE
#include <spirv/unified1/spirv.hpp>

#include <algorithm>
#include <array>
#include <bit>
#include <cstdio>
#include <map>
#include <optional>
#include <set>
#include <string>
#include <string_view>
#include <unordered_map>

namespace mn::codegen {
namespace {

// SPV_KHR_cooperative_matrix (SPIR-V registry, 2023): Debian's spirv-headers 1.3.239 predate it.
constexpr uint32_t kCapabilityCooperativeMatrixKHR = 6022;
constexpr uint32_t kOpTypeCooperativeMatrixKHR = 4456;
constexpr uint32_t kOpCooperativeMatrixLoadKHR = 4457;
constexpr uint32_t kOpCooperativeMatrixStoreKHR = 4458;
constexpr uint32_t kOpCooperativeMatrixMulAddKHR = 4459;
constexpr uint32_t kOpCooperativeMatrixLengthKHR = 4460;
// CooperativeMatrixLayout
constexpr uint32_t kRowMajorKHR = 0, kColumnMajorKHR = 1;
// CooperativeMatrixOperands
constexpr uint32_t kMatrixASigned = 0x1, kMatrixBSigned = 0x2, kMatrixCSigned = 0x4,
                   kMatrixResultSigned = 0x8;

constexpr const char* kSignatureError =
    "cooperative matrices in function signatures are not supported (optimization inlines such "
    "functions)";

constexpr std::string_view kNvExtension = "SPV_NV_cooperative_matrix";
constexpr std::string_view kKhrExtension = "SPV_KHR_cooperative_matrix";

// CooperativeMatrixUse values, also the bit positions of role masks.
enum Role : uint32_t { kMatrixA = 0, kMatrixB = 1, kAccumulator = 2 };
constexpr uint32_t kRoleCount = 3;
constexpr std::array<const char*, kRoleCount> kRoleNames = {"MatrixA", "MatrixB",
                                                            "MatrixAccumulator"};

struct Inst {
  uint32_t opcode = 0;
  size_t word = 0;  // offset in the input module, for messages
  std::vector<uint32_t> w;
};

std::string op_name(uint32_t opcode) {
  switch (opcode) {
#define MN_OP(name)   \
  case spv::Op##name: \
    return "Op" #name;
    MN_OP(TypeCooperativeMatrixNV)
    MN_OP(CooperativeMatrixLoadNV)
    MN_OP(CooperativeMatrixStoreNV)
    MN_OP(CooperativeMatrixMulAddNV)
    MN_OP(CooperativeMatrixLengthNV)
    MN_OP(Function)
    MN_OP(FunctionCall)
    MN_OP(FunctionParameter)
    MN_OP(ReturnValue)
    MN_OP(TypeStruct)
    MN_OP(TypeFunction)
    MN_OP(ExtInst)
    MN_OP(SpecConstantOp)
    MN_OP(Load)
    MN_OP(Store)
    MN_OP(Phi)
    MN_OP(Select)
    MN_OP(CompositeConstruct)
    MN_OP(CompositeExtract)
    MN_OP(CompositeInsert)
    MN_OP(VectorTimesScalar)
    MN_OP(MatrixTimesScalar)
    MN_OP(Dot)
    MN_OP(FConvert)
    MN_OP(FAdd)
    MN_OP(FMul)
    MN_OP(CopyObject)
    MN_OP(Variable)
#undef MN_OP
    default:
      return "opcode " + std::to_string(opcode);
  }
}

std::vector<Inst> parse(std::span<const uint32_t> spirv) {
  if (spirv.size() < 5) {
    throw Error("SPIR-V module of " + std::to_string(spirv.size()) +
                " words is shorter than its 5-word header");
  }
  if (spirv[0] != spv::MagicNumber) {
    char text[64];
    std::snprintf(text, sizeof text, "0x%08x", spirv[0]);
    throw Error(std::string("not a SPIR-V module: word 0 is ") + text +
                ", not the magic 0x07230203");
  }
  std::vector<Inst> insts;
  for (size_t at = 5; at < spirv.size();) {
    const uint32_t count = spirv[at] >> 16, opcode = spirv[at] & 0xffff;
    if (count == 0 || count > spirv.size() - at) {
      throw Error("SPIR-V instruction at word " + std::to_string(at) + " (" + op_name(opcode) +
                  ") has word count " + std::to_string(count) + ", but " +
                  std::to_string(spirv.size() - at) + " words remain");
    }
    insts.push_back({opcode, at, {spirv.begin() + at, spirv.begin() + at + count}});
    at += count;
  }
  return insts;
}

std::string decode_string(const std::vector<uint32_t>& w, size_t from) {
  std::string s;
  for (size_t i = from; i < w.size(); ++i) {
    for (int b = 0; b < 4; ++b) {
      const char c = static_cast<char>((w[i] >> (8 * b)) & 0xff);
      if (c == 0) return s;
      s += c;
    }
  }
  return s;
}

std::vector<uint32_t> encode_string(std::string_view s) {
  std::vector<uint32_t> words(s.size() / 4 + 1, 0);  // always room for the terminating NUL
  for (size_t i = 0; i < s.size(); ++i) {
    words[i / 4] |= static_cast<uint32_t>(static_cast<unsigned char>(s[i])) << (8 * (i % 4));
  }
  return words;
}

uint32_t header_word(uint32_t opcode, size_t count) {
  return static_cast<uint32_t>(count << 16) | opcode;
}

class Rewriter {
 public:
  explicit Rewriter(std::span<const uint32_t> spirv) {
    insts_ = parse(spirv);  // checks the header first
    header_.assign(spirv.begin(), spirv.begin() + 5);
    bound_ = header_[3];
    parent_.resize(bound_ + kRoleCount);
    for (uint32_t i = 0; i < parent_.size(); ++i) parent_[i] = i;
    mask_.assign(parent_.size(), 0);
    for (uint32_t r = 0; r < kRoleCount; ++r) mask_[role_node(r)] = 1u << r;
    type_of_.assign(bound_, 0);
    def_.assign(bound_, kNone);
    coop_type_.assign(bound_, false);
    elem_.assign(bound_, 0);
  }

  std::vector<uint32_t> run() {
    index_definitions();
    collect_constraints();
    assign_roles();
    return emit();
  }

 private:
  static constexpr size_t kNone = ~size_t{0};

  uint32_t role_node(uint32_t role) const { return bound_ + role; }

  [[noreturn]] void fail(size_t i, const std::string& why) const {
    throw Error("cannot rewrite cooperative matrices to SPV_KHR_cooperative_matrix: " +
                op_name(insts_[i].opcode) + " (instruction at word " +
                std::to_string(insts_[i].word) + "): " + why);
  }

  uint32_t id_at(size_t i, size_t pos) const {
    const Inst& in = insts_[i];
    if (pos >= in.w.size()) fail(i, "too few operands");
    const uint32_t id = in.w[pos];
    if (id == 0 || id >= bound_) {
      fail(i, "id %" + std::to_string(id) + " is outside the bound " + std::to_string(bound_));
    }
    return id;
  }

  bool coop_value(uint32_t id) const { return id < bound_ && coop_type_[type_of_[id]]; }
  bool const_like(uint32_t id) const {
    if (!coop_value(id)) return false;
    const uint32_t op = insts_[def_[id]].opcode;
    return op == spv::OpConstantComposite || op == spv::OpConstantNull || op == spv::OpUndef ||
           op == spv::OpSpecConstantComposite;
  }

  void index_definitions() {
    for (size_t i = 0; i < insts_.size(); ++i) {
      Inst& in = insts_[i];
      bool has_result = false, has_type = false;
      spv::HasResultAndType(static_cast<spv::Op>(in.opcode), &has_result, &has_type);
      if (in.opcode == spv::OpTypeCooperativeMatrixNV && !has_result) has_result = true;
      if (has_result) {
        const uint32_t id = id_at(i, has_type ? 2 : 1);
        def_[id] = i;
        if (has_type) type_of_[id] = id_at(i, 1);
      }
      switch (in.opcode) {
        case spv::OpCapability:
          if (in.w.size() == 2 && in.w[1] == spv::CapabilityCooperativeMatrixNV) has_nv_ = true;
          break;
        case spv::OpTypeCooperativeMatrixNV:
          if (in.w.size() != 6) fail(i, "expected 6 words");
          coop_type_[in.w[1]] = true;
          if (first_coop_type_ == kNone) first_coop_type_ = i;
          break;
        case spv::OpTypeArray:
        case spv::OpTypeRuntimeArray:
          if (coop_type_[id_at(i, 2)]) {
            coop_type_[in.w[1]] = true;
            elem_[in.w[1]] = in.w[2];
          }
          break;
        case spv::OpTypePointer:
          if (coop_type_[id_at(i, 3)]) {
            coop_type_[in.w[1]] = true;
            elem_[in.w[1]] = in.w[3];
          }
          break;
        case spv::OpTypeStruct:
          for (size_t p = 2; p < in.w.size(); ++p) {
            if (coop_type_[id_at(i, p)])
              fail(i, "cooperative matrices in structs are not supported");
          }
          break;
        case spv::OpTypeFunction:
          // Left unchanged (its ids name the first KHR type of each) unless a function uses it:
          // the optimizer inlines functions but may leave their types behind.
          for (size_t p = 2; p < in.w.size(); ++p) {
            if (coop_type_[id_at(i, p)]) coop_function_types_.insert(in.w[1]);
          }
          break;
        case spv::OpTypeInt:
          if (in.w.size() == 4 && in.w[2] == 32 && in.w[3] == 0 && uint_type_ == 0) {
            uint_type_ = in.w[1];
            uint_type_index_ = i;
          }
          break;
        default:
          break;
      }
    }
  }

  uint32_t find(uint32_t x) {
    while (parent_[x] != x) x = parent_[x] = parent_[parent_[x]];
    return x;
  }

  void unite(size_t i, uint32_t a, uint32_t b) {
    a = find(a), b = find(b);
    if (a == b) return;
    const uint32_t m = mask_[a] | mask_[b];
    if (std::popcount(m) > 1) {
      std::string uses;
      for (uint32_t r = 0; r < kRoleCount; ++r) {
        if (m & (1u << r)) uses += std::string(uses.empty() ? "" : " and ") + kRoleNames[r];
      }
      fail(i, "a value would be both " + uses +
                  " (KHR matrices have one use; load it separately for each use)");
    }
    parent_[a] = b;
    mask_[b] = m;
  }

  // The operand at `pos` of instruction i shares its use with `anchor` (a value or a role node).
  // Constants are not united: they are copied per use at emission instead.
  void link(size_t i, size_t pos, uint32_t anchor) {
    const uint32_t id = id_at(i, pos);
    if (!coop_value(id)) return;
    if (const_like(id)) {
      const_uses_.push_back({i, pos, anchor});
    } else {
      unite(i, anchor, id);
    }
  }

  // Ids of an instruction that has no rule here must not be cooperative matrices.
  void reject_coop_operands(size_t i, size_t from) {
    const Inst& in = insts_[i];
    for (size_t p = from; p < in.w.size(); ++p) {
      if (in.w[p] < bound_ && (coop_value(in.w[p]) || coop_type_[in.w[p]])) {
        fail(i, "cooperative matrix operand %" + std::to_string(in.w[p]) + " is not supported");
      }
    }
  }

  void collect_constraints() {
    for (size_t i = 0; i < insts_.size(); ++i) {
      const Inst& in = insts_[i];
      const auto& w = in.w;
      switch (in.opcode) {
        case spv::OpStore:
        case spv::OpCopyMemory:
        case spv::OpCopyMemorySized:
          if (coop_value(id_at(i, 1))) link(i, 2, w[1]);
          break;
        case spv::OpVariable:
          if (w.size() > 4 && coop_value(id_at(i, 2))) link(i, 4, w[2]);
          break;
        case spv::OpPhi:
          if (coop_value(id_at(i, 2))) {
            for (size_t p = 3; p < w.size(); p += 2) link(i, p, w[2]);
          }
          break;
        case spv::OpSelect:
          if (coop_value(id_at(i, 2))) {
            link(i, 4, w[2]);
            link(i, 5, w[2]);
          }
          break;
        case spv::OpCompositeConstruct:
          if (coop_value(id_at(i, 2))) {
            for (size_t p = 3; p < w.size(); ++p) link(i, p, w[2]);  // scalars of a fill: no-op
          }
          break;
        case spv::OpCompositeInsert:
          if (coop_value(id_at(i, 2))) {
            link(i, 3, w[2]);
            link(i, 4, w[2]);
          }
          break;
        // A result and its first operand share a use: loads, access chains into arrays of
        // matrices, a matrix out of an array (an element of a matrix is a scalar), copies,
        // conversions, negation and scaling.
        case spv::OpLoad:
        case spv::OpAccessChain:
        case spv::OpInBoundsAccessChain:
        case spv::OpPtrAccessChain:
        case spv::OpInBoundsPtrAccessChain:
        case spv::OpCompositeExtract:
        case spv::OpCopyObject:
        case spv::OpCopyLogical:
        case spv::OpFNegate:
        case spv::OpSNegate:
        case spv::OpFConvert:
        case spv::OpSConvert:
        case spv::OpUConvert:
        case spv::OpConvertFToS:
        case spv::OpConvertFToU:
        case spv::OpConvertSToF:
        case spv::OpConvertUToF:
        case spv::OpBitcast:
        case spv::OpMatrixTimesScalar:
          if (coop_value(id_at(i, 2))) link(i, 3, w[2]);
          break;
        case spv::OpFAdd:
        case spv::OpFSub:
        case spv::OpFMul:
        case spv::OpFDiv:
        case spv::OpIAdd:
        case spv::OpISub:
        case spv::OpIMul:
        case spv::OpSDiv:
        case spv::OpUDiv:
          if (coop_value(id_at(i, 2))) {
            link(i, 3, w[2]);
            link(i, 4, w[2]);
          }
          break;
        case spv::OpCooperativeMatrixMulAddNV:
          if (w.size() != 6) fail(i, "expected 6 words");
          link(i, 3, role_node(kMatrixA));
          link(i, 4, role_node(kMatrixB));
          link(i, 5, role_node(kAccumulator));
          unite(i, role_node(kAccumulator), id_at(i, 2));
          break;
        case spv::OpCooperativeMatrixLoadNV:
        case spv::OpCooperativeMatrixStoreNV:
        case spv::OpCooperativeMatrixLengthNV:
        case spv::OpConstantComposite:
        case spv::OpSpecConstantComposite:
        case spv::OpConstantNull:
        case spv::OpUndef:
        case spv::OpName:
        case spv::OpMemberName:
        case spv::OpDecorate:
        case spv::OpDecorateId:
        case spv::OpDecorateString:
        case spv::OpMemberDecorate:
        case spv::OpTypeCooperativeMatrixNV:
        case spv::OpTypeArray:
        case spv::OpTypeRuntimeArray:
        case spv::OpTypePointer:
        case spv::OpLifetimeStart:
        case spv::OpLifetimeStop:
          break;
        case spv::OpExtInst:
          reject_coop_operands(i, 1);
          break;
        case spv::OpFunction:
          if (coop_function_types_.count(id_at(i, 4))) fail(i, kSignatureError);
          break;
        case spv::OpFunctionCall:
          if (coop_type_[id_at(i, 1)]) fail(i, kSignatureError);
          for (size_t p = 4; p < w.size(); ++p) {
            if (coop_value(id_at(i, p))) fail(i, kSignatureError);
          }
          break;
        default: {
          bool has_result = false, has_type = false;
          spv::HasResultAndType(static_cast<spv::Op>(in.opcode), &has_result, &has_type);
          if (has_type && coop_value(id_at(i, 2))) {
            fail(i, "produces a cooperative matrix; the pass has no rule for it");
          }
          if (in.opcode == spv::OpSpecConstantOp && in.w.size() == 5 &&
              in.w[3] == spv::OpCooperativeMatrixLengthNV) {
            break;  // a constant length: resolved like OpCooperativeMatrixLengthNV
          }
          if (in.opcode == spv::OpReturnValue || in.opcode == spv::OpSpecConstantOp) {
            reject_coop_operands(i, 1);
          }
          break;
        }
      }
    }
  }

  uint32_t role_of(uint32_t id) {
    const uint32_t m = mask_[find(id)];
    for (uint32_t r = 0; r < kRoleCount; ++r) {
      if (m & (1u << r)) return r;
    }
    return kAccumulator;
  }

  void assign_roles() {
    type_roles_.assign(bound_, 0);
    const_roles_.assign(bound_, 0);
    for (const ConstUse& u : const_uses_) {
      const_roles_[insts_[u.inst].w[u.pos]] |= 1u << role_of(u.anchor);
    }
    // Constituents of a constant array of matrices are needed in each use of the array.
    for (size_t i = insts_.size(); i-- > 0;) {
      const Inst& in = insts_[i];
      if (in.opcode != spv::OpConstantComposite && in.opcode != spv::OpSpecConstantComposite &&
          in.opcode != spv::OpConstantNull && in.opcode != spv::OpUndef) {
        continue;
      }
      if (in.w.size() < 3 || !coop_value(in.w[2])) continue;
      uint32_t& mine = const_roles_[in.w[2]];
      if (mine == 0) mine = 1u << kAccumulator;
      for (size_t p = 3; p < in.w.size(); ++p) {
        if (const_like(in.w[p])) const_roles_[in.w[p]] |= mine;
      }
      type_roles_[in.w[1]] |= mine;
    }
    for (uint32_t id = 1; id < bound_; ++id) {
      if (def_[id] == kNone || !coop_value(id) || const_like(id)) continue;
      type_roles_[type_of_[id]] |= 1u << role_of(id);
    }
    // Arrays and pointers need their element type in each of their roles.
    for (size_t i = insts_.size(); i-- > 0;) {
      const Inst& in = insts_[i];
      const bool derived = in.opcode == spv::OpTypeArray || in.opcode == spv::OpTypeRuntimeArray ||
                           in.opcode == spv::OpTypePointer;
      if (!derived && in.opcode != spv::OpTypeCooperativeMatrixNV) continue;
      const uint32_t t = in.w[1];
      if (!coop_type_[t]) continue;
      if (type_roles_[t] == 0) type_roles_[t] = 1u << kAccumulator;
      if (derived) type_roles_[elem_[t]] |= type_roles_[t];
    }
    for (size_t i = 0; i < insts_.size(); ++i) {
      const size_t at = length_type_pos(i);
      if (at == 0) continue;
      const uint32_t t = id_at(i, at);
      if (!coop_type_[t] || elem_[t] != 0) fail(i, "operand is not a cooperative matrix type");
      if (std::popcount(type_roles_[t]) != 1) {
        fail(i, "the length of an NV type used as several KHR matrix uses is ambiguous");
      }
    }
    // The first role keeps the original id, so names and uses that carry no role stay valid.
    auto split = [&](std::vector<uint32_t>& roles, auto& ids) {
      for (uint32_t id = 1; id < bound_; ++id) {
        bool first = true;
        for (uint32_t r = 0; r < kRoleCount; ++r) {
          if (!(roles[id] & (1u << r))) continue;
          ids[{id, r}] = first ? id : next_id();
          if (!first) extra_ids_[id].push_back(ids[{id, r}]);
          first = false;
        }
      }
    };
    split(type_roles_, type_ids_);
    split(const_roles_, const_ids_);
  }

  // Where an instruction names the type whose length it asks for; 0 if it does not.
  // glslang emits .length() as OpSpecConstantOp CooperativeMatrixLengthNV.
  size_t length_type_pos(size_t i) const {
    const Inst& in = insts_[i];
    if (in.opcode == spv::OpCooperativeMatrixLengthNV) return 3;
    if (in.opcode == spv::OpSpecConstantOp && in.w.size() == 5 &&
        in.w[3] == spv::OpCooperativeMatrixLengthNV) {
      return 4;
    }
    return 0;
  }

  uint32_t length_type(uint32_t t) const {
    return typed(t, static_cast<uint32_t>(std::countr_zero(type_roles_[t])));
  }

  uint32_t next_id() { return bound_ + kRoleCount + added_++; }

  uint32_t typed(uint32_t type, uint32_t role) const {
    auto it = type_ids_.find({type, role});
    return it == type_ids_.end() ? type : it->second;
  }

  // An OpConstant of uint 32 defined before the first cooperative matrix type, or a new one.
  uint32_t uint_constant(uint32_t value) {
    auto it = uint_constants_.find(value);
    if (it != uint_constants_.end()) return it->second;
    if (uint_type_ != 0) {
      for (size_t i = uint_type_index_; i < first_coop_type_; ++i) {
        const Inst& in = insts_[i];
        if (in.opcode == spv::OpConstant && in.w.size() == 4 && in.w[1] == uint_type_ &&
            in.w[3] == value) {
          return uint_constants_[value] = in.w[2];
        }
      }
    }
    const uint32_t id = next_id();
    new_constants_.push_back({value, id});
    return uint_constants_[value] = id;
  }

  uint32_t layout_constant(size_t i, uint32_t bool_id) {
    const size_t d = bool_id < bound_ ? def_[bool_id] : kNone;
    const uint32_t op = d == kNone ? 0 : insts_[d].opcode;
    if (op == spv::OpConstantTrue) return uint_constant(kColumnMajorKHR);
    if (op == spv::OpConstantFalse) return uint_constant(kRowMajorKHR);
    fail(i, "the column-major operand %" + std::to_string(bool_id) +
                " is not an OpConstantTrue/OpConstantFalse");
  }

  bool signed_int_matrix(uint32_t value) const {
    const uint32_t type = type_of_[value];
    const Inst& t = insts_[def_[type]];
    const Inst& component = insts_[def_[t.w[2]]];
    return component.opcode == spv::OpTypeInt && component.w.size() == 4 && component.w[3] == 1;
  }

  void put(std::vector<uint32_t>& out, std::vector<uint32_t> w) {
    w[0] = header_word(w[0] & 0xffff, w.size());
    out.insert(out.end(), w.begin(), w.end());
  }

  std::vector<uint32_t> emit() {
    if (!has_nv_) {
      if (first_coop_type_ != kNone) {
        fail(first_coop_type_, "the module lacks the CooperativeMatrixNV capability");
      }
      std::vector<uint32_t> same = header_;
      for (const Inst& in : insts_) same.insert(same.end(), in.w.begin(), in.w.end());
      return same;
    }
    if (uint_type_ != 0 && uint_type_index_ > first_coop_type_) {
      fail(first_coop_type_, "the 32-bit uint type is declared after the first matrix type");
    }
    // Gather the constants the new operands need before anything is emitted.
    uint32_t roles_used = 0;
    for (size_t i = 0; i < insts_.size(); ++i) {
      if (insts_[i].opcode == spv::OpTypeCooperativeMatrixNV)
        roles_used |= type_roles_[insts_[i].w[1]];
    }
    for (uint32_t r = 0; r < kRoleCount; ++r) {
      if (roles_used & (1u << r)) use_constants_[r] = uint_constant(r);
    }
    std::map<size_t, uint32_t> layouts;  // per Load/Store: its layout constant
    for (size_t i = 0; i < insts_.size(); ++i) {
      const Inst& in = insts_[i];
      if (in.opcode == spv::OpCooperativeMatrixLoadNV) {
        if (in.w.size() < 6) fail(i, "expected at least 6 words");
        layouts[i] = layout_constant(i, in.w[5]);
      } else if (in.opcode == spv::OpCooperativeMatrixStoreNV) {
        if (in.w.size() < 5) fail(i, "expected at least 5 words");
        layouts[i] = layout_constant(i, in.w[4]);
      }
    }
    std::map<std::pair<size_t, size_t>, uint32_t> const_use_ids;
    for (const ConstUse& u : const_uses_) {
      const_use_ids[{u.inst, u.pos}] = const_ids_.at({insts_[u.inst].w[u.pos], role_of(u.anchor)});
    }

    std::vector<uint32_t> out = header_;
    for (size_t i = 0; i < insts_.size(); ++i) {
      std::vector<uint32_t> w = insts_[i].w;
      const uint32_t op = insts_[i].opcode;
      if (i == first_coop_type_) emit_new_constants(out);
      for (size_t p = 1; p < w.size(); ++p) {
        auto it = const_use_ids.find({i, p});
        if (it != const_use_ids.end()) w[p] = it->second;
      }
      switch (op) {
        case spv::OpCapability:
          if (w[1] == spv::CapabilityCooperativeMatrixNV) w[1] = kCapabilityCooperativeMatrixKHR;
          put(out, std::move(w));
          continue;
        case spv::OpExtension:
          if (decode_string(w, 1) == kNvExtension) {
            std::vector<uint32_t> ext = {spv::OpExtension};
            for (uint32_t word : encode_string(kKhrExtension)) ext.push_back(word);
            put(out, std::move(ext));
          } else {
            put(out, std::move(w));
          }
          continue;
        case spv::OpDecorate:
        case spv::OpDecorateId:
        case spv::OpDecorateString: {
          const uint32_t target = w[1];
          put(out, w);
          auto it = extra_ids_.find(target);
          if (it == extra_ids_.end()) continue;
          for (uint32_t extra : it->second) {
            w[1] = extra;
            put(out, w);
          }
          continue;
        }
        case spv::OpTypeCooperativeMatrixNV:
        case spv::OpTypeArray:
        case spv::OpTypeRuntimeArray:
        case spv::OpTypePointer: {
          const uint32_t t = w[1];
          if (!coop_type_[t]) break;
          for (uint32_t r = 0; r < kRoleCount; ++r) {
            if (!(type_roles_[t] & (1u << r))) continue;
            std::vector<uint32_t> v = w;
            v[1] = typed(t, r);
            if (op == spv::OpTypeCooperativeMatrixNV) {
              v[0] = kOpTypeCooperativeMatrixKHR;
              v.push_back(use_constants_[r]);
            } else {
              const size_t e = op == spv::OpTypePointer ? 3 : 2;
              v[e] = typed(v[e], r);
            }
            put(out, std::move(v));
          }
          continue;
        }
        case spv::OpConstantComposite:
        case spv::OpSpecConstantComposite:
        case spv::OpConstantNull:
        case spv::OpUndef: {
          if (!coop_value(w[2])) break;
          const uint32_t c = w[2];
          for (uint32_t r = 0; r < kRoleCount; ++r) {
            if (!(const_roles_[c] & (1u << r))) continue;
            std::vector<uint32_t> v = w;
            v[1] = typed(w[1], r);
            v[2] = const_ids_.at({c, r});
            for (size_t p = 3; p < v.size(); ++p) {
              if (const_like(v[p])) v[p] = const_ids_.at({v[p], r});
            }
            put(out, std::move(v));
          }
          continue;
        }
        default:
          break;
      }
      // Every other result of a matrix-carrying type takes the type of its use.
      bool has_result = false, has_type = false;
      spv::HasResultAndType(static_cast<spv::Op>(op), &has_result, &has_type);
      if (has_type && coop_value(w[2])) w[1] = typed(w[1], role_of(w[2]));
      switch (op) {
        case spv::OpCooperativeMatrixLoadNV: {
          // NV: type, result, pointer, stride, column-major [, memory operands]
          // KHR: type, result, pointer, layout, stride [, memory operands]
          std::vector<uint32_t> v = {
              kOpCooperativeMatrixLoadKHR, w[1], w[2], w[3], layouts[i], w[4]};
          v.insert(v.end(), w.begin() + 6, w.end());
          put(out, std::move(v));
          break;
        }
        case spv::OpCooperativeMatrixStoreNV: {
          // NV: pointer, object, stride, column-major [, memory operands]
          // KHR: pointer, object, layout, stride [, memory operands]
          std::vector<uint32_t> v = {kOpCooperativeMatrixStoreKHR, w[1], w[2], layouts[i], w[3]};
          v.insert(v.end(), w.begin() + 5, w.end());
          put(out, std::move(v));
          break;
        }
        case spv::OpCooperativeMatrixMulAddNV: {
          uint32_t flags = 0;
          if (signed_int_matrix(insts_[i].w[3])) flags |= kMatrixASigned;
          if (signed_int_matrix(insts_[i].w[4])) flags |= kMatrixBSigned;
          if (signed_int_matrix(insts_[i].w[5])) flags |= kMatrixCSigned;
          if (signed_int_matrix(insts_[i].w[2])) flags |= kMatrixResultSigned;
          std::vector<uint32_t> v = {kOpCooperativeMatrixMulAddKHR, w[1], w[2], w[3], w[4], w[5]};
          if (flags != 0) v.push_back(flags);
          put(out, std::move(v));
          break;
        }
        case spv::OpCooperativeMatrixLengthNV:
          put(out, {kOpCooperativeMatrixLengthKHR, w[1], w[2], length_type(w[3])});
          break;
        case spv::OpSpecConstantOp:
          if (length_type_pos(i) != 0) {
            w[3] = kOpCooperativeMatrixLengthKHR;
            w[4] = length_type(w[4]);
          }
          put(out, std::move(w));
          break;
        default:
          put(out, std::move(w));
          break;
      }
    }
    out[3] = bound_ + kRoleCount + added_;
    return out;
  }

  void emit_new_constants(std::vector<uint32_t>& out) {
    if (new_constants_.empty()) return;
    if (uint_type_ == 0) {
      uint_type_ = next_id();
      put(out, {spv::OpTypeInt, uint_type_, 32, 0});
    }
    for (const auto& [value, id] : new_constants_)
      put(out, {spv::OpConstant, uint_type_, id, value});
  }

  struct ConstUse {
    size_t inst, pos;
    uint32_t anchor;
  };

  std::vector<uint32_t> header_;
  std::vector<Inst> insts_;
  uint32_t bound_ = 0, added_ = 0;
  std::vector<uint32_t> parent_, mask_;
  std::vector<uint32_t> type_of_, elem_;
  std::vector<size_t> def_;
  std::vector<bool> coop_type_;
  bool has_nv_ = false;
  size_t first_coop_type_ = kNone;
  uint32_t uint_type_ = 0;
  size_t uint_type_index_ = 0;
  std::vector<ConstUse> const_uses_;
  std::set<uint32_t> coop_function_types_;
  std::vector<uint32_t> type_roles_, const_roles_;
  std::map<std::pair<uint32_t, uint32_t>, uint32_t> type_ids_, const_ids_;
  std::unordered_map<uint32_t, std::vector<uint32_t>> extra_ids_;
  std::map<uint32_t, uint32_t> uint_constants_;
  std::vector<std::pair<uint32_t, uint32_t>> new_constants_;
  std::array<uint32_t, kRoleCount> use_constants_{};
};

}  // namespace

std::vector<uint32_t> rewrite_nv_coop_to_khr(std::span<const uint32_t> spirv) {
  // The bound sizes the id tables; a bound past a few million ids is a damaged header.
  if (spirv.size() >= 5 && spirv[0] == spv::MagicNumber && spirv[3] > (1u << 22)) {
    throw Error("SPIR-V id bound " + std::to_string(spirv[3]) + " is implausibly large");
  }
  return Rewriter(spirv).run();
}

bool uses_nv_cooperative_matrix(std::span<const uint32_t> spirv) {
  for (const Inst& in : parse(spirv)) {
    if (in.opcode == spv::OpCapability && in.w.size() == 2 &&
        in.w[1] == spv::CapabilityCooperativeMatrixNV) {
      return true;
    }
  }
  return false;
}

}  // namespace mn::codegen
