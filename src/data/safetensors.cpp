// safetensors: an 8-byte little-endian header length, a JSON header, then the data section.
// The reader validates the header completely before any tensor is read: every tensor's bytes
// must match its dtype and shape, and the tensors must tile the data section exactly (no gap,
// no overlap, nothing past the end), as the reference implementation requires.
#include <meganeura/data.h>
#include <meganeura/error.h>

#include <fcntl.h>
#include <sys/stat.h>
#include <unistd.h>

#include <nlohmann/json.hpp>

#include <algorithm>
#include <cerrno>
#include <cstring>
#include <set>

#include "data/atomic_file.h"
#include "data/bytes.h"

namespace mn {

namespace {

using nlohmann::json;

// The reference implementation's limit; a larger header is almost surely corrupt.
constexpr uint64_t kMaxHeader = 100'000'000;

}  // namespace

struct SafetensorsReader::Impl {
  std::string name;
  int fd = -1;                  // the file, when reading from disk
  std::vector<uint8_t> memory;  // the file image, when parsing from memory
  uint64_t file_size = 0;
  uint64_t data_start = 0;
  std::map<std::string, std::string> metadata;
  std::vector<SafetensorsEntry> entries;
  std::map<std::string, size_t> index;

  ~Impl() {
    if (fd >= 0) ::close(fd);
  }

  [[noreturn]] void fail(const std::string& what) const { throw FormatError(name + ": " + what); }

  void read_at(uint64_t offset, uint8_t* dst, size_t n) const {
    if (n == 0) return;  // an empty tensor: dst may be null, which memcpy must not see
    if (fd < 0) {
      if (offset > memory.size() || n > memory.size() - offset) {
        fail("read of " + std::to_string(n) + " bytes at byte " + std::to_string(offset) +
             " is past the end");
      }
      std::memcpy(dst, memory.data() + offset, n);
      return;
    }
    size_t done = 0;
    while (done < n) {
      ssize_t got = ::pread(fd, dst + done, n - done, static_cast<off_t>(offset + done));
      if (got < 0 && errno == EINTR) continue;
      if (got < 0)
        fail("read error at byte " + std::to_string(offset + done) + ": " + std::strerror(errno));
      if (got == 0) {
        fail("truncated at byte " + std::to_string(offset + done) +
             " (the file shrank while open)");
      }
      done += static_cast<size_t>(got);
    }
  }

