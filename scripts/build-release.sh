#!/usr/bin/env bash
# The image's build stage: builds the release `tollgate` binary from the
# locked dependencies and copies it to DEST. The Dockerfile runs exactly this
# script, so running it here checks the build stage without Docker.
#
# Usage: scripts/build-release.sh [DEST]   (default: target/image/tollgate)
#        TOLLGATE_GIT_HASH=... names the commit when there is no .git (as in
#        the image's build context); otherwise the build script asks git.
set -euo pipefail
cd "$(dirname "$0")/.."
dest=${1:-target/image/tollgate}

cargo build --release --locked -p tollgate --bin tollgate
mkdir -p "$(dirname "$dest")"
cp target/release/tollgate "$dest"
echo "built $dest"
