# Two commands matter on a fresh machine:
#   make demo   runs `dlock demo` (naive lock vs dlock) against a throwaway redis-server
#   make test   runs every check CI runs
# Both install what they need first: redis-server from Debian's packages; for make
# test also valkey-server (bookworm-backports), chromium, postgresql and valgrind.

SHELL := /bin/bash
GO ?= go
STATICCHECK := honnef.co/go/tools/cmd/staticcheck@v0.8.2
# Every Go module in the repository, nested ones too.
MODULES := $(shell find . -name go.mod -not -path './.git/*' -printf '%h\n' | sort)

.PHONY: demo test deps valkey-deps test-deps fmt-check tidy-check vet cross staticcheck release-check gotest valkey-test valkey-suites valkey-torture bench torture

# cmd/dlock is a module of its own (its dependencies stay out of the root
# module's users' builds): run it from its directory.
demo: deps
	cd cmd/dlock && $(GO) run . demo

test: test-deps fmt-check tidy-check vet cross staticcheck release-check gotest valkey-test

# redis-server (and redis-cli, redis-sentinel for the topology tests) from
# Debian's packages, only when missing.
deps:
	@if ! command -v redis-server >/dev/null || ! command -v redis-cli >/dev/null || ! command -v redis-sentinel >/dev/null; then \
		echo "installing redis-server, redis-tools and redis-sentinel from Debian's packages"; \
		SUDO=; [ "$$(id -u)" = 0 ] || SUDO=sudo; \
		$$SUDO apt-get update -qq && \
		DEBIAN_FRONTEND=noninteractive $$SUDO apt-get install -y -qq redis-server redis-tools redis-sentinel >/dev/null; \
	fi
	@redis-server --version

# Valkey, for the suites make test runs on it too (valkey-test): from
# Debian's bookworm-backports suite, whose name is added to the machine's
# Debian source entry (backports are installed only when asked for with -t).
valkey-deps:
	@if ! command -v valkey-server >/dev/null || ! command -v valkey-cli >/dev/null; then \
		echo "installing valkey-server from Debian's bookworm-backports suite (its name added to the Debian source entry)"; \
		SUDO=; [ "$$(id -u)" = 0 ] || SUDO=sudo; \
		src=/etc/apt/sources.list.d/debian.sources; \
		if [ -f $$src ] && ! grep -q 'bookworm-backports' $$src; then \
			$$SUDO sed -i 's/^Suites: bookworm bookworm-updates$$/Suites: bookworm bookworm-updates bookworm-backports/' $$src; \
		fi; \
		$$SUDO apt-get update -qq && \
		DEBIAN_FRONTEND=noninteractive $$SUDO apt-get install -y -qq -t bookworm-backports valkey-server >/dev/null; \
	fi
	@valkey-server --version

