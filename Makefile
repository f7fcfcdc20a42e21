# tokenbiryani for NGINX
#
#   make            build build/ngx_http_tokenbiryani_module.so
#   make run        build, then start nginx + the gateway on 127.0.0.1:8787
#   make stop       stop what `make run` started
#   make deb        the Debian packages, into build/deb
#   make test       the static checks, unit tests of src/core, the Debian
#                   packages, then every suite in t/
#
# Every target installs the Debian packages it needs when they are missing.

TOP        := $(abspath .)
BUILD      := $(TOP)/build
MODULE     := $(BUILD)/ngx_http_tokenbiryani_module.so
PLUGIN_DIR := $(TOP)/src/plugins/example_strategy
PLUGIN     := $(BUILD)/ngx_http_tokenbiryani_example_strategy_module.so
CLI        := $(BUILD)/tokenbiryani
RUNDIR     := $(TOP)/.run

CC         ?= cc
UNIT_CFLAGS = -std=c99 -D_GNU_SOURCE -g -O1 -Wall -Wextra -Werror \
              -Wpointer-arith -Wno-unused-parameter -Isrc/core
UNIT_LIBS   = -lyaml -lcjson -lcrypto -lsqlite3 -lm

CORE_SRCS  := $(wildcard src/core/*.c)
UNIT_SRCS  := $(wildcard t/unit/test_*.c)
UNIT_BINS  := $(patsubst t/unit/%.c,$(BUILD)/unit/%,$(UNIT_SRCS))

# packages: build (nginx-dev recipe), module libraries, tests, the mock
DEB_PKGS   := nginx nginx-dev dpkg-dev gcc make libc6-dev \
              libssl-dev libpcre2-dev zlib1g-dev \
              libcjson-dev libyaml-dev libhiredis-dev libsqlite3-dev redis-server \
              libcurl4-openssl-dev \
              libtest-base-perl perl python3 python3-prometheus-client \
              openssl curl procps \
              clang clang-tools cppcheck debhelper

.PHONY: all deps build deb test-package test-container install-cli unit analyze sdk claude-deps console-deps console-shots test test-asan test-valgrind fuzz bench-core \
        bench-cache \
        bench-overhead bench-stampede bench-soak run stop clean

all: build

deps:
	@missing=""; for p in $(DEB_PKGS); do \
	    dpkg-query -W -f='$${Status}' $$p 2>/dev/null | grep -q "ok installed" \
	        || missing="$$missing $$p"; \
	done; \
	if [ -n "$$missing" ]; then \
	    echo "installing:$$missing"; \
	    if [ "$$(id -u)" != 0 ]; then SUDO=sudo; else SUDO=; fi; \
	    export DEBIAN_FRONTEND=noninteractive; \
	    $$SUDO apt-get update -qq && \
	    $$SUDO apt-get install -y -qq --no-install-recommends $$missing >/dev/null; \
	fi

build: deps
	@src/tools/build-module.sh $(TOP) $(BUILD) $(PLUGIN_DIR)
	@ls -l $(MODULE) | awk '{print "built", $$NF, "(" $$5 " bytes)"}'
	@$(MAKE) --no-print-directory $(CLI)

# the Debian packages (debian/): libnginx-mod-http-tokenbiryani and
# tokenbiryani, built from a copy of the tree into build/deb; t/270 checks
# them
deb: deps
	@src/tools/build-deb.sh $(TOP) $(BUILD)/deb

# the packages installed with apt-get into a throwaway Debian root
# (debootstrap), served, restarted, upgraded and purged (t/pkg)
test-package: deb
	@command -v debootstrap >/dev/null || $(MAKE) deps DEB_PKGS=debootstrap
	@t/pkg/test-package.sh $(TOP) $(BUILD)/deb

# the image (deploy/Dockerfile) and the compose stack (deploy/compose.yaml)
# brought up with podman and podman-compose (t/pkg)
test-container: deps
	@$(MAKE) --no-print-directory deps DEB_PKGS="podman buildah podman-compose runc debootstrap"
	@t/pkg/test-container.sh $(TOP)

# the operator's command: a client of /admin, and init/serve/console for a
# gateway of its own (src/cli); it links src/core's YAML loader and header
# parser, and knows where the module it was built with is
CLI_SRCS   := $(wildcard src/cli/*.c)

$(CLI): $(CLI_SRCS) $(wildcard src/cli/*.h) $(CORE_SRCS) $(wildcard src/core/*.h)
	@$(CC) $(UNIT_CFLAGS) -O2 -Isrc/cli -DTBC_MODULE='"$(MODULE)"' \
	    -o $@ $(CLI_SRCS) $(CORE_SRCS) -lcurl $(UNIT_LIBS)
	@echo "built $@"

# src/core compiled once for the unit tests, each test linked against it
CORE_OBJS  := $(patsubst src/core/%.c,$(BUILD)/unit/core/%.o,$(CORE_SRCS))
CORE_LIB   := $(BUILD)/unit/libtbcore.a

$(BUILD)/unit/core/%.o: src/core/%.c $(wildcard src/core/*.h)
	@mkdir -p $(BUILD)/unit/core
	@$(CC) $(UNIT_CFLAGS) -c -o $@ $<

$(CORE_LIB): $(CORE_OBJS)
	@rm -f $@
	@ar rcs $@ $(CORE_OBJS)

$(BUILD)/unit/%: t/unit/%.c $(CORE_LIB) $(wildcard src/core/*.h) $(wildcard t/unit/*.h)
	@mkdir -p $(BUILD)/unit
	$(CC) $(UNIT_CFLAGS) -o $@ $< $(CORE_LIB) $(UNIT_LIBS)

unit: deps $(UNIT_BINS)
	@fail=0; for t in $(UNIT_BINS); do \
	    out=$$($$t) || fail=1; \
	    echo "$$out" | grep -E '^(not ok|#)' ; \
	    echo "$$(basename $$t): $$(echo "$$out" | grep -c '^ok') passed, $$(echo "$$out" | grep -c '^not ok') failed"; \
	done; exit $$fail

test: build analyze unit deb sdk claude-deps console-deps
	@/usr/bin/python3 t/mock/selftest.py
	@cd $(TOP) && TEST_NGINX_LOAD_MODULES=$(MODULE) \
	    TEST_NGINX_PLUGIN=$(PLUGIN) TEST_NGINX_CLI=$(CLI) prove -r -j1 t/

# The official SDK, from npm, at the version t/sdk/package-lock.json pins:
# t/065-sdk.t drives the gateway with it as a user's program would.
sdk: deps t/sdk/node_modules/.package-lock.json

t/sdk/node_modules/.package-lock.json: t/sdk/package.json t/sdk/package-lock.json
	@command -v node >/dev/null && command -v npm >/dev/null \
	    || $(MAKE) deps DEB_PKGS="nodejs npm"
	@cd t/sdk && npm ci --no-audit --no-fund --loglevel=error
	@touch $@

# Claude Code, from npm, at the version t/claude/package-lock.json pins:
# t/065-sdk.t runs `claude -p` against the gateway as its users do.  Its
# postinstall (run here by name: npm may refuse install scripts) copies
# the native binary of its platform package into place, offline
claude-deps: deps t/claude/node_modules/.package-lock.json

t/claude/node_modules/.package-lock.json: t/claude/package.json t/claude/package-lock.json
	@command -v node >/dev/null && command -v npm >/dev/null \
	    || $(MAKE) deps DEB_PKGS="nodejs npm"
	@cd t/claude && npm ci --no-audit --no-fund --loglevel=error --ignore-scripts \
	    && node node_modules/@anthropic-ai/claude-code/install.cjs >/dev/null
	@touch $@

# The console's suite (t/220-console.t): Debian's chromium, headless,
# driven by puppeteer-core from npm at the version t/console/package-lock.json
# pins (it downloads no browser of its own).
console-deps: deps t/console/node_modules/.package-lock.json
	@command -v chromium >/dev/null || $(MAKE) deps DEB_PKGS="chromium fonts-dejavu-core"

t/console/node_modules/.package-lock.json: t/console/package.json t/console/package-lock.json
	@command -v node >/dev/null && command -v npm >/dev/null \
	    || $(MAKE) deps DEB_PKGS="nodejs npm"
	@cd t/console && PUPPETEER_SKIP_DOWNLOAD=1 npm ci --no-audit --no-fund --loglevel=error
	@touch $@

# docs/console/*.png: every page of the console, from the suite's own run
console-shots: build console-deps
	@mkdir -p docs/console
	@cd $(TOP) && TB_CONSOLE_SHOTS=$(TOP)/docs/console \
	    TEST_NGINX_LOAD_MODULES=$(MODULE) TEST_NGINX_CLI=$(CLI) \
	    prove t/220-console.t
	@ls docs/console/*.png | wc -l | awk '{print $$1, "screenshots in docs/console/"}'

# A second pair of eyes: clang's static analyzer (scan-build) over a build
# of the module of its own, cppcheck over the same sources, and the stages'
# include graph (no cycle; shm/ knows no request).  Every report fails it;
# a report that is wrong is suppressed where it is, with the reason.
NGX_SRC      := /usr/share/nginx/src
CPPCHECK_INC := -I src/core -I src/http -I src/store -I src/store/redis \
                -I src/state -I shm -I lua-free-admin \
                -I $(NGX_SRC)/src/core -I $(NGX_SRC)/src/event \
                -I $(NGX_SRC)/src/os/unix -I $(NGX_SRC)/src/http \
                -I $(NGX_SRC)/src/http/modules -I $(NGX_SRC)/src/http/v2 \
                -I $(BUILD) -I $(BUILD)/gen

analyze: deps
	@command -v scan-build >/dev/null && command -v cppcheck >/dev/null \
	    || $(MAKE) deps DEB_PKGS="clang clang-tools cppcheck"
	@rm -rf $(BUILD)/analyze/report
	@if [ -d $(BUILD)/analyze/addon ]; then \
	    find $(BUILD)/analyze/addon -name "*.o" -delete; \
	else rm -f $(BUILD)/analyze/.configured; fi
	@mkdir -p $(BUILD)/analyze
	@scan-build -o $(BUILD)/analyze/report --status-bugs \
	    --exclude $(NGX_SRC) \
	    src/tools/build-module.sh $(TOP) $(BUILD)/analyze \
	    > $(BUILD)/analyze/scan-build.log 2>&1 \
	    || { grep -E "(warning|error):" $(BUILD)/analyze/scan-build.log; \
	         tail -3 $(BUILD)/analyze/scan-build.log; exit 1; }
	@echo "scan-build: $$(grep -o 'No bugs found\|[0-9]* bugs\? found' \
	    $(BUILD)/analyze/scan-build.log)"
	@cppcheck -q --std=c99 --enable=warning,performance,portability \
	    --inline-suppr --error-exitcode=1 --suppress=missingIncludeSystem \
	    -D__GNUC__ -D__x86_64__ $(CPPCHECK_INC) -j2 \
	    src/core src/http src/store src/state shm lua-free-admin src/cli ngx_http_tokenbiryani_module.c
	@echo "cppcheck: no report"
	@/usr/bin/python3 t/lint/include_cycles.py
	@/usr/bin/python3 t/lint/call_cycles.py $(BUILD)/analyze

# The same suites against an AddressSanitizer + UBSan build of the module,
# loaded into Debian's nginx with the sanitizer runtimes preloaded.
ASAN_FLAGS  = -fsanitize=address,undefined -fno-omit-frame-pointer \
              -fno-sanitize-recover=undefined
ASAN_LIBS   = $(shell gcc -print-file-name=libasan.so) \
              $(shell gcc -print-file-name=libubsan.so)

test-asan: deps $(CLI) sdk claude-deps console-deps
	@EXTRA_CFLAGS="$(ASAN_FLAGS)" EXTRA_LDFLAGS="-fsanitize=address,undefined" \
	    src/tools/build-module.sh $(TOP) $(BUILD)/asan $(PLUGIN_DIR)
	@mkdir -p $(BUILD)/asan/unit
	@fail=0; for t in $(UNIT_SRCS); do \
	    b=$(BUILD)/asan/unit/$$(basename $$t .c); \
	    $(CC) $(UNIT_CFLAGS) $(ASAN_FLAGS) -o $$b $$t $(CORE_SRCS) $(UNIT_LIBS) \
	        || exit 1; \
	    out=$$($$b) || fail=1; echo "$$out" | grep -E '^not ok'; \
	    echo "$$(basename $$b) (asan): $$(echo "$$out" | grep -c '^ok') passed"; \
	done; exit $$fail
	@# nginx frees its pools at exit, not every malloc: leak reports would be
	@# noise, so only memory errors and undefined behaviour are fatal.
	@# Every nginx dynamic module defines ngx_modules, ngx_module_names and
	@# ngx_module_order (nginx reads each through dlsym on that module's own
	@# handle): with two modules loaded, ASan's one-definition check fires on
	@# that ABI, not on a bug, hence detect_odr_violation=0.
	@# The runtimes are preloaded into nginx alone, through a wrapper the
	@# harness and the command's `serve` both start nginx by: preloaded into
	@# the clients too (curl, node, chromium, the command), libasan deadlocks
	@# some of them at exit (libp11-kit's destructor under the locale lock).
	@printf '#!/bin/sh\nLD_PRELOAD="%s" exec /usr/sbin/nginx "$$@"\n' \
	    "$(ASAN_LIBS)" > $(BUILD)/asan/nginx && chmod 755 $(BUILD)/asan/nginx
	@cd $(TOP) && TEST_NGINX_BINARY=$(BUILD)/asan/nginx \
	    TOKENBIRYANI_NGINX=$(BUILD)/asan/nginx \
	    ASAN_OPTIONS=detect_leaks=0:abort_on_error=1:detect_odr_violation=0 \
	    UBSAN_OPTIONS=print_stacktrace=1:halt_on_error=1 \
	    TEST_NGINX_LOAD_MODULES=$(BUILD)/asan/ngx_http_tokenbiryani_module.so \
	    TEST_NGINX_PLUGIN=$(BUILD)/asan/ngx_http_tokenbiryani_example_strategy_module.so \
	    TEST_NGINX_CLI=$(CLI) prove -r -j1 $(or $(SUITES),t/)

# memcheck on the unit tests and on every suite of the module (nginx, its
# master and workers, under valgrind); t/000-harness.t tests the harness
# with plain nginx, whose rlimit and timing checks do not hold under it
VALGRIND_SUITES := $(filter-out t/000-harness.t,$(wildcard t/[0-9]*.t))

test-valgrind: build $(UNIT_BINS)
	@command -v valgrind >/dev/null || $(MAKE) deps DEB_PKGS=valgrind
	@for b in $(UNIT_BINS); do \
	    valgrind -q --error-exitcode=99 --leak-check=full \
	        --errors-for-leak-kinds=definite $$b >/dev/null || exit 1; \
	    echo "$$(basename $$b) (valgrind): clean"; \
	done
	@cd $(TOP) && TEST_NGINX_VALGRIND=1 \
	    TEST_NGINX_LOAD_MODULES=$(MODULE) \
	    TEST_NGINX_PLUGIN=$(BUILD)/ngx_http_tokenbiryani_example_strategy_module.so \
	    prove -j1 $(VALGRIND_SUITES)

# the cache-affinity benchmark through the real gateway: every strategy and
# an oracle on the reference's workload (4 accounts, 24 conversations,
# 8 turns); BENCH_ARGS="--accounts 3 ..." for another size
bench-cache: build
	@/usr/bin/python3 t/bench/cache_affinity.py --module $(MODULE) $(BENCH_ARGS)

# 1,000 requests at once against 4 small mock windows: the 429s the mock
# had to send because the gateway admitted past a window (goal 0)
bench-stampede: build
	@/usr/bin/python3 t/bench/stampede.py --module $(MODULE) $(BENCH_ARGS)

# wrk against a static upstream, plain nginx proxy_pass, the gateway and
# Portkey's gateway (npm, Node 20) in one run: req/s, p50/p99, ratios
bench-overhead: build
	@command -v wrk >/dev/null || $(MAKE) deps DEB_PKGS=wrk
	@command -v node >/dev/null && command -v npm >/dev/null \
	    || $(MAKE) deps DEB_PKGS="nodejs npm"
	@/usr/bin/python3 t/bench/overhead.py --module $(MODULE) $(BENCH_ARGS)

# a few minutes of wrk (JSON and streams) and churn (malformed requests,
# unknown keys, oversized bodies, keys minted and revoked) against the
# gateway with each store: every worker's RssAnon slope after warm-up
# (exit 1 when one is over 200 KB/min); BENCH_ARGS="--minutes 9" for longer
bench-soak: build
	@command -v wrk >/dev/null || $(MAKE) deps DEB_PKGS=wrk
	@/usr/bin/python3 t/bench/soak.py --module $(MODULE) $(BENCH_ARGS)

# libFuzzer + ASan + UBSan on every parser of src/core, FUZZ_SECONDS each;
# the seeds are in t/fuzz/corpus/, what the fuzzers find in build/fuzz/
FUZZERS      := body sse headers classify config keyspec usage redisurl news peers batch \
                evstream sigv4 provider record
FUZZ_SECONDS ?= 60

fuzz: deps
	@command -v clang >/dev/null && [ -n "$$(clang -print-file-name=libclang_rt.fuzzer-x86_64.a | grep /)" ] \
	    || $(MAKE) deps DEB_PKGS="clang libclang-rt-dev"
	@mkdir -p $(BUILD)/fuzz
	@for f in $(FUZZERS); do \
	    clang -g -O1 -std=c99 -D_GNU_SOURCE -Isrc/core \
	        -fsanitize=fuzzer,address,undefined -fno-sanitize-recover=undefined \
	        -o $(BUILD)/fuzz/fuzz_$$f t/fuzz/fuzz_$$f.c $(CORE_SRCS) $(UNIT_LIBS) \
	        || exit 1; \
	done
	@for f in $(FUZZERS); do \
	    mkdir -p $(BUILD)/fuzz/corpus/$$f; \
	    $(BUILD)/fuzz/fuzz_$$f -max_total_time=$(FUZZ_SECONDS) -max_len=65536 \
	        -artifact_prefix=$(BUILD)/fuzz/$$f- \
	        $(BUILD)/fuzz/corpus/$$f t/fuzz/corpus/$$f > $(BUILD)/fuzz/$$f.log 2>&1 \
	        || { tail -40 $(BUILD)/fuzz/$$f.log; exit 1; }; \
	    echo "fuzz_$$f: $$(grep -o 'Done [0-9]* runs in [0-9]* second(s)' $(BUILD)/fuzz/$$f.log), no crash"; \
	done

# src/core alone: instructions per route decision (callgrind counts them
# the same on a busy machine) and time per operation
bench-core: deps
	@command -v valgrind >/dev/null || $(MAKE) deps DEB_PKGS=valgrind
	@mkdir -p $(BUILD)/bench
	@$(CC) -std=c99 -D_GNU_SOURCE -O2 -g -Isrc/core -o $(BUILD)/bench/bench_core \
	    t/bench/bench_core.c $(CORE_SRCS) $(UNIT_LIBS)
	@echo "| operation | time | throughput |"
	@echo "|---|---|---|"
	@$(BUILD)/bench/bench_core report
	@echo
	@echo "| route decision | instructions (callgrind) |"
	@echo "|---|---|"
	@for n in 16 1000; do \
	    calls=$$([ $$n = 16 ] && echo 2000 || echo 100); \
	    ir=$$(valgrind --tool=callgrind --callgrind-out-file=/dev/null \
	        --toggle-collect=tb_route $(BUILD)/bench/bench_core decide $$calls $$n \
	        2>&1 | sed -n 's/.*Collected : //p'); \
	    echo "| $$n accounts | $$((ir / calls)) |"; \
	done

# the command on the PATH; it still loads the module it was built with
# (an absolute path into this checkout)
PREFIX ?= /usr/local

install-cli: build
	@install -D -m 0755 $(CLI) $(DESTDIR)$(PREFIX)/bin/tokenbiryani
	@echo "installed $(DESTDIR)$(PREFIX)/bin/tokenbiryani (it loads $(MODULE))"

run: build
	@src/tools/run.sh start $(TOP) $(MODULE) $(RUNDIR)

stop:
	@src/tools/run.sh stop $(TOP) $(MODULE) $(RUNDIR)

clean:
	rm -rf $(BUILD) t/servroot*
