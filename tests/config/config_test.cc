// Resolution order, typing, model files and derived values.
#include <gtest/gtest.h>

#include <fstream>
#include <sstream>

#include "kiln/config/config.h"
#include "test_util.h"

namespace kiln::config {
namespace {

using testing::configs_dir;
using testing::load_error;
using testing::load_with;
using testing::TempDir;

Config must_load(std::vector<std::string> overrides, std::string config_path = "",
                 int64_t num_ranks = 1) {
  Result<Config> c = load_with(std::move(overrides), std::move(config_path), num_ranks);
  EXPECT_TRUE(c.ok()) << c.status().to_string();
  if (!c.ok()) std::abort();
  return std::move(c).value();
}

TEST(Load, BaseDefaultsWithTheirTypes) {
  Config c = must_load({});
  EXPECT_EQ(c.get_string("model_name"), "default");
  EXPECT_EQ(c.get_int("steps"), 150001);  // written 150_001
  EXPECT_DOUBLE_EQ(c.get_float("learning_rate"), 3e-5);
  EXPECT_DOUBLE_EQ(c.get_float("per_device_batch_size"), 12.0);
  EXPECT_TRUE(c.get_bool("scan_layers"));
  EXPECT_EQ(c.get_string_list("mlp_activations"), (std::vector<std::string>{"silu", "linear"}));
  EXPECT_EQ(c.source("steps"), Source::kBase);
  EXPECT_EQ(c.keys().front(), "run_name");
  EXPECT_TRUE(c.has("ici_fsdp_parallelism"));
  EXPECT_FALSE(c.has("ici_fsdp_paralelism"));
  EXPECT_EQ(c.files().size(), 1u);
}

TEST(Load, MeshKeysHaveMaxTextDefaults) {
  Config c = must_load({});
  EXPECT_EQ(c.get_int("ici_fsdp_parallelism"), -1);
  EXPECT_EQ(c.get_int("dcn_data_parallelism"), -1);
  for (const auto& axis : known_mesh_axes()) {
    if (axis != "fsdp") {
      EXPECT_EQ(c.get_int(parallelism_key(axis, "ici")), 1) << axis;
    }
    if (axis != "data") {
      EXPECT_EQ(c.get_int(parallelism_key(axis, "dcn")), 1) << axis;
    }
  }
  EXPECT_EQ(c.get_int("local_devices"), -1);
  EXPECT_EQ(c.get_string_list("mesh_axes"), known_mesh_axes());
}

TEST(Load, Gpt20bResolvesToThePublishedShape) {
  Config c = must_load({"model_name=gpt-oss-20b"});
  const Derived& d = c.derived();
  EXPECT_EQ(d.emb_dim, 2880);
  EXPECT_EQ(d.num_query_heads, 64);
  EXPECT_EQ(d.num_kv_heads, 8);
  EXPECT_EQ(d.head_dim, 64);
  EXPECT_EQ(d.mlp_dim, 2880);
  EXPECT_EQ(d.moe_mlp_dim, 2880);
  EXPECT_EQ(d.num_decoder_layers, 24);
  EXPECT_EQ(c.get_int("num_experts"), 32);
  EXPECT_EQ(c.get_int("num_experts_per_tok"), 4);
  EXPECT_EQ(c.get_int("vocab_size"), 201088);
  EXPECT_EQ(c.get_int("sliding_window_size"), 128);
  EXPECT_TRUE(c.get_bool("attention_sink"));
  EXPECT_TRUE(c.get_bool("attention_bias"));
  EXPECT_EQ(c.get_string("rope_type"), "yarn");
  EXPECT_DOUBLE_EQ(c.get_float("rope_max_timescale"), 150000.0);
  EXPECT_DOUBLE_EQ(c.get_float("rope_factor"), 32.0);
  EXPECT_DOUBLE_EQ(c.get_float("beta_fast"), 32.0);
  EXPECT_DOUBLE_EQ(c.get_float("beta_slow"), 1.0);
  EXPECT_EQ(c.get_int("original_max_position_embeddings"), 4096);
  EXPECT_EQ(c.get_int("max_position_embeddings"), 131072);
  EXPECT_FALSE(c.get_bool("rope_interleave"));
  EXPECT_FALSE(c.get_bool("rope_truncate"));
  EXPECT_TRUE(c.get_bool("rope_attention_scaling"));
  EXPECT_TRUE(c.get_bool("routed_bias"));
  EXPECT_TRUE(c.get_bool("mlp_bias"));
  EXPECT_EQ(c.get_string_list("mlp_activations"), (std::vector<std::string>{"sigmoid", "linear"}));
  EXPECT_DOUBLE_EQ(c.get_float("mlp_activations_limit"), 7.0);
  EXPECT_DOUBLE_EQ(c.get_float("normalization_layer_epsilon"), 1e-5);
  EXPECT_FALSE(c.get_bool("logits_via_embedding"));
  EXPECT_FALSE(c.get_bool("enable_dropout"));
  EXPECT_EQ(c.get_string("decoder_block"), "gpt_oss");
  EXPECT_EQ(c.get_int("inhomogeneous_layer_cycle_interval"), 2);
  EXPECT_EQ(c.source("base_emb_dim"), Source::kModel);
  EXPECT_EQ(c.source("model_name"), Source::kOverride);
  EXPECT_EQ(c.source("steps"), Source::kBase);
  ASSERT_EQ(c.files().size(), 2u);
  EXPECT_NE(c.files()[1].find("models/gpt-oss-20b.yml"), std::string::npos);
}

TEST(Load, Gpt120bDiffersFrom20bOnlyInDepthAndExperts) {
  Config big = must_load({"model_name=gpt-oss-120b"});
  Config small = must_load({"model_name=gpt-oss-20b"});
  EXPECT_EQ(big.derived().num_decoder_layers, 36);
  EXPECT_EQ(big.get_int("num_experts"), 128);
  for (const auto& key : big.keys()) {
    if (key == "model_name" || key == "num_experts" || key == "base_num_decoder_layers") continue;
    EXPECT_EQ(big.get(key), small.get(key)) << key;
  }
}

TEST(Load, SmallModelsKeepSlidingAndFullLayersDistinct) {
  for (const char* name : {"gpt-oss-tiny", "gpt-oss-small"}) {
    Config c = must_load({std::string("model_name=") + name});
    SCOPED_TRACE(name);
    EXPECT_LT(c.get_int("sliding_window_size"), c.get_int("max_target_length"));
    EXPECT_EQ(c.get_int("num_experts"), 8);
    EXPECT_EQ(c.get_int("num_experts_per_tok"), 2);
    EXPECT_EQ(c.derived().num_decoder_layers % 2, 0);
    EXPECT_TRUE(c.get_bool("attention_sink"));
  }
  Config tiny = must_load({"model_name=gpt-oss-tiny"});
  EXPECT_EQ(tiny.derived().emb_dim, 256);
  EXPECT_EQ(tiny.derived().num_decoder_layers, 4);
  EXPECT_EQ(tiny.derived().num_query_heads, 8);
  EXPECT_EQ(tiny.derived().num_kv_heads, 2);
  EXPECT_EQ(tiny.derived().head_dim, 32);
  EXPECT_EQ(tiny.derived().moe_mlp_dim, 256);
  EXPECT_EQ(tiny.get_int("vocab_size"), 4096);
  EXPECT_EQ(tiny.get_int("max_target_length"), 256);
  Config small = must_load({"model_name=gpt-oss-small"});
  EXPECT_EQ(small.derived().emb_dim, 512);
  EXPECT_EQ(small.derived().num_decoder_layers, 8);
  EXPECT_EQ(small.get_int("max_target_length"), 512);
}

TEST(Overrides, CommandLineBeatsBaseAndTheLastOneWins) {
  Config c = must_load({"steps=10", "learning_rate=1e-3", "steps=20"});
  EXPECT_EQ(c.get_int("steps"), 20);
  EXPECT_DOUBLE_EQ(c.get_float("learning_rate"), 1e-3);
  EXPECT_EQ(c.source("steps"), Source::kOverride);
}

TEST(Overrides, TypedByTheDefault) {
  Config c = must_load({"per_device_batch_size=2", "scan_layers=False", "checkpoint_period=1_000",
                        "adamw_mask=[norm, bias]", "run_name=123", "dataset_path="});
  EXPECT_EQ(c.get("per_device_batch_size").kind(), ValueKind::kFloat);
  EXPECT_DOUBLE_EQ(c.get_float("per_device_batch_size"), 2.0);
  EXPECT_FALSE(c.get_bool("scan_layers"));
  EXPECT_EQ(c.get_int("checkpoint_period"), 1000);
  EXPECT_EQ(c.get_string_list("adamw_mask"), (std::vector<std::string>{"norm", "bias"}));
  EXPECT_EQ(c.get_string("run_name"), "123");
  EXPECT_EQ(c.get_string("dataset_path"), "");
}

TEST(Overrides, ModelKeysNeedOverrideModelConfig) {
  std::string m = load_error({"model_name=gpt-oss-20b", "base_emb_dim=2048"});
  EXPECT_NE(m.find("base_emb_dim=2048: model gpt-oss-20b sets base_emb_dim: 2880"),
            std::string::npos)
      << m;
  EXPECT_NE(m.find("add override_model_config=true"), std::string::npos) << m;

  Config c = must_load({"model_name=gpt-oss-20b", "override_model_config=true", "base_emb_dim=2048"});
  EXPECT_EQ(c.derived().emb_dim, 2048);
  EXPECT_EQ(c.source("base_emb_dim"), Source::kOverride);
  EXPECT_EQ(c.source("head_dim"), Source::kModel);
}

TEST(Overrides, RestatingTheModelsValueIsNotAConflict) {
  Config c = must_load({"model_name=gpt-oss-20b", "num_experts=32"});
  EXPECT_EQ(c.get_int("num_experts"), 32);
}

TEST(Overrides, NonModelKeysNeverNeedTheFlag) {
  Config c = must_load({"model_name=gpt-oss-20b", "max_target_length=4096", "steps=3"});
  EXPECT_EQ(c.get_int("max_target_length"), 4096);
}

TEST(ConfigFile, LayersBetweenBaseAndCommandLine) {
  TempDir dir;
  std::string path = dir.write("run.yml", "steps: 10\nlearning_rate: 1.e-3\nrun_name: \"a: b\"\n");
  Config c = must_load({"steps=30"}, path);
  EXPECT_EQ(c.get_int("steps"), 30);
  EXPECT_EQ(c.source("steps"), Source::kOverride);
  EXPECT_DOUBLE_EQ(c.get_float("learning_rate"), 1e-3);
  EXPECT_EQ(c.source("learning_rate"), Source::kConfigFile);
  EXPECT_EQ(c.get_string("run_name"), "a: b");
  EXPECT_EQ(c.files().size(), 2u);
}

TEST(ConfigFile, ChainsThroughBaseConfig) {
  TempDir dir;
  dir.write("parent.yml", "base_config: base.yml\nsteps: 5\nlearning_rate: 0.5\n");
  std::string child = dir.write("child.yml", "base_config: parent.yml\nsteps: 7\n");
  Config c = must_load({}, child);
  EXPECT_EQ(c.get_int("steps"), 7);
  EXPECT_DOUBLE_EQ(c.get_float("learning_rate"), 0.5);
  EXPECT_EQ(c.files().size(), 3u);  // base.yml, parent, child
}

TEST(ConfigFile, NamingBaseYmlIsTheSameAsNamingNothing) {
  Config c = must_load({"model_name=gpt-oss-20b"}, configs_dir() + "/base.yml");
  EXPECT_EQ(c.derived().emb_dim, 2880);
  EXPECT_EQ(c.source("steps"), Source::kBase);
}

TEST(ConfigFile, EveryKeyWrittenInTheFileIsASetting) {
  // Even a value equal to base.yml's default: the reference run's base_emb_dim: 2048 must
  // beat gpt-oss-20b's 2880. So a full copy of base.yml conflicts with a model file, and
  // says so (naming base.yml itself is fine, see above).
  TempDir dir;
  std::ifstream in(configs_dir() + "/base.yml");
  std::stringstream text;
  text << in.rdbuf();
  std::string path = dir.write("mybase.yml", text.str() + "\nderived:\n  emb_dim: 1\n");
  Config c = must_load({}, path);  // `derived:` is skipped
  EXPECT_EQ(c.source("steps"), Source::kConfigFile);
  std::string m = load_error({"model_name=gpt-oss-20b"}, path);
  EXPECT_NE(m.find("model gpt-oss-20b sets"), std::string::npos) << m;
}

TEST(ConfigFile, AnotherCopyOfBaseYmlEndsTheChainOnlyWhenItIsThisBuilds) {
  // A config directory copied with its base.yml (another checkout's, another release's): the
  // chain's base_config reaches that copy. Layered as a config file it would set every key
  // and, under override_model_config, silently replace the model file's values.
  std::ifstream in(configs_dir() + "/base.yml");
  std::stringstream text;
  text << in.rdbuf();
  const std::string run = "base_config: base.yml\nmodel_name: gpt-oss-20b\noverride_model_config: true\nsteps: 3\n";
  TempDir same;
  same.write("base.yml", text.str());
  Config c = must_load({}, same.write("run.yml", run));
  EXPECT_EQ(c.get_int("sliding_window_size"), 128);  // the model's, not base.yml's 0
  EXPECT_EQ(c.source("sliding_window_size"), Source::kModel);
  EXPECT_EQ(c.source("steps"), Source::kConfigFile);
  EXPECT_EQ(c.source("learning_rate"), Source::kBase);

  TempDir other;
  std::string changed = text.str();
  const size_t at = changed.find("\nsteps: ");
  ASSERT_NE(at, std::string::npos);
  changed.insert(at + 1, "# an older base.yml\n");
  other.write("base.yml", changed);
  std::string m = load_error({}, other.write("run.yml", run));
  EXPECT_NE(m.find("base_config reaches a base.yml that is not this build's"), std::string::npos) << m;
}

TEST(ConfigFile, ModelKeysInTheFileNeedOverrideModelConfig) {
  TempDir dir;
  std::string bad = dir.write("bad.yml", "model_name: gpt-oss-20b\nbase_emb_dim: 1024\n");
  std::string m = load_error({}, bad);
  EXPECT_NE(m.find("bad.yml:2: model gpt-oss-20b sets base_emb_dim: 2880"), std::string::npos)
      << m;
  EXPECT_NE(m.find("set override_model_config: true"), std::string::npos) << m;
  std::string good = dir.write(
      "good.yml", "model_name: gpt-oss-20b\noverride_model_config: true\nbase_emb_dim: 1024\n");
  Config c = must_load({}, good);
  EXPECT_EQ(c.derived().emb_dim, 1024);
  EXPECT_EQ(c.source("base_emb_dim"), Source::kConfigFile);
}

TEST(ConfigFile, ModelFilesBesideTheConfigAreFoundFirst) {
  TempDir dir;
  dir.write("models/mine.yml", "base_emb_dim: 64\nbase_num_query_heads: 4\nbase_num_kv_heads: 4\n");
  std::string run = dir.write("run.yml", "model_name: mine\n");
  Config c = must_load({}, run);
  EXPECT_EQ(c.derived().emb_dim, 64);
  EXPECT_EQ(c.source("base_emb_dim"), Source::kModel);
}

TEST(ReferenceRun, ConfigFileReproducesTheV6e4Run) {
  Config c = must_load({}, configs_dir() + "/gpt-oss-3.5b-v6e4.yml");
  const Derived& d = c.derived();
  EXPECT_EQ(d.emb_dim, 2048);
  EXPECT_EQ(d.num_query_heads, 32);
  EXPECT_EQ(d.num_kv_heads, 8);
  EXPECT_EQ(d.head_dim, 64);
  EXPECT_EQ(d.num_decoder_layers, 16);
  EXPECT_EQ(d.mlp_dim, 2048);
  EXPECT_EQ(d.moe_mlp_dim, 2048);
  EXPECT_EQ(c.get_int("num_experts"), 16);
  EXPECT_EQ(c.get_int("num_experts_per_tok"), 2);
  EXPECT_EQ(c.get_int("vocab_size"), 32768);
  EXPECT_EQ(c.get_int("sliding_window_size"), 128);  // inherited from gpt-oss-20b
  EXPECT_EQ(c.get_string("attention"), "flash");
  EXPECT_EQ(c.get_string("dtype"), "bfloat16");
  EXPECT_EQ(c.get_string("weight_dtype"), "float32");
  EXPECT_EQ(c.get_string("remat_policy"), "full");
  EXPECT_EQ(c.get_int("reuse_example_batch"), 1);
  EXPECT_FALSE(c.get_bool("enable_checkpointing"));
  EXPECT_DOUBLE_EQ(c.get_float("load_balance_loss_weight"), 0.0);
  EXPECT_EQ(d.steps, 200);
  EXPECT_EQ(d.learning_rate_schedule_steps, 200);
  EXPECT_EQ(d.num_devices, 4);
  EXPECT_EQ(d.local_devices, 4);
  EXPECT_EQ(d.mesh.size("fsdp"), 2);
  EXPECT_EQ(d.mesh.size("expert"), 2);
  EXPECT_EQ(d.mesh.to_string(), "fsdp=2 expert=2");
  EXPECT_EQ(d.global_batch_size, 4);
  EXPECT_EQ(d.tokens_per_step, 4096);
}

TEST(ReferenceRun, SameAsMaxTextsCommandLine) {
  // Spec §3.2's overrides, as MaxText was given them (minus TPU/GCS-only keys).
  Config line = must_load({"model_name=gpt-oss-20b", "override_model_config=true",
                           "run_name=gpt_oss_3b_fsdp2_ep2", "dataset_type=synthetic", "steps=200",
                           "enable_checkpointing=false", "reuse_example_batch=1",
                           "remat_policy=full", "attention=flash", "sa_block_q=512",
                           "dtype=bfloat16", "per_device_batch_size=1", "max_target_length=1024",
                           "base_emb_dim=2048", "base_num_query_heads=32", "base_num_kv_heads=8",
                           "head_dim=64", "base_num_decoder_layers=16", "base_mlp_dim=2048",
                           "base_moe_mlp_dim=2048", "num_experts=16", "num_experts_per_tok=2",
                           "vocab_size=32768", "megablox=true", "sparse_matmul=true",
                           "capacity_factor=-1.0", "ici_fsdp_parallelism=2",
                           "ici_expert_parallelism=2"});
  Config file = must_load({}, configs_dir() + "/gpt-oss-3.5b-v6e4.yml");
  for (const auto& key : line.keys()) EXPECT_EQ(line.get(key), file.get(key)) << key;
  EXPECT_EQ(line.derived().mesh.sizes(), file.derived().mesh.sizes());
}

TEST(Derived, GlobalParameterScaleFollowsMaxText) {
  // scale 2: heads and MLP double; 4: also the width; 8: everything once.
  Config s2 = must_load({"global_parameter_scale=2"});
  EXPECT_EQ(s2.derived().num_query_heads, 32);
  EXPECT_EQ(s2.derived().mlp_dim, 14336);
  EXPECT_EQ(s2.derived().emb_dim, 2048);
  EXPECT_EQ(s2.derived().num_decoder_layers, 16);
  Config s4 = must_load({"global_parameter_scale=4"});
  EXPECT_EQ(s4.derived().emb_dim, 4096);
  EXPECT_EQ(s4.derived().num_kv_heads, 32);
  EXPECT_EQ(s4.derived().num_decoder_layers, 16);
  Config s8 = must_load({"global_parameter_scale=8"});
  EXPECT_EQ(s8.derived().emb_dim, 4096);
  EXPECT_EQ(s8.derived().num_query_heads, 32);
  EXPECT_EQ(s8.derived().moe_mlp_dim, 14336);
  EXPECT_EQ(s8.derived().num_decoder_layers, 32);
}

TEST(Derived, LocalDevicesMinusOneCoversTheExplicitMesh) {
  Config one = must_load({});
  EXPECT_EQ(one.derived().num_devices, 1);
  EXPECT_EQ(one.derived().mesh.size("fsdp"), 1);
  Config four = must_load({"ici_fsdp_parallelism=2", "ici_expert_parallelism=2"});
  EXPECT_EQ(four.derived().local_devices, 4);
  EXPECT_EQ(four.derived().num_devices, 4);
  Config fill = must_load({"local_devices=8", "ici_tensor_parallelism=2"});
  EXPECT_EQ(fill.derived().mesh.size("fsdp"), 4);
  EXPECT_EQ(fill.derived().mesh.size("tensor"), 2);
}

TEST(Derived, RanksMultiplyLocalDevices) {
  Config two = must_load({}, "", /*num_ranks=*/2);
  EXPECT_EQ(two.derived().local_devices, 1);
  EXPECT_EQ(two.derived().num_devices, 2);
  EXPECT_EQ(two.derived().mesh.size("fsdp"), 2);
  Config four = must_load({"local_devices=2", "ici_expert_parallelism=2"}, "", 2);
  EXPECT_EQ(four.derived().num_devices, 4);
  EXPECT_EQ(four.derived().mesh.size("fsdp"), 2);
  EXPECT_EQ(four.derived().mesh.size("expert"), 2);
  std::string m = load_error({"ici_fsdp_parallelism=3"}, "", 2);
  EXPECT_NE(m.find("2 ranks × local_devices=-1 gives 2 per process"), std::string::npos) << m;
}

TEST(Derived, SlicesTakeTheDcnSizes) {
  Config c = must_load({"local_devices=4", "num_slices=2"});
  EXPECT_EQ(c.derived().mesh.size("data"), 2);  // dcn_data_parallelism=-1 fills the slices
  EXPECT_EQ(c.derived().mesh.size("fsdp"), 2);  // ici_fsdp_parallelism=-1 fills each slice
  EXPECT_EQ(c.derived().num_devices, 4);
}

TEST(Derived, BatchSizes) {
  Config c = must_load({"local_devices=4", "per_device_batch_size=0.5",
                        "gradient_accumulation_steps=3", "max_target_length=100"});
  EXPECT_EQ(c.derived().micro_batch_size, 2);
  EXPECT_EQ(c.derived().global_batch_size, 6);
  EXPECT_EQ(c.derived().tokens_per_step, 600);
}

TEST(Derived, StepsAndScheduleFollowEachOther) {
  Config a = must_load({"steps=-1", "learning_rate_schedule_steps=100"});
  EXPECT_EQ(a.derived().steps, 100);
  Config b = must_load({"steps=50"});
  EXPECT_EQ(b.derived().learning_rate_schedule_steps, 50);
  Config c = must_load({"steps=50", "learning_rate_schedule_steps=80"});
  EXPECT_EQ(c.derived().steps, 50);
  EXPECT_EQ(c.derived().learning_rate_schedule_steps, 80);
}

TEST(Derived, MuDtypeInheritsWeightDtype) {
  EXPECT_EQ(must_load({"weight_dtype=bfloat16"}).derived().mu_dtype, "bfloat16");
  EXPECT_EQ(must_load({"mu_dtype=float32", "weight_dtype=bfloat16"}).derived().mu_dtype, "float32");
}

TEST(Derived, LogicalAxisRulesAreNormalised) {
  Config c = must_load({});
  const auto& rules = c.derived().logical_axis_rules;
  ASSERT_FALSE(rules.empty());
  EXPECT_EQ(rules[0].logical_axis, "activation_batch");
  EXPECT_EQ(rules[0].mesh_axes, (std::vector<std::string>{"data", "fsdp", "fsdp_transpose", "expert"}));
  bool saw_kv = false;
  for (const auto& r : rules) {
    if (r.logical_axis == "kv") {
      saw_kv = true;
      EXPECT_TRUE(r.mesh_axes.empty());
    }
  }
  EXPECT_TRUE(saw_kv);
  // A single axis may be written without brackets, as MaxText does.
  Config custom = must_load({"logical_axis_rules=[[layers, stage], [embed, [fsdp, expert]]]"});
  ASSERT_EQ(custom.derived().logical_axis_rules.size(), 2u);
  EXPECT_EQ(custom.derived().logical_axis_rules[0].mesh_axes, (std::vector<std::string>{"stage"}));
}

TEST(ToYaml, ReadsBackToTheSameConfig) {
  Config c = must_load({"model_name=gpt-oss-20b", "override_model_config=true", "base_emb_dim=1024",
                        "steps=7", "run_name=x y", "adamw_mask=[norm]", "local_devices=2"});
  std::string text = c.to_yaml();
  EXPECT_NE(text.find("base_emb_dim: 1024  # override\n"), std::string::npos);
  EXPECT_NE(text.find("head_dim: 64  # model\n"), std::string::npos);
  EXPECT_NE(text.find("  - [activation_batch, [data, fsdp, fsdp_transpose, expert]]\n"),
            std::string::npos);
  EXPECT_NE(text.find("derived:\n"), std::string::npos);
  EXPECT_NE(text.find("  mesh: {data: 1, stage: 1, fsdp: 2,"), std::string::npos) << text;
  TempDir dir;
  Config again = must_load({}, dir.write("out.yml", text));
  for (const auto& key : c.keys()) EXPECT_EQ(c.get(key), again.get(key)) << key;
  EXPECT_EQ(c.to_yaml(false).find("derived:"), std::string::npos);
}

TEST(Getters, MisuseIsABugThatAborts) {
  Config c = must_load({});
  EXPECT_DEATH(c.get_int("learning_rate"), "learning_rate is not an integer");
  EXPECT_DEATH(c.get("ici_fsdp_paralelism"), "did you mean ici_fsdp_parallelism");
}

}  // namespace
}  // namespace kiln::config
