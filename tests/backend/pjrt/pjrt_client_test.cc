// The PJRT driver on XLA's CPU plugin (xla-cpu-pjrt 0.0.1): hand-written StableHLO compiled and
// run on 1 and 4 devices in replica mode, host round trips of every dtype, donation, and a
// syntax error. Every test loads the plugin in a child process (child_process.h): malformed
// programs can abort the plugin's process.
//
// The programs are in MLIR's pretty form, which the plugin parses (so does the generic form:
// GenericFormCompilesToo), e.g.
//   %0 = stablehlo.add %arg0, %arg1 : tensor<8xf32>
// and in generic form
//   %0 = "stablehlo.add"(%arg0, %arg1) : (tensor<8xf32>, tensor<8xf32>) -> tensor<8xf32>
#include "kiln/backend/pjrt/pjrt_client.h"

#include <gtest/gtest.h>

#include <algorithm>
#include <cmath>
#include <cstring>
#include <functional>
#include <memory>
#include <random>
#include <string>
#include <vector>

#include "kiln/backend/pjrt/plugin_path.h"
#include "tests/backend/pjrt/child_process.h"

namespace kiln::backend::pjrt {
namespace {

using testing::child_succeeded;
using testing::ChildResult;
using testing::run_in_child;

constexpr std::string_view kAddPretty = R"(
module @kiln {
  func.func public @main(%arg0: tensor<8xf32>, %arg1: tensor<8xf32>) -> tensor<8xf32> {
    %0 = stablehlo.add %arg0, %arg1 : tensor<8xf32>
    return %0 : tensor<8xf32>
  }
}
)";

constexpr std::string_view kAddGeneric = R"(
"builtin.module"() ({
  "func.func"() <{function_type = (tensor<8xf32>, tensor<8xf32>) -> tensor<8xf32>, sym_name = "main",
                  sym_visibility = "public"}> ({
  ^bb0(%arg0: tensor<8xf32>, %arg1: tensor<8xf32>):
    %0 = "stablehlo.add"(%arg0, %arg1) : (tensor<8xf32>, tensor<8xf32>) -> tensor<8xf32>
    "func.return"(%0) : (tensor<8xf32>) -> ()
  }) : () -> ()
}) : () -> ()
)";

// Sums over the pairs of replicas {0, 1} and {2, 3}.
constexpr std::string_view kAllReducePairs = R"(
module @kiln {
  func.func public @main(%arg0: tensor<8xf32>) -> tensor<8xf32> {
    %0 = "stablehlo.all_reduce"(%arg0) ({
    ^bb0(%x: tensor<f32>, %y: tensor<f32>):
      %s = stablehlo.add %x, %y : tensor<f32>
      stablehlo.return %s : tensor<f32>
    }) {replica_groups = dense<[[0, 1], [2, 3]]> : tensor<2x2xi64>} : (tensor<8xf32>) -> tensor<8xf32>
    return %0 : tensor<8xf32>
  }
}
)";

// Each replica's id, the argument plus the id, and the id-th entry of a constant table (how
// the emitter computes a device's offsets).
constexpr std::string_view kReplicaId = R"(
module @kiln {
  func.func public @main(%arg0: tensor<4xf32>) -> (tensor<ui32>, tensor<4xf32>, tensor<1xi32>) {
    %id = stablehlo.replica_id : tensor<ui32>
    %f = stablehlo.convert %id : (tensor<ui32>) -> tensor<f32>
    %b = stablehlo.broadcast_in_dim %f, dims = [] : (tensor<f32>) -> tensor<4xf32>
    %sum = stablehlo.add %arg0, %b : tensor<4xf32>
    %table = stablehlo.constant dense<[10, 20, 30, 40]> : tensor<4xi32>
    %i = stablehlo.convert %id : (tensor<ui32>) -> tensor<i32>
    %slice = stablehlo.dynamic_slice %table, %i, sizes = [1] : (tensor<4xi32>, tensor<i32>) -> tensor<1xi32>
    return %id, %sum, %slice : tensor<ui32>, tensor<4xf32>, tensor<1xi32>
  }
}
)";

