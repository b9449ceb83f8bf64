//! Reloading a listener's TLS certificate without a restart: its files are watched, and SIGHUP forces a reload.

use tollgate_tls::TlsAcceptor;

use crate::entries::EveryEntry;
use crate::task::AbortOnDrop;
use crate::watcher::{ConfigWatcher, DEFAULT_DEBOUNCE};

/// Watches the certificate, key and client CA files of `acceptor` and
/// reloads them once a burst of changes has gone quiet, or at once on
/// SIGHUP, until the returned guard is dropped.
///
/// A new certificate serves the handshakes that start afterwards; one that
/// does not load (a half-written file, a key that does not match) keeps the
/// running certificate and logs why at warn. `listener` names the listener
/// in the log lines.
pub fn watch_tls(acceptor: &TlsAcceptor, listener: &'static str) -> AbortOnDrop {
    let paths = acceptor.files().paths();
    let watcher = ConfigWatcher::new_or_forced_only::<EveryEntry>(&paths, DEFAULT_DEBOUNCE);
    let acceptor = acceptor.clone();
    watcher.spawn(move |_trigger| acceptor.reload_and_log(listener))
}
