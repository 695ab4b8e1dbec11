// report.html from run directories written here: what the page holds (charts, the numbers as
// text, tables, the data blob), what it says when files are torn, empty or missing, that no
// value can break out of its element, overlays of runs, and the atomic write.
#include <gtest/gtest.h>

#include <atomic>
#include <filesystem>
#include <fstream>
#include <iterator>
#include <string>
#include <thread>

#include <nlohmann/json.hpp>

#include "kiln/report/report.h"
#include "kiln/report/run_data.h"
#include "tests/report/run_fixture.h"

namespace kiln::report {
namespace {

using testing::fake_chartjs;
using testing::fresh_dir;
using testing::RunFixture;
using testing::write_run;

std::string read(const std::string& path) {
  std::ifstream in(path, std::ios::binary);
  return std::string(std::istreambuf_iterator<char>(in), {});
}

bool has(const std::string& page, const std::string& text) { return page.find(text) != std::string::npos; }

size_t count(const std::string& page, const std::string& text) {
  size_t n = 0;
  for (size_t at = page.find(text); at != std::string::npos; at = page.find(text, at + 1)) ++n;
  return n;
}

// The JSON blob the charts draw from.
nlohmann::json blob(const std::string& page) {
  const std::string open = "<script type=\"application/json\" id=\"kiln-data\">";
  size_t begin = page.find(open);
  EXPECT_NE(begin, std::string::npos);
  begin += open.size();
  const size_t end = page.find("</script>", begin);
  return nlohmann::json::parse(page.substr(begin, end - begin));
}

ReportOptions options_for(const std::string& dir) {
  ReportOptions o;
  o.chartjs_path = fake_chartjs(dir);
  return o;
}

// The text of the summary cell `key` of `run`.
std::string summary_cell(const std::string& page, const std::string& key, const std::string& run) {
  const std::string open = "<td data-key=\"" + key + "\" data-run=\"" + run + "\">";
  const size_t at = page.find(open);
  if (at == std::string::npos) return "";
  return page.substr(at + open.size(), page.find("</td>", at) - at - open.size());
}

TEST(Report, PageHoldsEveryChartTheNumbersAsTextAndTheData) {
  const std::string root = fresh_dir("full");
  const std::string dir = write_run(root + "/run_a");
  Result<std::string> page = render_report({dir}, options_for(root));
  ASSERT_TRUE(page.ok()) << page.status().to_string();
  for (const char* id : {"chart-loss", "chart-lr", "chart-norms", "chart-step-time", "chart-tokens", "chart-mfu",
                         "chart-attribution", "heatmap-imbalance-0", "heatmap-dropped-0"}) {
    EXPECT_TRUE(has(*page, std::string("id=\"") + id + "\"")) << id;
  }
  // Numbers a person copies are text.
  EXPECT_EQ(summary_cell(*page, "final_loss", "run_a"),
            fmt::format("{:.4f} <span class=\"muted\">(step 11)</span>", testing::loss_at(11)));
  EXPECT_EQ(summary_cell(*page, "final_eval_loss", "run_a"), "3.4326 <span class=\"muted\">(step 12)</span>");
  EXPECT_EQ(summary_cell(*page, "steps", "run_a"), "12 (steps 0–11)");
  // Medians leave out the warm-up steps 0 and 5 (the two starts): tokens 1101..1111 without 1105.
  EXPECT_EQ(summary_cell(*page, "median_tokens_per_s", "run_a"), "1106.5");
  EXPECT_EQ(summary_cell(*page, "status", "run_a"), "finished at step 12");
  EXPECT_EQ(summary_cell(*page, "checkpoints", "run_a"), "5, 10");
  EXPECT_EQ(summary_cell(*page, "wall_time", "run_a"), "12.6 s");
  EXPECT_TRUE(has(summary_cell(*page, "devices", "run_a"), "fsdp 2 × expert 2"));
  EXPECT_TRUE(has(summary_cell(*page, "attempts", "run_a"), "2 (restored at step 5)"));
  // Census, config, events and attribution tables.
  EXPECT_TRUE(has(*page, "5219 → 1929"));
  EXPECT_TRUE(has(*page, "collectives: all_gather</th><td>24 (3.0 MiB in all)</td>"));
  EXPECT_TRUE(has(*page, "170.1 MiB"));
  EXPECT_TRUE(has(*page, "<th>model_name</th><td class=\"source\">override</td><td class=\"text\">gpt-oss-tiny</td>"));
  EXPECT_TRUE(has(*page, "1 more key set by the model's file"));
  EXPECT_TRUE(has(*page, ">checkpoint_save</td>"));
  EXPECT_TRUE(has(*page, ">checkpoint_restore</td>"));
  EXPECT_TRUE(has(*page, "waited 250 ms for data"));
  EXPECT_TRUE(has(*page, "2 checkpoint saves, 1 restores, 1 data stalls, 3 evals."));
  EXPECT_TRUE(has(*page, "<td class=\"text\">51.5 GFLOP/s = 45% of peak</td>"));
  EXPECT_TRUE(has(*page, "/* fake Chart.js */"));
  EXPECT_FALSE(has(*page, "http-equiv=\"refresh\""));
  EXPECT_FALSE(has(*page, "id=\"notes\""));  // nothing missing or skipped

  nlohmann::json data = blob(*page);
  ASSERT_EQ(data["runs"].size(), 1u);
  const nlohmann::json& run = data["runs"][0];
  EXPECT_EQ(run["name"], "run_a");
  EXPECT_EQ(run["x"].size(), 12u);
  EXPECT_EQ(run["s"]["loss"].size(), 12u);
  EXPECT_NEAR(run["s"]["loss"][11].get<double>(), testing::loss_at(11), 1e-5);
  EXPECT_FALSE(run["s"].contains("collective_wait_s"));  // absent on one device: no curve
  EXPECT_EQ(run["eval"]["x"], nlohmann::json({4, 8, 12}));
  EXPECT_EQ(run["el"]["layers"], 4);
  EXPECT_EQ(run["el"]["x"], nlohmann::json({0, 4, 8}));
  EXPECT_EQ(run["el"]["dropped"][0][3], 2);
  EXPECT_EQ(run["attr"]["rows"].size(), 3u);  // the total row is the sum, not a bar
}

TEST(Report, TornLastLineAndCorruptLinesAreSkippedAndSaid) {
  const std::string root = fresh_dir("torn");
  RunFixture f;
  f.torn_tail = "{\"step\": 12, \"loss\": 3.1";
  const std::string dir = write_run(root + "/run", f);
  // A corrupt line in the middle too.
  std::string text = read(dir + "/metrics.jsonl");
  text.insert(text.find("{\"step\": 3,"), "garbage\n");
  std::ofstream(dir + "/metrics.jsonl", std::ios::binary) << text;

  Result<std::string> page = render_report({dir}, options_for(root));
  ASSERT_TRUE(page.ok()) << page.status().to_string();
  EXPECT_TRUE(has(*page, "metrics.jsonl: the last line is torn (a write in progress or a killed run); skipped"));
  EXPECT_TRUE(has(*page, "metrics.jsonl: 1 line is not a JSON record; skipped (line 4)"));
  EXPECT_EQ(blob(*page)["runs"][0]["x"].size(), 12u);
  EXPECT_EQ(summary_cell(*page, "steps", "run"), "12 (steps 0–11)");
}

TEST(Report, RunWithNoStepsYetSaysSo) {
  const std::string root = fresh_dir("empty");
  const std::string dir = root + "/starting";
  std::filesystem::create_directories(dir);
  std::ofstream(dir + "/events.jsonl") << testing::event_line(testing::start_event(1796162656.0, 0)) << "\n";
  std::ofstream(dir + "/metrics.jsonl");  // empty
  Result<std::string> page = render_report({dir}, options_for(root));
  ASSERT_TRUE(page.ok()) << page.status().to_string();
  EXPECT_TRUE(has(*page, "metrics.jsonl holds no steps yet"));
  EXPECT_TRUE(has(*page, "no finish event after the last start: the run is in progress, or it was stopped"));
  EXPECT_EQ(summary_cell(*page, "status", "starting"), "no steps yet");
  EXPECT_TRUE(has(*page, "no compile event in events.jsonl"));
  EXPECT_TRUE(has(*page, "no expert_load records yet"));
  EXPECT_TRUE(has(*page, "<th>model_name</th>"));  // the start event's config is there already
  nlohmann::json data = blob(*page);
  EXPECT_EQ(data["runs"][0]["x"].size(), 0u);
  EXPECT_TRUE(data["runs"][0]["el"].is_null());

  // An old run: metrics only.
  const std::string old = root + "/old";
  write_run(old, RunFixture{.steps = 3, .events = false});
  page = render_report({old}, options_for(root));
  ASSERT_TRUE(page.ok()) << page.status().to_string();
  EXPECT_TRUE(has(*page, "no events.jsonl (a run from before events were recorded"));
  EXPECT_EQ(summary_cell(*page, "status", "old"), "no events.jsonl (status unknown)");
  EXPECT_EQ(blob(*page)["runs"][0]["x"].size(), 3u);
}

TEST(Report, NoValueCanCloseItsElement) {
  const std::string root = fresh_dir("escape");
  const std::string evil = "</script><script>alert(1)</script><!--";
  const std::string dir = root + "/x<script>y";  // a directory name may hold '<'
  write_run(dir, RunFixture{.gemm_rate = evil});
  std::ofstream(dir + "/events.jsonl", std::ios::app)
      << nlohmann::json({{"time", 1796162700.0}, {"event", "start"}, {"step", 12}, {"config_diff", {{"run_name", evil}}}})
             .dump()
      << "\n";
  Result<std::string> page = render_report({dir}, options_for(root));
  ASSERT_TRUE(page.ok()) << page.status().to_string();
  // Exactly the page's own three script elements: the blob, Chart.js and the page's script.
  EXPECT_EQ(count(*page, "<script"), 3u);
  EXPECT_EQ(count(*page, "</script>"), 3u);
  EXPECT_EQ(count(*page, "<!--"), 0u);
  EXPECT_TRUE(has(*page, "&lt;/script&gt;&lt;script&gt;alert(1)&lt;/script&gt;&lt;!--"));  // the tables, escaped
  nlohmann::json data = blob(*page);  // and the blob gives the values back unchanged
  EXPECT_EQ(data["runs"][0]["name"], "x<script>y");
  EXPECT_EQ(data["runs"][0]["attr"]["rows"][0]["rate"], evil);
}

TEST(Report, OverlaysRunsWithOneColourAndNameEach) {
  const std::string root = fresh_dir("overlay");
  const std::string a = write_run(root + "/f32/run"), b = write_run(root + "/bf16/run", RunFixture{.steps = 7, .finished = false});
  Result<std::string> page = render_report({a, b}, options_for(root));
  ASSERT_TRUE(page.ok()) << page.status().to_string();
  nlohmann::json data = blob(*page);
  ASSERT_EQ(data["runs"].size(), 2u);
  EXPECT_EQ(data["runs"][0]["name"], "f32/run");  // equal directory names get their parent's
  EXPECT_EQ(data["runs"][1]["name"], "bf16/run");
  EXPECT_NE(data["runs"][0]["color"], data["runs"][1]["color"]);
  EXPECT_EQ(data["runs"][0]["x"].size(), 12u);
  EXPECT_EQ(data["runs"][1]["x"].size(), 7u);
  EXPECT_TRUE(has(*page, "<title>Kiln report: f32/run vs bf16/run</title>"));
  EXPECT_EQ(summary_cell(*page, "status", "bf16/run"), "running, or stopped before its finish event");
  EXPECT_TRUE(has(*page, "id=\"heatmap-imbalance-1\""));
  // Different directory names are kept as they are.
  const std::string c = write_run(root + "/other");
  page = render_report({a, c}, options_for(root));
  ASSERT_TRUE(page.ok());
  EXPECT_EQ(blob(*page)["runs"][0]["name"], "run");
  EXPECT_EQ(blob(*page)["runs"][1]["name"], "other");
}

TEST(Report, RestartedRunKeepsTheLaterRecordsOfRepeatedSteps) {
  const std::string root = fresh_dir("restart");
  const std::string dir = root + "/run";
  std::filesystem::create_directories(dir);
  {
    std::ofstream m(dir + "/metrics.jsonl");
    for (int s = 0; s < 8; ++s) m << testing::metrics_line(s) << "\n";
    for (int s = 5; s < 12; ++s) m << testing::metrics_line(s) << "\n";
  }
  Result<RunData> run = read_run(dir);
  ASSERT_TRUE(run.ok());
  EXPECT_EQ(run->metrics.size(), 12u);
  EXPECT_EQ(run->metrics_file.replaced, 3);
  EXPECT_EQ(run->expert_load.step, std::vector<int64_t>({0, 4, 8}));
  EXPECT_TRUE(has(run->notes[0], "3 records were written again by a later attempt"));
}

// dataset_type=hf runs log the tokens each source gave; the page tabulates the last record's.
TEST(Report, DataSourcesShowTheTokensEachSourceGave) {
  const std::string root = fresh_dir("data_tokens");
  const std::string dir = root + "/mix";
  std::filesystem::create_directories(dir);
  {
    std::ofstream m(dir + "/metrics.jsonl");
    for (int s = 0; s < 4; ++s) {
      std::string line = testing::metrics_line(s);
      line.insert(line.size() - 1, ", \"data_tokens\": {\"web\": " + std::to_string(700 * (s + 1)) +
                                       ", \"code\": " + std::to_string(300 * (s + 1)) + "}");
      m << line << "\n";
    }
  }
  Result<RunData> run = read_run(dir);
  ASSERT_TRUE(run.ok());
  ASSERT_EQ(run->data_tokens.size(), 2u);
  EXPECT_EQ(run->data_tokens_step, 3);
  Result<std::string> page = render_report({dir}, options_for(root));
  ASSERT_TRUE(page.ok()) << page.status().to_string();
  EXPECT_TRUE(has(*page, "<h2>Data sources</h2>"));
  EXPECT_TRUE(has(*page, "<td>web</td><td>2800</td><td>70.00%</td>")) << *page;
  EXPECT_TRUE(has(*page, "<td>code</td><td>1200</td><td>30.00%</td>"));
  // Runs without data_tokens have no such section.
  Result<std::string> plain = render_report({write_run(root + "/plain", RunFixture{})}, options_for(root));
  ASSERT_TRUE(plain.ok());
  EXPECT_FALSE(has(*plain, "Data sources"));
}

TEST(Report, LongRunsAreDrawnFromBucketsOfSteps) {
  const std::string root = fresh_dir("long");
  const std::string dir = root + "/run";
  std::filesystem::create_directories(dir);
  {
    std::ofstream m(dir + "/metrics.jsonl");
    for (int s = 0; s < 12000; ++s) m << testing::metrics_line(s, /*layers=*/4, /*log_period=*/10) << "\n";
  }
  ReportOptions o = options_for(root);
  o.max_points = 5000;
  Result<std::string> page = render_report({dir}, o);
  ASSERT_TRUE(page.ok());
  nlohmann::json data = blob(*page);
  EXPECT_EQ(data["runs"][0]["bucket"], 3);
  EXPECT_EQ(data["runs"][0]["x"].size(), 4000u);
  EXPECT_EQ(data["runs"][0]["x"][0], 2);  // a bucket is drawn at its last step
  EXPECT_EQ(data["runs"][0]["el"]["x"].size(), 600u);  // 1200 logged steps, two per column
  EXPECT_TRUE(has(*page, "12000 steps: the curves show 4000 points, each the mean of 3 consecutive steps"));
  EXPECT_EQ(summary_cell(*page, "steps", "run"), "12000 (steps 0–11999)");
  EXPECT_LT(page->size(), 1500000u);  // compact: six significant digits per value
}

TEST(Report, WithoutChartJsThePageHasItsTablesAndSaysWhatIsMissing) {
  const std::string root = fresh_dir("nochart");
  const std::string dir = write_run(root + "/run");
  ReportOptions o;
  o.chartjs_path = root + "/no/such/chart.min.js";
  Result<std::string> page = render_report({dir}, o);
  ASSERT_TRUE(page.ok());
  EXPECT_TRUE(has(*page, "id=\"no-chartjs\""));
  EXPECT_TRUE(has(*page, "libjs-chart.js"));
  EXPECT_EQ(count(*page, "<script"), 2u);  // the blob and the page's script (which still draws the heat maps)
  EXPECT_TRUE(has(*page, "id=\"summary\""));
  EXPECT_TRUE(has(*page, "id=\"census\""));
}

TEST(Report, FollowModePagesReloadThemselves) {
  const std::string root = fresh_dir("live");
  const std::string dir = write_run(root + "/run", RunFixture{.finished = false});
  ReportOptions o = options_for(root);
  o.refresh_seconds = 2;
  Result<std::string> page = render_report({dir}, o);
  ASSERT_TRUE(page.ok());
  EXPECT_TRUE(has(*page, "<meta http-equiv=\"refresh\" content=\"2\">"));
  EXPECT_TRUE(has(*page, "id=\"live\""));
  EXPECT_EQ(blob(*page)["live"], true);
  EXPECT_FALSE(run_finished(dir));
  std::ofstream(dir + "/events.jsonl", std::ios::app) << "{\"time\": 1, \"event\": \"finish\", \"step\": 12}\n";
  EXPECT_TRUE(run_finished(dir));
  std::ofstream(dir + "/events.jsonl", std::ios::app) << "{\"time\": 2, \"event\": \"start\", \"step\": 12}\n";
  EXPECT_FALSE(run_finished(dir));  // restarted: running again
}

TEST(Report, DirectoriesThatAreNotRunsAreErrors) {
  const std::string root = fresh_dir("bad");
  write_run(root + "/out/r1");
  write_run(root + "/out/r2");
  Result<std::string> missing = render_report({root + "/nope"});
  EXPECT_EQ(missing.status().code(), StatusCode::kNotFound);
  EXPECT_EQ(missing.status().message(), root + "/nope: no such directory");
  Result<std::string> parent = render_report({root + "/out"});
  EXPECT_EQ(parent.status().code(), StatusCode::kInvalidArgument);
  EXPECT_TRUE(has(parent.status().message(), "not a run directory (no metrics.jsonl or events.jsonl); the runs below "
                                              "it: " + root + "/out/r1 " + root + "/out/r2"))
      << parent.status().message();
  EXPECT_EQ(render_report({}).status().code(), StatusCode::kInvalidArgument);
}

TEST(Report, WriteReportReplacesThePageAtomically) {
  const std::string root = fresh_dir("atomic");
  const std::string dir = write_run(root + "/run");
  const ReportOptions o = options_for(root);
  ASSERT_TRUE(write_report(dir, o).ok());
  const std::string first = read(dir + "/report.html");
  ASSERT_TRUE(has(first, "</html>"));
  // A reader polling the page while it is rewritten sees a whole page every time.
  std::atomic<bool> done{false};
  std::atomic<int> reads{0}, partial{0};
  std::thread reader([&] {
    while (!done) {
      const std::string page = read(dir + "/report.html");
      ++reads;
      if (page.size() < 1000 || page.substr(page.size() - 8) != "</html>\n") ++partial;
    }
  });
  for (int i = 0; i < 30; ++i) {
    std::ofstream(dir + "/metrics.jsonl", std::ios::app) << testing::metrics_line(12 + i) << "\n";
    ASSERT_TRUE(write_report(dir, o).ok());
  }
  done = true;
  reader.join();
  EXPECT_GT(reads.load(), 0);
  EXPECT_EQ(partial.load(), 0);
  EXPECT_EQ(blob(read(dir + "/report.html"))["runs"][0]["x"].size(), 42u);
  for (const auto& entry : std::filesystem::directory_iterator(dir)) {
    EXPECT_EQ(entry.path().filename().string().find(".tmp"), std::string::npos) << entry.path();
  }
  // A failed write leaves the old page and no temporary file.
  EXPECT_EQ(write_file_atomically(root + "/no/such/dir/report.html", "x").code(), StatusCode::kNotFound);
  std::filesystem::create_directories(root + "/occupied/report.html/child");  // a directory where the page goes
  Status s = write_file_atomically(root + "/occupied/report.html", "x");
  EXPECT_EQ(s.code(), StatusCode::kIo);
  EXPECT_TRUE(has(s.message(), "cannot replace")) << s.message();
  for (const auto& entry : std::filesystem::directory_iterator(root + "/occupied")) {
    EXPECT_EQ(entry.path().filename().string(), "report.html");
  }
}

}  // namespace
}  // namespace kiln::report
