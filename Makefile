# Kiln's entry points. Every target installs what is missing first (scripts/setup.sh).
#   make run     set up, build, then train gpt-oss-tiny for 30 steps on real English text (fortunes)
#   make test    set up, build, run every test (ctest)
#   make build   set up and build only
#   make setup-tpu  opt-in: libtpu (Google Cloud terms) for kiln compile compile_topology=v6e-N / v5p-N
#   make asan    the tests under AddressSanitizer + UBSan, in build-asan/
#   make fuzz    every file reader under libFuzzer (FUZZ_SECONDS each), in build-fuzz/
#   make bench   benchmarks (bench/): kernels, the whole step vs PyTorch 1.13, kiln plan vs the measured
#                step, and the peers table
#                (bench/peers.py: Kiln vs PyTorch 2 eager and torch.compile, JAX/XLA, PyTorch 1.13)
#   make e2e     long end-to-end checks: bf16 vs f32 loss curves (gpt-oss-tiny 200 steps, gpt-oss-small 100),
#                a model 1.8x a per-process memory cap on 4 MPI ranks, two hosts in network namespaces
#   make parity  Kiln against Hugging Face transformers' GPT-OSS (logits, loss, every gradient)
#   make gpu     on a machine with an NVIDIA GPU: gpt-oss-small and the largest seed-shaped GPT-OSS one GPU
#                holds through backend=pjrt (XLA's CUDA plugin) beside the same step in JAX, in under 8
#                minutes (GPU_ARGS: bench/gpu_run.py's options); without a GPU one line, exit 0. Needs
#                no setup: it runs dist/kiln-gpu (make gpu-bundle) when present, else build/kiln
#   make gpu-bundle  dist/kiln-gpu/ (and .tar.gz): kiln with its shared libraries (rpath $ORIGIN/lib),
#                configs and make gpu's scripts, to carry to a GPU machine without Kiln's packages
BUILD_DIR ?= build
# Paths under the checkout hash relative to it, so another clone (CI) reuses the compile cache.
export CCACHE_BASEDIR := $(CURDIR)
# OpenAI's .tiktoken files for the tokenizer benchmarks (tests get the folder from CMake).
export KILN_TOKENIZER_DIR ?= $(abspath $(CURDIR)/../shared/data/tiktoken)
JOBS ?= $(shell nproc 2>/dev/null || echo 2)
CMAKE_FLAGS ?=
RUN_ARGS ?=
GPU_ARGS ?=
GPU_PYTHON ?= python3

.PHONY: setup setup-tpu configure build run test asan fuzz bench e2e parity gpu gpu-bundle clean

# Debian's packages, then the pinned Python environment .venv (python/requirements.txt: the
# tiktoken, openai-harmony and TensorBoard references some tests compare with), then on top
# of it the XLA CPU plugin (python/requirements-pjrt.txt: the PJRT backend builds against the
# wheel's pjrt_c_api.h and its tests run the plugin).
setup:
	@bash scripts/setup.sh
	@bash scripts/setup_venv.sh
	@bash scripts/setup_venv.sh python/requirements-pjrt.txt

# Opt-in: libtpu, Google's PJRT plugin for TPUs, for `kiln compile backend=pjrt
# compile_topology=v6e-4` (and v5e-N, v5p-N) without a TPU. Its licence is the Google Cloud
# Platform Terms of Service, not open source: make setup and make test never install it.
setup-tpu: setup
	@bash scripts/setup_venv.sh python/requirements-tpu.txt

configure: setup
	@cmake -S . -B $(BUILD_DIR) -G Ninja $(CMAKE_FLAGS) > /dev/null

build: configure
	@cmake --build $(BUILD_DIR) -j $(JOBS)

# Trains gpt-oss-tiny on real English text: Debian's fortunes (/usr/share/games/fortunes,
# installed by scripts/setup.sh), byte-tokenized once and cached in $(BUILD_DIR)/corpus,
# with the eval loss of held-out fortunes every 10 steps; under a minute on 2 cores.
# RUN_ARGS adds keys (dataset_type=synthetic reuse_example_batch=1: the memorisation run).
run: build
	$(BUILD_DIR)/kiln train model_name=gpt-oss-tiny override_model_config=true per_device_batch_size=1 \
	  max_target_length=128 steps=30 learning_rate=3e-3 run_name=make_run enable_checkpointing=false \
	  dataset_type=text dataset_path=/usr/share/games/fortunes tokenizer_type=bytes vocab_size=258 \
	  dataset_cache_dir=$(BUILD_DIR)/corpus eval_interval=10 eval_steps=4 $(RUN_ARGS)

test: build
	cd $(BUILD_DIR) && ctest --output-on-failure -j $(JOBS)

# RelWithDebInfo keeps assertions and debug info; the sanitizers make every test fail on
# the first error instead of printing and carrying on.
asan:
	@$(MAKE) test BUILD_DIR=build-asan \
	  CMAKE_FLAGS="-DCMAKE_BUILD_TYPE=RelWithDebInfo -DKILN_SANITIZE=ON"

