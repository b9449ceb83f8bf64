//! Reload races: rules swapped while clients hammer — a rule missing from one load
//! (a half-written file) and back in the next, or other rules changing — never
//! start a spent count again.

use std::sync::Arc;

use arc_swap::ArcSwap;
use tollgate_core::CoarseClock;
use tollgate_rules::{AlgorithmKind, RuleSet};
use tollgate_server::{Engine, EngineOptions};

use super::{
    Backend, DOMAIN, LIMIT, Subject, admitted, descriptor, parse, rule_yaml, rules_with, status,
};

/// Clients hammering at once.
const CLIENTS: usize = 4;
/// Requests each client sends per algorithm.
const REQUESTS: u64 = 60;
/// Rule swaps per algorithm while they do.
const SWAPS: usize = 30;

/// The rule sets a reloading operator goes through: all rules, a partial
/// file holding only the first `n` rules, and all rules plus one more.
fn rule_sets(backend: &Backend) -> Vec<Arc<RuleSet>> {
    let mut sets = vec![rules_with(backend, "")];
    for n in [0, 1, 3] {
        let mut yaml = format!("domain: {DOMAIN}\ndescriptors:\n");
        for kind in AlgorithmKind::ALL.into_iter().take(n) {
            yaml.push_str(&rule_yaml(kind, backend));
        }
        yaml.push_str("  - key: other\n    rate_limit: {unit: second, requests_per_unit: 1}\n");
        sets.push(parse(&yaml));
    }
    sets.push(rules_with(
        backend,
        "  - key: added\n    rate_limit: {unit: hour, requests_per_unit: 7}\n",
    ));
    sets
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn swapping_rules_while_hammering_never_admits_past_the_limit() {
    for backend in Backend::all() {
        let sets = rule_sets(&backend);
        let subject = Subject::start(&backend, EngineOptions::default()).await;
        let live: Arc<ArcSwap<Engine<CoarseClock>>> =
            Arc::new(ArcSwap::from_pointee(subject.engine));
        for kind in AlgorithmKind::ALL {
            let clients: Vec<_> = (0..CLIENTS)
                .map(|_| {
                    let live = Arc::clone(&live);
                    tokio::spawn(async move {
                        let mut ok = 0;
                        for _ in 0..REQUESTS {
                            let engine = live.load_full();
                            let s = status(&engine, descriptor(kind, "racer", None, false)).await;
                            ok += u64::from(admitted(s.as_ref()));
                            tokio::task::yield_now().await;
                        }
                        ok
                    })
                })
                .collect();
            for swap in 0..SWAPS {
                let next = live.load().with_rules(Arc::clone(&sets[swap % sets.len()]));
                live.store(Arc::new(next));
                tokio::task::yield_now().await;
            }
            let mut ok = 0;
            for client in clients {
                ok += client.await.expect("a client finishes");
            }
            // Back to every rule: the count kept across every swap.
            let full = live.load().with_rules(Arc::clone(&sets[0]));
            live.store(Arc::new(full));
            for _ in 0..2 * LIMIT {
                let s = status(&live.load(), descriptor(kind, "racer", None, false)).await;
                ok += u64::from(admitted(s.as_ref()));
            }
            assert!(
                ok <= LIMIT,
                "{kind} on {}: {ok} admitted across reloads",
                backend.name()
            );
        }
    }
}
