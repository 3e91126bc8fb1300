# mmcpd: build, run, test.
GO      ?= go
VERSION ?= $(shell git describe --tags --always --dirty 2>/dev/null || echo dev)
LDFLAGS := -X main.version=$(VERSION)
# Bundled plugins: every plugins/<name>/ with Go sources builds to plugins/mmcp-plugin-<name>.
PLUGINS := $(patsubst plugins/%/,plugins/mmcp-plugin-%,$(sort $(dir $(wildcard plugins/*/*.go))))

.PHONY: all build run test bench fuzz lint proto clean

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

clean:
	rm -rf bin plugins/mmcp-plugin-*
