#include "kiln/train/observability/tensorboard.h"

#include <unistd.h>

#include <array>
#include <cerrno>
#include <chrono>
#include <cstring>
#include <ctime>
#include <filesystem>

#include <fmt/format.h>

namespace kiln::train {
namespace {

// CRC-32C (Castagnoli, reflected polynomial 0x82F63B78), one table byte at a time: the
// files are small, so simplicity beats the SSE4.2 instruction.
const std::array<uint32_t, 256>& crc_table() {
  static const std::array<uint32_t, 256> table = [] {
    std::array<uint32_t, 256> t{};
    for (uint32_t i = 0; i < 256; ++i) {
      uint32_t c = i;
      for (int k = 0; k < 8; ++k) c = (c & 1) ? (c >> 1) ^ 0x82F63B78u : c >> 1;
      t[i] = c;
    }
    return t;
  }();
  return table;
}

// Protobuf wire format: tag = field << 3 | wire type (0 varint, 1 fixed64, 2 bytes, 5 fixed32).
void put_varint(std::string& out, uint64_t v) {
  while (v >= 0x80) {
    out += static_cast<char>((v & 0x7f) | 0x80);
    v >>= 7;
  }
  out += static_cast<char>(v);
}
void put_tag(std::string& out, int field, int wire) { put_varint(out, static_cast<uint64_t>(field) << 3 | wire); }
template <typename T>
void put_fixed(std::string& out, T v) {  // little-endian host (x86-64, aarch64)
  char bytes[sizeof(T)];
  std::memcpy(bytes, &v, sizeof(T));
  out.append(bytes, sizeof(T));
}
void put_bytes(std::string& out, int field, std::string_view bytes) {
  put_tag(out, field, 2);
  put_varint(out, bytes.size());
  out.append(bytes);
}

}  // namespace

uint32_t crc32c(const void* data, size_t size) {
  const auto& table = crc_table();
  const auto* p = static_cast<const uint8_t*>(data);
  uint32_t c = 0xFFFFFFFFu;
  for (size_t i = 0; i < size; ++i) c = table[(c ^ p[i]) & 0xff] ^ (c >> 8);
  return c ^ 0xFFFFFFFFu;
}

uint32_t masked_crc32c(const void* data, size_t size) {
  uint32_t c = crc32c(data, size);
  return ((c >> 15) | (c << 17)) + 0xa282ead8u;
}

std::string encode_event(double wall_time, int64_t step, const std::vector<Scalar>& scalars,
                         std::string_view file_version) {
  std::string event;
  put_tag(event, 1, 1);
  put_fixed<double>(event, wall_time);
  put_tag(event, 2, 0);
  put_varint(event, static_cast<uint64_t>(step));  // int64: two's complement in 10 bytes if negative
  if (!file_version.empty()) put_bytes(event, 3, file_version);
  if (!scalars.empty()) {
    std::string summary;
    for (const Scalar& s : scalars) {
      std::string value;
      put_bytes(value, 1, s.tag);
      put_tag(value, 2, 5);
      put_fixed<float>(value, s.value);
      put_bytes(summary, 1, value);
    }
    put_bytes(event, 5, summary);
  }
  return event;
}

std::string encode_session_start(double wall_time, int64_t step) {
  std::string event = encode_event(wall_time, step, {});
  std::string session_log;
  put_tag(session_log, 1, 0);
  put_varint(session_log, 1);  // SessionLog.START
  put_bytes(event, 7, session_log);  // Event.session_log (6 is the deprecated log_message)
  return event;
}

std::string frame_record(std::string_view data) {
  std::string out;
  const uint64_t length = data.size();
  put_fixed<uint64_t>(out, length);
  put_fixed<uint32_t>(out, masked_crc32c(&length, sizeof(length)));
  out.append(data);
  put_fixed<uint32_t>(out, masked_crc32c(data.data(), data.size()));
  return out;
}

namespace {
double now_unix_s() {
  return std::chrono::duration<double>(std::chrono::system_clock::now().time_since_epoch()).count();
}
}  // namespace

TensorBoardWriter::~TensorBoardWriter() { close(); }

Status TensorBoardWriter::open(const std::string& dir) {
  close();
  std::error_code ec;
  std::filesystem::create_directories(dir, ec);
  if (ec) return io_error("cannot create TensorBoard directory {}: {}", dir, ec.message());
  earlier_files_ = false;
  for (const auto& entry : std::filesystem::directory_iterator(dir, ec)) {
    if (entry.path().filename().string().rfind("events.out.tfevents.", 0) == 0) earlier_files_ = true;
  }
  char host[256] = "localhost";
  gethostname(host, sizeof(host) - 1);
  // The pid keeps two writers started in the same second apart.
  path_ = (std::filesystem::path(dir) /
           fmt::format("events.out.tfevents.{}.{}.{}", static_cast<int64_t>(std::time(nullptr)), host, getpid()))
              .string();
  file_ = std::fopen(path_.c_str(), "wb");
  if (file_ == nullptr) return io_error("cannot open {} for writing: {}", path_, std::strerror(errno));
  KILN_RETURN_IF_ERROR(write_record(encode_event(now_unix_s(), 0, {}, "brain.Event:2")));
  return flush();
}

Status TensorBoardWriter::write_record(const std::string& data) {
  if (file_ == nullptr) return failed_precondition("TensorBoard event file is not open");
  std::string record = frame_record(data);
  if (std::fwrite(record.data(), 1, record.size(), file_) != record.size()) {
    return io_error("cannot write to {}: {}", path_, std::strerror(errno));
  }
  return ok_status();
}

Status TensorBoardWriter::add(int64_t step, const std::vector<Scalar>& scalars) {
  return write_record(encode_event(now_unix_s(), step, scalars));
}

Status TensorBoardWriter::add_session_start(int64_t step) {
  return write_record(encode_session_start(now_unix_s(), step));
}

Status TensorBoardWriter::flush() {
  if (file_ != nullptr && std::fflush(file_) != 0) return io_error("cannot write to {}: {}", path_, std::strerror(errno));
  return ok_status();
}

void TensorBoardWriter::close() {
  if (file_ != nullptr) {
    std::fclose(file_);
    file_ = nullptr;
  }
}

}  // namespace kiln::train
