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
JOBS     ?= $(shell nproc 2>/dev/null || echo 2)
BUILD    ?= build
CMAKE_FLAGS ?=
CTEST_FLAGS ?= --output-on-failure
WERROR   ?= OFF
PREFIX   ?= /usr/local

.PHONY: all build demo test asan tsan bench minimal install clean

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
	cd $(BUILD) && ctest $(CTEST_FLAGS) -j $(JOBS)

asan:
	$(MAKE) test BUILD=build-asan CMAKE_FLAGS="-DCMAKE_BUILD_TYPE=RelWithDebInfo -DDPT_SANITIZE=address $(CMAKE_FLAGS)"

tsan:
	$(MAKE) test BUILD=build-tsan CMAKE_FLAGS="-DCMAKE_BUILD_TYPE=RelWithDebInfo -DDPT_SANITIZE=thread $(CMAKE_FLAGS)"

bench: build

minimal:
	$(MAKE) test BUILD=build-minimal CMAKE_FLAGS="-DDPT_WITH_BLAS=OFF -DDPT_WITH_MPI=OFF -DDPT_WITH_ZLIB=OFF $(CMAKE_FLAGS)"

install: build
	cmake --install $(BUILD) --prefix "$(PREFIX)"

clean:
	rm -rf build build-asan build-tsan build-minimal
