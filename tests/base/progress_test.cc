// Progress: plain lines when not a terminal, in-place redraws on one, exact counts from threads.
#include "kiln/base/progress.h"

#include <gtest/gtest.h>

#include <cstdio>
#include <string>
#include <thread>
#include <vector>

namespace kiln {
namespace {

// Everything a Progress wrote into a temporary stream.
std::string read_all(std::FILE* f) {
  std::fflush(f);
  std::rewind(f);
  std::string text;
  char buf[4096];
  size_t n;
  while ((n = std::fread(buf, 1, sizeof buf, f)) > 0) text.append(buf, n);
  return text;
}

int count(const std::string& text, const std::string& needle) {
  int n = 0;
  for (size_t at = text.find(needle); at != std::string::npos; at = text.find(needle, at + 1)) ++n;
  return n;
}

TEST(Progress, ShortPlainPhasePrintsOnlyTheDoneLine) {
  std::FILE* f = std::tmpfile();
  {
    Progress p("convert", 3, {.mode = Progress::Mode::kPlain, .stream = f});
    p.advance(3);
  }
  const std::string text = read_all(f);
  EXPECT_EQ(text.rfind("convert: done 3 in ", 0), 0u) << text;
  EXPECT_EQ(count(text, "\n"), 1) << text;
  EXPECT_EQ(text.find('\r'), std::string::npos) << "plain output must not redraw";
  std::fclose(f);
}

TEST(Progress, PlainLinesShowAmountAndPercent) {
  std::FILE* f = std::tmpfile();
  Progress p("restore checkpoint", 4 << 20,
             {.unit = Progress::Unit::kBytes, .mode = Progress::Mode::kPlain, .stream = f,
              .plain_interval_s = 0.0});
  p.advance(1 << 20);
  p.finish("2 files");
  const std::string text = read_all(f);
  EXPECT_NE(text.find("restore checkpoint: 1.0/4.0 MiB (25%)"), std::string::npos) << text;
  EXPECT_NE(text.find("restore checkpoint: done 1.0 MiB in "), std::string::npos) << text;
  EXPECT_NE(text.find(", 2 files\n"), std::string::npos) << text;
  std::fclose(f);
}

TEST(Progress, TerminalRedrawsInPlaceAndEndsWithNewline) {
  std::FILE* f = std::tmpfile();
  Progress p("compile", 10,
             {.mode = Progress::Mode::kTerminal, .stream = f, .redraw_interval_s = 0.0});
  for (int i = 0; i < 5; ++i) p.advance();
  p.finish();
  p.finish();  // idempotent
  const std::string text = read_all(f);
  EXPECT_NE(text.find("\rcompile [##########..........] 5/10 50%"), std::string::npos) << text;
  EXPECT_EQ(count(text, "\n"), 1) << "redraws must not scroll: " << text;
  EXPECT_EQ(count(text, "compile: done 5 in "), 1) << text;
  std::fclose(f);
}

TEST(Progress, CountsAreExactAcrossThreads) {
  std::FILE* f = std::tmpfile();
  Progress p("tokenize", 0, {.mode = Progress::Mode::kTerminal, .stream = f,
                             .redraw_interval_s = 0.0});
  std::vector<std::thread> threads;
  for (int t = 0; t < 4; ++t)
    threads.emplace_back([&] { for (int i = 0; i < 1000; ++i) p.advance(); });
  for (auto& t : threads) t.join();
  EXPECT_EQ(p.done(), 4000);
  p.finish();
  EXPECT_NE(read_all(f).find("tokenize: done 4000 in "), std::string::npos);
  std::fclose(f);
}

TEST(Progress, OffModeWritesNothing) {
  std::FILE* f = std::tmpfile();
  {
    Progress p("save", 2, {.mode = Progress::Mode::kOff, .stream = f, .plain_interval_s = 0.0});
    p.advance(2);
  }
  EXPECT_EQ(read_all(f), "");
  std::fclose(f);
}

TEST(Progress, FormatsAmounts) {
  EXPECT_EQ(Progress::format_amount(3, 10, Progress::Unit::kItems), "3/10");
  EXPECT_EQ(Progress::format_amount(7, 0, Progress::Unit::kItems), "7");
  EXPECT_EQ(Progress::format_amount(3 << 19, 0, Progress::Unit::kBytes), "1.5 MiB");
}

}  // namespace
}  // namespace kiln
