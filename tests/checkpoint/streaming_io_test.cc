// Streaming checkpoint I/O: CheckpointWriter writes the very files checkpoint::save writes
// for the same global tensors and leaves nothing behind when abandoned; read_shard with
// partial_reads reads a device's block of a global tensor (only its bytes) and gives the
// bytes the whole-piece read gives, on meshes that split one, two and three dimensions.
#include <gtest/gtest.h>

#include <filesystem>
#include <fstream>
#include <random>
#include <string>

#include "kiln/checkpoint/checkpoint.h"
#include "kiln/checkpoint/checkpoint_writer.h"
#include "kiln/checkpoint/shard_read.h"
#include "tests/testing/cli.h"

namespace kiln::checkpoint {
namespace {

namespace fs = std::filesystem;

fs::path fresh_dir(const std::string& name) { return kiln::testing::fresh_temp_dir("kiln_streaming_io_" + name); }

std::string file_bytes(const fs::path& path) { return kiln::testing::read_text_file(path.string()); }

std::string random_bytes(int64_t n, uint32_t seed) {
  std::mt19937 rng(seed);
  std::string s(static_cast<size_t>(n), '\0');
  for (char& c : s) c = static_cast<char>(rng() & 0xFF);
  return s;
}

// Three global tensors of three dtypes, as a CheckpointState.
CheckpointState sample_state() {
  CheckpointState s;
  s.step = 0;
  const std::vector<std::pair<std::string, ir::Shape>> shapes = {
      {"params/a", ir::Shape(ir::DType::kF32, {4, 6, 2})},
      {"params/b", ir::Shape(ir::DType::kBF16, {8, 3})},
      {"params/c", ir::Shape(ir::DType::kS32, {5})}};
  uint32_t seed = 1;
  for (const auto& [name, shape] : shapes) {
    StateTensor t;
    t.name = name;
    t.shape = shape;
    t.shards.push_back(random_bytes(shape.byte_size(), seed++));
    s.tensors.push_back(std::move(t));
  }
  s.config_yaml = "vocab_size: 64\n";
  s.data_iterator = {{"type", "none"}};
  s.rng = {{"imported_from", "test"}};
  return s;
}

TEST(CheckpointWriter, WritesTheFilesSaveWrites) {
  const fs::path dir = fresh_dir("same");
  const CheckpointState s = sample_state();
  SaveOptions quiet;
  quiet.progress = false;
  ASSERT_TRUE(save((dir / "saved").string(), s, quiet).ok());
  std::vector<std::pair<std::string, ir::Shape>> declared;
  for (const StateTensor& t : s.tensors) declared.emplace_back(t.name, t.shape);
  auto w = CheckpointWriter::begin((dir / "streamed").string(), 0, declared);
  ASSERT_TRUE(w.ok()) << w.status().to_string();
  // Out of order and wrong sizes are refused, naming the tensor.
  Status bad = (*w)->write("params/b", s.tensors[1].shards[0]);
  ASSERT_FALSE(bad.ok());
  EXPECT_NE(bad.message().find("params/b"), std::string::npos) << bad.message();
  EXPECT_FALSE((*w)->write("params/a", "short").ok());
  for (const StateTensor& t : s.tensors) ASSERT_TRUE((*w)->write(t.name, t.shards[0]).ok());
  ASSERT_TRUE((*w)->commit(s.config_yaml, s.data_iterator, s.rng).ok());
  for (const char* f : {"shard-0.safetensors", "manifest.json"}) {
    EXPECT_EQ(file_bytes(dir / "saved" / "0" / f), file_bytes(dir / "streamed" / "0" / f)) << f;
  }
}

TEST(CheckpointWriter, AbandonedWriterLeavesThePreviousCheckpointAndNoTemporary) {
  const fs::path dir = fresh_dir("abandoned");
  const CheckpointState s = sample_state();
  std::vector<std::pair<std::string, ir::Shape>> declared;
  for (const StateTensor& t : s.tensors) declared.emplace_back(t.name, t.shape);
  {
    auto w = CheckpointWriter::begin((dir / "ckpt").string(), 0, declared);
    ASSERT_TRUE(w.ok());
    for (const StateTensor& t : s.tensors) ASSERT_TRUE((*w)->write(t.name, t.shards[0]).ok());
    ASSERT_TRUE((*w)->commit(s.config_yaml, s.data_iterator, s.rng).ok());
  }
  const std::string good = file_bytes(dir / "ckpt" / "0" / "manifest.json");
  {
    auto w = CheckpointWriter::begin((dir / "ckpt").string(), 0, declared);
    ASSERT_TRUE(w.ok());
    ASSERT_TRUE((*w)->write("params/a", s.tensors[0].shards[0]).ok());
    // Committing early is refused; the writer then goes out of scope (an error midway).
    EXPECT_FALSE((*w)->commit(s.config_yaml, s.data_iterator, s.rng).ok());
  }
  EXPECT_EQ(file_bytes(dir / "ckpt" / "0" / "manifest.json"), good);
  int entries = 0;
  for (const auto& e : fs::directory_iterator(dir / "ckpt")) entries += e.path().filename() != "0";
  EXPECT_EQ(entries, 0) << "a temporary directory was left behind";
  {
    auto w = CheckpointWriter::begin((dir / "new").string(), 0, declared);
    ASSERT_TRUE(w.ok());
  }
  EXPECT_FALSE(fs::exists(dir / "new")) << "a directory the writer made stays only with a checkpoint in it";
}

config::Mesh mesh_of(std::vector<std::string> axes, std::vector<int64_t> ici) {
  return config::Mesh(std::move(axes), std::move(ici));
}

TEST(ShardRead, PartialReadsOfAGlobalTensorEqualTheWholePieceRead) {
  const fs::path dir = fresh_dir("partial");
  const CheckpointState s = sample_state();
  SaveOptions quiet;
  quiet.progress = false;
  ASSERT_TRUE(save(dir.string(), s, quiet).ok());
  auto r = CheckpointReader::open((dir / "0").string());
  ASSERT_TRUE(r.ok()) << r.status().to_string();
  const config::Mesh mesh = mesh_of({"fsdp", "expert", "tensor"}, {2, 2, 2});
  const ir::Shape& a = s.tensors[0].shape;  // f32[4, 6, 2]
  for (const ir::Sharding& sharding :
       {ir::Sharding{{{"expert"}, {}, {}}}, ir::Sharding{{{}, {"fsdp"}, {}}}, ir::Sharding{{{"expert"}, {"fsdp"}, {"tensor"}}},
        ir::Sharding{{{"fsdp", "expert"}, {}, {}}}}) {
    for (int64_t dev = 0; dev < mesh.num_devices(); ++dev) {
      auto whole = r->read_shard("params/a", a, sharding, mesh, dev);
      auto part = r->read_shard("params/a", a, sharding, mesh, dev, ShardReadOptions{.partial_reads = true});
      ASSERT_TRUE(whole.ok() && part.ok()) << whole.status().to_string() << part.status().to_string();
      EXPECT_EQ(*whole, *part) << "device " << dev;
    }
  }
  // Only the block's bytes are read: device 3 of {[expert], [fsdp], [tensor]} holds a[2:4, 3:6, 1:2].
  const Region stored{{0, 0, 0}, {4, 6, 2}}, want{{2, 3, 1}, {2, 3, 1}};
  std::string block(static_cast<size_t>(want.num_elements() * 4), '\0');
  const SavedTensor* t = r->find("params/a");
  ASSERT_NE(t, nullptr);
  auto index = index_safetensors((dir / "0" / t->pieces[0].file).string());
  ASSERT_TRUE(index.ok());
  auto read = read_block_into(index->path, index->data_start + index->entries.at("params/a").begin, stored, block, want,
                              4, "params/a");
  ASSERT_TRUE(read.ok()) << read.status().to_string();
  EXPECT_EQ(*read, want.num_elements() * 4);
  const std::string& all = s.tensors[0].shards[0];
  for (int64_t i = 0; i < 2; ++i)
    for (int64_t j = 0; j < 3; ++j) {
      const int64_t src = ((2 + i) * 6 + (3 + j)) * 2 + 1, dst = i * 3 + j;
      EXPECT_EQ(block.substr(dst * 4, 4), all.substr(src * 4, 4)) << i << "," << j;
    }
}

}  // namespace
}  // namespace kiln::checkpoint
