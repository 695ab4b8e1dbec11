#include "kiln/base/progress.h"

#include <unistd.h>

#include <cstdlib>
#include <cstring>

#include <fmt/format.h>

namespace kiln {
namespace {

Progress::Mode mode_from_env(std::FILE* stream) {
  const char* env = std::getenv("KILN_PROGRESS");
  if (env != nullptr) {
    if (std::strcmp(env, "off") == 0 || std::strcmp(env, "0") == 0) return Progress::Mode::kOff;
    if (std::strcmp(env, "plain") == 0) return Progress::Mode::kPlain;
    if (std::strcmp(env, "tty") == 0) return Progress::Mode::kTerminal;
  }
  return isatty(fileno(stream)) ? Progress::Mode::kTerminal : Progress::Mode::kPlain;
}

std::string format_rate(double per_s, Progress::Unit unit) {
  if (unit == Progress::Unit::kBytes) return fmt::format("{:.1f} MiB/s", per_s / (1 << 20));
  return fmt::format("{:.1f}/s", per_s);
}

std::string format_duration(double s) {
  if (s < 60) return fmt::format("{:.1f}s", s);
  if (s < 3600) return fmt::format("{}m{:02}s", static_cast<int>(s) / 60, static_cast<int>(s) % 60);
  return fmt::format("{}h{:02}m", static_cast<int>(s) / 3600, (static_cast<int>(s) / 60) % 60);
}

}  // namespace

Progress::Progress(std::string label, int64_t total, Unit unit)
    : Progress(std::move(label), total, Options{.unit = unit}) {}

Progress::Progress(std::string label, int64_t total, Options options)
    : label_(std::move(label)),
      total_(total),
      options_(options),
      stream_(options.stream ? options.stream : stderr),
      start_(std::chrono::steady_clock::now()) {
  mode_ = options_.mode == Mode::kAuto ? mode_from_env(stream_) : options_.mode;
}

Progress::~Progress() { finish(); }

double Progress::elapsed_s() const {
  return std::chrono::duration<double>(std::chrono::steady_clock::now() - start_).count();
}

std::string Progress::format_amount(int64_t done, int64_t total, Unit unit) {
  if (unit == Unit::kBytes) {
    const double mib = 1 << 20;
    if (total > 0) return fmt::format("{:.1f}/{:.1f} MiB", done / mib, total / mib);
    return fmt::format("{:.1f} MiB", done / mib);
  }
  if (total > 0) return fmt::format("{}/{}", done, total);
  return fmt::format("{}", done);
}

void Progress::advance(int64_t n) {
  done_.fetch_add(n, std::memory_order_relaxed);
  maybe_draw(false);
}

void Progress::set(int64_t done) {
  done_.store(done, std::memory_order_relaxed);
  maybe_draw(false);
}

void Progress::set_total(int64_t total) { total_.store(total, std::memory_order_relaxed); }

void Progress::maybe_draw(bool force) {
  if (mode_ == Mode::kOff) return;
  const double now = elapsed_s();
  const double interval =
      mode_ == Mode::kTerminal ? options_.redraw_interval_s : options_.plain_interval_s;
  // Cheap unlocked check first: most advance() calls return here.
  if (!force && now - last_draw_s_.load(std::memory_order_relaxed) < interval) return;
  std::unique_lock<std::mutex> lock(draw_mu_, std::try_to_lock);
  if (!lock.owns_lock() || finished_) return;  // another thread is drawing
  // Plain mode: the first line comes after one interval, so short phases print only "done".
  if (mode_ == Mode::kPlain && now < interval) return;
  if (now - last_draw_s_.load() < interval) return;
  last_draw_s_.store(now);

  const int64_t done = done_.load(), total = total_.load();
  const std::string amount = format_amount(done, total, options_.unit);
  const std::string rate = now > 0 ? format_rate(done / now, options_.unit) : "";
  std::string percent;
  if (total > 0) percent = fmt::format("{}%", static_cast<int>(100.0 * done / total));
  if (mode_ == Mode::kTerminal) {
    std::string bar;
    if (total > 0) {
      const int width = 20, filled = static_cast<int>(width * std::min<int64_t>(done, total) / total);
      bar = "[" + std::string(filled, '#') + std::string(width - filled, '.') + "] ";
    }
    std::string eta;
    if (total > 0 && done > 0 && done < total)
      eta = " eta " + format_duration(now * (total - done) / done);
    // "\x1b[K" clears what a longer previous line left behind.
    std::fprintf(stream_, "\r%s %s%s %s %s%s\x1b[K", label_.c_str(), bar.c_str(), amount.c_str(),
                 percent.c_str(), rate.c_str(), eta.c_str());
    drew_partial_ = true;
  } else {
    std::fprintf(stream_, "%s: %s%s %s\n", label_.c_str(), amount.c_str(),
                 percent.empty() ? "" : (" (" + percent + ")").c_str(), rate.c_str());
  }
  std::fflush(stream_);
}

void Progress::finish(const std::string& note) {
  std::lock_guard<std::mutex> lock(draw_mu_);
  if (finished_) return;
  finished_ = true;
  if (mode_ == Mode::kOff) return;
  const double now = elapsed_s();
  const int64_t done = done_.load();
  std::string line = fmt::format("{}: done {} in {}", label_,
                                 format_amount(done, 0, options_.unit), format_duration(now));
  if (options_.unit == Unit::kBytes && now > 0)
    line += " (" + format_rate(done / now, options_.unit) + ")";
  if (!note.empty()) line += ", " + note;
  std::fprintf(stream_, "%s%s%s\n", drew_partial_ ? "\r" : "", line.c_str(),
               drew_partial_ ? "\x1b[K" : "");
  std::fflush(stream_);
}

}  // namespace kiln
