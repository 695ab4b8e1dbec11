// kiln convert --from hf --to kiln IN OUT | --from kiln --to hf IN OUT: GPT-OSS weights
// between the Hugging Face layout (config.json + model*.safetensors, with
// model.safetensors.index.json for several shards; MXFP4 expert blocks are dequantized to
// bf16) and a Kiln checkpoint (parameters only,
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
    for (const auto& [name, file] : index.value("weight_map", nlohmann::json::object()).items()) {
      unique.insert(file.get<std::string>());
    }
    files.assign(unique.begin(), unique.end());
  } else {
    files.push_back("model.safetensors");
  }
  std::vector<std::string> paths;
  for (const std::string& f : files) paths.push_back((in / f).string());
  // MXFP4 expert blocks (as on the hub) are dequantized to bf16 while reading.
  KILN_ASSIGN_OR_RETURN(checkpoint::TensorMap hf, checkpoint::read_hf_tensors(paths));
  KILN_ASSIGN_OR_RETURN(checkpoint::TensorMap kiln, checkpoint::gpt_oss_from_hf(hf, config["num_attention_heads"].get<int64_t>()));
  checkpoint::CheckpointState state;
  state.step = 0;
  for (auto& [name, t] : kiln) state.tensors.push_back(checkpoint::StateTensor::global("params/" + name, t));
  state.data_iterator = {{"type", "none"}};
  state.rng = {{"imported_from", "huggingface"}, {"hf_config", config}};
  KILN_RETURN_IF_ERROR(checkpoint::save(out.string(), state));
  fmt::print("wrote {} Kiln parameters to {} (start a run from them with load_parameters_path={})\n", kiln.size(),
             checkpoint::step_dir(out.string(), 0), out.string());
  return ok_status();
}

Status kiln_to_hf(const fs::path& in, const fs::path& out) {
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
  KILN_RETURN_IF_ERROR(checkpoint::write_safetensors((out / "model.safetensors").string(), named, {{"format", "pt"}}));
  std::ofstream(out / "config.json") << config.dump(2) << "\n";
  fmt::print("wrote {} Hugging Face tensors of step {} to {}\n", hf.size(), reader.step(), out.string());
  return ok_status();
}

}  // namespace

std::function<int()> add_convert_command(CLI::App& cmd) {
  struct Args {
    std::string from, to, in, out;
  };
  auto args = std::make_shared<Args>();
  cmd.add_option("--from", args->from, "hf or kiln")->required()->check(CLI::IsMember({"hf", "kiln"}));
  cmd.add_option("--to", args->to, "kiln or hf")->required()->check(CLI::IsMember({"hf", "kiln"}));
  cmd.add_option("input", args->in, "input directory")->required();
  cmd.add_option("output", args->out, "output directory")->required();
  return [args]() -> int {
    if (args->from == args->to) return report_error(invalid_argument("--from and --to are both {}", args->from));
    Status st = args->from == "hf" ? hf_to_kiln(args->in, args->out) : kiln_to_hf(args->in, args->out);
    return st.ok() ? kExitOk : report_error(st);
  };
}

}  // namespace kiln::app
