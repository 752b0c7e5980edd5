// Rewrites of a kernel's stores (codegen/store_rewrites.h): a twin stored through a second
// output binding (a raw 16-bit store widened for it), a permuted store, and the refusals.
#include <gtest/gtest.h>

#include <string>

#include <meganeura/error.h>

#include "codegen/glsl.h"
#include "codegen/shader/shader_compiler.h"
#include "codegen/store_rewrites.h"
#include "support/expect_error.h"
#include "support/spirv_val.h"

namespace mn::codegen {
namespace {

// One launch reading binding 0 and storing binding 1 through `body`.
Lowering copy_lowering(DType in, DType out, const std::string& body) {
  KernelLaunch k;
  k.name = "copy";
  k.glsl = glsl::header() + glsl::buffer(0, in, "x", true) + glsl::buffer(1, out, "out", false) +
           "void main() {\n  uint i = gl_GlobalInvocationID.x;\n" + body + "}\n";
  k.bindings = {{ArgRef::input(0), false}, {ArgRef::output(), true}};
  Lowering l;
  l.launches.push_back(std::move(k));
  return l;
}

void expect_compiles(const KernelLaunch& k) {
  const std::vector<uint32_t> spirv = compile_glsl(k.glsl, CompileOptions{});
  if (!test::spirv_val_path().empty()) EXPECT_EQ(test::spirv_val_errors(spirv), "") << k.glsl;
}

TEST(TwinStore, ANarrowedCopyOfEveryStoreThroughASecondBinding) {
  Lowering l = copy_lowering(DType::f32, DType::f32, "  out_st(i, x_ld(i) * 2.0);\n");
  add_twin_store(l, DType::f32, DType::bf16);
  const KernelLaunch& k = l.launches.front();
  ASSERT_EQ(k.bindings.size(), 3u);
  EXPECT_EQ(k.bindings[2].arg, ArgRef::output(1));
  EXPECT_TRUE(k.bindings[2].written);
  EXPECT_EQ(k.name, "copy+twin[bf16]");
  EXPECT_NE(k.glsl.find("twin_st(i, v)"), std::string::npos);
  expect_compiles(k);
}

TEST(TwinStore, ARawSixteenBitStoreIsWidenedForTheTwin) {
  Lowering l = copy_lowering(DType::bf16, DType::bf16, "  out_stb(i, x_ldb(i));\n");
  add_twin_store(l, DType::bf16, DType::f32);
  const KernelLaunch& k = l.launches.front();
  EXPECT_NE(k.glsl.find("twin_st(i, mn_bf16_to_f32(v))"), std::string::npos) << k.glsl;
  expect_compiles(k);
}

// A kernel storing two outputs (a stacked rotation's): the second's twin through out1_st.
TEST(TwinStore, OfASecondOutput) {
  Lowering l =
      copy_lowering(DType::f32, DType::f32, "  out_st(i, x_ld(i));\n  out1_st(i, -x_ld(i));\n");
  KernelLaunch& k = l.launches.front();
  k.glsl.insert(k.glsl.find("void main()"), glsl::buffer(2, DType::f32, "out1", false));
  k.bindings.push_back({ArgRef::output(1), true});
  add_twin_store(l, DType::f32, DType::bf16, 2, KernelOutput{1, "out1"});
  ASSERT_EQ(k.bindings.size(), 4u);
  EXPECT_EQ(k.bindings[3].arg, ArgRef::output(2));
  EXPECT_NE(k.glsl.find("mn_own_out1_st(i, v); twin1_st(i, v);"), std::string::npos) << k.glsl;
  EXPECT_EQ(k.glsl.find("mn_own_out_st"), std::string::npos);  // output 0 stays as it was
  expect_compiles(k);
}

TEST(TwinStore, RefusesWhatItCannotCopy) {
  Lowering direct = copy_lowering(DType::f32, DType::f32, "  out_data[i] = x_ld(i);\n");
  expect_error<Error>([&] { add_twin_store(direct, DType::f32, DType::bf16); },
                      {"kernel 'copy'", "other than through out_st"});
  Lowering same = copy_lowering(DType::f32, DType::f32, "  out_st(i, x_ld(i));\n");
  expect_error<Error>([&] { add_twin_store(same, DType::f32, DType::f32); },
                      {"two float dtypes", "f32 to f32"});
  Lowering none = copy_lowering(DType::f32, DType::f32, "  out_st(i, x_ld(i));\n");
  none.launches.front().bindings[1].written = false;
  expect_error<Error>([&] { add_twin_store(none, DType::f32, DType::bf16); },
                      {"no launch stores the output"});
}

TEST(PermutedStore, StoresAtThePermutedOffset) {
  Lowering l = copy_lowering(DType::f32, DType::bf16, "  out_st(i, x_ld(i));\n");
  add_permuted_store(l, {2, 3, 4}, {2, 0, 1});
  const KernelLaunch& k = l.launches.front();
  EXPECT_EQ(k.name, "copy+store[permute(2,0,1)]");
  // Element (c0, c1, c2) of [2, 3, 4] goes to (c2, c0, c1) of [4, 2, 3]: offset c2 * 6 + c0 * 3 +
  // c1.
  EXPECT_NE(k.glsl.find("return mn_c2 * 6u + mn_c0 * 3u + mn_c1 * 1u;"), std::string::npos)
      << k.glsl;
  EXPECT_EQ(k.bindings.size(), 2u);
  expect_compiles(k);
}

TEST(PermutedStore, RefusesKernelsReadingTheirOutputOrStoringRawValues) {
  Lowering readback = copy_lowering(DType::f32, DType::f32,
                                    "  out_st(i, x_ld(i));\n  out_st(i, out_ld(i) * 2.0);\n");
  expect_error<Error>(
      [&] {
        add_permuted_store(readback, {4, 2}, {1, 0});
      },
      {"kernel 'copy'", "reads its output back"});
  Lowering raw = copy_lowering(DType::bf16, DType::bf16, "  out_stb(i, x_ldb(i));\n");
  expect_error<Error>([&] { add_permuted_store(raw, {4, 2}, {1, 0}); }, {"raw or integer"});
  Lowering rank = copy_lowering(DType::f32, DType::f32, "  out_st(i, x_ld(i));\n");
  expect_error<Error>(
      [&] {
        add_permuted_store(rank, {4, 2}, {1, 0, 2});
      },
      {"permutation of the result's 2 axes, got 3"});
  for (const std::vector<int64_t>& bad : {std::vector<int64_t>{1, 1}, {0, 2}, {-1, 0}}) {
    Lowering l = copy_lowering(DType::f32, DType::f32, "  out_st(i, x_ld(i));\n");
    expect_error<Error>(
        [&] {
          add_permuted_store(l, {4, 2}, bad);
        },
        {"permutation of the result's 2 axes", "out of range or repeated"});
  }
}

// A permuted twin: the value stored as it is and, through a second binding, at the permuted
// offset in the twin's dtype (f32 twins too: the layout differs, not the dtype).
TEST(PermutedTwinStore, StoresBothLayouts) {
  for (const DType twin : {DType::bf16, DType::f32}) {
    Lowering l = copy_lowering(DType::f32, DType::f32, "  out_st(i, x_ld(i));\n");
    add_permuted_twin_store(l, twin, {2, 3, 4}, {2, 0, 1}, 1);
    const KernelLaunch& k = l.launches.front();
    EXPECT_EQ(k.name, "copy+twin[" + std::string(dtype_name(twin)) + ",permute(2,0,1)]");
    ASSERT_EQ(k.bindings.size(), 3u);
    EXPECT_EQ(k.bindings[2].arg, ArgRef::output(1));
    EXPECT_TRUE(k.bindings[2].written);
    EXPECT_NE(k.glsl.find("mn_own_out_st(i, v); ptwin_st(mn_twin_permuted(i), v);"),
              std::string::npos)
        << k.glsl;
    EXPECT_NE(k.glsl.find("return mn_c2 * 6u + mn_c0 * 3u + mn_c1 * 1u;"), std::string::npos);
    expect_compiles(k);
  }
  Lowering raw = copy_lowering(DType::bf16, DType::bf16, "  out_stb(i, x_ldb(i));\n");
  expect_error<Error>(
      [&] {
        add_permuted_twin_store(raw, DType::f32, {4, 2}, {1, 0}, 1);
      },
      {"kernel 'copy'", "raw or integer"});
  Lowering ints = copy_lowering(DType::f32, DType::f32, "  out_st(i, x_ld(i));\n");
  expect_error<Error>(
      [&] {
        add_permuted_twin_store(ints, DType::i32, {4, 2}, {1, 0}, 1);
      },
      {"float dtype", "i32"});
}

}  // namespace
}  // namespace mn::codegen
