//! What every long-running subcommand (`serve`, `proxy`, `lab`) shares: the config watcher, signals, graceful shutdown and the accept loop.
//!
//! Must not know (the README's layout table): limits, rules, engines, Redis, HTTP routes, the proxy's config format;
//! a caller says which paths hold its configuration, what a reload does and what a connection serves.
//!
//! * [`ConfigWatcher`] watches configuration paths (files or directories)
//!   and calls a reload callback once a burst of changes has gone quiet, or
//!   at once on SIGHUP or a [`ReloadTrigger`]. [`ConfigEntries`] says which
//!   entries of a watched directory count.
//! * [`shutdown_signal`] completes on SIGTERM or Ctrl-C; [`Shutdown`] is the
//!   one stop that several servers of a process share.
//! * [`serve_connections`] is the accept loop: accept, spawn a hyper
//!   connection, and on shutdown stop accepting and [`drain`] the
//!   connections for at most a timeout; a [`ConnectionLimit`] caps the
//!   connections it keeps open; with a `TlsAcceptor` (tollgate-tls) each
//!   connection is TLS, and [`watch_tls`] reloads its certificate when the
//!   files change or on SIGHUP.
//! * [`LabelValue`]: a Prometheus label value written escaped, for label
//!   values that callers or configurations choose.
//! * [`error_chain`]: an error worded with its sources (tonic's and hyper's say little alone).
//! * [`trace_context`]: whether tracing is on, and W3C trace context taken
//!   from a request's headers and passed on to the next hop.

#![forbid(unsafe_code)]

mod accept;
mod connection_limit;
mod entries;
mod error_chain;
mod label_value;
mod open_connections;
mod reload_trigger;
mod shutdown;
mod signal;
mod task;
mod tls_reload;
pub mod trace_context;
mod watcher;

pub use accept::{AcceptOptions, LIMIT_LOG_INTERVAL, serve_connections};
pub use connection_limit::{ConnectionLimit, Slot};
pub use entries::{ConfigEntries, EveryEntry};
pub use error_chain::error_chain;
pub use label_value::LabelValue;
pub use open_connections::{ConnectionAge, OpenConnections};
pub use reload_trigger::{ReloadTrigger, Trigger};
pub use shutdown::{Drained, Shutdown, drain};
pub use signal::shutdown_signal;
pub use task::AbortOnDrop;
pub use tls_reload::watch_tls;
pub use watcher::{ConfigWatcher, DEFAULT_DEBOUNCE};
