//! A real nginx (Debian's) for differential tests: one worker on a free loopback port, its own prefix directory, stopped on drop.

use std::net::{SocketAddr, TcpStream};
use std::path::{Path, PathBuf};
use std::process::{Command, Stdio};
use std::time::Duration;

use crate::budget::poll_until;
use crate::ports::free_port;
use crate::process::{ChildGuard, log_tail};

/// How long a started nginx may take to accept a connection.
const START_BUDGET: Duration = Duration::from_secs(10);

/// The `nginx` binary: `$TOLLGATE_NGINX`, else `nginx` on PATH, else Debian's `/usr/sbin/nginx`.
#[must_use]
pub fn nginx_bin() -> PathBuf {
    if let Some(path) = std::env::var_os("TOLLGATE_NGINX") {
        return PathBuf::from(path);
    }
    let on_path = std::env::var_os("PATH")
        .into_iter()
        .flat_map(|paths| std::env::split_paths(&paths).collect::<Vec<_>>())
        .map(|dir| dir.join("nginx"))
        .find(|candidate| candidate.is_file());
    on_path.unwrap_or_else(|| PathBuf::from("/usr/sbin/nginx"))
}

/// One nginx serving a test's `http` block contents, killed on drop.
#[derive(Debug)]
pub struct Nginx {
    /// Where it listens.
    pub addr: SocketAddr,
    _child: ChildGuard,
}

impl Nginx {
    /// Starts nginx in `dir` (its prefix: logs, temp files, `nginx.conf`)
    /// with `http` inside its `http { … }` block; `{listen}` in it is
    /// replaced by the address it listens on. Waits (bounded) until it accepts.
    #[must_use]
    pub fn start(dir: &Path, http: &str) -> Nginx {
        let port = free_port();
        let addr: SocketAddr = ([127, 0, 0, 1], port).into();
        std::fs::create_dir_all(dir.join("logs")).expect("the nginx log directory is created");
        let prefix = dir.display();
        let config = format!(
            "worker_processes 1;\ndaemon off;\nmaster_process off;\npid {prefix}/nginx.pid;\nerror_log {prefix}/logs/error.log warn;\nevents {{ worker_connections 256; }}\nhttp {{\n  access_log off;\n  client_body_temp_path {prefix}/body;\n  proxy_temp_path {prefix}/proxy;\n  fastcgi_temp_path {prefix}/fastcgi;\n  uwsgi_temp_path {prefix}/uwsgi;\n  scgi_temp_path {prefix}/scgi;\n{}\n}}\n",
            http.replace("{listen}", &addr.to_string())
        );
        let conf = dir.join("nginx.conf");
        std::fs::write(&conf, config).expect("nginx.conf is written");
        let child = ChildGuard(
            Command::new(nginx_bin())
                .arg("-p")
                .arg(dir)
                .arg("-c")
                .arg(&conf)
                .arg("-e")
                .arg(dir.join("logs/error.log"))
                .stdin(Stdio::null())
                .stdout(Stdio::null())
                .stderr(Stdio::null())
                .spawn()
                .expect("nginx starts (apt-get install nginx, or set TOLLGATE_NGINX)"),
        );
        let up = poll_until(START_BUDGET, || {
            TcpStream::connect_timeout(&addr, Duration::from_millis(200))
                .ok()
                .map(|_| ())
        });
        assert!(
            up.is_some(),
            "nginx did not listen on {addr} within {START_BUDGET:?}; error log:\n{}",
            log_tail(&dir.join("logs/error.log"))
        );
        Nginx {
            addr,
            _child: child,
        }
    }
}
