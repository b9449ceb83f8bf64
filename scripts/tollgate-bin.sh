# Sourced by the benchmark scripts from the repository root: sets $bin to the
# `tollgate` binary to measure. TOLLGATE_BIN measures a given build (e.g. the
# previous commit's, for a before/after ratio in one session); by default the
# tree is built here in release mode.
if [ -n "${TOLLGATE_BIN:-}" ]; then
    bin=$TOLLGATE_BIN
else
    cargo build -q --release -p tollgate
    bin=$PWD/target/release/tollgate
fi
