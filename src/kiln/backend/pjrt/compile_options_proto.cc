// Protobuf wire format, the part these messages need: a field is a key varint
// (field_number << 3 | wire_type) then its value; wire type 0 is a varint, wire type 2 a
// varint length then that many bytes (nested messages and packed repeated scalars). Fields
// left out read as their defaults.
//
// The messages, from XLA's xla/pjrt/proto/compile_options.proto and xla/xla_data.proto:
//   CompileOptionsProto          3: executable_build_options (ExecutableBuildOptionsProto)
//   ExecutableBuildOptionsProto  4: num_replicas (int64), 5: num_partitions (int64),
//                                9: device_assignment (DeviceAssignmentProto)
//   DeviceAssignmentProto        1: replica_count (int32), 2: computation_count (int32),
//                                3: computation_devices (repeated ComputationDevice)
//   ComputationDevice            1: replica_device_ids (repeated int64, packed as proto3 does)
#include "kiln/backend/pjrt/compile_options_proto.h"

#include "kiln/base/check.h"

namespace kiln::backend::pjrt {

namespace {

constexpr int kWireVarint = 0;
constexpr int kWireLengthDelimited = 2;

void put_varint(std::string& out, uint64_t value) {
  while (value >= 0x80) {
    out += static_cast<char>((value & 0x7f) | 0x80);
    value >>= 7;
  }
  out += static_cast<char>(value);
}

// Negative ints are written as their 64-bit two's complement (ten bytes), as protobuf does.
void put_int_field(std::string& out, int field, int64_t value) {
  put_varint(out, (static_cast<uint64_t>(field) << 3) | kWireVarint);
  put_varint(out, static_cast<uint64_t>(value));
}

void put_bytes_field(std::string& out, int field, const std::string& bytes) {
  put_varint(out, (static_cast<uint64_t>(field) << 3) | kWireLengthDelimited);
  put_varint(out, bytes.size());
  out += bytes;
}

std::string build_options(int num_replicas, int num_partitions, std::span<const int64_t> device_ids,
                          bool with_assignment) {
  std::string executable_build_options;
  put_int_field(executable_build_options, 4, num_replicas);    // num_replicas
  put_int_field(executable_build_options, 5, num_partitions);  // num_partitions
  if (with_assignment) {
    KILN_CHECK_EQ(static_cast<int64_t>(device_ids.size()), int64_t{num_replicas} * num_partitions);
    std::string assignment;
    put_int_field(assignment, 1, num_replicas);    // replica_count
    put_int_field(assignment, 2, num_partitions);  // computation_count
    for (int p = 0; p < num_partitions; ++p) {
      std::string packed_ids;
      for (int r = 0; r < num_replicas; ++r) put_varint(packed_ids, static_cast<uint64_t>(device_ids[r * num_partitions + p]));
      std::string computation;
      put_bytes_field(computation, 1, packed_ids);  // replica_device_ids
      put_bytes_field(assignment, 3, computation);  // computation_devices
    }
    put_bytes_field(executable_build_options, 9, assignment);  // device_assignment
  }
  std::string options;
  put_bytes_field(options, 3, executable_build_options);  // executable_build_options
  return options;
}

}  // namespace

std::string compile_options_proto(int num_replicas, int num_partitions) {
  return build_options(num_replicas, num_partitions, {}, /*with_assignment=*/false);
}

std::string compile_options_proto(int num_replicas, int num_partitions, std::span<const int64_t> device_ids) {
  return build_options(num_replicas, num_partitions, device_ids, /*with_assignment=*/true);
}

}  // namespace kiln::backend::pjrt