// Argument 0 may be written in place as output 0 (what the emitter writes for donated state).
constexpr std::string_view kAddIntoArgument = R"(
module @kiln {
  func.func public @main(%arg0: tensor<4xf32> {tf.aliasing_output = 0 : i32}, %arg1: tensor<4xf32>) -> tensor<4xf32> {
    %0 = stablehlo.add %arg0, %arg1 : tensor<4xf32>
    return %0 : tensor<4xf32>
  }
}
)";

// In a child: the CPU plugin's client with `devices` devices.
Result<std::unique_ptr<Client>> cpu_client(int devices) {
  KILN_ASSIGN_OR_RETURN(std::string path, resolve_plugin("cpu"));
  KILN_ASSIGN_OR_RETURN(const Plugin* plugin, Plugin::load(path));
  return Client::create(*plugin, devices);
}

// Seeded values in [-2, 2), never all zeros or ones.
Buffer random_f32(std::vector<int64_t> dims, uint32_t seed) {
  Buffer b(ir::Shape(ir::DType::kF32, std::move(dims)));
  std::mt19937 rng(seed);
  std::uniform_real_distribution<float> dist(-2.0f, 2.0f);
  for (int64_t i = 0; i < b.num_elements(); ++i) b.as<float>()[i] = dist(rng);
  return b;
}

// Runs `body(client)` in a child with a `devices`-device CPU client; the test fails with the
// child's failures, or the signal that killed it.
void with_cpu_client(int devices, const std::function<void(Client&)>& body) {
  ChildResult r = run_in_child([&](int) {
    Result<std::unique_ptr<Client>> client = cpu_client(devices);
    ASSERT_TRUE(client.ok()) << client.status().to_string();
    body(**client);
  });
  EXPECT_TRUE(child_succeeded(r));
}

// f32 sums of two values are one IEEE rounding on XLA as on the host, so results are exact.
void expect_sum(const Buffer& got, const Buffer& a, const Buffer& b) {
  ASSERT_EQ(got.shape(), a.shape());
  for (int64_t i = 0; i < a.num_elements(); ++i) {
    EXPECT_EQ(got.as<float>()[i], a.as<float>()[i] + b.as<float>()[i]) << "element " << i;
  }
}

TEST(PjrtClient, CpuClientHasTheDevicesAskedFor) {
  with_cpu_client(4, [](Client& client) {
    EXPECT_EQ(client.platform_name(), "cpu");
    EXPECT_EQ(client.num_devices(), 4);
  });
  with_cpu_client(1, [](Client& client) { EXPECT_EQ(client.num_devices(), 1); });
}

TEST(PjrtClient, AddsTwoF32ParametersOnOneDevice) {
  with_cpu_client(1, [](Client& client) {
    Result<std::unique_ptr<LoadedExecutable>> exe = client.compile(kAddPretty, 1);
    ASSERT_TRUE(exe.ok()) << exe.status().to_string();
    EXPECT_EQ((*exe)->num_outputs(), 1);
    EXPECT_EQ((*exe)->num_replicas(), 1);
    const Buffer a = random_f32({8}, 1), b = random_f32({8}, 2);
    Result<DeviceBuffer> da = client.to_device(a, 0), db = client.to_device(b, 0);
    ASSERT_TRUE(da.ok() && db.ok()) << da.status().to_string() << db.status().to_string();
    auto outputs = (*exe)->execute({{&*da, &*db}}, {});
    ASSERT_TRUE(outputs.ok()) << outputs.status().to_string();
    ASSERT_EQ(outputs->size(), 1u);
    ASSERT_EQ((*outputs)[0].size(), 1u);
    const DeviceBuffer& out = (*outputs)[0][0];
    EXPECT_EQ(out.shape(), ir::Shape(ir::DType::kF32, {8}));
    EXPECT_EQ(out.device(), 0);
    Result<Buffer> host = out.to_host();
    ASSERT_TRUE(host.ok()) << host.status().to_string();
    expect_sum(*host, a, b);
    EXPECT_TRUE(da->valid());  // not donated: still the caller's
  });
}

