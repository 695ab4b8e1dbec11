// Sharded checkpoints: tensors saved from per-device shards (fsdp 2 × expert 2) are written
// once per distinct shard, by the lowest device holding it, and restore bit-exactly on one
// device and on fsdp 4 (resharding on load); mismatches are refused naming the tensor; two
// ranks each write their own devices' shards and rank 0 commits.
#include <gtest/gtest.h>

#include <algorithm>
#include <chrono>
#include <cstring>
#include <filesystem>
#include <fstream>
#include <random>
#include <string>
#include <thread>
#include <vector>

#include <nlohmann/json.hpp>

#include "kiln/base/check.h"
#include "kiln/checkpoint/checkpoint.h"
#include "kiln/checkpoint/shard_layout.h"
#include "tests/testing/temp_path.h"

namespace kiln::checkpoint {
namespace {

namespace fs = std::filesystem;

std::string temp_dir(const std::string& name) {
  fs::path p = ::kiln::testing::temp_path("kiln_sharded_test_" + name);
  fs::remove_all(p);
  fs::create_directories(p);
  return p.string();
}

config::Mesh mesh(int64_t fsdp, int64_t expert) {
  return config::Mesh{{"data", "fsdp", "expert"}, {1, fsdp, expert}, {1, 1, 1}};
}

ir::Sharding sharding(std::vector<std::vector<std::string>> dims) { return ir::Sharding{std::move(dims)}; }

// Seeded random bytes: every bit pattern of the dtype is fair game, the copy is bytewise.
std::string random_bytes(size_t n, uint32_t seed) {
  std::mt19937 rng(seed);
  std::string s(n, '\0');
  for (char& c : s) c = static_cast<char>(rng() & 0xFF);
  return s;
}

// Device `device`'s shard of `global`, cut element by element from the sharding's definition
// (piece index = coord(a) · size(b) + coord(b) for axes [a, b]; devices row-major over the
// mesh axes), independently of shard_layout.cc's region and copy code.
std::string slice(const std::string& global, const std::vector<int64_t>& dims, int elem, const ir::Sharding& s,
                  const config::Mesh& m, int64_t device) {
  std::vector<int64_t> coord(m.axes().size());
  for (int64_t d = device, i = static_cast<int64_t>(m.axes().size()) - 1; i >= 0; --i) {
    coord[i] = d % m.sizes()[i];
    d /= m.sizes()[i];
  }
  std::vector<int64_t> lo(dims.size(), 0), size = dims;
  for (size_t d = 0; d < s.dims.size(); ++d) {
    int64_t piece = 0, pieces = 1;
    for (const std::string& axis : s.dims[d]) {
      size_t a = std::find(m.axes().begin(), m.axes().end(), axis) - m.axes().begin();
      piece = piece * m.sizes()[a] + coord[a];
      pieces *= m.sizes()[a];
    }
    size[d] = dims[d] / pieces;
    lo[d] = piece * size[d];
  }
  int64_t total = 1, local_total = 1;
  for (size_t d = 0; d < dims.size(); ++d) total *= dims[d], local_total *= size[d];
  std::string out;
  for (int64_t flat = 0; flat < total; ++flat) {
    int64_t rest = flat;
    bool inside = true;
    for (size_t d = dims.size(); d-- > 0;) {
      int64_t i = rest % dims[d];
      rest /= dims[d];
      inside &= i >= lo[d] && i < lo[d] + size[d];
    }
    if (inside) out.append(global, static_cast<size_t>(flat * elem), static_cast<size_t>(elem));
  }
  EXPECT_EQ(static_cast<int64_t>(out.size()), local_total * elem);
  return out;
}

struct Global {
  std::string name;
  ir::Shape shape;
  ir::Sharding saved;   // on fsdp 2 × expert 2
  ir::Sharding fsdp4;   // the layout it is restored to on fsdp 4
  std::string bytes;
};

std::vector<Global> globals() {
  std::vector<Global> g = {
      // MoE weight: experts over `expert`, embed over `fsdp`.
      {"params/layers.0.mlp.wi_0", ir::Shape(ir::DType::kF32, {4, 6, 2}), sharding({{"expert"}, {"fsdp"}, {}}),
       sharding({{"fsdp"}, {}, {}}), ""},
      // bf16, one dimension over both axes.
      {"mu/layers.0.mlp.wo", ir::Shape(ir::DType::kBF16, {8, 3}), sharding({{"fsdp", "expert"}, {}}),
       sharding({{"fsdp"}, {}}), ""},
      // Sharded over fsdp only: replicated over expert (written by devices 0 and 2 only).
      {"params/token_embedder.embedding", ir::Shape(ir::DType::kF32, {6, 4}), sharding({{"fsdp"}, {}}),
       sharding({{}, {"fsdp"}}), ""},
      // Fully replicated, and a scalar.
      {"params/decoder_norm.scale", ir::Shape(ir::DType::kF32, {5}), ir::Sharding{}, sharding({{}}), ""},
      {"nu/step_like", ir::Shape(ir::DType::kS32, {}), ir::Sharding{}, ir::Sharding{}, ""},
  };
  uint32_t seed = 11;
  for (Global& t : g) {
    t.bytes = random_bytes(static_cast<size_t>(t.shape.num_elements() * ir::dtype_size(t.shape.dtype())), seed++);
  }
  return g;
}

CheckpointState sharded_state(const std::vector<Global>& g, int64_t step) {
  CheckpointState s;
  s.step = step;
  s.mesh = mesh(2, 2);
  for (const Global& t : g) {
    StateTensor st{t.name, t.shape, t.saved, {}};
    for (int64_t dev = 0; dev < 4; ++dev) {
      st.shards.push_back(slice(t.bytes, t.shape.dims(), ir::dtype_size(t.shape.dtype()), t.saved, s.mesh, dev));
    }
    s.tensors.push_back(std::move(st));
  }
  s.config_yaml = "ici_fsdp_parallelism: 2\nici_expert_parallelism: 2\n";
  s.data_iterator = {{"type", "synthetic"}, {"batches_consumed", step}};
  s.rng = {{"init_weights_seed", 3}};
  return s;
}

TEST(ShardLayout, RegionsFollowTheMeshRowMajor) {
  // fsdp=2 expert=2 over W [E=4, D=6] sharded {[expert], [fsdp]} (the header's example).
  config::Mesh m = mesh(2, 2);
  ir::Sharding s = sharding({{"expert"}, {"fsdp"}});
  EXPECT_EQ(shard_region({4, 6}, s, m, 0), (Region{{0, 0}, {2, 3}}));
  EXPECT_EQ(shard_region({4, 6}, s, m, 1), (Region{{2, 0}, {2, 3}}));
  EXPECT_EQ(shard_region({4, 6}, s, m, 2), (Region{{0, 3}, {2, 3}}));
  EXPECT_EQ(shard_region({4, 6}, s, m, 3), (Region{{2, 3}, {2, 3}}));
  EXPECT_EQ(shard_owners({4, 6}, sharding({{"fsdp"}, {}}), m), (std::vector<int64_t>{0, 2}));
  EXPECT_EQ(shard_owners({4, 6}, ir::Sharding{}, m), (std::vector<int64_t>{0}));
  Status bad = check_sharding("w", {3, 6}, s, m);
  EXPECT_FALSE(bad.ok());
  EXPECT_NE(bad.message().find("tensor w"), std::string::npos) << bad.message();
  EXPECT_FALSE(check_sharding("w", {4, 6}, sharding({{"tensor"}, {}}), m).ok());
  EXPECT_FALSE(check_sharding("w", {4, 6}, sharding({{"fsdp"}, {"fsdp"}}), m).ok());
}

TEST(Sharded, SavedOnFsdp2Expert2RestoresBitExactOnOneDeviceAndOnFsdp4) {
  const std::string dir = temp_dir("reshard") + "/checkpoints";
  const std::vector<Global> g = globals();
  ASSERT_TRUE(save(dir, sharded_state(g, 7)).ok());

  // One file per owner; replicated shards written once, by the lowest device.
  for (int dev = 0; dev < 4; ++dev) EXPECT_TRUE(fs::exists(dir + "/7/shard-" + std::to_string(dev) + ".safetensors"));
  std::ifstream in(dir + "/7/manifest.json");
  nlohmann::json manifest = nlohmann::json::parse(in);
  EXPECT_EQ(manifest["mesh"]["shape"], (std::vector<int64_t>{1, 2, 2}));
  EXPECT_EQ(manifest["tensors"]["params/token_embedder.embedding"]["pieces"].size(), 2u);
  EXPECT_EQ(manifest["tensors"]["params/token_embedder.embedding"]["pieces"][1]["device"], 2);
  EXPECT_EQ(manifest["tensors"]["params/decoder_norm.scale"]["pieces"].size(), 1u);
  EXPECT_EQ(manifest["tensors"]["params/layers.0.mlp.wi_0"]["pieces"].size(), 4u);
  EXPECT_EQ(manifest["tensors"]["params/layers.0.mlp.wi_0"]["sharding"],
            (std::vector<std::vector<std::string>>{{"expert"}, {"fsdp"}, {}}));
  EXPECT_EQ(manifest["rng"]["init_weights_seed"], 3);

  auto reader = CheckpointReader::open(dir + "/7");
  ASSERT_TRUE(reader.ok()) << reader.status().to_string();
  EXPECT_EQ(reader->step(), 7);
  EXPECT_EQ(reader->mesh().sizes(), (std::vector<int64_t>{1, 2, 2}));
  EXPECT_EQ(reader->data_iterator()["batches_consumed"], 7);
  ASSERT_EQ(reader->tensors().size(), g.size());
  for (const Global& t : g) {
    // One device: the global tensor.
    auto whole = reader->read_shard(t.name, t.shape, ir::Sharding{}, single_device_mesh(), 0);
    ASSERT_TRUE(whole.ok()) << whole.status().to_string();
    EXPECT_TRUE(*whole == t.bytes) << t.name;
    // fsdp 4: each device's shard of the new layout.
    const config::Mesh m4 = mesh(4, 1);
    for (int64_t dev = 0; dev < 4; ++dev) {
      auto shard = reader->read_shard(t.name, t.shape, t.fsdp4, m4, dev);
      ASSERT_TRUE(shard.ok()) << shard.status().to_string();
      EXPECT_TRUE(*shard == slice(t.bytes, t.shape.dims(), ir::dtype_size(t.shape.dtype()), t.fsdp4, m4, dev))
          << t.name << " on fsdp-4 device " << dev;
    }
    // And back onto the saved layout.
    for (int64_t dev = 0; dev < 4; ++dev) {
      auto shard = reader->read_shard(t.name, t.shape, t.saved, mesh(2, 2), dev);
      ASSERT_TRUE(shard.ok()) << shard.status().to_string();
      EXPECT_TRUE(*shard == slice(t.bytes, t.shape.dims(), ir::dtype_size(t.shape.dtype()), t.saved, mesh(2, 2), dev));
    }
  }
  // load(): every tensor global.
  auto state = load(dir + "/7");
  ASSERT_TRUE(state.ok()) << state.status().to_string();
  for (size_t i = 0; i < g.size(); ++i) EXPECT_TRUE(state->tensors[i].shards.at(0) == g[i].bytes) << g[i].name;
}

TEST(Sharded, MismatchesAreRefusedNamingTheTensor) {
  const std::string dir = temp_dir("mismatch") + "/checkpoints";
  const std::vector<Global> g = globals();
  ASSERT_TRUE(save(dir, sharded_state(g, 3)).ok());
  auto reader = CheckpointReader::open(dir + "/3");
  ASSERT_TRUE(reader.ok()) << reader.status().to_string();
  const std::string w = "params/layers.0.mlp.wi_0";
  auto expect_error = [&](const Result<std::string>& r, const std::string& part) {
    ASSERT_FALSE(r.ok()) << part;
    EXPECT_NE(r.status().message().find("tensor " + w), std::string::npos) << r.status().message();
    EXPECT_NE(r.status().message().find(part), std::string::npos) << r.status().message();
    EXPECT_EQ(r.status().message().find('\n'), std::string::npos);
  };
  // A different model config: another shape; another dtype; a tensor the checkpoint lacks.
  expect_error(reader->read_shard(w, ir::Shape(ir::DType::kF32, {8, 6, 2}), ir::Sharding{}, single_device_mesh(), 0),
               "f32[8,6,2]");
  expect_error(reader->read_shard(w, ir::Shape(ir::DType::kBF16, {4, 6, 2}), ir::Sharding{}, single_device_mesh(), 0),
               "bf16[4,6,2]");
  auto missing = reader->read_shard("params/nope", ir::Shape(ir::DType::kF32, {1}), ir::Sharding{}, single_device_mesh(), 0);
  ASSERT_FALSE(missing.ok());
  EXPECT_NE(missing.status().message().find("tensor params/nope is missing"), std::string::npos);
  // A target layout that does not fit.
  expect_error(reader->read_shard(w, g[0].shape, sharding({{"fsdp"}, {}, {}}), mesh(8, 1), 0), "not divisible");

  // A flipped bit in device 3's file: only the tensors read from it fail, naming the tensor.
  std::string path = dir + "/3/shard-3.safetensors";
  std::string bytes;
  {
    std::ifstream f(path, std::ios::binary);
    bytes.assign(std::istreambuf_iterator<char>(f), {});
  }
  uint64_t n = 0;
  std::memcpy(&n, bytes.data(), 8);
  bytes[8 + n] ^= 0x01;  // first data byte: wi_0's piece (first tensor saved)
  std::ofstream(path, std::ios::binary | std::ios::trunc) << bytes;
  auto corrupt = CheckpointReader::open(dir + "/3");
  ASSERT_TRUE(corrupt.ok());
  expect_error(corrupt->read_shard(w, g[0].shape, ir::Sharding{}, single_device_mesh(), 0), "fails its checksum");
  // Device 0's fsdp-4 shard of wi_0 (expert 0) needs no piece from device 3's file (experts 2-3).
  EXPECT_TRUE(corrupt->read_shard(w, g[0].shape, sharding({{"fsdp"}, {}, {}}), mesh(4, 1), 0).ok());
  EXPECT_FALSE(load(dir + "/3").ok());
}

TEST(Sharded, ShardOfTheWrongSizeIsRefusedOnSave) {
  const std::string dir = temp_dir("badsave") + "/checkpoints";
  CheckpointState s = sharded_state(globals(), 1);
  s.tensors[1].shards[2].pop_back();
  Status st = save(dir, s);
  ASSERT_FALSE(st.ok());
  EXPECT_NE(st.message().find("tensor mu/layers.0.mlp.wo: device 2"), std::string::npos) << st.message();
  EXPECT_TRUE(list_steps(dir).empty());
  s = sharded_state(globals(), 1);
  s.tensors[0].sharding = sharding({{"expert"}, {"tensor"}, {}});
  st = save(dir, s);
  ASSERT_FALSE(st.ok());
  EXPECT_NE(st.message().find("mesh axis tensor"), std::string::npos) << st.message();
}

}  // namespace
}  // namespace kiln::checkpoint

