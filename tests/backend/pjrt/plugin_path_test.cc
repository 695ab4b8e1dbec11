// resolve_plugin: short names looked up in a venv (a fake one made here, and the project's),
// paths taken as given, and one-line errors naming the install command. Nothing is loaded.
#include "kiln/backend/pjrt/plugin_path.h"

#include <gtest/gtest.h>
#include <stdlib.h>

#include <filesystem>
#include <fstream>
#include <optional>
#include <string>

namespace kiln::backend::pjrt {
namespace {

namespace fs = std::filesystem;

// Sets KILN_VENV for one test and restores it after.
class ScopedVenv {
 public:
  explicit ScopedVenv(const std::string& venv) {
    if (const char* old = getenv("KILN_VENV")) old_ = old;
    setenv("KILN_VENV", venv.c_str(), 1);
  }
  ~ScopedVenv() {
    if (old_) setenv("KILN_VENV", old_->c_str(), 1);
    else unsetenv("KILN_VENV");
  }

 private:
  std::optional<std::string> old_;
};

// An empty venv-like folder under the test's temporary directory.
fs::path fresh_venv(const std::string& name) {
  fs::path venv = fs::temp_directory_path() / ("kiln_plugin_path_test_" + name + "_" + std::to_string(getpid()));
  fs::remove_all(venv);
  fs::create_directories(venv / "lib/python3.11/site-packages");
  return venv;
}

void touch(const fs::path& path) {
  fs::create_directories(path.parent_path());
  std::ofstream(path) << "";
}

TEST(ResolvePlugin, MissingCpuPluginNamesTheVenvAndTheInstallCommand) {
  const fs::path venv = fresh_venv("missing");
  ScopedVenv scoped(venv.string());
  Result<std::string> path = resolve_plugin("cpu");
  ASSERT_FALSE(path.ok());
  const std::string& message = path.status().message();
  EXPECT_EQ(message.find('\n'), std::string::npos) << message;
  EXPECT_NE(message.find("pjrt_plugin=cpu: no XLA CPU plugin"), std::string::npos) << message;
  EXPECT_NE(message.find(venv.string()), std::string::npos) << message;
  EXPECT_NE(message.find("bash scripts/setup_venv.sh python/requirements-pjrt.txt"), std::string::npos) << message;
  fs::remove_all(venv);
}

TEST(ResolvePlugin, MissingTpuAndCudaPluginsNameTheirInstallCommands) {
  const fs::path venv = fresh_venv("missing_accel");
  ScopedVenv scoped(venv.string());
  Result<std::string> tpu = resolve_plugin("tpu");
  ASSERT_FALSE(tpu.ok());
  EXPECT_NE(tpu.status().message().find("python/requirements-tpu.txt"), std::string::npos) << tpu.status().message();
  Result<std::string> cuda = resolve_plugin("cuda");
  ASSERT_FALSE(cuda.ok());
  EXPECT_NE(cuda.status().message().find("jax-cuda13-pjrt"), std::string::npos) << cuda.status().message();
  fs::remove_all(venv);
}

TEST(ResolvePlugin, FindsEachWheelsSharedObjectInTheVenv) {
  const fs::path venv = fresh_venv("found");
  const fs::path site = venv / "lib/python3.11/site-packages";
  touch(site / "xla_plugins/xla_cpu_pjrt/xla_cpu_pjrt.so");
  touch(site / "jax_plugins/xla_cuda13/xla_cuda_plugin.so");
  touch(site / "libtpu/libtpu.so");
  ScopedVenv scoped(venv.string());
  EXPECT_EQ(resolve_plugin("cpu").value(), (site / "xla_plugins/xla_cpu_pjrt/xla_cpu_pjrt.so").string());
  EXPECT_EQ(resolve_plugin("cuda").value(), (site / "jax_plugins/xla_cuda13/xla_cuda_plugin.so").string());
  EXPECT_EQ(resolve_plugin("tpu").value(), (site / "libtpu/libtpu.so").string());
  fs::remove_all(venv);
}

TEST(ResolvePlugin, TheProjectVenvHasTheCpuPlugin) {
  // make's setup installs python/requirements-pjrt.txt; KILN_VENV unset means the checkout's .venv.
  Result<std::string> path = resolve_plugin("cpu");
  ASSERT_TRUE(path.ok()) << path.status().to_string();
  EXPECT_TRUE(fs::exists(*path)) << *path;
  EXPECT_TRUE(path->ends_with("xla_plugins/xla_cpu_pjrt/xla_cpu_pjrt.so")) << *path;
}

TEST(ResolvePlugin, PathsAreTakenAsGiven) {
  const fs::path venv = fresh_venv("paths");
  const fs::path so = venv / "my_plugin.so";
  touch(so);
  EXPECT_EQ(resolve_plugin(so.string()).value(), so.string());
  // A bare library name is left to dlopen's search.
  EXPECT_EQ(resolve_plugin("libsomething.so").value(), "libsomething.so");
  Result<std::string> missing = resolve_plugin((venv / "nope/plugin.so").string());
  ASSERT_FALSE(missing.ok());
  EXPECT_NE(missing.status().message().find("no such file"), std::string::npos) << missing.status().message();
  fs::remove_all(venv);
}

TEST(ResolvePlugin, UnknownNameListsTheKnownOnes) {
  Result<std::string> path = resolve_plugin("rocm");
  ASSERT_FALSE(path.ok());
  EXPECT_EQ(path.status().code(), StatusCode::kInvalidArgument);
  EXPECT_NE(path.status().message().find("cpu, cuda, tpu"), std::string::npos) << path.status().message();
}

}  // namespace
}  // namespace kiln::backend::pjrt
