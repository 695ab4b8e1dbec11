// Loading plugins: the pinned CPU plugin loads once per path; a library that is not a plugin,
// a missing file, and plugins too old, of another major version or short of a function are
// one-line errors. Every load happens in a child process (child_process.h).
#include "kiln/backend/pjrt/pjrt_plugin.h"

#include <gtest/gtest.h>
#include <stdlib.h>

#include <string>

#include "kiln/backend/pjrt/plugin_path.h"
#include "tests/backend/pjrt/child_process.h"

#ifndef KILN_FAKE_PJRT_PLUGIN
#error "KILN_FAKE_PJRT_PLUGIN (the path of fake_pjrt_plugin.so) comes from tests/backend/pjrt/CMakeLists.txt"
#endif

namespace kiln::backend::pjrt {
namespace {

using testing::child_succeeded;
using testing::ChildResult;
using testing::run_in_child;
using testing::run_in_child_returning;

// In a child: Plugin::load(path)'s error message ("" when it loads).
ChildResult load_error(const std::string& path) {
  return run_in_child_returning([&] {
    Result<const Plugin*> plugin = Plugin::load(path);
    return plugin.ok() ? std::string() : plugin.status().message();
  });
}

void expect_one_line_containing(const std::string& message, const std::string& part) {
  EXPECT_EQ(message.find('\n'), std::string::npos) << message;
  EXPECT_NE(message.find(part), std::string::npos) << "'" << part << "' not in: " << message;
}

TEST(PjrtPlugin, CpuPluginLoadsOncePerPath) {
  ChildResult r = run_in_child([](int) {
    Result<std::string> path = resolve_plugin("cpu");
    ASSERT_TRUE(path.ok()) << path.status().to_string();
    Result<const Plugin*> first = Plugin::load(*path);
    ASSERT_TRUE(first.ok()) << first.status().to_string();
    EXPECT_EQ((*first)->api().pjrt_api_version.major_version, PJRT_API_MAJOR);
    EXPECT_GE((*first)->api().pjrt_api_version.minor_version, kMinimumPjrtMinor);
    EXPECT_EQ((*first)->version(), "0.81");  // xla-cpu-pjrt 0.0.1, pinned
    EXPECT_EQ((*first)->path(), *path);
    EXPECT_TRUE((*first)->has(offsetof(PJRT_Api, PJRT_Executable_GetCompiledMemoryStats)));
    Result<const Plugin*> second = Plugin::load(*path);
    ASSERT_TRUE(second.ok());
    EXPECT_EQ(*first, *second);
  });
  EXPECT_TRUE(child_succeeded(r));
}

TEST(PjrtPlugin, LibraryWithoutGetPjrtApiIsOneLineError) {
  ChildResult r = load_error("libm.so.6");
  ASSERT_TRUE(child_succeeded(r));
  expect_one_line_containing(r.output, "libm.so.6 is not a PJRT plugin (no GetPjrtApi symbol)");
}

TEST(PjrtPlugin, MissingFileIsOneLineError) {
  ChildResult r = load_error("/nonexistent/kiln/plugin.so");
  ASSERT_TRUE(child_succeeded(r));
  expect_one_line_containing(r.output, "pjrt: cannot load plugin /nonexistent/kiln/plugin.so");
}

TEST(PjrtPlugin, TooOldPluginNamesItsVersionAndTheMinimum) {
  ChildResult r = run_in_child_returning([] {
    setenv("FAKE_PJRT_MINOR", "40", 1);
    Result<const Plugin*> plugin = Plugin::load(KILN_FAKE_PJRT_PLUGIN);
    return plugin.ok() ? std::string() : plugin.status().message();
  });
  ASSERT_TRUE(child_succeeded(r));
  expect_one_line_containing(r.output, std::string(KILN_FAKE_PJRT_PLUGIN) + " has PJRT C API 0.40; Kiln needs 0.81 or newer");
}

TEST(PjrtPlugin, OtherMajorVersionIsRefused) {
  ChildResult r = run_in_child_returning([] {
    setenv("FAKE_PJRT_MAJOR", "1", 1);
    setenv("FAKE_PJRT_MINOR", "0", 1);
    Result<const Plugin*> plugin = Plugin::load(KILN_FAKE_PJRT_PLUGIN);
    return plugin.ok() ? std::string() : plugin.status().message();
  });
  ASSERT_TRUE(child_succeeded(r));
  expect_one_line_containing(r.output, "has PJRT C API 1.0; Kiln needs 0.81 or newer (same major version)");
}

TEST(PjrtPlugin, ApiTooShortForAFunctionKilnCallsIsRefused) {
  ChildResult r = run_in_child_returning([] {
    // The version is new enough, but PJRT_Api ends before PJRT_Client_Create.
    setenv("FAKE_PJRT_STRUCT_SIZE", std::to_string(offsetof(PJRT_Api, PJRT_Client_Create)).c_str(), 1);
    Result<const Plugin*> plugin = Plugin::load(KILN_FAKE_PJRT_PLUGIN);
    return plugin.ok() ? std::string() : plugin.status().message();
  });
  ASSERT_TRUE(child_succeeded(r));
  expect_one_line_containing(r.output, "(PJRT C API 0.81) lacks PJRT_Client_Create, which Kiln calls");
}

TEST(PjrtPlugin, PluginOfTheMinimumVersionWithEveryFunctionLoads) {
  // The fake's stubs answer PJRT_Plugin_Initialize with no error.
  ChildResult r = load_error(KILN_FAKE_PJRT_PLUGIN);
  ASSERT_TRUE(child_succeeded(r));
  EXPECT_EQ(r.output, "");
}

TEST(PjrtPlugin, NullErrorIsOk) {
  // pjrt_status never touches the API for a null error, so a default PJRT_Api will do.
  PJRT_Api api{};
  EXPECT_TRUE(pjrt_status(api, nullptr, "PJRT_Client_Compile").ok());
}

}  // namespace
}  // namespace kiln::backend::pjrt
