// kiln convert --from hf --to kiln IN OUT | --from kiln --to hf IN OUT: a model's weights
// (any family of kiln/checkpoint/hf_family.h: the config's decoder_block going out,
// config.json's model_type coming in) between the Hugging Face layout (config.json + model*.safetensors, with
// model.safetensors.index.json for several shards; MXFP4 expert blocks are dequantized to
// bf16; the import streams tensor by tensor, kiln/checkpoint/hf_import.h; export splits files larger than --max_shard_size the same way) and a Kiln checkpoint (parameters only,
// written as OUT/0/, so load_parameters_path=OUT starts a run from them). Mappings:
// kiln/checkpoint/hf_<family>.h.
#include <filesystem>
#include <fstream>
#include <map>
#include <memory>
#include <sstream>

#include <fmt/format.h>
#include <nlohmann/json.hpp>

#include "command.h"
#include "kiln/checkpoint/checkpoint.h"
#include "kiln/checkpoint/checkpoint_writer.h"
#include "kiln/checkpoint/hf_family.h"
#include "kiln/checkpoint/hf_import.h"
#include "kiln/checkpoint/hf_shards.h"
#include "kiln/checkpoint/safetensors.h"
#include "kiln/base/progress.h"

namespace kiln::app {

namespace {

namespace fs = std::filesystem;

// Streams: the files' headers are read and the whole Kiln tensor list planned from names and
// shapes first (so a missing file or tensor fails before anything is written), then each
// Kiln tensor is made from just its HF source's bytes, appended to the checkpoint and freed
// before the next. Peak memory: the largest Kiln tensor plus a 16 MiB read buffer.
Status hf_to_kiln(const fs::path& in, const fs::path& out) {
  KILN_ASSIGN_OR_RETURN(checkpoint::HfImportPlan import, checkpoint::plan_hf_import(in.string()));
  const std::vector<checkpoint::KilnFromHf>& plan = import.tensors;
  std::vector<std::pair<std::string, ir::Shape>> declared;
  int64_t total_bytes = 0;
  for (const checkpoint::KilnFromHf& t : plan) {
    declared.emplace_back("params/" + t.name, t.shape);
    total_bytes += t.shape.byte_size();
  }
  KILN_ASSIGN_OR_RETURN(std::unique_ptr<checkpoint::CheckpointWriter> writer,
                        checkpoint::CheckpointWriter::begin(out.string(), /*step=*/0, std::move(declared)));
  Progress progress("convert " + in.string(), total_bytes, Progress::Unit::kBytes);
  for (const checkpoint::KilnFromHf& t : plan) {
    KILN_ASSIGN_OR_RETURN(std::string bytes, import.checkpoint.produce(t));
    KILN_RETURN_IF_ERROR(writer->write("params/" + t.name, bytes));
    progress.advance(static_cast<int64_t>(bytes.size()));
  }
  const nlohmann::json rng = {{"imported_from", "huggingface"}, {"hf_config", import.config}};
  KILN_RETURN_IF_ERROR(writer->commit(import.config_yaml, {{"type", "none"}}, rng));
  progress.finish();
  fmt::print("wrote {} Kiln parameters to {} (start a run from them with load_parameters_path={})\n", plan.size(),
             checkpoint::step_dir(out.string(), 0), out.string());
  return ok_status();
}

Status kiln_to_hf(const fs::path& in, const fs::path& out, int64_t max_shard_size) {
  KILN_ASSIGN_OR_RETURN(std::string dir, checkpoint::resolve_step_dir(in.string()));
  // Only the parameters are read (any saved layout: pieces are assembled into global tensors).
  KILN_ASSIGN_OR_RETURN(checkpoint::CheckpointReader reader, checkpoint::CheckpointReader::open(dir));
  checkpoint::TensorMap kiln;
  int64_t param_bytes = 0;
  for (const checkpoint::SavedTensor& t : reader.tensors()) param_bytes += t.name.rfind("params/", 0) == 0 ? t.shape.byte_size() : 0;
  Progress progress("read " + dir, param_bytes, Progress::Unit::kBytes);
  for (const checkpoint::SavedTensor& t : reader.tensors()) {
    if (t.name.rfind("params/", 0) != 0) continue;
    KILN_ASSIGN_OR_RETURN(kiln[t.name.substr(7)], reader.read_global(t.name));
    progress.advance(t.shape.byte_size());
  }
  progress.finish();
  KILN_ASSIGN_OR_RETURN(std::string block, checkpoint::decoder_block_of(reader.config_yaml()));
  KILN_ASSIGN_OR_RETURN(const checkpoint::HfFamily* family, checkpoint::hf_family_for_block(block));
  KILN_ASSIGN_OR_RETURN(checkpoint::TensorMap hf, family->to_hf(kiln, reader.config_yaml()));
  KILN_ASSIGN_OR_RETURN(nlohmann::json config, family->hf_config(kiln, reader.config_yaml()));
  std::error_code ec;
  fs::create_directories(out, ec);
  if (ec) return io_error("creating {}: {}", out.string(), ec.message());
  std::vector<checkpoint::NamedTensor> named;
  for (const auto& [name, t] : hf) named.emplace_back(name, &t);
  Progress writing("write " + out.string(), param_bytes, Progress::Unit::kBytes);
  KILN_ASSIGN_OR_RETURN(checkpoint::ShardPlan plan,
                        checkpoint::write_hf_safetensors(out.string(), named, max_shard_size,
                                                         [&](int64_t bytes) { writing.advance(bytes); }));
  writing.finish();
  std::ofstream(out / "config.json") << config.dump(2) << "\n";
  fmt::print("wrote {} Hugging Face tensors of step {} to {} ({})\n", hf.size(), reader.step(), out.string(),
             plan.files.size() == 1 ? std::string("model.safetensors")
                                    : fmt::format("{} files and model.safetensors.index.json", plan.files.size()));
  return ok_status();
}

}  // namespace

std::function<int()> add_convert_command(CLI::App& cmd) {
  struct Args {
    std::string from, to, in, out;
    std::string max_shard_size = "5GB";
  };
  auto args = std::make_shared<Args>();
  cmd.add_option("--from", args->from, "hf or kiln")->required()->check(CLI::IsMember({"hf", "kiln"}));
  cmd.add_option("--to", args->to, "kiln or hf")->required()->check(CLI::IsMember({"hf", "kiln"}));
  cmd.add_option("input", args->in, "input directory")->required();
  cmd.add_option("output", args->out, "output directory")->required();
  cmd.add_option("--max_shard_size", args->max_shard_size,
                 "--to hf: split the weights into files of at most this size, with model.safetensors.index.json "
                 "(5GB, 500MB, 2GiB, bytes; default 5GB, as Hugging Face)");
  return [args]() -> int {
    if (args->from == args->to) return report_error(invalid_argument("--from and --to are both {}", args->from));
    Result<int64_t> max_shard = checkpoint::parse_shard_size("--max_shard_size", args->max_shard_size);
    if (!max_shard.ok()) return report_error(max_shard.status());
    Status st = args->from == "hf" ? hf_to_kiln(args->in, args->out) : kiln_to_hf(args->in, args->out, *max_shard);
    return st.ok() ? kExitOk : report_error(st);
  };
}

}  // namespace kiln::app
