# mmcpd: build, run, test.
GO      ?= go
VERSION ?= $(shell git describe --tags --always --dirty 2>/dev/null || echo dev)
COMMIT  ?= $(shell git rev-parse --short=12 HEAD 2>/dev/null)
LDFLAGS := -X main.version=$(VERSION) -X main.commit=$(COMMIT)
# Bundled plugins: every plugins/<name>/ with Go sources builds to plugins/mmcp-plugin-<name>.
PLUGINS := $(patsubst plugins/%/,plugins/mmcp-plugin-%,$(sort $(dir $(wildcard plugins/*/*.go))))

.PHONY: all build run test bench fuzz lint proto clean dist

all: build

build:
	@echo "building bin/mmcpd (on a fresh machine the first build fetches and compiles every dependency: a few minutes)"
	$(GO) build -ldflags "$(LDFLAGS)" -o bin/mmcpd ./cmd/mmcpd
	@for p in $(PLUGINS); do \
		name=$${p#plugins/mmcp-plugin-}; \
		echo "$(GO) build -o $$p ./plugins/$$name"; \
		$(GO) build -o $$p ./plugins/$$name || exit 1; \
	done

run: build
	./bin/mmcpd serve

# gotestsum prints each package as it finishes, and at the end every skipped
# test with its reason (a missing outside program names its package).
GOTESTSUM ?= $(GO) run gotest.tools/gotestsum@v1.13.0

test:
	@echo "go vet ./... (on a fresh machine the first run fetches and compiles every dependency: a few minutes)"
	$(GO) vet ./...
	$(GOTESTSUM) --format pkgname-and-test-fails --format-hide-empty-pkg -- -race ./...

bench:
	$(GO) test -run='^$$' -bench=. -benchmem -count=5 ./...

# Each fuzz target for a while; FUZZTIME=5m make fuzz for a longer look.
FUZZTIME ?= 30s
fuzz:
	@for pkg in ./pkg/schema ./pkg/context ./pkg/redact; do \
		for t in $$($(GO) test -list '^Fuzz' $$pkg | grep '^Fuzz'); do \
			$(GO) test -run='^$$' -fuzz="^$$t$$" -fuzztime=$(FUZZTIME) $$pkg || exit 1; \
		done; \
	done

lint:
	@test -z "$$(gofmt -l $$(git ls-files '*.go'))" || { gofmt -l $$(git ls-files '*.go'); exit 1; }
	$(GO) vet ./...

# Regenerates the plugin protocol's Go code (committed, so only needed after
# editing the .proto). Needs protoc (Debian: protobuf-compiler) and the two
# generators: go install google.golang.org/protobuf/cmd/protoc-gen-go@latest
# google.golang.org/grpc/cmd/protoc-gen-go-grpc@latest
proto:
	cd pkg/plugins/proto && PATH="$$PATH:$$($(GO) env GOPATH)/bin" protoc \
		--go_out=. --go_opt=paths=source_relative \
		--go-grpc_out=. --go-grpc_opt=paths=source_relative plugin.proto

# Release archives: $(DIST_DIR)/mmcpd-<version>-<os>-<arch>.tar.gz for each
# platform, each holding bin/mmcpd, plugins/, the systemd unit, the env
# example and the README, and $(DIST_DIR)/SHA256SUMS. The binaries are static
# (CGO_ENABLED=0: the SQLite driver is pure Go), so one machine builds every
# architecture. Files are sorted, owned by root and dated to the commit, so
# the same commit gives the same archives. DIST_PLUGINS narrows the plugins
# (the test builds one).
DIST_DIR       ?= dist
DIST_PLATFORMS ?= linux/amd64 linux/arm64
DIST_PLUGINS   ?= $(patsubst plugins/mmcp-plugin-%,%,$(PLUGINS))
DIST_DATE      ?= $(shell git log -1 --format=%ct 2>/dev/null || echo 0)

dist:
	rm -rf $(DIST_DIR) && mkdir -p $(DIST_DIR)
	@set -e; for platform in $(DIST_PLATFORMS); do \
		os=$${platform%/*}; arch=$${platform#*/}; \
		name=mmcpd-$(VERSION)-$$os-$$arch; dir=$(DIST_DIR)/$$name; \
		echo "building $$name"; \
		mkdir -p $$dir/bin $$dir/plugins; \
		GOOS=$$os GOARCH=$$arch CGO_ENABLED=0 $(GO) build -trimpath -ldflags "$(LDFLAGS) -s -w" -o $$dir/bin/mmcpd ./cmd/mmcpd; \
		for p in $(DIST_PLUGINS); do \
			GOOS=$$os GOARCH=$$arch CGO_ENABLED=0 $(GO) build -trimpath -ldflags "-s -w" -o $$dir/plugins/mmcp-plugin-$$p ./plugins/$$p; \
		done; \
		cp deploy/mmcpd.service deploy/mmcpd.env.example README.md $$dir/; \
		tar -C $(DIST_DIR) --sort=name --owner=0 --group=0 --numeric-owner --mtime=@$(DIST_DATE) -cf $$dir.tar $$name; \
		gzip -n $$dir.tar; \
		rm -rf $$dir; \
	done
	cd $(DIST_DIR) && sha256sum mmcpd-*.tar.gz > SHA256SUMS && cat SHA256SUMS

clean:
	rm -rf bin plugins/mmcp-plugin-* dist
