//! [`serve_on_workers`]: the gRPC listener served by N threads, each with its own current-thread runtime, accepting from the same socket.
//!
//! A multi-thread runtime moves tasks between its workers (work stealing)
//! and wakes tasks across threads: with two workers a check cost 1.14-1.26x
//! the server CPU of one (docs/benchmarks.md, issue 26). Here each worker
//! is a thread with a current-thread runtime that accepts from its own
//! handle (a `dup`) on the one bound socket: the kernel hands each new
//! connection to one of the workers waiting in `accept`, and the
//! connection's calls are then served on that worker's thread only, with no
//! task ever moving to another thread.
//!
//! What the workers share: the services (the engine in service, so a
//! reload reaches every worker's next call; the quota book, whose streams
//! are fed through channels that work across runtimes), one
//! [`ConnectionLimit`](tollgate_runtime::ConnectionLimit) (the bound holds
//! over all of them) and one [`Shutdown`]: at the stop every worker stops
//! accepting, drains its connections and drops its runtime on its own
//! thread; [`serve_on_workers`] returns once all have.

use std::io;
use std::num::NonZeroUsize;

use futures_util::StreamExt;
use futures_util::stream::FuturesUnordered;
use tokio::net::TcpListener;
use tollgate_core::Clock;
use tollgate_runtime::Shutdown;

use super::serve::{Acceptor, GrpcServer};
use super::{GrpcLimits, RateLimitGrpc};

/// Serves `service` on `listener` with `workers` threads of their own
/// (see the module docs) until `shutdown` is triggered, then waits until
/// every worker has drained its connections and stopped.
///
/// The store's health watch and the quota payer run on the runtime that
/// calls this, as do whatever tasks the caller runs there (the HTTP API,
/// the reload watcher, the Redis connections). A worker that cannot start
/// its runtime, or that stops before the shutdown, triggers it, so the
/// others stop too, and its error is returned once all have stopped.
pub async fn serve_on_workers<C>(
    listener: std::net::TcpListener,
    service: RateLimitGrpc<C>,
    grpc_limits: GrpcLimits,
    workers: NonZeroUsize,
    shutdown: Shutdown,
) -> io::Result<()>
where
    C: Clock + 'static,
{
    listener.set_nonblocking(true)?;
    let server = GrpcServer::start(service, grpc_limits).await;
    let mut running = FuturesUnordered::new();
    let mut threads = Vec::with_capacity(workers.get());
    let mut outcome = Ok(());
    for index in 0..workers.get() {
        let started = listener
            .try_clone()
            .and_then(|listener| start_worker(index, listener, server.acceptor(), &shutdown));
        match started {
            Ok((thread, done)) => {
                threads.push(thread);
                running.push(done);
            }
            Err(error) => {
                tracing::error!(%error, worker = index, "cannot start a gRPC worker; stopping");
                shutdown.trigger();
                outcome = Err(error);
                break;
            }
        }
    }
    drop(listener);
    while let Some(done) = running.next().await {
        let result = done.unwrap_or_else(|_| {
            Err(io::Error::other(
                "a gRPC worker stopped without saying why (its thread ended)",
            ))
        });
        if let Err(error) = result {
            if !shutdown.is_triggered() {
                tracing::error!(%error, "a gRPC worker stopped; stopping the others");
                shutdown.trigger();
            }
            if outcome.is_ok() {
                outcome = Err(error);
            }
        }
    }
    // Every worker has said it is done: its runtime is dropped, and the
    // thread ends at once.
    for thread in threads {
        if thread.join().is_err() {
            outcome = outcome.and(Err(io::Error::other("a gRPC worker panicked")));
        }
    }
    outcome
}

/// What a worker says when it stops: its runtime has been dropped by then.
type WorkerDone = tokio::sync::oneshot::Receiver<io::Result<()>>;

/// Starts worker `index` on a thread of its own, accepting on `listener` until `shutdown`.
fn start_worker<C: Clock + 'static>(
    index: usize,
    listener: std::net::TcpListener,
    acceptor: Acceptor<C>,
    shutdown: &Shutdown,
) -> io::Result<(std::thread::JoinHandle<()>, WorkerDone)> {
    let (said, done) = tokio::sync::oneshot::channel();
    let stopped = shutdown.stopped();
    let thread = std::thread::Builder::new()
        .name(format!("tollgate-grpc-{index}"))
        .spawn(move || {
            let result = run_worker(listener, acceptor, stopped);
            let _ = said.send(result);
        })?;
    Ok((thread, done))
}

/// Builds a current-thread runtime on this thread, serves on it until
/// `stopped` and the drain are done, then drops it here (a runtime
/// dropped inside another runtime's context panics; this thread has none).
fn run_worker<C: Clock + 'static>(
    listener: std::net::TcpListener,
    acceptor: Acceptor<C>,
    stopped: impl Future<Output = ()> + Send + 'static,
) -> io::Result<()> {
    let runtime = tokio::runtime::Builder::new_current_thread()
        .enable_all()
        .build()?;
    let served = runtime.block_on(async move {
        let listener = TcpListener::from_std(listener)?;
        acceptor.accept(listener, stopped).await;
        Ok(())
    });
    drop(runtime);
    served
}
