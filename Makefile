# Kiln's entry points. Every target installs what is missing first (scripts/setup.sh).
BUILD_DIR ?= build
JOBS ?= $(shell nproc)
CMAKE_FLAGS ?=

.PHONY: setup configure build run test asan bench clean

setup:
	@bash scripts/setup.sh

configure: setup
	@cmake -S . -B $(BUILD_DIR) -G Ninja $(CMAKE_FLAGS) > /dev/null

build: configure
	@cmake --build $(BUILD_DIR) -j $(JOBS)

run: build
	$(BUILD_DIR)/kiln config

test: build
	cd $(BUILD_DIR) && ctest --output-on-failure -j $(JOBS)

asan:
	@$(MAKE) test BUILD_DIR=build-asan CMAKE_FLAGS="-DCMAKE_BUILD_TYPE=RelWithDebInfo -DKILN_SANITIZE=ON"

bench: build
	@echo "no benchmarks yet"

clean:
	rm -rf $(BUILD_DIR) build-asan
