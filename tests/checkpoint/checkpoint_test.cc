// The safetensors reader/writer and the checkpoint directory format: round trips in every
// handled dtype, one-line errors for truncated or corrupt files naming the tensor, atomic
// saves (a process killed mid-save leaves the previous checkpoint as the latest), pruning.
#include <gtest/gtest.h>

#include <cstring>

#include <signal.h>
#include <sys/resource.h>
#include <sys/wait.h>
#include <unistd.h>

#include <chrono>
#include <thread>

#include <filesystem>
#include <fstream>
#include <random>
#include <string>
#include <vector>

#include <optional>

#include "kiln/checkpoint/checkpoint.h"
#include "kiln/checkpoint/safetensors.h"
#include "tests/testing/temp_path.h"

namespace kiln::checkpoint {
namespace {

namespace fs = std::filesystem;

std::string temp_dir(const std::string& name) {
  fs::path p = ::kiln::testing::temp_path("kiln_checkpoint_test_" + name);
  fs::remove_all(p);
  fs::create_directories(p);
  return p.string();
}

// Seeded values, exact in the dtype (never all zeros or ones).
ir::Literal random_literal(ir::DType dtype, std::vector<int64_t> dims, uint32_t seed) {
  std::mt19937 rng(seed);
  std::normal_distribution<double> normal(0.0, 3.0);
  ir::Shape shape(dtype, std::move(dims));
  std::vector<double> v(static_cast<size_t>(shape.num_elements()));
  for (double& x : v) {
    x = normal(rng);
    if (dtype == ir::DType::kS32) x = std::round(x * 1000);
    if (dtype == ir::DType::kU32) x = std::round(std::abs(x) * 1e6);
  }
  return ir::Literal(shape, v);
}

std::string slurp(const std::string& path) {
  std::ifstream in(path, std::ios::binary);
  return std::string(std::istreambuf_iterator<char>(in), {});
}
void spit(const std::string& path, const std::string& bytes) {
  std::ofstream out(path, std::ios::binary | std::ios::trunc);
  out << bytes;
}

TEST(Safetensors, RoundTripsEveryDtypeBitExactly) {
  std::string dir = temp_dir("roundtrip");
  ir::Literal f32 = random_literal(ir::DType::kF32, {3, 5}, 1);
  ir::Literal bf16 = random_literal(ir::DType::kBF16, {7}, 2);
  ir::Literal f64 = random_literal(ir::DType::kF64, {2, 2, 2}, 3);
  ir::Literal s32 = random_literal(ir::DType::kS32, {4}, 4);
  ir::Literal u32 = random_literal(ir::DType::kU32, {3}, 5);
  ir::Literal scalar = ir::Literal::scalar(ir::DType::kF32, -2.75);
  std::string path = dir + "/t.safetensors";
  ASSERT_TRUE(write_safetensors(path, {{"b.f32", &f32}, {"a.bf16", &bf16}, {"f64", &f64}, {"s32", &s32},
                                       {"u32", &u32}, {"scalar", &scalar}},
                                {{"step", "7"}})
                  .ok());
  auto file = read_safetensors(path);
  ASSERT_TRUE(file.ok()) << file.status().to_string();
  EXPECT_EQ(file->names, (std::vector<std::string>{"b.f32", "a.bf16", "f64", "s32", "u32", "scalar"}));
  EXPECT_EQ(file->tensors.at("b.f32"), f32);
  EXPECT_EQ(file->tensors.at("a.bf16"), bf16);
  EXPECT_EQ(file->tensors.at("f64"), f64);
  EXPECT_EQ(file->tensors.at("s32"), s32);
  EXPECT_EQ(file->tensors.at("u32"), u32);
  EXPECT_EQ(file->tensors.at("scalar"), scalar);
  EXPECT_EQ(file->metadata.at("step"), "7");
  // Header length is a multiple of 8 (data aligned), as the format recommends.
  std::string bytes = slurp(path);
  uint64_t n = 0;
  std::memcpy(&n, bytes.data(), 8);
  EXPECT_EQ(n % 8, 0u);
}

TEST(Safetensors, TruncatedFileIsAnErrorNamingFileAndTensor) {
  std::string dir = temp_dir("truncated");
  ir::Literal a = random_literal(ir::DType::kF32, {16}, 1), b = random_literal(ir::DType::kF32, {16}, 2);
  std::string path = dir + "/t.safetensors";
  ASSERT_TRUE(write_safetensors(path, {{"first", &a}, {"second", &b}}).ok());
  std::string bytes = slurp(path);
  spit(path, bytes.substr(0, bytes.size() - 10));
  auto file = read_safetensors(path);
  ASSERT_FALSE(file.ok());
  EXPECT_NE(file.status().message().find("t.safetensors"), std::string::npos) << file.status().message();
  EXPECT_NE(file.status().message().find("truncated: tensor second"), std::string::npos) << file.status().message();
  EXPECT_EQ(file.status().message().find('\n'), std::string::npos);

  spit(path, bytes.substr(0, 5));
  EXPECT_NE(read_safetensors(path).status().message().find("truncated"), std::string::npos);
  spit(path, bytes.substr(0, 20));
  EXPECT_NE(read_safetensors(path).status().message().find("truncated"), std::string::npos);
}

TEST(Safetensors, CorruptHeaderIsAnError) {
  std::string dir = temp_dir("corrupt");
  ir::Literal a = random_literal(ir::DType::kF32, {4}, 1);
  std::string path = dir + "/t.safetensors";
  ASSERT_TRUE(write_safetensors(path, {{"w", &a}}).ok());
  std::string bytes = slurp(path);
  std::string bad = bytes;
  bad[9] = '#';  // breaks the JSON
  spit(path, bad);
  EXPECT_NE(read_safetensors(path).status().message().find("corrupt header"), std::string::npos);
  // A shape that disagrees with the offsets names the tensor.
  bad = bytes;
  size_t pos = bad.find("[4]");
  ASSERT_NE(pos, std::string::npos);
  bad[pos + 1] = '5';
  spit(path, bad);
  auto r = read_safetensors(path);
  ASSERT_FALSE(r.ok());
  EXPECT_NE(r.status().message().find("tensor w"), std::string::npos) << r.status().message();
  // An unknown dtype.
  bad = bytes;
  pos = bad.find("F32");
  bad.replace(pos, 3, "F16");
  spit(path, bad);
  EXPECT_NE(read_safetensors(path).status().message().find("F16"), std::string::npos);
}

// A header whose shape multiplies past 2^64 (here to exactly 0 modulo 2^64, which empty
// data_offsets would then match) is refused by its element count, before any allocation.
TEST(Safetensors, HugeShapeIsRefusedBeforeAllocating) {
  std::string dir = temp_dir("huge");
  std::string path = dir + "/t.safetensors";
  const std::string header = R"({"w":{"dtype":"F32","shape":[1152921504606846976,16],"data_offsets":[0,0]}})";
  std::string bytes(8, '\0');
  uint64_t n = header.size();
  std::memcpy(bytes.data(), &n, 8);
  spit(path, bytes + header);
  auto index = index_safetensors(path);
  ASSERT_FALSE(index.ok());
  EXPECT_NE(index.status().message().find("tensor w: shape [1152921504606846976,16] has more than"), std::string::npos)
      << index.status().message();
}

CheckpointState make_state(int64_t step, uint32_t seed) {
  CheckpointState s;
  s.step = step;
  const std::vector<std::string> names = {"params/w", "params/b", "mu/w", "mu/b", "nu/w", "nu/b"};
  for (size_t i = 0; i < names.size(); ++i) {
    s.tensors.push_back(StateTensor::global(
        names[i], random_literal(i % 2 == 0 ? ir::DType::kF32 : ir::DType::kBF16, {3, 4}, seed + static_cast<uint32_t>(i))));
  }
  s.config_yaml = "steps: 20\n";
  s.data_iterator = {{"type", "synthetic"}, {"batches_consumed", step}};
  return s;
}

TEST(Checkpoint, SavesAndLoadsAStepDirectory) {
  std::string dir = temp_dir("save_load") + "/checkpoints";
  CheckpointState s = make_state(10, 7);
  ASSERT_TRUE(save(dir, s).ok());
  EXPECT_TRUE(fs::exists(dir + "/10/shard-0.safetensors"));
  EXPECT_TRUE(fs::exists(dir + "/10/manifest.json"));
  EXPECT_EQ(latest(dir), step_dir(dir, 10));
  auto loaded = load(dir + "/10");
  ASSERT_TRUE(loaded.ok()) << loaded.status().to_string();
  EXPECT_EQ(loaded->step, 10);
  ASSERT_EQ(loaded->tensors.size(), s.tensors.size());
  for (size_t i = 0; i < s.tensors.size(); ++i) {
    EXPECT_EQ(loaded->tensors[i].name, s.tensors[i].name);
    EXPECT_EQ(loaded->tensors[i].shape, s.tensors[i].shape) << s.tensors[i].name;
    EXPECT_EQ(loaded->tensors[i].shards, s.tensors[i].shards) << s.tensors[i].name;
  }
  EXPECT_EQ(loaded->config_yaml, s.config_yaml);
  EXPECT_EQ(loaded->data_iterator["batches_consumed"], 10);
}

TEST(Checkpoint, ChecksumMismatchIsRefusedNamingTheTensor) {
  std::string dir = temp_dir("checksum") + "/checkpoints";
  ASSERT_TRUE(save(dir, make_state(3, 1)).ok());
  std::string path = dir + "/3/shard-0.safetensors";
  std::string bytes = slurp(path);
  bytes[bytes.size() - 1] ^= 0x40;  // last tensor in the file: nu/b
  spit(path, bytes);
  auto loaded = load(dir + "/3");
  ASSERT_FALSE(loaded.ok());
  EXPECT_NE(loaded.status().message().find("tensor nu/b fails its checksum"), std::string::npos)
      << loaded.status().message();
}

TEST(Checkpoint, PrunesOldCheckpointsAfterASuccessfulSave) {
  std::string dir = temp_dir("prune") + "/checkpoints";
  SaveOptions options;
  options.max_to_keep = 2;
  for (int64_t step : {5, 10, 15}) ASSERT_TRUE(save(dir, make_state(step, 1), options).ok());
  EXPECT_EQ(list_steps(dir), (std::vector<int64_t>{10, 15}));
}

TEST(Checkpoint, FailedSaveKeepsThePreviousCheckpoint) {
  std::string dir = temp_dir("failed") + "/checkpoints";
  ASSERT_TRUE(save(dir, make_state(5, 1)).ok());
  SaveOptions options;
  options.max_to_keep = 1;
  // An I/O error while writing: the hook removes the temporary directory under the writer.
  options.after_file = [&](const std::string&) {
    for (const auto& e : fs::directory_iterator(dir)) {
      if (e.path().filename().string().find(".tmp-") != std::string::npos) fs::remove_all(e.path());
    }
  };
  Status st = save(dir, make_state(10, 2), options);
  EXPECT_FALSE(st.ok());
  EXPECT_NE(st.message().find("earlier checkpoints kept"), std::string::npos) << st.message();
  EXPECT_EQ(list_steps(dir), (std::vector<int64_t>{5}));
  EXPECT_TRUE(load(step_dir(dir, 5)).ok());
}

TEST(Checkpoint, KillDuringSaveLeavesThePreviousCheckpointLatest) {
  std::string dir = temp_dir("kill") + "/checkpoints";
  CheckpointState first = make_state(10, 1);
  ASSERT_TRUE(save(dir, first).ok());
  int ready[2];
  ASSERT_EQ(pipe(ready), 0);
  pid_t child = fork();
  ASSERT_GE(child, 0);
  if (child == 0) {
    // The child saves step 20 and stalls after writing the state file, as a process
    // killed mid-save would be.
    SaveOptions options;
    options.after_file = [&](const std::string&) {
      char c = 1;
      (void)!write(ready[1], &c, 1);
      for (;;) pause();
    };
    (void)save(dir, make_state(20, 2), options);
    _exit(0);
  }
  char c = 0;
  ASSERT_EQ(read(ready[0], &c, 1), 1);
  ASSERT_EQ(kill(child, SIGKILL), 0);
  int status = 0;
  waitpid(child, &status, 0);
  EXPECT_TRUE(WIFSIGNALED(status));
  // A partial "20.tmp-<pid>" directory exists, but it is not a checkpoint.
  bool partial = false;
  for (const auto& e : fs::directory_iterator(dir)) partial |= e.path().filename().string().starts_with("20.tmp-");
  EXPECT_TRUE(partial);
  EXPECT_EQ(list_steps(dir), (std::vector<int64_t>{10}));
  auto loaded = load(*latest(dir));
  ASSERT_TRUE(loaded.ok()) << loaded.status().to_string();
  EXPECT_EQ(loaded->step, 10);
  EXPECT_EQ(loaded->tensors[0].shards, first.tensors[0].shards);
  // The next save removes the dead process's temporary directory.
  ASSERT_TRUE(save(dir, make_state(30, 3)).ok());
  partial = false;
  for (const auto& e : fs::directory_iterator(dir)) partial |= e.path().filename().string().find(".tmp-") != std::string::npos;
  EXPECT_FALSE(partial);
  EXPECT_EQ(list_steps(dir), (std::vector<int64_t>{10, 30}));
}

// A state large enough (4 × 64 KiB) that a save takes a while, so kills land mid-write.
CheckpointState big_state(int64_t step) {
  CheckpointState s;
  s.step = step;
  for (int i = 0; i < 4; ++i) {
    s.tensors.push_back(StateTensor::global("params/w" + std::to_string(i),
                                            random_literal(ir::DType::kF32, {128, 128}, static_cast<uint32_t>(step * 10 + i))));
  }
  s.data_iterator = {{"batches_consumed", step}};
  return s;
}

TEST(Checkpoint, SigkillAtRandomMomentsAlwaysLeavesALoadableLatestCheckpoint) {
  std::string dir = temp_dir("kill_loop") + "/checkpoints";
  ASSERT_TRUE(save(dir, big_state(0)).ok());
  std::mt19937 rng(2026);
  int64_t next = 1, killed_mid_save = 0;
  for (int round = 0; round < 12; ++round) {
    // The child says when it runs: on a loaded machine it may not be scheduled for a while
    // after fork(), and a kill before it starts tests nothing.
    int started[2];
    ASSERT_EQ(pipe(started), 0);
    pid_t child = fork();
    ASSERT_GE(child, 0);
    if (child == 0) {
      (void)!write(started[1], "s", 1);
      for (int64_t step = next;; ++step) (void)save(dir, big_state(step));
    }
    char c = 0;
    ASSERT_EQ(read(started[0], &c, 1), 1);
    close(started[0]);
    close(started[1]);
    std::this_thread::sleep_for(std::chrono::microseconds(500 + rng() % 20000));
    ASSERT_EQ(kill(child, SIGKILL), 0);
    int status = 0;
    waitpid(child, &status, 0);
    // The latest complete checkpoint loads, with exactly the state that was saved as it.
    std::optional<std::string> last = latest(dir);
    ASSERT_TRUE(last.has_value());
    auto loaded = load(*last);
    ASSERT_TRUE(loaded.ok()) << "round " << round << ": " << loaded.status().to_string();
    CheckpointState want = big_state(loaded->step);
    for (size_t i = 0; i < want.tensors.size(); ++i) {
      ASSERT_TRUE(loaded->tensors[i].shards == want.tensors[i].shards) << "round " << round << " step " << loaded->step;
    }
    for (const auto& e : fs::directory_iterator(dir)) killed_mid_save += e.path().filename().string().find(".tmp-") != std::string::npos;
    next = loaded->step + 1;
  }
  // Some kills landed inside a save (a temporary directory was left); the next save cleans up.
  EXPECT_GT(killed_mid_save, 0);
  ASSERT_TRUE(save(dir, big_state(next)).ok());
  for (const auto& e : fs::directory_iterator(dir)) EXPECT_EQ(e.path().filename().string().find(".tmp-"), std::string::npos);
}

TEST(Checkpoint, FullDiskFailsLoudlyAndKeepsThePreviousCheckpoint) {
  // A file-size limit (RLIMIT_FSIZE, with SIGXFSZ ignored) makes write() fail with EFBIG as a
  // full disk does with ENOSPC; set in a child so the test process keeps its limits.
  std::string dir = temp_dir("full_disk") + "/checkpoints";
  ASSERT_TRUE(save(dir, make_state(5, 1)).ok());
  int pipefd[2];
  ASSERT_EQ(pipe(pipefd), 0);
  pid_t child = fork();
  ASSERT_GE(child, 0);
  if (child == 0) {
    signal(SIGXFSZ, SIG_IGN);
    struct rlimit limit = {16 * 1024, 16 * 1024};
    setrlimit(RLIMIT_FSIZE, &limit);
    Status st = save(dir, big_state(10));
    std::string msg = st.ok() ? "saved" : st.message();
    (void)!write(pipefd[1], msg.data(), msg.size());
    _exit(st.ok() ? 0 : 1);
  }
  close(pipefd[1]);
  std::string msg;
  char buf[512];
  for (ssize_t n; (n = read(pipefd[0], buf, sizeof buf)) > 0;) msg.append(buf, static_cast<size_t>(n));
  close(pipefd[0]);
  int status = 0;
  waitpid(child, &status, 0);
  ASSERT_TRUE(WIFEXITED(status));
  EXPECT_EQ(WEXITSTATUS(status), 1) << msg;
  EXPECT_NE(msg.find("checkpoint of step 10 not saved (earlier checkpoints kept)"), std::string::npos) << msg;
  EXPECT_NE(msg.find("shard-0.safetensors"), std::string::npos) << msg;
  EXPECT_NE(msg.find("File too large"), std::string::npos) << msg;
  EXPECT_EQ(list_steps(dir), (std::vector<int64_t>{5}));
  EXPECT_TRUE(load(step_dir(dir, 5)).ok());
  for (const auto& e : fs::directory_iterator(dir)) EXPECT_EQ(e.path().filename().string().find(".tmp-"), std::string::npos);
}

TEST(Checkpoint, AsyncSaverWritesInTheBackground) {
  std::string dir = temp_dir("async") + "/checkpoints";
  AsyncSaver saver;
  ASSERT_TRUE(saver.save(dir, make_state(1, 1), {}).ok());
  ASSERT_TRUE(saver.save(dir, make_state(2, 2), {}).ok());  // waits for the first
  ASSERT_TRUE(saver.wait().ok());
  EXPECT_EQ(list_steps(dir), (std::vector<int64_t>{1, 2}));
}

}  // namespace
}  // namespace kiln::checkpoint
