//! The types a multi-threaded proxy shares across tasks are Send and Sync.

use tollgate_upstream::balance::{Balance, BalanceLayer, ResponseFuture};
use tollgate_upstream::{Cluster, HealthCheckTask, HealthChecker, PickError, PickedEndpoint};

fn send_sync<T: Send + Sync>() {}
fn send<T: Send>() {}

#[test]
fn shared_types_cross_threads() {
    send_sync::<Cluster>();
    send_sync::<PickedEndpoint>();
    send_sync::<PickError>();
    send_sync::<HealthChecker>();
    send_sync::<HealthCheckTask>();
    send_sync::<BalanceLayer<()>>();
    send::<Balance<(), ()>>();
    send::<ResponseFuture<std::future::Ready<Result<http::Response<()>, PickError>>>>();
    // And a cluster really is usable from several threads at once.
    let cluster = Cluster::builder(
        tollgate_upstream::ClusterConfig::from_yaml(
            "name: t\nlb_policy: least_request\nendpoints: [{address: 'a:1'}, {address: 'b:1'}]\n",
        )
        .unwrap(),
    )
    .build()
    .unwrap();
    std::thread::scope(|s| {
        for _ in 0..4 {
            s.spawn(|| {
                for _ in 0..1000 {
                    let p = cluster.pick(None).unwrap();
                    p.finish(tollgate_upstream::Outcome::Success);
                }
            });
        }
    });
    assert_eq!(cluster.in_flight(), 0);
}
