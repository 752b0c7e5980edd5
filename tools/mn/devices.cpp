// `mn devices`: every Vulkan device with its capabilities, as text or as JSON.
#include <cstdio>
#include <cstdlib>
#include <string>

#include <nlohmann/json.hpp>

#include <meganeura/error.h>

#include "codegen/shader/current_glslang.h"
#include "codegen/shader/shader_compiler.h"
#include "commands.h"
#include "vulkan/capabilities.h"
#include "vulkan/device.h"
#include "vulkan/instance.h"

namespace mn::cli {
namespace {

using Json = nlohmann::ordered_json;

std::string hex_id(uint32_t id) {
  char text[16];
  std::snprintf(text, sizeof text, "0x%04x", id);
  return text;
}

Json configs_json(const std::vector<vk::CooperativeMatrixConfig>& configs) {
  Json out = Json::array();
  for (const auto& c : configs) {
    out.push_back({{"m", c.m},
                   {"n", c.n},
                   {"k", c.k},
                   {"a", c.a_type},
                   {"b", c.b_type},
                   {"c", c.c_type},
                   {"result", c.result_type},
                   {"saturating", c.saturating_accumulation},
                   {"scope", c.scope}});
  }
  return out;
}

Json device_json(const vk::DeviceCapabilities& d) {
  Json j;
  j["index"] = d.index;
  j["name"] = d.name;
  j["type"] = d.type;
  j["vendor"] = d.vendor;
  j["vendor_id"] = hex_id(d.vendor_id);
  j["device_id"] = hex_id(d.device_id);
  j["api_version"] = d.api_version_text;
  j["driver"] = {{"name", d.driver_name}, {"info", d.driver_info}, {"version", d.driver_version}};
  j["usable"] = d.usable;
  if (!d.usable) {
    j["unusable_reason"] = d.unusable_reason;
    return j;
  }
  const auto& c = d.compute;
  j["compute"] = {{"queue_family", c.queue_family},
                  {"subgroup_size", c.subgroup_size},
                  {"min_subgroup_size", c.min_subgroup_size},
                  {"max_subgroup_size", c.max_subgroup_size},
                  {"subgroup_size_control", c.subgroup_size_control},
                  {"compute_full_subgroups", c.compute_full_subgroups},
                  {"subgroup_arithmetic", c.subgroup_arithmetic},
                  {"subgroup_shuffle", c.subgroup_shuffle},
                  {"subgroup_ballot", c.subgroup_ballot},
                  {"subgroup_vote", c.subgroup_vote},
                  {"subgroup_clustered", c.subgroup_clustered},
                  {"shared_memory_bytes", c.shared_memory_bytes},
                  {"shared_memory_optin_bytes", c.shared_memory_optin_bytes},
                  {"max_workgroup_size", c.max_workgroup_size},
                  {"max_workgroup_invocations", c.max_workgroup_invocations},
                  {"max_workgroup_count", c.max_workgroup_count},
                  {"max_push_constant_bytes", c.max_push_constant_bytes},
                  {"max_storage_buffers_per_stage", c.max_storage_buffers_per_stage}};
  if (d.has_nv_sm_builtins) {
    j["compute"]["multiprocessors"] = c.multiprocessors;
    j["compute"]["warps_per_multiprocessor"] = c.warps_per_multiprocessor;
  }
  const auto& b = d.buffers;
  j["buffers"] = {{"max_storage_buffer_range", b.max_storage_buffer_range},
                  {"max_memory_allocation_bytes", b.max_memory_allocation_bytes},
                  {"max_buffer_bytes", b.max_buffer_bytes},
                  {"max_memory_allocation_count", b.max_memory_allocation_count},
                  {"min_storage_buffer_offset_alignment", b.min_storage_buffer_offset_alignment}};
  const auto& t = d.types;
  j["types"] = {{"f16_storage", t.storage_16bit},
                {"f16_arithmetic", t.float16},
                {"i8_storage", t.storage_8bit},
                {"i8_arithmetic", t.int8},
                {"i16", t.int16},
                {"i64", t.int64},
                {"f64", t.float64},
                {"bf16", t.bfloat16},
                {"bf16_dot", t.bfloat16_dot},
                {"bf16_cooperative_matrix", t.bfloat16_cooperative_matrix},
                {"integer_dot_product", t.integer_dot_product}};
  const auto& a = d.atomics;
  j["atomics"] = {{"i64_buffer", a.int64_buffer},
                  {"i64_shared", a.int64_shared},
                  {"ext_shader_atomic_float", a.float_extension},
                  {"f32_add_buffer", a.float32_add_buffer},
                  {"f32_add_shared", a.float32_add_shared},
                  {"f32_exchange_buffer", a.float32_buffer},
                  {"f64_add_buffer", a.float64_add_buffer},
                  {"ext_shader_atomic_float2", a.float2_extension},
                  {"f16_add_buffer", a.float16_add_buffer},
                  {"f32_min_max_buffer", a.float32_min_max_buffer}};
  j["timestamps"] = {{"supported", d.timestamps.supported},
                     {"valid_bits", d.timestamps.valid_bits},
                     {"period_ns", d.timestamps.period_ns}};
  const auto& m = d.cooperative_matrix;
  j["cooperative_matrix"] = {{"nv",
                              {{"extension", m.nv_extension},
                               {"feature", m.nv_feature},
                               {"configs", configs_json(m.nv_configs)}}},
                             {"khr",
                              {{"extension", m.khr_extension},
                               {"feature", m.khr_feature},
                               {"configs", configs_json(m.khr_configs)}}}};
  Json flexible = Json::array();
  for (const auto& f : m.flexible_configs) {
    flexible.push_back({{"m_granularity", f.m_granularity},
                        {"n_granularity", f.n_granularity},
                        {"k_granularity", f.k_granularity},
                        {"a", f.a_type},
                        {"b", f.b_type},
                        {"c", f.c_type},
                        {"result", f.result_type},
                        {"saturating_accumulation", f.saturating_accumulation},
                        {"scope", f.scope},
                        {"workgroup_invocations", f.workgroup_invocations}});
  }
  j["cooperative_matrix"]["nv2"] = {
      {"extension", m.nv2_extension},
      {"workgroup_scope", m.workgroup_scope},
      {"flexible_dimensions", m.flexible_dimensions},
      {"tensor_addressing", m.tensor_addressing},
      {"per_element_operations", m.per_element_operations},
      {"reductions", m.reductions},
      {"conversions", m.conversions},
      {"block_loads", m.block_loads},
      {"workgroup_scope_max_workgroup_size", m.workgroup_scope_max_workgroup_size},
      {"flexible_dimensions_max_dimension", m.flexible_dimensions_max_dimension},
      {"workgroup_scope_reserved_shared_bytes", m.workgroup_scope_reserved_shared_bytes},
      {"flexible_configs", flexible}};
  Json heaps = Json::array();
  for (const auto& h : d.memory.heaps) {
    heaps.push_back({{"bytes", h.bytes}, {"device_local", h.device_local}});
  }
  j["memory"] = {{"device_local_bytes", d.memory.device_local_bytes},
                 {"host_visible_device_local_bytes", d.memory.host_visible_device_local_bytes},
                 {"unified", d.memory.unified},
                 {"heaps", heaps}};
  j["vulkan_memory_model"] = d.vulkan_memory_model;
  return j;
}

std::string scalar_text(const Json& v) { return v.is_string() ? v.get<std::string>() : v.dump(); }

// The JSON, as indented "key: value" lines; arrays of objects print one object per line.
void print_text(const Json& object, int indent) {
  const std::string pad(indent, ' ');
  for (const auto& [key, value] : object.items()) {
    if (value.is_object()) {
      std::printf("%s%s:\n", pad.c_str(), key.c_str());
      print_text(value, indent + 2);
    } else if (value.is_array() && !value.empty() && value.front().is_object()) {
      std::printf("%s%s: %zu\n", pad.c_str(), key.c_str(), value.size());
      for (const auto& element : value) {
        std::string line;
        for (const auto& [k, v] : element.items()) line += k + "=" + scalar_text(v) + " ";
        std::printf("%s  %s\n", pad.c_str(), line.c_str());
      }
    } else {
      std::printf("%s%s: %s\n", pad.c_str(), key.c_str(), scalar_text(value).c_str());
    }
  }
}

void run_devices(bool json) {
  vk::Instance instance(vk::validation_requested_by_env());
  const auto physical = instance.physical_devices();
  std::vector<vk::DeviceCapabilities> devices;
  for (uint32_t i = 0; i < physical.size(); ++i) {
    devices.push_back(vk::query_capabilities(instance.handle(), physical[i], i));
  }
  const char* env = std::getenv("MN_DEVICE");
  Json selected = nullptr;
  std::string selection_error;
  try {
    selected = vk::select_device(devices, env ? env : "");
  } catch (const DeviceError& e) {
    selection_error = e.what();
  }
  Json out;
  out["devices"] = Json::array();
  for (const auto& d : devices) {
    Json j = device_json(d);
    j["selected"] = !selected.is_null() && selected.get<uint32_t>() == d.index;
    out["devices"].push_back(std::move(j));
  }
  // The current glslang (docs/shader-toolchain.md): where it was found, or why not.
  const codegen::CurrentGlslang& cg = codegen::current_glslang();
  out["shader_compiler"] = {{"linked", codegen::compiler_version()},
                            {"current", cg.available ? cg.version : std::string()},
                            {"current_path", cg.path},
                            {"current_status", cg.available ? std::string("loaded") : cg.status}};
  if (json) {
    std::printf("%s\n", out.dump(2).c_str());
  } else {
    if (devices.empty()) std::printf("no Vulkan devices\n");
    for (const auto& j : out["devices"]) {
      std::printf("device %s: %s%s\n", j["index"].dump().c_str(),
                  j["name"].get<std::string>().c_str(),
                  j["selected"].get<bool>() ? " [selected]" : "");
      Json rest = j;
      rest.erase("index");
      rest.erase("name");
      rest.erase("selected");
      print_text(rest, 2);
    }
    std::printf("shader compilers:\n");
    print_text(out["shader_compiler"], 2);
  }
  if (!selection_error.empty()) std::fprintf(stderr, "mn: %s\n", selection_error.c_str());
  instance.validation_log().check("mn devices");
}

}  // namespace

void add_devices_command(CLI::App& app) {
  auto* cmd = app.add_subcommand("devices", "list Vulkan devices and their capabilities");
  auto json = std::make_shared<bool>(false);
  cmd->add_flag("--json", *json,
                "print one JSON object: {\"devices\": [...], \"shader_compiler\": {...}}");
  cmd->callback([json] { run_devices(*json); });
}

}  // namespace mn::cli
