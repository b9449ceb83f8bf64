#!/usr/bin/env bash
# Runs every Tollgate check on a fresh machine: installs what is missing, then
# formatting, lints, the whole test suite and the loom model checks.
#
# Usage: scripts/test.sh            (from anywhere inside the repository)
set -euo pipefail
cd "$(dirname "$0")/.."

log() { printf '\n==> %s\n' "$*"; }

# System packages the tests need, as "command:debian-package" pairs: the C
# linker rustc calls. Later parts (Redis, Envoy, the lab's browser test) add
# theirs here.
REQUIRED_COMMANDS=(
    "cc:gcc"
)

install_missing_packages() {
    local missing=()
    for pair in "${REQUIRED_COMMANDS[@]}"; do
        command -v "${pair%%:*}" >/dev/null 2>&1 || missing+=("${pair#*:}")
    done
    [ ${#missing[@]} -eq 0 ] && return 0
    log "installing missing packages: ${missing[*]}"
    local sudo=()
    if [ "$(id -u)" -ne 0 ]; then
        if command -v sudo >/dev/null 2>&1; then
            sudo=(sudo)
        else
            echo "error: missing ${missing[*]} and not root (install them, then rerun)" >&2
            exit 1
        fi
    fi
    "${sudo[@]}" apt-get update -qq
    DEBIAN_FRONTEND=noninteractive "${sudo[@]}" apt-get install -y -qq --no-install-recommends "${missing[@]}"
}

for tool in cargo rustc; do
    command -v "$tool" >/dev/null 2>&1 || { echo "error: $tool not found; Tollgate needs a Rust toolchain (see Cargo.toml rust-version)" >&2; exit 1; }
done
for component in fmt clippy; do
    cargo "$component" --version >/dev/null 2>&1 || { echo "error: cargo $component is not installed with this toolchain" >&2; exit 1; }
done

install_missing_packages

log "cargo fmt --check"
cargo fmt --all -- --check

log "cargo clippy (all targets, warnings are errors)"
cargo clippy --workspace --all-targets --locked -- -D warnings

log "cargo test"
cargo test --workspace --locked

log "loom model checks of the store's atomic step"
RUSTFLAGS="--cfg loom" CARGO_TARGET_DIR=target/loom \
    cargo test --locked --release -p tollgate-store --test loom

log "all checks passed"
