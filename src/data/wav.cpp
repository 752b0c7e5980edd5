// RIFF/WAVE reading: the fmt and data chunks, PCM integers of 16/24/32 bits or 32-bit floats,
// channels averaged to mono.
#include <bit>
#include <cstring>
#include <fstream>
#include <string>

#include <meganeura/audio.h>
#include <meganeura/error.h>

#include "data/bytes.h"

namespace mn {

namespace {

constexpr uint16_t kPcm = 1, kFloat = 3, kExtensible = 0xFFFE;

uint32_t u32_at(const std::vector<uint8_t>& b, size_t at) { return data::load_le<uint32_t>(&b[at]); }
uint16_t u16_at(const std::vector<uint8_t>& b, size_t at) { return data::load_le<uint16_t>(&b[at]); }

struct Format {
  uint16_t tag = 0, channels = 0, bits = 0;
  uint32_t rate = 0;
  bool seen = false;
};

// One sample of `bits` bits at `p` as a float: integers scaled to [-1, 1).
float sample_at(const uint8_t* p, uint16_t tag, uint16_t bits) {
  if (tag == kFloat) return std::bit_cast<float>(data::load_le<uint32_t>(p));
  switch (bits) {
    case 16:
      return static_cast<float>(static_cast<int16_t>(data::load_le<uint16_t>(p))) / 32768.0f;
    case 24: {
      int32_t v = p[0] | p[1] << 8 | p[2] << 16;
      if (v & 0x800000) v -= 1 << 24;
      return static_cast<float>(v) / 8388608.0f;
    }
    default:
      return static_cast<float>(static_cast<double>(static_cast<int32_t>(data::load_le<uint32_t>(p))) /
                                2147483648.0);
  }
}

}  // namespace

Audio read_wav(const std::filesystem::path& path) {
  const std::string file = path.string();
  std::ifstream f(path, std::ios::binary);
  if (!f) throw FormatError(file + ": cannot open the audio file");
  const std::vector<uint8_t> b((std::istreambuf_iterator<char>(f)), std::istreambuf_iterator<char>());
  if (f.bad()) throw FormatError(file + ": cannot read the audio file");
  if (b.size() < 12 || std::memcmp(b.data(), "RIFF", 4) != 0 ||
      std::memcmp(b.data() + 8, "WAVE", 4) != 0) {
    throw FormatError(file + ": not a RIFF/WAVE file");
  }
  Format fmt;
  for (size_t at = 12; at + 8 <= b.size();) {
    const std::string id(reinterpret_cast<const char*>(b.data() + at), 4);
    const uint64_t size = u32_at(b, at + 4);
    const size_t body = at + 8;
    if (body + size > b.size()) {
      throw FormatError(file + ": the '" + id + "' chunk at byte " + std::to_string(at) +
                        " claims " + std::to_string(size) + " bytes, the file has " +
                        std::to_string(b.size() - body) + " after its header (truncated?)");
    }
    if (id == "fmt ") {
      if (size < 16) throw FormatError(file + ": the fmt chunk is " + std::to_string(size) + " bytes");
      fmt.tag = u16_at(b, body);
      fmt.channels = u16_at(b, body + 2);
      fmt.rate = u32_at(b, body + 4);
      fmt.bits = u16_at(b, body + 14);
      if (fmt.tag == kExtensible) {
        if (size < 40) throw FormatError(file + ": WAVE_FORMAT_EXTENSIBLE without its sub-format");
        fmt.tag = u16_at(b, body + 24);  // the sub-format GUID's first two bytes
      }
      fmt.seen = true;
    } else if (id == "data") {
      if (!fmt.seen) throw FormatError(file + ": the data chunk comes before the fmt chunk");
      const bool pcm = fmt.tag == kPcm && (fmt.bits == 16 || fmt.bits == 24 || fmt.bits == 32);
      const bool flt = fmt.tag == kFloat && fmt.bits == 32;
      if (!pcm && !flt) {
        throw FormatError(file + ": samples of format " + std::to_string(fmt.tag) + " with " +
                          std::to_string(fmt.bits) +
                          " bits are not supported (PCM of 16, 24 or 32 bits, or 32-bit float)");
      }
      if (fmt.channels == 0 || fmt.rate == 0) {
        throw FormatError(file + ": " + std::to_string(fmt.channels) + " channels at " +
                          std::to_string(fmt.rate) + " Hz");
      }
      const size_t frame = size_t{fmt.channels} * (fmt.bits / 8);
      if (size % frame != 0) {
        throw FormatError(file + ": the data chunk's " + std::to_string(size) +
                          " bytes are not whole frames of " + std::to_string(frame) + " bytes");
      }
      Audio a;
      a.sample_rate = fmt.rate;
      a.channels = fmt.channels;
      a.samples.resize(size / frame);
      for (size_t i = 0; i < a.samples.size(); ++i) {
        double sum = 0;
        for (uint16_t c = 0; c < fmt.channels; ++c) {
          sum += sample_at(b.data() + body + i * frame + c * (fmt.bits / 8u), fmt.tag, fmt.bits);
        }
        a.samples[i] = static_cast<float>(sum / fmt.channels);
      }
      return a;
    }
    at = body + size + (size & 1);  // chunks are padded to even sizes
  }
  throw FormatError(file + (fmt.seen ? ": no data chunk" : ": no fmt chunk"));
}

}  // namespace mn
