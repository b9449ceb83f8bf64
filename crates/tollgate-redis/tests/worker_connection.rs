//! A store used from workers' own current-thread runtimes calls Redis on one connection per worker, and stays exact across them.

use std::sync::Barrier;
use std::time::Duration;

use tollgate_core::{AnyAlgorithm, FixedWindow, Timestamp};
use tollgate_redis::RedisStore;
use tollgate_store::{Counter, CounterStore};
use tollgate_testkit::redis::RedisServer;

const LIMIT: u64 = 30;
const CHECKS_PER_WORKER: usize = 25;
const WORKERS: usize = 2;

fn counter() -> Counter<'static> {
    Counter {
        group: 0,
        key: b"worker-connection",
        tag: 26,
        // 100 days: the test never runs across a window's end.
        algorithm: AnyAlgorithm::from(
            FixedWindow::new(LIMIT, Duration::from_secs(100 * 86_400)).unwrap(),
        ),
        hits: 1,
        give_back: false,
        phase_ns: 0,
    }
}

/// Clients connected to `server`, from `INFO clients` (the `redis-cli` asking included).
fn connected_clients(server: &RedisServer) -> usize {
    let info = server.cli(&["INFO", "clients"]);
    info.lines()
        .find_map(|l| l.strip_prefix("connected_clients:"))
        .expect("INFO clients names connected_clients")
        .trim()
        .parse()
        .unwrap()
}

fn current_thread() -> tokio::runtime::Runtime {
    tokio::runtime::Builder::new_current_thread()
        .enable_all()
        .build()
        .unwrap()
}

#[test]
fn each_worker_calls_on_its_own_connection_and_the_limit_holds_across_them() {
    let server = RedisServer::start();
    let home = current_thread();
    let store = home
        .block_on(RedisStore::connect(&server.url(), Duration::from_secs(1)))
        .unwrap()
        .with_connection_per_worker();
    let before = connected_clients(&server);
    // Every worker has checked (and holds its connection) at the first
    // barrier; the count is read before any worker's runtime ends.
    let checked = Barrier::new(WORKERS + 1);
    let counted = Barrier::new(WORKERS + 1);
    let (admitted, during) = std::thread::scope(|s| {
        let workers: Vec<_> = (0..WORKERS)
            .map(|_| {
                s.spawn(|| {
                    let runtime = current_thread();
                    // The first error ends the worker's checks; the
                    // barriers are met whatever happened, so a failure
                    // fails the asserts below instead of hanging the test.
                    let admitted = runtime.block_on(async {
                        let mut admitted = 0;
                        let mut out = Vec::new();
                        for _ in 0..CHECKS_PER_WORKER {
                            store
                                .check_batch(&[counter()], Timestamp::from_secs(0), &mut out)
                                .await
                                .map_err(|e| e.to_string())?;
                            admitted += u64::from(out[0].is_allowed());
                        }
                        Ok::<u64, String>(admitted)
                    });
                    checked.wait();
                    counted.wait();
                    admitted
                })
            })
            .collect();
        checked.wait();
        let during = connected_clients(&server);
        counted.wait();
        let admitted: Result<Vec<u64>, String> =
            workers.into_iter().map(|w| w.join().unwrap()).collect();
        (admitted.map(|a| a.into_iter().sum::<u64>()), during)
    });
    let admitted = admitted.expect("every worker's checks answered by Redis");
    assert_eq!(
        admitted,
        LIMIT,
        "{} checks on {WORKERS} connections admitted exactly the limit",
        WORKERS * CHECKS_PER_WORKER
    );
    assert_eq!(store.worker_connections(), WORKERS);
    assert_eq!(
        during,
        before + WORKERS,
        "one connection of its own per worker, beside the store's"
    );
    // The store's own runtime keeps its own connection.
    let mut out = Vec::new();
    home.block_on(store.check_batch(&[counter()], Timestamp::from_secs(0), &mut out))
        .unwrap();
    assert!(
        !out[0].is_allowed(),
        "the limit is used up for every runtime"
    );
    assert_eq!(store.worker_connections(), WORKERS);
}