TEST(PjrtClient, GenericFormCompilesToo) {
  with_cpu_client(1, [](Client& client) {
    Result<std::unique_ptr<LoadedExecutable>> exe = client.compile(kAddGeneric, 1);
    ASSERT_TRUE(exe.ok()) << exe.status().to_string();
    const Buffer a = random_f32({8}, 3), b = random_f32({8}, 4);
    DeviceBuffer da = std::move(client.to_device(a, 0)).value(), db = std::move(client.to_device(b, 0)).value();
    auto outputs = (*exe)->execute({{&da, &db}}, {});
    ASSERT_TRUE(outputs.ok()) << outputs.status().to_string();
    expect_sum((*outputs)[0][0].to_host().value(), a, b);
  });
}

TEST(PjrtClient, AllReduceOverReplicaGroupsOnFourDevices) {
  with_cpu_client(4, [](Client& client) {
    Result<std::unique_ptr<LoadedExecutable>> exe = client.compile(kAllReducePairs, 4);
    ASSERT_TRUE(exe.ok()) << exe.status().to_string();
    ASSERT_EQ((*exe)->num_replicas(), 4);
    std::vector<Buffer> host;
    std::vector<DeviceBuffer> device;
    for (int d = 0; d < 4; ++d) {
      host.push_back(random_f32({8}, 10 + d));
      device.push_back(std::move(client.to_device(host[d], d)).value());
    }
    auto outputs = (*exe)->execute({{&device[0]}, {&device[1]}, {&device[2]}, {&device[3]}}, {});
    ASSERT_TRUE(outputs.ok()) << outputs.status().to_string();
    ASSERT_EQ(outputs->size(), 4u);
    for (int d = 0; d < 4; ++d) {
      const int partner = d ^ 1;  // {0, 1} and {2, 3}
      ASSERT_EQ((*outputs)[d].size(), 1u);
      EXPECT_EQ((*outputs)[d][0].device(), d);
      // A sum of two is exact whichever order XLA adds in.
      expect_sum((*outputs)[d][0].to_host().value(), host[std::min(d, partner)], host[std::max(d, partner)]);
    }
  });
}

TEST(PjrtClient, ReplicaIdIsTheDeviceIndex) {
  with_cpu_client(4, [](Client& client) {
    Result<std::unique_ptr<LoadedExecutable>> exe = client.compile(kReplicaId, 4);
    ASSERT_TRUE(exe.ok()) << exe.status().to_string();
    EXPECT_EQ((*exe)->num_outputs(), 3);
    const Buffer x = random_f32({4}, 20);
    std::vector<DeviceBuffer> device;
    for (int d = 0; d < 4; ++d) device.push_back(std::move(client.to_device(x, d)).value());
    auto outputs = (*exe)->execute({{&device[0]}, {&device[1]}, {&device[2]}, {&device[3]}}, {});
    ASSERT_TRUE(outputs.ok()) << outputs.status().to_string();
    for (int d = 0; d < 4; ++d) {
      const std::vector<DeviceBuffer>& out = (*outputs)[d];
      ASSERT_EQ(out.size(), 3u);
      EXPECT_EQ(out[0].shape(), ir::Shape::scalar(ir::DType::kU32));
      EXPECT_EQ(out[0].to_host().value().as<uint32_t>()[0], static_cast<uint32_t>(d));
      Buffer sum = out[1].to_host().value();
      for (int i = 0; i < 4; ++i) EXPECT_EQ(sum.as<float>()[i], x.as<float>()[i] + static_cast<float>(d));
      EXPECT_EQ(out[2].shape(), ir::Shape(ir::DType::kS32, {1}));
      EXPECT_EQ(out[2].to_host().value().as<int32_t>()[0], 10 * (d + 1));
    }
  });
}

