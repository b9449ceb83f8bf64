//! The process signals: SIGTERM and Ctrl-C stop a subcommand, SIGHUP forces a config reload.

use tokio::task::JoinHandle;

use crate::reload_trigger::ReloadTrigger;

/// Completes on Ctrl-C (SIGINT) or, on Unix, SIGTERM.
pub async fn shutdown_signal() {
    let ctrl_c = async {
        if let Err(error) = tokio::signal::ctrl_c().await {
            tracing::warn!(%error, "cannot listen for Ctrl-C");
            std::future::pending::<()>().await;
        }
    };
    #[cfg(unix)]
    let terminate = async {
        use tokio::signal::unix::{SignalKind, signal};
        match signal(SignalKind::terminate()) {
            Ok(mut sigterm) => {
                sigterm.recv().await;
            }
            Err(error) => {
                tracing::warn!(%error, "cannot listen for SIGTERM");
                std::future::pending::<()>().await;
            }
        }
    };
    #[cfg(not(unix))]
    let terminate = std::future::pending::<()>();
    tokio::select! {
        () = ctrl_c => tracing::info!("Ctrl-C received, draining"),
        () = terminate => tracing::info!("SIGTERM received, draining"),
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