# Debian's Chromium, for the admin view's end-to-end browser test, and
# PostgreSQL's programs, for examples/dbtx's tests on a throwaway cluster
# (they look in /usr/lib/postgresql/*/bin too, where Debian puts them).
test-deps: deps valkey-deps
	@if ! command -v chromium >/dev/null; then \
		echo "installing chromium from Debian's packages (browser test of the admin view)"; \
		SUDO=; [ "$$(id -u)" = 0 ] || SUDO=sudo; \
		$$SUDO apt-get update -qq && \
		DEBIAN_FRONTEND=noninteractive $$SUDO apt-get install -y -qq chromium >/dev/null; \
	fi
	@if ! command -v gcc >/dev/null; then \
		echo "installing gcc from Debian's packages (the torture crash fault builds its fsync log library)"; \
		SUDO=; [ "$$(id -u)" = 0 ] || SUDO=sudo; \
		$$SUDO apt-get update -qq && \
		DEBIAN_FRONTEND=noninteractive $$SUDO apt-get install -y -qq gcc libc6-dev >/dev/null; \
	fi
	@if ! command -v valgrind >/dev/null || ! command -v vgdb >/dev/null; then \
		echo "installing valgrind from Debian's packages (bench/'s instruction count of redis-server)"; \
		SUDO=; [ "$$(id -u)" = 0 ] || SUDO=sudo; \
		$$SUDO apt-get update -qq && \
		DEBIAN_FRONTEND=noninteractive $$SUDO apt-get install -y -qq valgrind >/dev/null; \
	fi
	@if ! command -v initdb >/dev/null && ! ls /usr/lib/postgresql/*/bin/initdb >/dev/null 2>&1; then \
		echo "installing postgresql from Debian's packages (examples/dbtx tests on a throwaway cluster)"; \
		SUDO=; [ "$$(id -u)" = 0 ] || SUDO=sudo; \
		$$SUDO apt-get update -qq && \
		DEBIAN_FRONTEND=noninteractive $$SUDO apt-get install -y -qq postgresql >/dev/null; \
	fi

fmt-check:
	@out=$$(gofmt -l $$(git ls-files '*.go' 2>/dev/null || find . -name '*.go')); \
	if [ -n "$$out" ]; then echo "not gofmt-formatted:"; echo "$$out"; exit 1; fi

# go.mod and go.sum of every module as `go mod tidy` leaves them (it prints
# the diff otherwise). GOWORK=off: each module on its own, as CI has it.
# A module with a go.work beside it (cmd/dlock: `go install ...@version`
# refuses a go.mod with replace directives, so they are in its go.work) is
# tidied with the go.work's replaces added to a copy of its go.mod
# (-modfile), as tidy, which ignores workspaces, would see it with them.
tidy-check:
	@bad=; for m in $(MODULES); do echo "go mod tidy -diff ($$m)"; \
		if [ -f $$m/go.work ]; then \
			tmp=$$(mktemp -d) && cp $$m/go.mod $$m/go.sum $$tmp/ && \
			(cd $$m && $(GO) mod edit -modfile=$$tmp/go.mod $$(awk '/=>/ { sub(/^replace[ \t]+/, ""); print "-replace=" $$1 "=" $$3 }' go.work) && \
				GOWORK=off $(GO) mod tidy -diff -modfile=$$tmp/go.mod) || bad="$$bad $$m"; \
			rm -rf $$tmp; \
		else \
			(cd $$m && GOWORK=off $(GO) mod tidy -diff) || bad="$$bad $$m"; \
		fi; \
	done; \
	if [ -n "$$bad" ]; then echo "not tidy:$$bad (run go mod tidy there and commit go.mod and go.sum;" \
		"for cmd/dlock see docs/RELEASING.md, \"Tidying cmd/dlock\")"; exit 1; fi

vet:
	@set -e; for m in $(MODULES); do echo "go vet ($$m)"; (cd $$m && $(GO) vet ./...); done

# Other platforms stay buildable: every module, its tests included (go vet
# compiles them), for macOS; for Windows the two modules with per-OS code
# (the root module, with the library, its tests and the torture suite, and
# the CLI, whose run, demo and torture refuse there: they need process
# groups and SIGSTOP). The integrations' modules have none of their own.
cross:
	@set -e; for m in $(MODULES); do echo "go vet, darwin/arm64 ($$m)"; (cd $$m && GOOS=darwin GOARCH=arm64 $(GO) vet ./...); done
	@set -e; for m in . ./cmd/dlock; do echo "go vet, windows/amd64 ($$m)"; (cd $$m && GOOS=windows GOARCH=amd64 $(GO) vet ./...); done

staticcheck:
	@set -e; for m in $(MODULES); do echo "staticcheck ($$m)"; (cd $$m && $(GO) run $(STATICCHECK) ./...); done

# What a user outside the repository gets once the release is tagged: a
# module proxy in a temporary directory serving the published modules, made
# from the work tree, and a consumer module built, vetted and run against it
# (internal/release, docs/RELEASING.md). Outside gotest, so that its compiling
# does not run beside the timing-sensitive tests.
release-check:
	DLOCK_RELEASE_CHECK=1 $(GO) test -count=1 -timeout 5m ./internal/release

gotest:
	@set -e; for m in $(MODULES); do echo "go test -race ($$m)"; (cd $$m && $(GO) test -race -count=1 -timeout 15m ./...); done

# What depends on the server runs again on Valkey: the scripts (protocol,
# NOSCRIPT, conformance on the Client and Redlock, the lease-extension
# paths that read the server's version), pub/sub (hand-off,
# notify), replication, failover and Cluster (the topology tests), and the
# torture short profile's rows whose faults reach the server (restart,
# eviction, forced unlock, the lock family, Redlock). Without -race: the race
# detector checks dlock's code, the same on either server. Left to the Redis
# run: tests of dlock's own timers and connections (WithReplicas' read
# timeouts, hung pub/sub connections, the failover timings), and the rows
# whose faults are the workers' or the network's (kill, pause, blackhole,
# latency, reset). The two halves run side by side.
VALKEY_RUN := TestConformance|TestProtocol|ScriptFlush|NoScript|Handoff|HandOff|Sentinel|Cluster|Topology|Failover|Moved|Migrat|Notify|PubSub|Outage|Unavailable|Replica|Flavor|CheckServer|OnEveryServerPath|PutsBackAnExpiry|NeverShortensTheServerLease|MovesNothingStillWrites
VALKEY_SKIP := TestWithReplicasAcceptedWaitEndsInRedisAnswer|TestWithReplicasWaitNotBelowReadTimeout|Measured|HungPubSub|TestCloseDuringPubSubRepair
VALKEY_ROWS := ^(restart-aof|restart-empty|evict|force-unlock|mixed|semaphore|shared|election|redlock-3|redlock-5)$$
valkey-test: valkey-deps
	@$(MAKE) --no-print-directory -j2 --output-sync=target valkey-suites valkey-torture

valkey-suites:
	DLOCK_TEST_SERVER=valkey $(GO) test -count=1 -timeout 15m -run '$(VALKEY_RUN)' -skip '$(VALKEY_SKIP)' . ./internal/node ./internal/redistest ./internal/scripts ./redlock

valkey-torture:
	DLOCK_TEST_SERVER=valkey $(GO) test -count=1 -timeout 15m -run 'TestShortProfile/$(VALKEY_ROWS)' ./internal/torture

bench: deps
	cd bench && $(GO) run .

# The full torture profile (about 15 minutes on 2 cores): every scenario for
# about a minute, without the race detector, and the safety table of
# docs/torture.md regenerated from its output (between the torture markers).
torture: deps
	mkdir -p $(CURDIR)/.torture-dump
	TORTURE_FULL=1 TORTURE_TABLE=$(CURDIR)/.torture-table.md TORTURE_DUMP=$(CURDIR)/.torture-dump $(GO) test -count=1 -timeout 30m -run 'TestFullProfile' -v ./internal/torture
	@awk -v table=.torture-table.md ' \
		/<!-- torture:begin -->/ { print; print ""; while ((getline l < table) > 0) print l; print ""; skip = 1; next } \
		/<!-- torture:end -->/ { skip = 0 } \
		!skip { print }' docs/torture.md > docs/torture.md.new && mv docs/torture.md.new docs/torture.md && rm -f .torture-table.md
	@echo "docs/torture.md: safety table regenerated"
