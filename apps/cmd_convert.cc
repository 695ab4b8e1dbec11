// kiln convert --from hf --to kiln IN OUT | --from kiln --to hf IN OUT: GPT-OSS weights
// between the Hugging Face layout (config.json + model*.safetensors, with
// model.safetensors.index.json for several shards; MXFP4 expert blocks are dequantized to
// bf16; export splits files larger than --max_shard_size the same way) and a Kiln checkpoint (parameters only,
// written as OUT/0/, so load_parameters_path=OUT starts a run from them). Mapping:
// kiln/checkpoint/hf_gpt_oss.h.
#include <filesystem>
#include <fstream>
#include <set>
#include <sstream>

#include <fmt/format.h>
#include <nlohmann/json.hpp>

#include "command.h"
#include "kiln/checkpoint/checkpoint.h"
#include "kiln/checkpoint/hf_gpt_oss.h"
#include "kiln/checkpoint/hf_shards.h"
#include "kiln/checkpoint/mxfp4.h"
#include "kiln/checkpoint/safetensors.h"
#include "kiln/base/progress.h"

namespace kiln::app {

namespace {

namespace fs = std::filesystem;

Result<nlohmann::json> read_json(const fs::path& path) {
  std::ifstream in(path);
  if (!in.good()) return not_found("cannot open {}", path.string());
  std::stringstream ss;
  ss << in.rdbuf();
  nlohmann::json j = nlohmann::json::parse(ss.str(), nullptr, /*allow_exceptions=*/false);
  if (j.is_discarded()) return invalid_argument("{} is not JSON", path.string());
  return j;
}

Status hf_to_kiln(const fs::path& in, const fs::path& out) {
  KILN_ASSIGN_OR_RETURN(nlohmann::json config, read_json(in / "config.json"));
  if (!config.contains("num_attention_heads")) return invalid_argument("{}: no num_attention_heads", (in / "config.json").string());
  std::vector<std::string> files;
  if (fs::exists(in / "model.safetensors.index.json")) {
    KILN_ASSIGN_OR_RETURN(nlohmann::json index, read_json(in / "model.safetensors.index.json"));
    std::set<std::string> unique;
    // A named copy: items() of the temporary value() returns would dangle.
    const nlohmann::json weight_map = index.value("weight_map", nlohmann::json::object());
    for (const auto& [name, file] : weight_map.items()) {
      if (!file.is_string()) return invalid_argument("{}: weight_map[{}] is not a file name", (in / "model.safetensors.index.json").string(), name);
      unique.insert(file.get<std::string>());
    }
    files.assign(unique.begin(), unique.end());
  } else {
    files.push_back("model.safetensors");
  }
  // MXFP4 expert blocks (as on the hub) are dequantized to bf16 while reading; progress by
  // file bytes (a released GPT-OSS is tens of GB).
  int64_t total_bytes = 0;
  for (const std::string& f : files) {
    std::error_code ec;
    const auto size = fs::file_size(in / f, ec);
    if (!ec) total_bytes += static_cast<int64_t>(size);
  }
  Progress reading("read " + in.string(), total_bytes, Progress::Unit::kBytes);
  checkpoint::TensorMap hf;
  for (const std::string& f : files) {
    KILN_ASSIGN_OR_RETURN(checkpoint::TensorMap part, checkpoint::read_hf_tensors({(in / f).string()}));
    for (auto& [name, t] : part) {
      if (!hf.emplace(name, std::move(t)).second) return invalid_argument("{}: tensor {} appears in two files", in.string(), name);
    }
    std::error_code ec;
    const auto size = fs::file_size(in / f, ec);
    reading.advance(ec ? 0 : static_cast<int64_t>(size));
  }
  reading.finish();
  KILN_ASSIGN_OR_RETURN(checkpoint::TensorMap kiln, checkpoint::gpt_oss_from_hf(hf, config["num_attention_heads"].get<int64_t>()));
  checkpoint::CheckpointState state;
  state.step = 0;
  for (auto& [name, t] : kiln) state.tensors.push_back(checkpoint::StateTensor::global("params/" + name, t));
  state.data_iterator = {{"type", "none"}};
  state.rng = {{"imported_from", "huggingface"}, {"hf_config", config}};
  // The model's Kiln config, so kiln forward / kiln sample run the checkpoint as they run a
  // trained one (dtype: the imported weights', bf16 for a released GPT-OSS).
  Result<std::string> yaml = checkpoint::gpt_oss_kiln_config(kiln, config);
  if (!yaml.ok()) return yaml.status().with_context((in / "config.json").string());
  state.config_yaml = *yaml;
  KILN_RETURN_IF_ERROR(checkpoint::save(out.string(), state));
  fmt::print("wrote {} Kiln parameters to {} (start a run from them with load_parameters_path={})\n", kiln.size(),
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
  KILN_ASSIGN_OR_RETURN(checkpoint::TensorMap hf, checkpoint::gpt_oss_to_hf(kiln));
  KILN_ASSIGN_OR_RETURN(nlohmann::json config, checkpoint::gpt_oss_hf_config(kiln, reader.config_yaml()));
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
