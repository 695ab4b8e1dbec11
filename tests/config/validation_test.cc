// Every validation rule: each bad config fails in load() with one line that names the key,
// the value and what is accepted.
#include <gtest/gtest.h>

#include <algorithm>
#include <filesystem>

#include "kiln/config/config.h"
#include "kiln/config/validate.h"
#include "test_util.h"

namespace kiln::config {
namespace {

using testing::load_error;
using testing::load_with;
using testing::TempDir;

#define EXPECT_CONTAINS(text, part) \
  EXPECT_NE(std::string(text).find(part), std::string::npos) << "in: " << (text)

TEST(Validation, UnknownKeySuggestsTheClosestOne) {
  EXPECT_EQ(load_error({"ici_fsdp_paralelism=2"}),
            "ici_fsdp_paralelism=2: unknown key ici_fsdp_paralelism (did you mean "
            "ici_fsdp_parallelism?)");
  EXPECT_EQ(load_error({"zzzzzzzzzz=1"}), "zzzzzzzzzz=1: unknown key zzzzzzzzzz");
}

TEST(Validation, UnknownKeyInAFileNamesTheLine) {
  TempDir dir;
  std::string path = dir.write("run.yml", "steps: 3\nlearning_rat: 0.1\n");
  std::string m = load_error({}, path);
  EXPECT_CONTAINS(m, "run.yml:2: unknown key learning_rat (did you mean learning_rate?)");
}

TEST(Validation, WrongTypeOnTheCommandLine) {
  EXPECT_EQ(load_error({"steps=abc"}), "steps=abc: expected an integer, got abc");
  EXPECT_EQ(load_error({"steps=1.5"}), "steps=1.5: expected an integer, got 1.5");
  EXPECT_EQ(load_error({"learning_rate=fast"}), "learning_rate=fast: expected a number, got fast");
  EXPECT_EQ(load_error({"scan_layers=maybe"}), "scan_layers=maybe: expected true or false, got maybe");
  EXPECT_EQ(load_error({"mlp_activations=silu"}),
            "mlp_activations=silu: expected a list like [a, b], got silu");
  EXPECT_CONTAINS(load_error({"mesh_axes=[1, 2]"}), "expected a list of strings");
}

TEST(Validation, WrongTypeInAFile) {
  TempDir dir;
  std::string path = dir.write("run.yml", "steps: \"ten\"\n");
  EXPECT_CONTAINS(load_error({}, path), "run.yml:1: steps: expected an integer, got ten");
  std::string null_value = dir.write("null.yml", "run_name:\n");
  EXPECT_CONTAINS(load_error({}, null_value), "null.yml:1: run_name: an empty (null) value");
  std::string twice = dir.write("twice.yml", "steps: 1\nsteps: 2\n");
  EXPECT_CONTAINS(load_error({}, twice), "twice.yml:2: key steps appears twice");
  std::string broken = dir.write("broken.yml", "steps: [1, 2\n");
  EXPECT_CONTAINS(load_error({}, broken), "broken.yml:");
}

TEST(Validation, ArgumentsMustBeKeyValue) {
  EXPECT_EQ(load_error({"steps"}), "steps: expected key=value (a CONFIG.yml may only come first)");
  EXPECT_CONTAINS(load_error({"=3"}), "expected key=value");
}

TEST(Validation, MissingConfigFile) {
  Result<Config> c = load_with({}, "no/such/run.yml");
  ASSERT_FALSE(c.ok());
  EXPECT_EQ(c.status().code(), StatusCode::kNotFound);
  EXPECT_EQ(c.status().message(), "no/such/run.yml: no such config file");
}

// "default, " and then every configs/models/*.yml name, sorted.
std::string available_models() {
  std::vector<std::string> names;
  for (const auto& e : std::filesystem::directory_iterator(std::filesystem::path(KILN_SOURCE_DIR) / "configs" / "models")) {
    if (e.path().extension() == ".yml") names.push_back(e.path().stem().string());
  }
  std::sort(names.begin(), names.end());
  std::string out = "default";
  for (const std::string& n : names) out += ", " + n;
  return out;
}

TEST(Validation, UnknownModelListsTheAvailableOnes) {
  std::string m = load_error({"model_name=gpt-oss-21b"});
  EXPECT_CONTAINS(m, "model_name=gpt-oss-21b: no such model (did you mean gpt-oss-20b?); available: " +
                         available_models());
  EXPECT_CONTAINS(m, "gpt-oss-120b, gpt-oss-20b, gpt-oss-small, gpt-oss-tiny");
}

// A name the file system refuses (longer than a file name may be) is no such model, not an
// exception out of std::filesystem (found by tests/fuzz's config_yaml target).
TEST(Validation, OverlongModelNameIsNoSuchModel) {
  std::string m = load_error({"model_name=" + std::string(5000, 'g')});
  EXPECT_CONTAINS(m, ": no such model");
  EXPECT_CONTAINS(m, "available: " + available_models());
}

TEST(Validation, ModelFilesCannotPickModelsOrUnlockOverrides) {
  TempDir dir;
  dir.write("models/m.yml", "override_model_config: true\n");
  std::string run = dir.write("run.yml", "model_name: m\n");
  EXPECT_CONTAINS(load_error({}, run), "m.yml:1: a model file cannot set override_model_config");
  dir.write("models/u.yml", "hidden_size: 4\n");
  std::string run2 = dir.write("run2.yml", "model_name: u\n");
  EXPECT_CONTAINS(load_error({}, run2), "u.yml:1: unknown key hidden_size");
}

TEST(Validation, EnumKeysAcceptOnlyTheirValues) {
  EXPECT_EQ(load_error({"dtype=float64"}),
            "dtype=float64: float64 is not accepted; expected one of float32, bfloat16 (did you "
            "mean float32?)");
  EXPECT_CONTAINS(load_error({"remat_policy=minimall"}), "(did you mean minimal?)");
  EXPECT_CONTAINS(load_error({"attention=splash"}), "expected one of autoselected, dot_product, flash");
  EXPECT_CONTAINS(load_error({"lr_schedule_type=linear"}), "expected one of cosine, wsd");
  EXPECT_CONTAINS(load_error({"dataset_type=tfds"}), "expected one of synthetic, tokens, text");
  EXPECT_CONTAINS(load_error({"opt_type=muon"}), "expected one of adamw, sgd");
  EXPECT_CONTAINS(load_error({"backend=jit"}), "expected one of cpu, pjrt, interpreter");
  EXPECT_CONTAINS(load_error({"pjrt_plugin=gpu"}), "expected cpu, cuda, tpu or a path to a PJRT plugin");
  // What backend=pjrt cannot do is refused before any work, naming the key.
  EXPECT_CONTAINS(load_error({"backend=pjrt", "profiler=trace"}), "profiler=trace: backend=pjrt runs the step as one");
  EXPECT_CONTAINS(load_error({"backend=pjrt", "report=true"}), "report=true: backend=pjrt runs the step as one");
  EXPECT_CONTAINS(load_error({"backend=pjrt", "pjrt_plugin=cuda"}), "set hardware_peak_tflops");
  // The key it replaced names its successor.
  EXPECT_CONTAINS(load_error({"executor=compiled"}), "executor was renamed backend");
  EXPECT_CONTAINS(load_error({"mlp_activations=[silu, swish]"}),
                  "mlp_activations=[silu, swish]: swish is not accepted");
  EXPECT_CONTAINS(load_error({"mu_dtype=int8"}), "expected one of \"\", float32, bfloat16");
  // Every enum key's default is itself accepted (load of base.yml succeeds), and every
  // enum key exists in base.yml.
  ASSERT_TRUE(load_with({}).ok());
  for (const auto& [key, choices] : enum_keys()) EXPECT_TRUE(load_with({}).value().has(key)) << key;
}

TEST(Validation, MeshProductMustEqualTheDevices) {
  EXPECT_EQ(load_error({"local_devices=4", "ici_fsdp_parallelism=3"}),
            "mesh: the ici_* parallelism sizes multiply to 3 (ici_fsdp_parallelism=3), but the "
            "mesh needs 4 devices (local_devices=4); make them multiply to 4 or set one to -1");
  EXPECT_CONTAINS(load_error({"local_devices=4", "ici_tensor_parallelism=3"}),
                  "cannot fill ici_fsdp_parallelism=-1");
}

TEST(Validation, AtMostOneMinusOnePerLevel) {
  EXPECT_CONTAINS(load_error({"ici_tensor_parallelism=-1"}),
                  "ici_fsdp_parallelism=-1 and ici_tensor_parallelism=-1: at most one ici_*");
  EXPECT_CONTAINS(load_error({"dcn_fsdp_parallelism=-1"}), "at most one dcn_*");
}

TEST(Validation, DevicesAndSlices) {
  EXPECT_CONTAINS(load_error({"local_devices=0"}), "local_devices=0: expected a positive device count");
  EXPECT_CONTAINS(load_error({"local_devices=3", "num_slices=2"}),
                  "num_slices=2: 3 devices (local_devices=3) do not split into 2 equal slices");
  EXPECT_CONTAINS(load_error({"dcn_fsdp_parallelism=2"}),
                  "mesh: cannot fill dcn_data_parallelism=-1: the other dcn_* sizes multiply to 2 "
                  "(dcn_fsdp_parallelism=2), which does not divide 1 slice (num_slices=1)");
  EXPECT_CONTAINS(load_error({"dcn_data_parallelism=1", "dcn_fsdp_parallelism=2"}),
                  "dcn_* parallelism sizes multiply to 2");
}

TEST(Validation, HeadsMustDivideOverTheTensorAxis) {
  EXPECT_EQ(load_error({"ici_tensor_parallelism=3"}),
            "base_num_query_heads=16: 16 query heads do not divide over the tensor axis "
            "(tensor=3); use a head count divisible by 3 or less tensor parallelism");
  EXPECT_CONTAINS(load_error({"model_name=gpt-oss-20b", "ici_tensor_parallelism=16"}),
                  "base_num_kv_heads=8: 8 kv heads do not divide over the tensor axis (tensor=16)");
  EXPECT_CONTAINS(load_error({"ici_tensor_parallelism=2", "ici_tensor_sequence_parallelism=16"}),
                  "(tensor=2 × tensor_sequence=16)");
}

TEST(Validation, ExpertsMustDivideOverTheExpertAxis) {
  EXPECT_EQ(load_error({"model_name=gpt-oss-20b", "ici_expert_parallelism=3"}),
            "num_experts=32: 32 experts do not divide over the expert axis (expert=3); use an "
            "expert count divisible by 3 or less expert parallelism");
  // A dense model may still use the expert axis (as extra batch sharding).
  EXPECT_TRUE(load_with({"ici_expert_parallelism=2"}).ok());
}

TEST(Validation, GlobalBatchMustBeWhole) {
  EXPECT_EQ(load_error({"per_device_batch_size=0.5", "local_devices=3"}),
            "per_device_batch_size=0.5: × 3 devices = 1.5 sequences; the global batch must be a "
            "whole number of at least 1");
  EXPECT_CONTAINS(load_error({"per_device_batch_size=0"}), "expected a number in (0, inf)");
}

TEST(Validation, ModelShapeRules) {
  EXPECT_CONTAINS(load_error({"base_num_kv_heads=5"}),
                  "16 query heads cannot be grouped over 5 kv heads");
  EXPECT_CONTAINS(load_error({"num_experts=2", "num_experts_per_tok=3"}),
                  "num_experts_per_tok=3: cannot pick more experts per token than num_experts=2");
  EXPECT_CONTAINS(load_error({"model_name=gpt-oss-20b", "override_model_config=true",
                              "base_num_decoder_layers=3"}),
                  "inhomogeneous_layer_cycle_interval=2: scan_layers=true scans blocks of 2 layers");
  EXPECT_TRUE(load_with({"model_name=gpt-oss-20b", "override_model_config=true",
                         "base_num_decoder_layers=3", "scan_layers=false"})
                  .ok());
  EXPECT_CONTAINS(load_error({"global_parameter_scale=3"}),
                  "global_parameter_scale=3: expected a power of 2");
  EXPECT_EQ(load_error({"head_dim=0"}), "head_dim=0: expected an integer >= 1");
}

TEST(Validation, NumericRanges) {
  EXPECT_EQ(load_error({"learning_rate=-1"}), "learning_rate=-1.0: expected a number in [0, inf)");
  EXPECT_EQ(load_error({"warmup_steps_fraction=2"}),
            "warmup_steps_fraction=2.0: expected a number in [0, 1]");
  EXPECT_CONTAINS(load_error({"adam_b2=1"}), "adam_b2=1.0: expected a number in [0, 1)");
  EXPECT_CONTAINS(load_error({"steps=-2"}), "steps=-2: expected -1 or a step count >= 0");
  EXPECT_CONTAINS(load_error({"steps=-1"}), "steps=-1: steps follows learning_rate_schedule_steps");
}

TEST(Validation, MeshAxesAndLogicalAxisRules) {
  EXPECT_CONTAINS(load_error({"mesh_axes=[data, fsdp]"}), "expected an ordering of all of data, stage");
  EXPECT_CONTAINS(load_error({"mesh_axes=[data, fsdp, fsdp]"}), "axis fsdp appears twice");
  EXPECT_CONTAINS(load_error({"logical_axis_rules=[[embed, [fsdpp]]]"}),
                  "logical_axis_rules: rule 0 ([embed, [fsdpp]]): unknown mesh axis fsdpp (did you "
                  "mean fsdp?)");
  EXPECT_CONTAINS(load_error({"logical_axis_rules=[[embed]]"}),
                  "expected [logical_name, [mesh_axis, ...]]");
}

TEST(Validation, ExclusiveKeys) {
  EXPECT_CONTAINS(load_error({"load_parameters_path=a", "load_full_state_path=b"}),
                  "set at most one of load_parameters_path and load_full_state_path");
  EXPECT_CONTAINS(load_error({"mlp_activations=[]"}), "expected one or two activations");
}

}  // namespace
}  // namespace kiln::config
