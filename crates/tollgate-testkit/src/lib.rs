//! What Tollgate's integration tests share, so that each test says only what it checks.
//!
//! Must not know (the README's layout table): any Tollgate crate: it drives binaries and speaks HTTP; fixtures for one crate stay in that crate's `tests/`.
//!
//! The kit runs the real parts: `redis-server` nodes and clusters
//! ([`redis`], [`redis_cluster`], [`redis_sentinel`], TLS-only ones in [`redis_tls`]), the `tollgate` binary as a child process
//! ([`tollgate`], on top of [`process`]), Envoy ([`envoy`]) on the
//! repository's example bootstraps ([`bootstrap`]), a loopback upstream
//! ([`upstream`]), an xDS management server serving rate limit configs ([`xds`]). Around them it gives scratch directories
//! ([`scratch`]), free loopback ports ([`ports`]), bounded waits on a real
//! clock ([`budget`]), waits clear of a fixed window's reset ([`window`]), a test CA writing PEM files ([`pki`]), limits-file fragments ([`limits`]), the fuzzers'
//! fixed-seed runner ([`fuzz`]) and one small HTTP client, blocking ([`http`], on
//! `ureq`) or async ([`async_http`], on hyper-util's client).
//!
//! It is a `[dev-dependencies]` entry only and must never become a normal
//! dependency of a shipped crate.

pub mod async_http;
pub mod bootstrap;
pub mod budget;
pub mod envoy;
pub mod fuzz;
pub mod http;
pub mod limits;
pub mod nginx;
pub mod pki;
pub mod ports;
pub mod process;
pub mod redis;
pub mod redis_cluster;
pub mod redis_sentinel;
pub mod redis_tls;
pub mod rlqs;
pub mod scratch;
pub mod tollgate;
pub mod upstream;
pub mod window;
pub mod xds;
pub mod xds_tls;
