# Thin wrapper over CMake/CTest: the README's commands.
#   make demo   build, then run the main job
#   make test   build, then run every test (CTest prints the summary)
#   make asan   address+undefined sanitizer build and its tests
#   make tsan   thread sanitizer build and its tests
#   make bench  build the benchmark programs
#   make minimal  build and test with every optional dependency switched off
#   make install  build, then install into PREFIX (default /usr/local): the dpt
#                 command, libdpt.a, libdpt.so.0, the headers, dpt.pc and the
#                 CMake package (find_package(dpt))
#   make test-faults  build, then the fault-injection and distributed failure
#                 tests (label "faults": kill -9, I/O faults, signals, ranks
#                 killed or stopped); `make test` leaves out the long ones
#   make soak   1 hour of DD-PPO with a checkpoint every iteration and a
#               resume every 5 minutes beside an uninterrupted run: memory,
#               descriptors, same final weights (SOAK_MINUTES; not in CI)
#   make fuzz   clang + libFuzzer build of the fuzz targets (build-fuzz)
#   make fuzz-run  make fuzz, then run every target on its corpus
#                  (FUZZ_SECONDS in all, shared equally; default 240)
JOBS     ?= $(shell nproc 2>/dev/null || echo 2)
BUILD    ?= build
CMAKE_FLAGS ?=
CTEST_FLAGS ?= --output-on-failure
# Tests labelled "long" (fault injection, distributed failures) run in
# `make test-faults`, not in `make test` and the sanitizer builds.
CTEST_EXCLUDE ?= -LE long
WERROR   ?= OFF
PREFIX   ?= /usr/local
FUZZ_SECONDS ?= 240
SOAK_MINUTES ?= 60

.PHONY: all build demo test test-faults soak asan tsan bench minimal install fuzz fuzz-run clean

all: build

build:
	cmake -S . -B $(BUILD) -DCMAKE_BUILD_TYPE=Release -DDPT_WERROR=$(WERROR) $(CMAKE_FLAGS)
	cmake --build $(BUILD) -j $(JOBS)

# The main job: DD-PPO on CartPole with 2 worker threads until solved, then an
# evaluation of the greedy policy (no MPI, no dataset needed). Every run gets
# a new directory under runs/.
demo: build
	./$(BUILD)/dpt train examples/cartpole_ddppo.conf

test: build
	cd $(BUILD) && ctest $(CTEST_FLAGS) $(CTEST_EXCLUDE) -j $(JOBS)

# One at a time: the tests kill processes and time their ends.
test-faults: build
	cd $(BUILD) && ctest $(CTEST_FLAGS) -L faults

soak: build
	SOAK_MINUTES=$(SOAK_MINUTES) sh tests/soak.sh ./$(BUILD)/dpt ./$(BUILD)/tests/ckpt_compare $(BUILD)/soak_work

asan:
	$(MAKE) test BUILD=build-asan CMAKE_FLAGS="-DCMAKE_BUILD_TYPE=RelWithDebInfo -DDPT_SANITIZE=address $(CMAKE_FLAGS)"

tsan:
	$(MAKE) test BUILD=build-tsan CMAKE_FLAGS="-DCMAKE_BUILD_TYPE=RelWithDebInfo -DDPT_SANITIZE=thread $(CMAKE_FLAGS)"

bench: build

minimal:
	$(MAKE) test BUILD=build-minimal CMAKE_FLAGS="-DDPT_WITH_BLAS=OFF -DDPT_WITH_MPI=OFF -DDPT_WITH_ZLIB=OFF $(CMAKE_FLAGS)"

install: build
	cmake --install $(BUILD) --prefix "$(PREFIX)"

# The fuzz build needs clang and its libFuzzer runtime; configuring fails
# (it does not skip) without them. MPI is left out: no target uses it.
fuzz:
	CC=clang cmake -S . -B build-fuzz -DCMAKE_BUILD_TYPE=RelWithDebInfo -DDPT_FUZZ=ON \
	    -DDPT_WITH_MPI=OFF -DBUILD_TESTING=OFF -DDPT_WERROR=$(WERROR) $(CMAKE_FLAGS)
	cmake --build build-fuzz --target dpt_fuzz -j $(JOBS)

fuzz-run: fuzz
	fuzz/run.sh build-fuzz $(FUZZ_SECONDS)

clean:
	rm -rf build build-asan build-tsan build-minimal build-fuzz build-py
