//! The process signals: SIGTERM and Ctrl-C stop a subcommand, SIGHUP forces a config reload.

use std::future::Future;

use tokio::task::JoinHandle;

use crate::reload_trigger::ReloadTrigger;

/// Completes on Ctrl-C (SIGINT) or, on Unix, SIGTERM.
///
/// The handlers are installed when this returns (call it inside the
/// runtime), not when the future is first polled: a signal sent after the
/// call, even before the future runs (a process manager's SIGTERM right
/// after the server said where it listens), starts the drain instead of
/// ending the process.
pub fn shutdown_signal() -> impl Future<Output = ()> + Send + 'static {
    #[cfg(unix)]
    {
        use tokio::signal::unix::{SignalKind, signal};
        let listen = |kind: SignalKind, name: &'static str| match signal(kind) {
            Ok(stream) => Some(stream),
            Err(error) => {
                tracing::warn!(%error, "cannot listen for {name}");
                None
            }
        };
        let interrupt = listen(SignalKind::interrupt(), "Ctrl-C");
        let terminate = listen(SignalKind::terminate(), "SIGTERM");
        async move {
            let received = |stream: Option<tokio::signal::unix::Signal>| async move {
                match stream {
                    Some(mut stream) => {
                        stream.recv().await;
                    }
                    None => std::future::pending::<()>().await,
                }
            };
            tokio::select! {
                () = received(interrupt) => tracing::info!("Ctrl-C received, draining"),
                () = received(terminate) => tracing::info!("SIGTERM received, draining"),
            }
        }
    }
    #[cfg(not(unix))]
    async {
        if let Err(error) = tokio::signal::ctrl_c().await {
            tracing::warn!(%error, "cannot listen for Ctrl-C");
            std::future::pending::<()>().await;
        }
        tracing::info!("Ctrl-C received, draining");
    }
}

/// Forces a reload through `trigger` on each SIGHUP; `None` where SIGHUP cannot be heard.
///
/// The handler is installed when this returns, so a SIGHUP sent after it
/// no longer ends the process.
pub(crate) fn spawn_hangups(trigger: ReloadTrigger) -> Option<JoinHandle<()>> {
    #[cfg(unix)]
    {
        use tokio::signal::unix::{SignalKind, signal};
        match signal(SignalKind::hangup()) {
            Ok(mut sighup) => Some(tokio::spawn(async move {
                while sighup.recv().await.is_some() {
                    tracing::info!("SIGHUP received, reloading the config");
                    if !trigger.force() {
                        break;
                    }
                }
            })),
            Err(error) => {
                tracing::warn!(%error, "cannot listen for SIGHUP");
                None
            }
        }
    }
    #[cfg(not(unix))]
    {
        drop(trigger);
        None
    }
}