TEST(PjrtClient, EveryDtypeRoundTripsThroughTheDevice) {
  with_cpu_client(2, [](Client& client) {
    // Rank 2, so a layout other than row-major would show.
    for (ir::DType dtype : {ir::DType::kPred, ir::DType::kS32, ir::DType::kU32, ir::DType::kBF16, ir::DType::kF32,
                            ir::DType::kF64}) {
      Buffer host(ir::Shape(dtype, {2, 3}));
      const double values[] = {1.5, -2.25, 3e3, 0, 7, -1e-3};  // rounded to the dtype by set()
      for (int i = 0; i < 6; ++i) host.set(i, dtype == ir::DType::kU32 ? std::abs(values[i]) * 1e5 : values[i] * 1e5);
      Result<DeviceBuffer> device = client.to_device(host, 1);
      ASSERT_TRUE(device.ok()) << device.status().to_string();
      EXPECT_EQ(device->shape(), host.shape());
      EXPECT_EQ(device->device(), 1);
      Result<Buffer> back = device->to_host();
      ASSERT_TRUE(back.ok()) << back.status().to_string();
      ASSERT_EQ(back->shape(), host.shape());
      EXPECT_EQ(std::memcmp(back->data(), host.data(), host.byte_size()), 0) << ir::dtype_name(dtype);
    }
  });
}

TEST(PjrtClient, DonatedArgumentIsWrittenInPlaceAndConsumed) {
  with_cpu_client(1, [](Client& client) {
    Result<std::unique_ptr<LoadedExecutable>> exe = client.compile(kAddIntoArgument, 1);
    ASSERT_TRUE(exe.ok()) << exe.status().to_string();
    Result<CompiledMemoryStats> stats = (*exe)->compiled_memory_stats();
    ASSERT_TRUE(stats.ok()) << stats.status().to_string();
    EXPECT_EQ(stats->alias_bytes, 16);  // the f32[4] argument is the output's storage
    EXPECT_EQ(stats->argument_bytes, 32);

    // State kept on the device across steps: each step's output is the next step's donated
    // argument 0.
    const Buffer a = random_f32({4}, 30), b = random_f32({4}, 31);
    DeviceBuffer state = std::move(client.to_device(a, 0)).value();
    DeviceBuffer step = std::move(client.to_device(b, 0)).value();
    Buffer want = a;
    for (int i = 0; i < 3; ++i) {
      auto outputs = (*exe)->execute({{&state, &step}}, {0});
      ASSERT_TRUE(outputs.ok()) << outputs.status().to_string();
      EXPECT_FALSE(state.valid());  // consumed
      EXPECT_TRUE(step.valid());
      Buffer next(want.shape());
      for (int j = 0; j < 4; ++j) next.as<float>()[j] = want.as<float>()[j] + b.as<float>()[j];
      want = next;
      state = std::move((*outputs)[0][0]);
      Buffer got = state.to_host().value();
      for (int j = 0; j < 4; ++j) EXPECT_EQ(got.as<float>()[j], want.as<float>()[j]);
    }
    Result<Buffer> consumed = DeviceBuffer().to_host();
    EXPECT_FALSE(consumed.ok());
  });
}

