//! [`ListenerLimits`]: what one listener allows a client connection (header time and size, idle time, stream idle time, open connections), with Envoy-like defaults.

use std::time::Duration;

use super::path::{ConfigPath, FieldError};
use super::proxy::ListenerConfig;

/// How long a client may take to send a request's headers by default.
///
/// Envoy leaves `request_headers_timeout` off, but then relies on its 1 h
/// idle timeout; 10 s is long enough for any real client on a slow link to
/// send a few kilobytes, and short enough that a client dribbling one byte
/// at a time holds a connection (a file descriptor) for seconds, not hours.
pub const DEFAULT_REQUEST_HEADERS_TIMEOUT: Duration = Duration::from_secs(10);

/// How long a connection with no request in flight stays open by default.
///
/// Envoy's HTTP connection manager uses 1 h. 60 s keeps keep-alive useful
/// (clients reuse a connection within seconds) while an idle connection
/// costs its file descriptor and buffers for one minute at most, so idle
/// clients cannot fill the connection limit for long.
pub const DEFAULT_IDLE_TIMEOUT: Duration = Duration::from_secs(60);

/// How long a request in flight may go without a byte moving on its connection by default: Envoy's `stream_idle_timeout`.
///
/// A client that reads its response (or sends its request body) one byte
/// every few seconds keeps a request in flight, so the idle timeout never
/// starts; this bound cuts it once nothing has moved for 5 minutes, long
/// enough for a slow upstream or a stalled mobile link to recover.
pub const DEFAULT_STREAM_IDLE_TIMEOUT: Duration = Duration::from_secs(300);

/// The most connections a listener keeps open by default.
///
/// Envoy has no per-listener default (its overload manager's
/// `max_downstream_connections` is unset); 10 000 connections cost about
/// 10 000 file descriptors and a few hundred MiB of buffers at worst, so set
/// it below the process's open-file limit (`ulimit -n`) minus the upstream
/// connections.
pub const DEFAULT_MAX_CONNECTIONS: usize = 10_000;

/// The largest request head by default, in KiB: Envoy's `max_request_headers_kb`.
pub const DEFAULT_MAX_REQUEST_HEADERS_KB: u32 = 60;

/// The smallest `max_request_headers_kb`: hyper's HTTP/1 read buffer cannot be smaller than 8 KiB.
pub const MIN_REQUEST_HEADERS_KB: u32 = 8;

/// The largest `max_request_headers_kb`, as Envoy's.
pub const MAX_REQUEST_HEADERS_KB: u32 = 8192;

/// One listener's limits on its client connections, resolved.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub struct ListenerLimits {
    /// The time a client has to send a request's headers (`None`: no limit).
    pub request_headers_timeout: Option<Duration>,
    /// The time a connection with no request in flight stays open (`None`: no limit).
    pub idle_timeout: Option<Duration>,
    /// The time a request in flight may go without a byte read from or written to its client (`None`: no limit).
    pub stream_idle_timeout: Option<Duration>,
    /// The most connections open at once.
    pub max_connections: usize,
    /// The largest request head (request line and headers), in bytes; a larger one gets 431.
    pub max_request_header_bytes: usize,
}

impl Default for ListenerLimits {
    fn default() -> Self {
        ListenerLimits {
            request_headers_timeout: Some(DEFAULT_REQUEST_HEADERS_TIMEOUT),
            idle_timeout: Some(DEFAULT_IDLE_TIMEOUT),
            stream_idle_timeout: Some(DEFAULT_STREAM_IDLE_TIMEOUT),
            max_connections: DEFAULT_MAX_CONNECTIONS,
            max_request_header_bytes: kib(DEFAULT_MAX_REQUEST_HEADERS_KB),
        }
    }
}

/// The limits as set (in a listener's YAML or on the command line); what is unset keeps its value.
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq)]
pub struct LimitSettings {
    /// `request_headers_timeout` (0 disables).
    pub request_headers_timeout: Option<Duration>,
    /// `idle_timeout` (0 disables).
    pub idle_timeout: Option<Duration>,
    /// `stream_idle_timeout` (0 disables).
    pub stream_idle_timeout: Option<Duration>,
    /// `max_connections` (at least 1).
    pub max_connections: Option<usize>,
    /// `max_request_headers_kb` (8 to 8192).
    pub max_request_headers_kb: Option<u32>,
}

impl From<&ListenerConfig> for LimitSettings {
    fn from(listener: &ListenerConfig) -> Self {
        LimitSettings {
            request_headers_timeout: listener.request_headers_timeout,
            idle_timeout: listener.idle_timeout,
            stream_idle_timeout: listener.stream_idle_timeout,
            max_connections: listener.max_connections,
            max_request_headers_kb: listener.max_request_headers_kb,
        }
    }
}

impl ListenerLimits {
    /// These limits with what `settings` sets replaced; `at` names the listener in errors.
    pub fn with(self, settings: &LimitSettings, at: &ConfigPath) -> Result<Self, FieldError> {
        let mut limits = self;
        if let Some(d) = settings.request_headers_timeout {
            limits.request_headers_timeout = (!d.is_zero()).then_some(d);
        }
        if let Some(d) = settings.idle_timeout {
            limits.idle_timeout = (!d.is_zero()).then_some(d);
        }
        if let Some(d) = settings.stream_idle_timeout {
            limits.stream_idle_timeout = (!d.is_zero()).then_some(d);
        }
        if let Some(n) = settings.max_connections {
            if n == 0 {
                return Err(at.key("max_connections").error("must be at least 1"));
            }
            limits.max_connections = n;
        }
        if let Some(kb) = settings.max_request_headers_kb {
            if !(MIN_REQUEST_HEADERS_KB..=MAX_REQUEST_HEADERS_KB).contains(&kb) {
                return Err(at.key("max_request_headers_kb").error(format!(
                    "must be from {MIN_REQUEST_HEADERS_KB} to {MAX_REQUEST_HEADERS_KB} (got {kb})"
                )));
            }
            limits.max_request_header_bytes = kib(kb);
        }
        Ok(limits)
    }
}

fn kib(kb: u32) -> usize {
    usize::try_from(kb)
        .unwrap_or(usize::MAX)
        .saturating_mul(1024)
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn settings_replace_defaults_zero_disables_a_timeout_and_bad_values_name_their_field() {
        let at = ConfigPath::root().key("listeners").index(0);
        let set = LimitSettings {
            request_headers_timeout: Some(Duration::ZERO),
            idle_timeout: Some(Duration::from_secs(5)),
            stream_idle_timeout: Some(Duration::ZERO),
            max_connections: Some(3),
            max_request_headers_kb: Some(8),
        };
        let limits = ListenerLimits::default().with(&set, &at).unwrap();
        assert_eq!(limits.request_headers_timeout, None);
        assert_eq!(limits.idle_timeout, Some(Duration::from_secs(5)));
        assert_eq!(limits.stream_idle_timeout, None);
        assert_eq!(limits.max_connections, 3);
        assert_eq!(limits.max_request_header_bytes, 8192);
        let zero = LimitSettings {
            max_connections: Some(0),
            ..LimitSettings::default()
        };
        let error = ListenerLimits::default().with(&zero, &at).unwrap_err();
        assert!(error.to_string().contains("max_connections"), "{error}");
        let tiny = LimitSettings {
            max_request_headers_kb: Some(4),
            ..LimitSettings::default()
        };
        let error = ListenerLimits::default().with(&tiny, &at).unwrap_err();
        assert!(error.to_string().contains("from 8 to 8192"), "{error}");
    }
}
