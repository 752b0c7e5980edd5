// A kernel storing its result twice (codegen/twin_store.h): the second output binding, the
// wrapped stores (the raw 16-bit store of a copy too), and the refusals that name the kernel.
#include <gtest/gtest.h>

#include <string>

#include <meganeura/error.h>

#include "codegen/glsl.h"
#include "codegen/shader/shader_compiler.h"
#include "codegen/twin_store.h"
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

}  // namespace
}  // namespace mn::codegen