TEST(PjrtClient, AliasedArgumentTheCallerKeepsIsNotOverwritten) {
  with_cpu_client(1, [](Client& client) {
    Result<std::unique_ptr<LoadedExecutable>> exe = client.compile(kAddIntoArgument, 1);
    ASSERT_TRUE(exe.ok()) << exe.status().to_string();
    const Buffer a = random_f32({4}, 40), b = random_f32({4}, 41);
    DeviceBuffer da = std::move(client.to_device(a, 0)).value(), db = std::move(client.to_device(b, 0)).value();
    // Not donated: passed as non-donatable, so XLA copies instead of writing into it.
    auto outputs = (*exe)->execute({{&da, &db}}, {});
    ASSERT_TRUE(outputs.ok()) << outputs.status().to_string();
    ASSERT_TRUE(da.valid());
    Result<Buffer> kept = da.to_host();
    ASSERT_TRUE(kept.ok()) << kept.status().to_string();
    EXPECT_EQ(std::memcmp(kept->data(), a.data(), a.byte_size()), 0);
    expect_sum((*outputs)[0][0].to_host().value(), a, b);
  });
}

TEST(PjrtClient, SyntaxErrorIsOneLineStatusNotACrash) {
  with_cpu_client(1, [](Client& client) {
    constexpr std::string_view kBad = R"(
module @kiln {
  func.func public @main(%arg0: tensor<4xf32>) -> tensor<4xf32> {
    %0 = stablehlo.bogus %arg0 : tensor<4xf32>
    return %0 : tensor<4xf32>
  }
}
)";
    Result<std::unique_ptr<LoadedExecutable>> exe = client.compile(kBad, 1);
    ASSERT_FALSE(exe.ok());
    const std::string& message = exe.status().message();
    EXPECT_EQ(message.find('\n'), std::string::npos) << message;
    EXPECT_TRUE(message.starts_with("pjrt: PJRT_Client_Compile: ")) << message;
    EXPECT_NE(message.find("'stablehlo.bogus' is unknown"), std::string::npos) << message;
    Result<std::unique_ptr<LoadedExecutable>> garbage = client.compile("this is not MLIR", 1);
    ASSERT_FALSE(garbage.ok());
    EXPECT_EQ(garbage.status().message().find('\n'), std::string::npos) << garbage.status().message();
    // The client still works afterwards.
    EXPECT_TRUE(client.compile(kAddPretty, 1).ok());
  });
}

TEST(PjrtClient, ExecuteChecksItsArguments) {
  with_cpu_client(2, [](Client& client) {
    Result<std::unique_ptr<LoadedExecutable>> exe = client.compile(kAddPretty, 2);
    ASSERT_TRUE(exe.ok()) << exe.status().to_string();
    const Buffer a = random_f32({8}, 50);
    DeviceBuffer d0 = std::move(client.to_device(a, 0)).value(), d1 = std::move(client.to_device(a, 1)).value();
    DeviceBuffer e0 = std::move(client.to_device(a, 0)).value(), e1 = std::move(client.to_device(a, 1)).value();
    auto one_list = (*exe)->execute({{&d0, &e0}}, {});
    ASSERT_FALSE(one_list.ok());
    EXPECT_NE(one_list.status().message().find("runs on 2 devices, got 1 argument lists"), std::string::npos)
        << one_list.status().message();
    auto swapped = (*exe)->execute({{&d1, &e0}, {&d0, &e1}}, {});
    ASSERT_FALSE(swapped.ok());
    EXPECT_NE(swapped.status().message().find("argument 0 of replica 0 is on device 1"), std::string::npos)
        << swapped.status().message();
    auto bad_donation = (*exe)->execute({{&d0, &e0}, {&d1, &e1}}, {2});
    ASSERT_FALSE(bad_donation.ok());
    DeviceBuffer empty;
    auto with_empty = (*exe)->execute({{&d0, &empty}, {&d1, &e1}}, {});
    ASSERT_FALSE(with_empty.ok());
    EXPECT_NE(with_empty.status().message().find("argument 1 of replica 0 is empty"), std::string::npos)
        << with_empty.status().message();
    EXPECT_FALSE(client.compile(kAddPretty, 3).ok());  // more replicas than devices
    EXPECT_FALSE(client.to_device(a, 2).ok());
  });
}

}  // namespace
}  // namespace kiln::backend::pjrt
