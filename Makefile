# ktune: the two commands a new user runs. Everything else is CMake (CMakePresets.json).
#   make demo   install missing Debian packages, build (release), start ktuned, tune gemm on the CPU
#   make test   same setup, then the whole suite through ctest: the Catch2 tests, the CUDA
#               compile check (every admitted config of every CUDA family for sm_80 and sm_90),
#               the install, Python client and Debian package checks (the packages installed
#               in a clean Debian root: label clean-root) and, with clang, a short
#               run of every libFuzzer target. A test without a TIMEOUT of its own is stopped
#               after 300 s (CMakePresets.json): a hang fails that test instead of the run.
#   make package  the Debian packages build/release/*.deb (CPack): ktune, libktune-client0,
#               libktune-client-dev, python3-ktune-client
JOBS ?= $(shell nproc)
MAKEFLAGS += --no-print-directory

.PHONY: all deps release dev demo test test-dev test-tsan compile-check fuzz-smoke package clean

all: release

deps:
	@scripts/install-deps.sh

release: deps
	@cmake --preset release >/dev/null
	@cmake --build --preset release -j $(JOBS)

dev: deps
	@cmake --preset dev >/dev/null
	@cmake --build --preset dev -j $(JOBS)

demo: release
	@scripts/demo.sh build/release/bin

test: release
	@ctest --preset release -j $(JOBS) --output-on-failure
	@$(MAKE) fuzz-smoke

package: release
	@cd build/release && cpack

# libFuzzer targets (tests/fuzz): 20 s each over their seed corpora, two at a time; needs clang.
# scripts/fuzz.sh runs them for as long as you like.
fuzz-smoke:
	@if command -v clang++ >/dev/null 2>&1; then \
	  cmake --preset fuzz >/dev/null && cmake --build --preset fuzz -j $(JOBS) && ctest --preset fuzz; \
	else echo "make test: clang++ not found, fuzz targets skipped"; fi

# The same suite under AddressSanitizer + UndefinedBehaviorSanitizer.
test-dev: dev
	@ctest --preset dev -j $(JOBS)

# The daemon tests (ctest label `daemon`: each starts a real ktuned and drives it with clients and
# workers) with ktuned, ktune-worker, ktune and the tests built with ThreadSanitizer. TSAN_OPTIONS
# (the tsan test preset) stops a process at its first report and writes the report under
# build/tsan/reports; any report fails this target, also one whose test passed. The fault
# family's candidates (tests/faults) crash and over-allocate on purpose: handle_segv=0 and
# allocator_may_return_null=1 let their worker die by the signal or see malloc fail, as in a
# release build, instead of filing those as reports.
test-tsan: deps
	@cmake --preset tsan >/dev/null
	@cmake --build --preset tsan -j $(JOBS)
	@rm -rf build/tsan/reports && mkdir -p build/tsan/reports
	@ctest --preset tsan -j $(JOBS); status=$$?; \
	  if [ -n "$$(ls build/tsan/reports)" ]; then \
	    cat build/tsan/reports/*; echo "make test-tsan: ThreadSanitizer reports in build/tsan/reports"; \
	    exit 1; \
	  fi; exit $$status

# Performance harnesses: `make bench-<name>` runs benchmarks/<name> against the release build;
# its last output line is one JSON object.
bench-%: release
	@benchmarks/$* build/release/bin

clean:
	rm -rf build

# Only the CUDA compile check (part of `make test`): every admitted config of every CUDA family
# compiled with nvrtc for sm_80 and sm_90, no GPU needed; about 3 minutes on 2 cores.
compile-check: release
	@ctest --preset release -L compile-check --output-on-failure
