#include <meganeura/attrs.h>

#include <bit>
#include <cstring>
#include <iomanip>

#include <meganeura/array.h>

namespace mn::attr_detail {

uint64_t hash_bytes(const void* data, size_t n, uint64_t seed) {
  // FNV-1a then mixed: stable, and fast enough for attribute payloads.
  uint64_t h = 0xcbf29ce484222325ULL ^ seed;
  const auto* p = static_cast<const unsigned char*>(data);
  for (size_t i = 0; i < n; ++i) h = (h ^ p[i]) * 0x100000001b3ULL;
  return hash_mix(h, n);
}

uint64_t hash_value(double v, uint64_t h) {
  if (v == 0.0) v = 0.0;  // -0 and +0 compare equal, so they hash equal
  return hash_mix(h, std::bit_cast<uint64_t>(v));
}

uint64_t hash_value(const std::string& v, uint64_t h) { return hash_bytes(v.data(), v.size(), h); }

void print_value(std::ostream& os, double v) { os << std::setprecision(7) << v; }

}  // namespace mn::attr_detail
