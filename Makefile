# The front door. `make demo` and `make test` do all set-up on a fresh Debian 12 machine.
JOBS ?= $(shell nproc)
PROMPT ?= Once upon a time
.PHONY: all deps cli demo kvquant calibrate test test-debug release results speed throughput rolling ruler xsum cli-doc format clean

all: release

deps:
	@bash scripts/install-deps.sh

release: deps
	@cmake --preset release >/dev/null
	@cmake --build --preset release -j $(JOBS)

# The CLI alone (what demo runs), quietly: the build's output goes to build/cli-build.log, shown when it fails.
cli: deps
	@cmake --preset release >/dev/null
	@mkdir -p build
	@echo "building build/release/tools/h2okv/h2okv (log: build/cli-build.log) ..."
	@cmake --build --preset release --target h2okv -j $(JOBS) >build/cli-build.log 2>&1 || \
		{ tail -n 40 build/cli-build.log; echo "make cli: the build failed (build/cli-build.log)"; exit 1; }

# Generates a story on the bundled model with an H2O-managed KV cache smaller than the generation: the story on
# stdout, the cache's statistics on stderr.
demo: cli
	@echo "h2okv generate -p \"$(PROMPT)\" -n 200 --kv-policy h2o --kv-budget 64 --seed 1"
	@./build/release/tools/h2okv/h2okv generate -p "$(PROMPT)" -n 200 --kv-policy h2o --kv-budget 64 --seed 1

# Builds with warnings as errors (RelWithDebInfo, assertions on) and runs every test.
test: deps
	@cmake --preset ci >/dev/null
	@cmake --build --preset ci -j $(JOBS)
	@ctest --preset ci -j $(JOBS)

# The same tests under AddressSanitizer + UndefinedBehaviorSanitizer.
test-debug: deps
	@cmake --preset debug >/dev/null
	@cmake --build --preset debug -j $(JOBS)
	@ctest --preset debug -j $(JOBS)

# Regenerates docs/RESULTS.md and docs/img/ from measurements (needs ../shared; about 160 minutes on 2 cores:
# run_results.sh about 15 minutes, rolling about 30, throughput about 25, ruler about 30, calibrate about 65,
# kvquant, xsum and speed a few each).
results: release
	bash scripts/run_results.sh results
	bash scripts/run_rolling.sh results
	bash scripts/run_kvquant.sh results
	bash scripts/run_calibrate.sh results
	bash scripts/run_speed.sh results
	bash scripts/run_throughput.sh results
	bash scripts/run_ruler.sh results
	bash scripts/run_xsum.sh results
	/usr/bin/python3 scripts/gen_results.py results docs

# Re-measures only the speed section (the other sections' files must be in results/ from `make results`).
speed: release
	bash scripts/run_speed.sh results
	/usr/bin/python3 scripts/gen_results.py results docs

# Re-measures only the throughput section (many sequences, equal KV memory; about 25 minutes).
throughput: release
	bash scripts/run_throughput.sh results
	/usr/bin/python3 scripts/gen_results.py results docs

# Re-measures only the rolling-positions section (perplexity past the trained context, a 1M-token stream;
# about 30 minutes).
rolling: release
	bash scripts/run_rolling.sh results
	/usr/bin/python3 scripts/gen_results.py results docs

# Re-measures only the "Eviction x KV quantization" section (a few minutes).
kvquant: release
	bash scripts/run_kvquant.sh results
	/usr/bin/python3 scripts/gen_results.py results docs

# Re-measures only the "Calibrated configurations" section (h2okv calibrate, held-out perplexity; about 65
# minutes on 2 cores).
calibrate: release
	bash scripts/run_calibrate.sh results
	/usr/bin/python3 scripts/gen_results.py results docs

# Re-measures only the long-context (RULER-style) section (scripts/run_ruler.sh; about 30 minutes).
ruler: release
	bash scripts/run_ruler.sh results
	/usr/bin/python3 scripts/gen_results.py results docs

# Re-measures only the summarisation section (XSUM prompts, ROUGE; scripts/run_xsum.sh, a few minutes).
xsum: release
	bash scripts/run_xsum.sh results
	/usr/bin/python3 scripts/gen_results.py results docs

# Regenerates docs/CLI.md from the binary's --help texts.
cli-doc: release
	/usr/bin/python3 scripts/gen_cli_doc.py ./build/release/tools/h2okv/h2okv docs/CLI.md

format:
	@find include src tools tests bench examples python \( -name '*.h' -o -name '*.c' -o -name '*.cpp' \) -print0 | xargs -0 clang-format -i

clean:
	rm -rf build
