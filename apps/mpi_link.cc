#include "mpi_link.h"

#include <unistd.h>

#include <cstdlib>
#include <filesystem>
#include <fstream>
#include <sstream>

#include <fmt/format.h>
#include <nlohmann/json.hpp>

#include "kiln/plan/calibrate.h"
#include "kiln/report/report.h"
#include "kiln/runtime/world.h"

namespace kiln::app {

Status measure_mpi_link(const std::string& file) {
  KILN_ASSIGN_OR_RETURN(int64_t ranks, runtime::launcher_num_ranks());
  if (ranks < 2) {
    return invalid_argument("--measure-mpi-link runs as an MPI job of 2 or more ranks (mpiexec -np 2 kiln plan "
                            "--measure-mpi-link FILE), got {} rank(s)",
                            ranks);
  }
  KILN_ASSIGN_OR_RETURN(std::unique_ptr<runtime::World> world, runtime::make_world(ranks, 1));
  KILN_ASSIGN_OR_RETURN(plan::Link link,
                        plan::measure_link(*world, fmt::format("MPI between {} ranks, one device each", ranks)));
  if (world->rank() != 0) return ok_status();
  const nlohmann::json j = {{"name", link.name}, {"bandwidth_gbs", link.bandwidth_gbs}, {"latency_us", link.latency_us}};
  return report::write_file_atomically(file, j.dump() + "\n");
}

namespace {

std::string shell_quote(const std::string& s) {
  std::string out = "'";
  for (char c : s) out += c == '\'' ? std::string("'\\''") : std::string(1, c);
  return out + "'";
}

std::string last_line(const std::string& path) {
  std::ifstream in(path);
  std::string line, last;
  while (std::getline(in, line)) {
    if (!line.empty()) last = line;
  }
  return last;
}

}  // namespace

Result<plan::Link> run_mpi_link_job() {
  const char* env = std::getenv("KILN_MPIEXEC");
  std::string launcher = env != nullptr ? env : "mpiexec --oversubscribe";
  if (launcher == "none") return failed_precondition("KILN_MPIEXEC=none");
  if (env == nullptr && geteuid() == 0) launcher += " --allow-run-as-root";
  std::error_code ec;
  const std::filesystem::path self = std::filesystem::read_symlink("/proc/self/exe", ec);
  if (ec) return failed_precondition("cannot find this kiln binary (/proc/self/exe): {}", ec.message());
  const std::filesystem::path dir = std::filesystem::temp_directory_path() / fmt::format("kiln_mpi_link_{}", getpid());
  std::filesystem::create_directories(dir, ec);
  const std::string result = (dir / "link.json").string(), log = (dir / "job.log").string();
  // The job's collectives give up after 60 s (a rank that cannot start); shared-memory
  // single-copy off, as it is unavailable in many containers (OpenMPI then fails the job).
  const std::string command = fmt::format(
      "KILN_COLLECTIVE_TIMEOUT_S=${{KILN_COLLECTIVE_TIMEOUT_S:-60}} "
      "OMPI_MCA_btl_vader_single_copy_mechanism=${{OMPI_MCA_btl_vader_single_copy_mechanism:-none}} "
      "KILN_PROGRESS=off {} -np 2 {} plan --measure-mpi-link {} > {} 2>&1",
      launcher, shell_quote(self.string()), shell_quote(result), shell_quote(log));
  const int rc = std::system(command.c_str());
  // The result decides, not the launcher's status: OpenMPI's launcher sometimes crashes in its
  // own teardown after a job that succeeded.
  std::ifstream in(result);
  if (!in) {
    const std::string why = last_line(log);
    std::filesystem::remove_all(dir, ec);
    return failed_precondition("`{} -np 2` failed (status {}){}", launcher, rc, why.empty() ? "" : ": " + why);
  }
  std::stringstream text;
  text << in.rdbuf();
  std::filesystem::remove_all(dir, ec);
  nlohmann::json j = nlohmann::json::parse(text.str(), nullptr, false);
  if (j.is_discarded() || !j.is_object() || !j.value("bandwidth_gbs", nlohmann::json()).is_number() ||
      !j.value("latency_us", nlohmann::json()).is_number() || !j.value("name", nlohmann::json()).is_string()) {
    return failed_precondition("the MPI link job wrote an unreadable result");
  }
  plan::Link link;
  link.name = j["name"].get<std::string>();
  link.bandwidth_gbs = j["bandwidth_gbs"].get<double>();
  link.latency_us = j["latency_us"].get<double>();
  return link;
}

}  // namespace kiln::app
