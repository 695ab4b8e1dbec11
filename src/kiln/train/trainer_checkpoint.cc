// The trainer's checkpoints (docs/checkpoints.md): what a snapshot holds, how a save is
// split among the shard owners (devices, MPI ranks) and how a restore hands each local
// device the shard it needs from a checkpoint of any layout.
#include <unistd.h>

#include <algorithm>
#include <chrono>
#include <cstring>
#include <map>
#include <set>

#include <fmt/format.h>

#include "kiln/base/progress.h"
#include "kiln/checkpoint/hf_import.h"
#include "kiln/train/trainer.h"

namespace kiln::train {

namespace {

using Clock = std::chrono::steady_clock;

double seconds_since(Clock::time_point start) {
  return std::chrono::duration<double>(Clock::now() - start).count();
}

bool is_local(const StepRunner::Layout& l, int64_t device) {
  return device >= l.first_device && device < l.first_device + l.local_devices;
}

// Row-major elements of dtype `from` as dtype `to` (f32, bf16, f64: a Hugging Face model's
// bf16 weights become f32 master weights exactly; f32 to bf16 rounds to nearest even).
Result<std::string> cast_floats(const std::string& bytes, ir::DType from, ir::DType to, const std::string& what) {
  if (from == to) return bytes;
  auto is_float = [](ir::DType t) { return t == ir::DType::kF32 || t == ir::DType::kBF16 || t == ir::DType::kF64; };
  if (!is_float(from) || !is_float(to)) {
    return failed_precondition("{} is {} but this run needs {}; only float dtypes are cast", what,
                               ir::dtype_name(from), ir::dtype_name(to));
  }
  const int64_t n = static_cast<int64_t>(bytes.size()) / ir::dtype_size(from);
  std::string out(static_cast<size_t>(n * ir::dtype_size(to)), '\0');
  for (int64_t i = 0; i < n; ++i) {
    double v = 0;
    if (from == ir::DType::kBF16) {
      uint16_t b;
      std::memcpy(&b, bytes.data() + 2 * i, 2);
      v = ir::bf16_bits_to_float(b);
    } else if (from == ir::DType::kF32) {
      float f;
      std::memcpy(&f, bytes.data() + 4 * i, 4);
      v = f;
    } else {
      std::memcpy(&v, bytes.data() + 8 * i, 8);
    }
    if (to == ir::DType::kBF16) {
      const uint16_t b = ir::float_to_bf16_bits(static_cast<float>(v));
      std::memcpy(out.data() + 2 * i, &b, 2);
    } else if (to == ir::DType::kF32) {
      const float f = static_cast<float>(v);
      std::memcpy(out.data() + 4 * i, &f, 4);
    } else {
      std::memcpy(out.data() + 8 * i, &v, 8);
    }
  }
  return out;
}

}  // namespace

checkpoint::CheckpointState Trainer::snapshot() const {
  checkpoint::CheckpointState s;
  s.step = step_;
  const StepRunner::Layout layout = runner_->layout();
  s.mesh = layout.mesh;
  const std::vector<models::ParamSpec>& specs = model_->params();
  const char* groups[] = {"params/", "mu/", "nu/"};
  for (int g = 0; g < 3; ++g) {
    for (int64_t i = 0; i < program_.num_params; ++i) {
      const int64_t arg = g == 0 ? program_.param_arg(i) : g == 1 ? program_.mu_arg(i) : program_.nu_arg(i);
      // A copy of the bytes each local owner device holds (training may go on while they are
      // written); other ranks' owners write theirs.
      checkpoint::StateTensor t;
      t.name = groups[g] + specs[i].name;
      t.shape = program_.module->entry()->param(static_cast<int>(arg))->shape();
      t.sharding = runner_->arg_sharding(arg);
      t.shards.resize(static_cast<size_t>(s.mesh.num_devices()));
      for (int64_t dev : checkpoint::shard_owners(t.shape.dims(), t.sharding, s.mesh)) {
        if (is_local(layout, dev)) t.shards[dev] = runner_->arg_bytes(arg, dev - layout.first_device);
      }
      s.tensors.push_back(std::move(t));
    }
  }
  s.config_yaml = config_yaml_;
  s.data_iterator = data_json_;
  s.data_iterator["batches_consumed"] = step_;  // one batch per step (no gradient accumulation)
  if (tokens_) {
    s.data_iterator = tokens_->state();
    s.data_iterator["batches_consumed"] = step_;
  }
  s.rng = rng_json_;
  if (spikes_) s.rng["spike_window"] = spikes_->to_json();  // trainer state beside the seed
  return s;
}

Status Trainer::restore(const std::string& dir, bool full_state, const std::vector<models::ParamSpec>& specs,
                        ir::DType mu_dtype) {
  KILN_ASSIGN_OR_RETURN(std::string step_dir, checkpoint::resolve_step_dir(dir));
  KILN_ASSIGN_OR_RETURN(checkpoint::CheckpointReader state, checkpoint::CheckpointReader::open(step_dir));
  // Read and check everything before touching the state: every tensor present with this
  // run's shape and dtype, its checksums intact. Each local device gets its shard in this
  // run's layout, read from the saved pieces that overlap it (any saved mesh).
  const StepRunner::Layout layout = runner_->layout();
  struct Set {
    int64_t arg, local;
    std::string bytes;
  };
  std::vector<Set> sets;
  std::set<std::string> used;
  std::vector<std::pair<int64_t, std::string>> wanted;  // (argument, tensor name)
  for (int64_t i = 0; i < program_.num_params; ++i) {
    wanted.emplace_back(program_.param_arg(i), "params/" + specs[i].name);
    if (!full_state) continue;
    wanted.emplace_back(program_.mu_arg(i), "mu/" + specs[i].name);
    wanted.emplace_back(program_.nu_arg(i), "nu/" + specs[i].name);
  }
  int64_t restore_bytes = 0;
  for (const auto& [arg, name] : wanted) {
    const ir::Shape& shape = program_.module->entry()->param(static_cast<int>(arg))->shape();
    for (int64_t d = 0; d < layout.local_devices; ++d) {
      restore_bytes += checkpoint::shard_region(shape.dims(), runner_->arg_sharding(arg), layout.mesh,
                                                layout.first_device + d).num_elements() *
                       ir::dtype_size(shape.dtype());
    }
  }
  Progress progress("restore checkpoint " + step_dir, restore_bytes,
                    Progress::Options{.unit = Progress::Unit::kBytes,
                                      .mode = layout.rank == 0 ? Progress::Mode::kAuto : Progress::Mode::kOff});
  for (const auto& [arg, name] : wanted) {
    // The parameters' shapes from the model (mu in mu_dtype): a mismatch names the tensor.
    const ir::Shape& shape = program_.module->entry()->param(static_cast<int>(arg))->shape();
    for (int64_t d = 0; d < layout.local_devices; ++d) {
      // Only the device's block of a larger saved piece is read (a global tensor of a
      // converted checkpoint, a resume on another mesh): no process holds a whole tensor.
      KILN_ASSIGN_OR_RETURN(std::string bytes,
                            state.read_shard(name, shape, runner_->arg_sharding(arg), layout.mesh,
                                             layout.first_device + d, checkpoint::ShardReadOptions{.partial_reads = true}));
      progress.advance(static_cast<int64_t>(bytes.size()));
      sets.push_back({arg, d, std::move(bytes)});
    }
    used.insert(name);
  }
  (void)mu_dtype;  // the step program's mu arguments carry it
  for (const checkpoint::SavedTensor& t : state.tensors()) {
    bool wanted_group = full_state || t.name.rfind("params/", 0) == 0;
    if (wanted_group && !used.count(t.name)) {
      return failed_precondition("checkpoint {}: tensor {} is not part of this run's model (a different model config?)",
                                 step_dir, t.name);
    }
  }
  progress.finish();
  for (const Set& s : sets) KILN_RETURN_IF_ERROR(runner_->set_arg_bytes(s.arg, s.bytes, s.local));
  restored_from_ = step_dir;
  if (full_state) {
    step_ = state.step();
    restored_step_ = state.step();
    if (spikes_ && state.rng().contains("spike_window")) {
      KILN_RETURN_IF_ERROR(spikes_->restore(state.rng()["spike_window"]).with_context("checkpoint " + step_dir));
    }
    // The data iterator: synthetic batches are numbered, so skip the consumed ones.
    if (tokens_) {
      if (state.data_iterator().value("type", "") != tokens_->type()) {
        return failed_precondition("checkpoint {} was trained on {} data; this run reads {}", step_dir,
                                   state.data_iterator().value("type", "unknown"),
                                   tokens_->type() == "hf" ? "dataset_type=hf" : "token shards (dataset_type=tokens or text)");
      }
      Status restored = tokens_->restore(state.data_iterator());
      if (!restored.ok()) return restored.with_context("checkpoint " + step_dir);
    } else {
      int64_t consumed = state.data_iterator().value("batches_consumed", state.step());
      for (int64_t k = 0; k < consumed; ++k) (void)data_.take();
    }
    print(fmt::format("restored the full training state of step {} from {} (saved on {}, restored on {})", state.step(),
                      step_dir, state.mesh().to_string(), layout.mesh.to_string()));
  } else {
    print(fmt::format("loaded {} parameter tensors from {} (parameters only; optimizer state and step start fresh)",
                      program_.num_params, step_dir));
  }
  return ok_status();
}

Status Trainer::restore_from_hf(const std::string& dir, const std::vector<models::ParamSpec>& specs) {
  // Config, index and every file's header are read and checked first (hf_import.h).
  KILN_ASSIGN_OR_RETURN(checkpoint::HfImportPlan plan, checkpoint::plan_hf_import(dir));
  std::map<std::string, const checkpoint::KilnFromHf*> planned;
  for (const checkpoint::KilnFromHf& t : plan.tensors) planned[t.name] = &t;
  for (int64_t i = 0; i < program_.num_params; ++i) {
    const ir::Shape& shape = program_.module->entry()->param(static_cast<int>(program_.param_arg(i)))->shape();
    auto it = planned.find(specs[i].name);
    if (it == planned.end()) {
      return failed_precondition("Hugging Face directory {}: nothing in it makes parameter {} {} (a different model?)",
                                 dir, specs[i].name, shape.to_string());
    }
    if (it->second->shape.dims() != shape.dims()) {
      return failed_precondition("Hugging Face directory {}: {} makes parameter {} as {} but this run needs {} (a "
                                 "different model config?)",
                                 dir, it->second->source, specs[i].name, it->second->shape.to_string(),
                                 shape.to_string());
    }
  }
  if (static_cast<int64_t>(planned.size()) != program_.num_params) {
    for (const auto& [name, t] : planned) {
      if (std::none_of(specs.begin(), specs.end(), [&](const models::ParamSpec& p) { return p.name == name; })) {
        return failed_precondition("Hugging Face directory {}: {} ({}) is not part of this run's model (a different "
                                   "model config?)",
                                   dir, t->source, name);
      }
    }
  }
  // Each local device's block of each Kiln tensor, read alone from the source rows it
  // touches (HfCheckpoint::produce_block: never the whole tensor, except an MXFP4 source,
  // dequantized whole and then cut), cast to the run's dtype. Nothing is set before every
  // tensor has been read.
  const StepRunner::Layout layout = runner_->layout();
  struct Set {
    int64_t arg, local;
    std::string bytes;
  };
  std::vector<Set> sets;
  int64_t total = 0;
  for (const checkpoint::KilnFromHf& t : plan.tensors) total += t.shape.byte_size();
  Progress progress("load Hugging Face model " + dir, total,
                    Progress::Options{.unit = Progress::Unit::kBytes,
                                      .mode = layout.rank == 0 ? Progress::Mode::kAuto : Progress::Mode::kOff});
  for (int64_t i = 0; i < program_.num_params; ++i) {
    const int64_t arg = program_.param_arg(i);
    const ir::Shape& shape = program_.module->entry()->param(static_cast<int>(arg))->shape();
    const checkpoint::KilnFromHf& t = *planned.at(specs[i].name);
    for (int64_t d = 0; d < layout.local_devices; ++d) {
      const checkpoint::Region mine =
          checkpoint::shard_region(shape.dims(), runner_->arg_sharding(arg), layout.mesh, layout.first_device + d);
      KILN_ASSIGN_OR_RETURN(std::string block, plan.checkpoint.produce_block(t, mine));
      KILN_ASSIGN_OR_RETURN(std::string cast, cast_floats(block, t.shape.dtype(), shape.dtype(),
                                                          fmt::format("{}: {}", dir, t.source)));
      sets.push_back({arg, d, std::move(cast)});
    }
    progress.advance(t.shape.byte_size());
  }
  progress.finish();
  for (const Set& s : sets) KILN_RETURN_IF_ERROR(runner_->set_arg_bytes(s.arg, s.bytes, s.local));
  restored_from_ = dir;
  print(fmt::format("loaded {} parameter tensors from the Hugging Face model {} (parameters only; optimizer state and "
                    "step start fresh)",
                    program_.num_params, dir));
  return ok_status();
}

Status Trainer::save_checkpoint() {
  Clock::time_point start = Clock::now();
  // The stall lands in the next step's time (the step clock runs from the previous step's end).
  struct StallSpan {
    RunObserver* o;
    Clock::time_point start;
    ~StallSpan() {
      o->span("checkpoint stall", "checkpoint",
              std::chrono::duration_cast<std::chrono::nanoseconds>(start.time_since_epoch()).count(),
              RunObserver::now_ns());
    }
  } stall{observer_.get(), start};
  // The records of every step the checkpoint holds reach the disk first, so a restart from it
  // finds no gap in metrics.jsonl.
  KILN_RETURN_IF_ERROR(metrics_.flush());
  KILN_RETURN_IF_ERROR(extra_metrics_.flush());
  const StepRunner::Layout layout = runner_->layout();
  checkpoint::SaveOptions save_options;
  save_options.max_to_keep = max_checkpoints_;
  save_options.after_file = options_.checkpoint_after_file;
  save_options.rank = layout.rank;
  save_options.num_ranks = layout.num_ranks;
  save_options.first_device = layout.first_device;
  save_options.local_devices = layout.local_devices;
  // A background save is not a phase anyone waits for: no progress line between the steps.
  save_options.progress = !async_checkpointing_ && layout.rank == 0;
  last_saved_step_ = step_;
  Status previous = ok_status();
  if (layout.num_ranks > 1) {
    // Every rank writes its devices' shards into one directory that rank 0 makes: rank 0
    // finishes its previous save (its commit), prepares the directory, and tells the others
    // its name (its pid) through a collective, which is also the barrier before they write.
    previous = saver_.wait();
    int64_t pid = 0;
    if (layout.rank == 0) {
      Result<std::string> tmp = previous.ok() ? checkpoint::prepare_save(checkpoints_dir(), step_)
                                              : Result<std::string>(previous);
      pid = tmp.ok() ? static_cast<int64_t>(::getpid()) : -1;
      if (!tmp.ok()) previous = tmp.status();
    }
    pid = runner_->broadcast_from_rank0(pid);
    if (pid < 0) {
      return previous.ok() ? failed_precondition("rank 0 could not prepare checkpoint {}", step_) : previous;
    }
    if (!previous.ok()) return previous;
    save_options.tmp_dir = fmt::format("{}.tmp-{}", checkpoint::step_dir(checkpoints_dir(), step_), pid);
  }
  if (async_checkpointing_) {
    Status earlier = saver_.save(checkpoints_dir(), snapshot(), save_options);
    checkpoint_blocked_s_ = seconds_since(start);
    print(fmt::format("saving checkpoint {} in the background to {} (the step was blocked {:.3f} s)", step_,
                      checkpoint::step_dir(checkpoints_dir(), step_), checkpoint_blocked_s_));
    checkpoint_total_s_ += checkpoint_blocked_s_;
    pending_stall_s_ += checkpoint_blocked_s_;
    KILN_RETURN_IF_ERROR(events_.write("checkpoint_save", step_,
                                       {{"path", checkpoint::step_dir(checkpoints_dir(), step_)},
                                        {"blocked_s", checkpoint_blocked_s_},
                                        {"background", true}}));
    KILN_RETURN_IF_ERROR(write_goodput(/*final=*/false));
    write_run_report(/*announce=*/false);
    return earlier;
  }
  Status st = checkpoint::save(checkpoints_dir(), snapshot(), save_options);
  checkpoint_blocked_s_ = seconds_since(start);
  checkpoint_total_s_ += checkpoint_blocked_s_;
  pending_stall_s_ += checkpoint_blocked_s_;
  if (st.ok()) {
    print(fmt::format("saved checkpoint {} to {} in {:.3f} s", step_, checkpoint::step_dir(checkpoints_dir(), step_),
                      checkpoint_blocked_s_));
    KILN_RETURN_IF_ERROR(events_.write("checkpoint_save", step_,
                                       {{"path", checkpoint::step_dir(checkpoints_dir(), step_)},
                                        {"blocked_s", checkpoint_blocked_s_},
                                        {"background", false}}));
    KILN_RETURN_IF_ERROR(write_goodput(/*final=*/false));
    write_run_report(/*announce=*/false);
  }
  return st;
}

Status Trainer::wait_for_checkpoint() {
  // Waiting for a background save blocks the trainer: checkpoint time for goodput.
  const Clock::time_point start = Clock::now();
  Status st = saver_.wait();
  checkpoint_total_s_ += seconds_since(start);
  return st;
}

}  // namespace kiln::train
