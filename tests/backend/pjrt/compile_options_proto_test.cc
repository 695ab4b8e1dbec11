// The hand-written xla.CompileOptionsProto bytes, checked byte by byte against the wire format
// (field numbers in compile_options_proto.cc). The plugin reads them: every program of
// pjrt_client_test compiles with them (Client::compile passes replica r -> device r), and
// when this was written a reversed assignment was seen to put replica 0 on device id 3.
#include "kiln/backend/pjrt/compile_options_proto.h"

#include <gtest/gtest.h>

#include <string>
#include <vector>

namespace kiln::backend::pjrt {
namespace {

std::string bytes(std::initializer_list<int> values) {
  std::string s;
  for (int v : values) s += static_cast<char>(v);
  return s;
}

TEST(CompileOptionsProto, ReplicasAndPartitionsWithoutAssignment) {
  // 0x1a = field 3 (executable_build_options), length-delimited; 4 bytes follow:
  // 0x20 = field 4 (num_replicas) varint 1; 0x28 = field 5 (num_partitions) varint 1.
  EXPECT_EQ(compile_options_proto(1, 1), bytes({0x1a, 0x04, 0x20, 0x01, 0x28, 0x01}));
  EXPECT_EQ(compile_options_proto(4, 1), bytes({0x1a, 0x04, 0x20, 0x04, 0x28, 0x01}));
}

TEST(CompileOptionsProto, VarintsPastOneByte) {
  // 300 = 0b10'0101100: low 7 bits first with the continuation bit (0xac), then 0x02.
  EXPECT_EQ(compile_options_proto(300, 1), bytes({0x1a, 0x05, 0x20, 0xac, 0x02, 0x28, 0x01}));
}

TEST(CompileOptionsProto, DeviceAssignmentOfFourReplicas) {
  const std::vector<int64_t> ids = {0, 1, 2, 3};
  // executable_build_options: num_replicas 4, num_partitions 1, then 0x4a = field 9
  // (device_assignment), 12 bytes: 0x08 replica_count 4, 0x10 computation_count 1, 0x1a =
  // field 3 (computation_devices), 6 bytes: 0x0a = field 1 (replica_device_ids), packed, 4
  // varints 0 1 2 3.
  const std::string want = bytes({0x1a, 0x12, 0x20, 0x04, 0x28, 0x01, 0x4a, 0x0c, 0x08, 0x04, 0x10, 0x01, 0x1a,
                                  0x06, 0x0a, 0x04, 0x00, 0x01, 0x02, 0x03});
  EXPECT_EQ(compile_options_proto(4, 1, ids), want);
}

TEST(CompileOptionsProto, DeviceAssignmentIsOneComputationPerPartition) {
  // 2 replicas x 2 partitions, ids[r * 2 + p]: partition 0 runs on {10, 12}, partition 1 on {11, 13}.
  const std::vector<int64_t> ids = {10, 11, 12, 13};
  const std::string want = bytes({0x1a, 0x16, 0x20, 0x02, 0x28, 0x02, 0x4a, 0x10, 0x08, 0x02, 0x10, 0x02,
                                  0x1a, 0x04, 0x0a, 0x02, 10, 12,    // computation 0
                                  0x1a, 0x04, 0x0a, 0x02, 11, 13});  // computation 1
  EXPECT_EQ(compile_options_proto(2, 2, ids), want);
}

}  // namespace
}  // namespace kiln::backend::pjrt