namespace kiln::checkpoint {
namespace {

// Two processes' share of one save (MPI ranks, here two threads): rank 0 prepares the
// directory, each rank hands over only its own devices' shards (2 and 2) and writes its
// files; rank 0 commits once rank 1's note is there. The result is the one-process save's
// checkpoint, every piece with its checksum, and no note is left behind.
TEST(Sharded, TwoRanksWriteTheirOwnShardsAndRankZeroCommits) {
  const std::string dir = temp_dir("two_ranks") + "/checkpoints";
  const std::vector<Global> g = globals();
  auto tmp = prepare_save(dir, 5);
  ASSERT_TRUE(tmp.ok()) << tmp.status().to_string();
  auto rank_state = [&](int64_t rank) {
    CheckpointState s = sharded_state(g, 5);
    for (StateTensor& t : s.tensors) {
      for (int64_t dev = 0; dev < 4; ++dev) {
        if (dev / 2 != rank) t.shards[dev].clear();  // another process holds it
      }
    }
    return s;
  };
  auto options = [&](int64_t rank) {
    SaveOptions o;
    o.rank = rank, o.num_ranks = 2, o.first_device = 2 * rank, o.local_devices = 2, o.tmp_dir = *tmp;
    o.progress = false;
    return o;
  };
  Status st0, st1;
  std::thread r0([&] { st0 = save(dir, rank_state(0), options(0)); });
  std::this_thread::sleep_for(std::chrono::milliseconds(50));  // rank 0 is waiting for rank 1's note
  EXPECT_TRUE(list_steps(dir).empty());
  std::thread r1([&] { st1 = save(dir, rank_state(1), options(1)); });
  r0.join();
  r1.join();
  ASSERT_TRUE(st0.ok()) << st0.to_string();
  ASSERT_TRUE(st1.ok()) << st1.to_string();
  EXPECT_EQ(list_steps(dir), (std::vector<int64_t>{5}));
  std::vector<std::string> files;
  for (const auto& e : fs::directory_iterator(dir + "/5")) files.push_back(e.path().filename().string());
  std::sort(files.begin(), files.end());
  EXPECT_EQ(files, (std::vector<std::string>{"manifest.json", "shard-0.safetensors", "shard-1.safetensors",
                                             "shard-2.safetensors", "shard-3.safetensors"}));
  auto state = load(dir + "/5");  // every checksum checked
  ASSERT_TRUE(state.ok()) << state.status().to_string();
  for (size_t i = 0; i < g.size(); ++i) EXPECT_TRUE(state->tensors[i].shards.at(0) == g[i].bytes) << g[i].name;
}

// A rank that fails (here: it hands over a shard of the wrong size) fails rank 0's save,
// naming the rank and the tensor; nothing is committed and the temporary directory goes.
TEST(Sharded, AFailingRankFailsTheCommitAndLeavesNoCheckpoint) {
  const std::string dir = temp_dir("failing_rank") + "/checkpoints";
  const std::vector<Global> g = globals();
  ASSERT_TRUE(save(dir, sharded_state(g, 1)).ok());
  auto tmp = prepare_save(dir, 2);
  ASSERT_TRUE(tmp.ok());
  CheckpointState bad = sharded_state(g, 2);
  bad.tensors[0].shards[3] = "short";
  SaveOptions o0, o1;
  o0.num_ranks = o1.num_ranks = 2;
  o1.rank = 1;
  o0.local_devices = o1.local_devices = 2;
  o1.first_device = 2;
  o0.tmp_dir = o1.tmp_dir = *tmp;
  o0.progress = o1.progress = false;
  o0.commit_timeout_s = 30;
  Status st1 = save(dir, bad, o1);
  EXPECT_FALSE(st1.ok());
  Status st0 = save(dir, sharded_state(g, 2), o0);
  ASSERT_FALSE(st0.ok());
  EXPECT_NE(st0.message().find("rank 1"), std::string::npos) << st0.message();
  EXPECT_NE(st0.message().find(g[0].name), std::string::npos) << st0.message();
  EXPECT_EQ(list_steps(dir), (std::vector<int64_t>{1}));
  EXPECT_FALSE(fs::exists(*tmp));
}

// Partial reads are checked (step_dir.h kChecksumBlockBytes): a 4 MiB global tensor has a
// checksum per MiB, a device of a 4-way row split reads and checks only its block, and a
// corrupt byte fails exactly the reads that touch its block, naming the file and the block;
// a column split touches every block.
TEST(Sharded, PartialReadsCheckTheBlocksTheyTouch) {
  const std::string dir = temp_dir("partial_checked");
  const ir::Shape shape(ir::DType::kF32, {1024, 1024});  // 4 MiB: 4 blocks of 256 rows
  const std::string global = random_bytes(static_cast<size_t>(shape.byte_size()), 5);
  CheckpointState s;
  s.step = 1;
  s.tensors.push_back({"params/w", shape, ir::Sharding{}, {global}});
  s.config_yaml = "x: 1\n";
  s.data_iterator = {{"type", "synthetic"}};
  ASSERT_TRUE(save(dir, s).ok());
  const std::string step = (fs::path(dir) / "1").string();
  {
    std::ifstream in(fs::path(step) / "manifest.json");
    const nlohmann::json m = nlohmann::json::parse(in);
    ASSERT_EQ(m["tensors"]["params/w"]["pieces"][0]["block_fnv1a64"].size(), 4u);
  }
  const config::Mesh m4 = mesh(4, 1);
  const ir::Sharding rows = sharding({{"fsdp"}, {}}), cols = sharding({{}, {"fsdp"}});
  const ShardReadOptions partial{.partial_reads = true};
  auto read = [&](const ir::Sharding& sh, int64_t device) {
    Result<CheckpointReader> r = CheckpointReader::open(step);
    KILN_CHECK(r.ok()) << r.status().to_string();
    return r->read_shard("params/w", shape, sh, m4, device, partial);
  };
  for (int64_t d = 0; d < 4; ++d) {
    Result<std::string> got = read(rows, d);
    ASSERT_TRUE(got.ok()) << got.status().to_string();
    EXPECT_EQ(*got, slice(global, shape.dims(), 4, rows, m4, d));
    Result<std::string> col = read(cols, d);
    ASSERT_TRUE(col.ok()) << col.status().to_string();
    EXPECT_EQ(*col, slice(global, shape.dims(), 4, cols, m4, d));
  }
  // Flip one byte in block 2 (rows 512..767) of the file's tensor data.
  const fs::path shard = fs::path(step) / "shard-0.safetensors";
  std::fstream f(shard, std::ios::in | std::ios::out | std::ios::binary);
  uint64_t header = 0;
  f.read(reinterpret_cast<char*>(&header), 8);
  const std::streamoff at = static_cast<std::streamoff>(8 + header + 2 * (1 << 20) + 12345);
  f.seekg(at);
  char c = 0;
  f.get(c);
  f.seekp(at);
  f.put(static_cast<char>(c ^ 0x40));
  f.close();
  for (int64_t d = 0; d < 4; ++d) {
    Result<std::string> got = read(rows, d);
    if (d != 2) {
      ASSERT_TRUE(got.ok()) << "device " << d << ": " << got.status().to_string();
      continue;
    }
    ASSERT_FALSE(got.ok());
    const std::string msg = got.status().message();
    EXPECT_EQ(got.status().code(), StatusCode::kDataLoss) << msg;
    EXPECT_NE(msg.find("tensor params/w in shard-0.safetensors fails its checksum in block 2 of 4"), std::string::npos)
        << msg;
    EXPECT_EQ(msg.find('\n'), std::string::npos) << msg;
  }
  EXPECT_FALSE(read(cols, 0).ok());  // every column block crosses block 2
}

}  // namespace
}  // namespace kiln::checkpoint
