#pragma once
// ONNX element types and TensorProto contents as the rest of the library knows them (ElemType,
// RawTensor, Array).
#include <filesystem>
#include <optional>
#include <string>

#include <meganeura/array.h>
#include <meganeura/data.h>
#include <meganeura/dtype.h>

namespace onnx {
class TensorProto;
}

namespace mn::onnx {

// TensorProto.DataType code -> ElemType; UnsupportedError (naming `what`) for strings,
// complex numbers, 64-bit unsigned integers and codes we do not know.
ElemType elem_type_of(int onnx_type, const std::string& what);

// The dtype a value of this element type has in a graph: floats keep theirs, integers up to 32
// bits and 64-bit ones (range-checked) are i32, UINT32 is u32, BOOL is f32 holding 0/1.
// DOUBLE has none: UnsupportedError naming `what`.
DType graph_dtype_of(ElemType t, const std::string& what);
bool is_integer(ElemType t);
bool is_float_type(ElemType t);  // FLOAT, FLOAT16, BFLOAT16

// A TensorProto's elements (typed fields, raw_data or external data, read from `dir`); `what`
// names it in errors.
RawTensor tensor_from_proto(const ::onnx::TensorProto& t, const std::filesystem::path& dir,
                            const std::string& what);

// The first element outside the 32-bit integers the device computes with, if any.
std::optional<size_t> first_outside_i32(const Array& a);

// A host value: exact doubles (integers up to 2^53, 64-bit sentinels like INT64_MAX as the
// nearest double), labelled with the graph dtype the element type maps to (f32 for DOUBLE).
Array host_array(const RawTensor& t);

}  // namespace mn::onnx
