# `make test` is the one command that checks everything CI checks.
CARGO ?= cargo

.PHONY: test fmt-check lint rust-test fmt bench-store

test: fmt-check lint rust-test

fmt-check:
	$(CARGO) fmt --all -- --check

lint:
	$(CARGO) clippy --workspace --all-targets -- -D warnings

rust-test:
	$(CARGO) test --workspace

fmt:
	$(CARGO) fmt --all

bench-store:
	$(CARGO) run --release -p stow-bench -- store