# Coverage-guided fuzzing of every file reader (tests/fuzz, docs/fuzzing.md): clang's libFuzzer
# under ASan + UBSan in build-fuzz/, FUZZ_SECONDS per target (default 15, about 4 minutes in
# all). A crash, leak, hang or report fails it and keeps the minimised input as a regression
# file that make test replays.
fuzz:
	@bash scripts/fuzz.sh

# Benchmarks: every Google Benchmark binary under bench/, then the whole-step comparison
# with PyTorch. Ratios are measured side by side in one run; see README "Benchmarks".
bench: build
	@bash scripts/setup_bench.sh
	@for b in $(BUILD_DIR)/bench/*_bench; do [ -x "$$b" ] && "$$b" || true; done
	/usr/bin/python3 bench/step_vs_torch.py --kiln $(BUILD_DIR)/kiln
	/usr/bin/python3 bench/step_bf16_vs_f32.py --kiln $(BUILD_DIR)/kiln
	/usr/bin/python3 bench/sharded_vs_single.py --kiln $(BUILD_DIR)/kiln
	/usr/bin/python3 bench/gemm_row_vs_bench.py --kiln $(BUILD_DIR)/kiln --bench $(BUILD_DIR)/bench/gemm_shapes_bench
	/usr/bin/python3 bench/compile_growth.py --kiln $(BUILD_DIR)/kiln
	/usr/bin/python3 bench/init_vs_interpreted.py --kiln $(BUILD_DIR)/kiln
	/usr/bin/python3 bench/plan_vs_measured.py --kiln $(BUILD_DIR)/kiln
	/usr/bin/python3 bench/pjrt_vs_cpu.py --kiln $(BUILD_DIR)/kiln
	.venv/bin/python bench/data_vs_step.py --kiln $(BUILD_DIR)/kiln
	@bash scripts/setup_venv.sh python/requirements-parity.txt
	@bash scripts/setup_venv.sh python/requirements-bench.txt
	/usr/bin/python3 bench/peers.py --kiln $(BUILD_DIR)/kiln

# bf16 mixed precision tracks float32: both loss curves of a 200-step gpt-oss-tiny run and a
# 100-step gpt-oss-small run on the fortunes corpus and their largest deviation; fails past the stated tolerance.
# Then the bigger-than-one-process model, multi-host, and gpt-oss-small on backend=pjrt (XLA's CPU
# plugin) beside backend=cpu for 20 steps (losses within 1e-3, step times side by side).
e2e: build
	/usr/bin/python3 bench/bf16_loss_curve.py --kiln $(BUILD_DIR)/kiln --steps 200
	/usr/bin/python3 bench/bf16_loss_curve.py --kiln $(BUILD_DIR)/kiln --model gpt-oss-small --batch 2 --seq 512 \
	  --steps 100 --lr 1e-3
	/usr/bin/python3 tests/e2e/bigger_than_process_test.py --kiln $(BUILD_DIR)/kiln --size large \
	  --mpirun "mpiexec --allow-run-as-root --oversubscribe"
	tests/e2e/multihost_test.sh $(BUILD_DIR)/kiln large
	/usr/bin/python3 bench/pjrt_vs_cpu.py --kiln $(BUILD_DIR)/kiln --model gpt-oss-small --steps 20 --rounds 1 \
	  --set adam_eps=1e-4 --check 1e-3

# The community's reference, both ways: Hugging Face transformers' GptOssForCausalLM against
# kiln forward / the step's gradients (Kiln -> HF and HF -> Kiln, MXFP4 experts included),
# with torch and transformers from PyPI (python/requirements-parity.txt, ~3 GB with PyPI
# torch's CUDA wheels, so not in make test). About 1-2 minutes once installed (docs/parity.md).
parity: build
	@bash scripts/setup_venv.sh python/requirements-parity.txt
	KILN=$(BUILD_DIR)/kiln bash scripts/parity.sh

# One command on a GPU (docs/backends.md, "On a GPU"): no dependency on setup or build, since a
# rented GPU machine has its own image (Python, JAX, CUDA) and none of Kiln's Debian packages.
# GPU_PYTHON is the interpreter with JAX (the driver itself needs only the standard library).
gpu:
	@$(GPU_PYTHON) bench/gpu_run.py $(GPU_ARGS)

# The self-contained kiln make gpu runs on such a machine (scripts/gpu_bundle.sh): fails in one
# line past 64 MiB; checks the bundled binary runs on its own libraries.
gpu-bundle: build
	@bash scripts/gpu_bundle.sh $(BUILD_DIR)/kiln dist/kiln-gpu

clean:
	rm -rf $(BUILD_DIR) build-asan build-fuzz dist/kiln-gpu dist/kiln-gpu.tar.gz
