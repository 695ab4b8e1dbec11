// xla.CompileOptionsProto, written by hand as protobuf wire bytes: what PJRT_Client_Compile
// takes as its options. Kiln needs four fields of it, so it writes them itself instead of
// pulling in protobuf and XLA's .proto files (spec/pjrt.md).
#pragma once

#include <cstdint>
#include <span>
#include <string>

namespace kiln::backend::pjrt {

// Options for a replica-mode program (Kiln's partitioner already made the per-device program,
// so XLA's partitioner stays out: num_partitions = 1). No device assignment: the plugin
// chooses its default (on XLA:CPU, replica r runs on device id r).
std::string compile_options_proto(int num_replicas, int num_partitions);

// The same with an explicit device assignment: the computation of replica r, partition p runs
// on device id device_ids[r * num_partitions + p] (ids as PJRT_DeviceDescription_Id reports
// them). device_ids.size() must be num_replicas * num_partitions.
std::string compile_options_proto(int num_replicas, int num_partitions, std::span<const int64_t> device_ids);

}  // namespace kiln::backend::pjrt