  void parse();
  SafetensorsEntry parse_entry(const std::string& key, const json& v, uint64_t data_size) const;
};

SafetensorsEntry SafetensorsReader::Impl::parse_entry(const std::string& key, const json& v,
                                                      uint64_t data_size) const {
  const std::string where = "tensor '" + key + "'";
  if (!v.is_object()) fail(where + ": header entry is not an object");
  auto field = [&](const char* f) -> const json& {
    auto it = v.find(f);
    if (it == v.end()) fail(where + ": header entry has no \"" + f + "\"");
    return *it;
  };
  SafetensorsEntry e;
  e.name = key;
  const json& dtype = field("dtype");
  if (!dtype.is_string()) fail(where + ": \"dtype\" is not a string");
  try {
    e.type = elem_type_from_name(dtype.get<std::string>());
  } catch (const FormatError& err) {
    fail(where + ": " + err.what());
  }
  const json& shape = field("shape");
  if (!shape.is_array()) fail(where + ": \"shape\" is not an array");
  uint64_t count = 1;
  for (const json& d : shape) {
    if (!d.is_number_unsigned() || d.get<uint64_t>() > uint64_t{INT64_MAX}) {
      fail(where + ": shape " + shape.dump() + " has an entry that is not a non-negative integer");
    }
    if (data::mul_overflow(count, d.get<uint64_t>(), &count)) {
      fail(where + ": shape " + shape.dump() + " overflows 64 bits");
    }
    e.shape.push_back(static_cast<int64_t>(d.get<uint64_t>()));
  }
  uint64_t nbytes = 0;
  if (data::mul_overflow(count, elem_type_size(e.type), &nbytes)) {
    fail(where + ": shape " + shape.dump() + " overflows 64 bits");
  }
  const json& offsets = field("data_offsets");
  if (!offsets.is_array() || offsets.size() != 2 || !offsets[0].is_number_unsigned() ||
      !offsets[1].is_number_unsigned()) {
    fail(where + ": \"data_offsets\" " + offsets.dump() +
         " is not [begin, end] with non-negative integers");
  }
  e.begin = offsets[0].get<uint64_t>();
  e.end = offsets[1].get<uint64_t>();
  const std::string range =
      "data_offsets [" + std::to_string(e.begin) + ", " + std::to_string(e.end) + "]";
  if (e.end < e.begin) fail(where + ": " + range + " end before they begin");
  if (e.end - e.begin != nbytes) {
    fail(where + ": " + range + " span " + std::to_string(e.end - e.begin) + " bytes, but " +
         elem_type_name(e.type) + " " + shape_str(e.shape) + " needs " + std::to_string(nbytes));
  }
  if (e.end > data_size) {
    fail(where + ": " + range + " run past the " + std::to_string(data_size) +
         "-byte data section (file bytes " + std::to_string(data_start) + " to " +
         std::to_string(file_size) + ")");
  }
  return e;
}

void SafetensorsReader::Impl::parse() {
  if (file_size < 8) {
    fail("the file is " + std::to_string(file_size) +
         " bytes, too short for the 8-byte header length at byte 0");
  }
  uint8_t len_bytes[8];
  read_at(0, len_bytes, 8);
  const uint64_t header_len = data::load_le<uint64_t>(len_bytes);
  if (header_len > kMaxHeader) {
    fail("header length " + std::to_string(header_len) + " (bytes 0-7) exceeds the limit of " +
         std::to_string(kMaxHeader));
  }
  if (header_len > file_size - 8) {
    fail("header length " + std::to_string(header_len) + " (bytes 0-7) runs past the end of the " +
         std::to_string(file_size) + "-byte file");
  }
  data_start = 8 + header_len;
  const uint64_t data_size = file_size - data_start;
  std::string text(header_len, '\0');
  read_at(8, reinterpret_cast<uint8_t*>(text.data()), text.size());
  if (text.empty() || text[0] != '{') fail("the JSON header at byte 8 does not start with '{'");

  // nlohmann keeps the last of duplicate keys; the format forbids duplicates, so track them.
  std::vector<std::set<std::string>> open_objects;
  std::string duplicate;
  json header;
  try {
    header = json::parse(text, [&](int, json::parse_event_t event, json& parsed) {
      if (event == json::parse_event_t::object_start) open_objects.emplace_back();
      if (event == json::parse_event_t::object_end && !open_objects.empty())
        open_objects.pop_back();
      if (event == json::parse_event_t::key && !open_objects.empty() && duplicate.empty() &&
          !open_objects.back().insert(parsed.get<std::string>()).second) {
        duplicate = parsed.get<std::string>();
      }
      return true;
    });
  } catch (const json::parse_error& err) {
    fail("invalid JSON header near byte " + std::to_string(8 + (err.byte ? err.byte - 1 : 0)) +
         ": " + err.what());
  } catch (const json::exception& err) {
    fail(std::string("invalid JSON header: ") + err.what());
  }
  if (!duplicate.empty()) fail("the JSON header repeats the key '" + duplicate + "'");
  if (!header.is_object()) fail("the JSON header at byte 8 is not an object");

  for (const auto& [key, value] : header.items()) {
    if (key == "__metadata__") {
      if (!value.is_object()) fail("\"__metadata__\" is not an object of strings");
      for (const auto& [mk, mv] : value.items()) {
        if (!mv.is_string()) fail("\"__metadata__\" value of '" + mk + "' is not a string");
        metadata[mk] = mv.get<std::string>();
      }
      continue;
    }
    entries.push_back(parse_entry(key, value, data_size));
  }
  std::sort(entries.begin(), entries.end(), [](const auto& a, const auto& b) {
    return a.begin != b.begin ? a.begin < b.begin : a.end < b.end;
  });
  uint64_t covered = 0;
  for (size_t i = 0; i < entries.size(); ++i) {
    const SafetensorsEntry& e = entries[i];
    if (e.begin < covered) {
      fail("tensor '" + e.name + "' data_offsets [" + std::to_string(e.begin) + ", " +
           std::to_string(e.end) + "] overlap tensor '" + entries[i - 1].name + "' [" +
           std::to_string(entries[i - 1].begin) + ", " + std::to_string(entries[i - 1].end) + "]");
    }
    if (e.begin > covered) {
      fail("data bytes [" + std::to_string(covered) + ", " + std::to_string(e.begin) +
           ") before tensor '" + e.name + "' belong to no tensor (file bytes " +
           std::to_string(data_start + covered) + " to " + std::to_string(data_start + e.begin) +
           ")");
    }
    covered = e.end;
    index[e.name] = i;
  }
  if (covered != data_size) {
    fail("the data section is " + std::to_string(data_size) + " bytes but the tensors cover " +
         std::to_string(covered) + " (file bytes " + std::to_string(data_start + covered) + " to " +
         std::to_string(file_size) + " belong to no tensor)");
  }
}

SafetensorsReader::SafetensorsReader() : impl_(std::make_unique<Impl>()) {}

SafetensorsReader::SafetensorsReader(const std::filesystem::path& path) : SafetensorsReader() {
  impl_->name = path.string();
  impl_->fd = ::open(path.c_str(), O_RDONLY | O_CLOEXEC);
  if (impl_->fd < 0) impl_->fail(std::string("cannot open: ") + std::strerror(errno));
  struct stat st {};
  if (::fstat(impl_->fd, &st) != 0 || !S_ISREG(st.st_mode)) impl_->fail("not a regular file");
  impl_->file_size = static_cast<uint64_t>(st.st_size);
  impl_->parse();
}

SafetensorsReader SafetensorsReader::from_bytes(std::vector<uint8_t> bytes, std::string name) {
  SafetensorsReader r;
  r.impl_->name = std::move(name);
  r.impl_->file_size = bytes.size();
  r.impl_->memory = std::move(bytes);
  r.impl_->parse();
  return r;
}

SafetensorsReader::~SafetensorsReader() = default;
SafetensorsReader::SafetensorsReader(SafetensorsReader&&) noexcept = default;
SafetensorsReader& SafetensorsReader::operator=(SafetensorsReader&&) noexcept = default;

const std::map<std::string, std::string>& SafetensorsReader::metadata() const {
  return impl_->metadata;
}

const std::vector<SafetensorsEntry>& SafetensorsReader::entries() const { return impl_->entries; }

bool SafetensorsReader::contains(const std::string& name) const {
  return impl_->index.count(name) > 0;
}

const SafetensorsEntry& SafetensorsReader::entry(const std::string& name) const {
  auto it = impl_->index.find(name);
  if (it == impl_->index.end()) {
    std::string names;
    for (size_t i = 0; i < impl_->entries.size() && i < 8; ++i) {
      names += (i ? ", " : "") + impl_->entries[i].name;
    }
    if (impl_->entries.size() > 8) names += ", ...";
    impl_->fail("no tensor named '" + name + "' (it has " + std::to_string(impl_->entries.size()) +
                ": " + names + ")");
  }
  return impl_->entries[it->second];
}

RawTensor SafetensorsReader::raw(const std::string& name) const {
  const SafetensorsEntry& e = entry(name);
  RawTensor t;
  t.type = e.type;
  t.shape = e.shape;
  t.bytes.resize(e.end - e.begin);
  impl_->read_at(impl_->data_start + e.begin, t.bytes.data(), t.bytes.size());
  return t;
}

Array SafetensorsReader::array(const std::string& name) const {
  return to_array(raw(name), impl_->name + ": tensor '" + name + "'");
}

namespace {

using Fill = std::function<void(size_t, std::span<uint8_t>)>;

// With bytes_given, every view's bytes must hold its tensor; else fill() produces them.
void write_tensors(const std::filesystem::path& path, std::span<const TensorView> tensors,
                   const std::map<std::string, std::string>& metadata, const Fill& fill,
                   bool bytes_given) {
  const std::string file = "write_safetensors '" + path.string() + "'";
  json header = json::object();
  if (!metadata.empty()) header["__metadata__"] = metadata;
  uint64_t offset = 0;
  std::vector<uint64_t> sizes;
  for (const TensorView& t : tensors) {
    if (t.name == "__metadata__")
      throw Error(file + ": '__metadata__' is reserved, not a tensor name");
    if (header.contains(t.name)) throw Error(file + ": two tensors are named '" + t.name + "'");
    uint64_t count = 1;
    for (int64_t d : t.shape) {
      if (d < 0 || data::mul_overflow(count, static_cast<uint64_t>(d), &count)) {
        throw Error(file + ": tensor '" + t.name + "' has an invalid shape " + shape_str(t.shape));
      }
    }
    if (count > UINT64_MAX / elem_type_size(t.type) ||
        (bytes_given && count * elem_type_size(t.type) != t.bytes.size())) {
      throw Error(file + ": tensor '" + t.name + "' has " + std::to_string(t.bytes.size()) +
                  " bytes for " + elem_type_name(t.type) + " " + shape_str(t.shape));
    }
    sizes.push_back(count * elem_type_size(t.type));
    header[t.name] = {{"dtype", elem_type_name(t.type)},
                      {"shape", t.shape},
                      {"data_offsets", {offset, offset + sizes.back()}}};
    offset += sizes.back();
  }
  std::string text;
  try {
    text = header.dump();
  } catch (const json::exception& err) {
    throw Error(file + ": cannot encode the header: " + err.what());
  }
  // Spaces keep the data section 8-byte aligned, as the reference writer does.
  text.append((8 - text.size() % 8) % 8, ' ');
  uint8_t len[8];
  data::store_le<uint64_t>(len, text.size());

  data::AtomicFile out(path);
  out.write(len, sizeof len);
  out.write(text.data(), text.size());
  std::vector<uint8_t> buffer;
  for (size_t i = 0; i < tensors.size(); ++i) {
    buffer.assign(sizes[i], 0);
    fill(i, buffer);
    out.write(buffer.data(), buffer.size());
  }
  out.commit();
}

}  // namespace

void write_safetensors(const std::filesystem::path& path, std::span<const TensorView> tensors,
                       const std::map<std::string, std::string>& metadata) {
  auto copy = [&](size_t i, std::span<uint8_t> out) {
    if (!out.empty()) std::memcpy(out.data(), tensors[i].bytes.data(), out.size());
  };
  write_tensors(path, tensors, metadata, copy, /*bytes_given=*/true);
}

void write_safetensors(const std::filesystem::path& path, std::span<const TensorView> tensors,
                       const std::map<std::string, std::string>& metadata, const Fill& fill) {
  write_tensors(path, tensors, metadata, fill, /*bytes_given=*/false);
}

void save_safetensors(const std::filesystem::path& path, const std::map<std::string, Array>& arrays,
                      const std::map<std::string, std::string>& metadata) {
  std::vector<RawTensor> raws;
  std::vector<TensorView> views;
  raws.reserve(arrays.size());
  for (const auto& [name, a] : arrays) {
    raws.push_back(
        from_array(a, elem_type_for(a.dtype), path.string() + ": tensor '" + name + "'"));
    views.push_back(view(name, raws.back()));
  }
  write_safetensors(path, views, metadata);
}

std::map<std::string, Array> load_safetensors(const std::filesystem::path& path) {
  SafetensorsReader r(path);
  std::map<std::string, Array> out;
  for (const SafetensorsEntry& e : r.entries()) out.emplace(e.name, r.array(e.name));
  return out;
}

}  // namespace mn
