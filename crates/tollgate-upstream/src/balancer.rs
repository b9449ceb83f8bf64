//! The load balancers: how one request picks an endpoint among the usable ones.
//!
//! A balancer sees the endpoints by index. The cluster tells it which ones
//! are usable right now (not ejected, not failing health checks, or all of
//! them in panic mode) and how many requests each has in flight; the
//! balancer only decides.

use std::sync::atomic::{AtomicUsize, Ordering};

use parking_lot::Mutex;
use rand::{Rng, RngCore};
use rand_chacha::ChaCha8Rng;
use xxhash_rust::xxh3::xxh3_64;

use crate::config::{EndpointConfig, LbPolicy, RingHashConfig};

/// What a balancer may ask about the endpoints while picking.
pub(crate) trait EndpointView {
    /// How many endpoints the cluster has.
    fn len(&self) -> usize;
    /// Whether endpoint `i` may take this request.
    fn usable(&self, i: usize) -> bool;
    /// Requests in flight on endpoint `i`.
    fn in_flight(&self, i: usize) -> i64;
}

/// One balancer with the state its policy needs.
pub(crate) enum Balancer {
    RoundRobin {
        next: AtomicUsize,
    },
    WeightedRoundRobin {
        weights: Vec<i64>,
        current: Mutex<Vec<i64>>,
    },
    LeastRequest,
    RingHash {
        /// Virtual nodes sorted by hash: (hash, endpoint index).
        ring: Vec<(u64, usize)>,
    },
    Random {
        weights: Vec<u64>,
    },
}

impl Balancer {
    /// Builds the balancer for `policy` over `endpoints`.
    pub(crate) fn new(
        policy: LbPolicy,
        endpoints: &[EndpointConfig],
        ring: RingHashConfig,
    ) -> Self {
        match policy {
            LbPolicy::RoundRobin => Balancer::RoundRobin {
                next: AtomicUsize::new(0),
            },
            LbPolicy::WeightedRoundRobin => Balancer::WeightedRoundRobin {
                weights: endpoints.iter().map(|e| i64::from(e.weight)).collect(),
                current: Mutex::new(vec![0; endpoints.len()]),
            },
            LbPolicy::LeastRequest => Balancer::LeastRequest,
            LbPolicy::RingHash => Balancer::RingHash {
                ring: build_ring(endpoints, ring),
            },
            LbPolicy::Random => Balancer::Random {
                weights: endpoints.iter().map(|e| u64::from(e.weight)).collect(),
            },
        }
    }

    /// Picks a usable endpoint, or `None` when there is none.
    ///
    /// `hash_key` matters only to the ring hash (without one it picks a
    /// random point on the ring).
    pub(crate) fn pick(
        &self,
        view: &dyn EndpointView,
        hash_key: Option<&[u8]>,
        rng: &Mutex<ChaCha8Rng>,
    ) -> Option<usize> {
        let n = view.len();
        match self {
            Balancer::RoundRobin { next } => {
                let start = next.fetch_add(1, Ordering::Relaxed) % n;
                (0..n).map(|k| (start + k) % n).find(|&i| view.usable(i))
            }
            Balancer::WeightedRoundRobin { weights, current } => {
                let mut current = current.lock();
                smooth_weighted_pick(weights, &mut current, |i| view.usable(i))
            }
            Balancer::LeastRequest => least_request_pick(view, &mut rng.lock()),
            Balancer::RingHash { ring } => {
                let hash = match hash_key {
                    Some(key) => xxh3_64(key),
                    None => rng.lock().next_u64(),
                };
                ring_pick(ring, hash, |i| view.usable(i))
            }
            Balancer::Random { weights } => weighted_random_pick(weights, view, &mut rng.lock()),
        }
    }
}

/// nginx's smooth weighted round robin over the usable endpoints.
///
/// Every usable endpoint's current weight grows by its weight; the largest
/// current weight wins (the first on a tie) and drops by the sum of the
/// usable weights. Weights 5, 1, 1 give A A B A C A A.
pub(crate) fn smooth_weighted_pick(
    weights: &[i64],
    current: &mut [i64],
    usable: impl Fn(usize) -> bool,
) -> Option<usize> {
    let mut total = 0i64;
    let mut best: Option<usize> = None;
    for i in 0..weights.len() {
        if !usable(i) {
            continue;
        }
        current[i] += weights[i];
        total += weights[i];
        if best.is_none_or(|b| current[i] > current[b]) {
            best = Some(i);
        }
    }
    let best = best?;
    current[best] -= total;
    Some(best)
}

/// Power of two choices: two distinct usable endpoints at random, the one
/// with fewer requests in flight wins (the first drawn on a tie).
fn least_request_pick(view: &dyn EndpointView, rng: &mut ChaCha8Rng) -> Option<usize> {
    let n = view.len();
    let all_usable = (0..n).all(|i| view.usable(i));
    let candidates: Vec<usize>;
    let pool: &[usize] = if all_usable {
        &[]
    } else {
        candidates = (0..n).filter(|&i| view.usable(i)).collect();
        &candidates
    };
    let count = if all_usable { n } else { pool.len() };
    let index = |k: usize| if all_usable { k } else { pool[k] };
    match count {
        0 => None,
        1 => Some(index(0)),
        _ => {
            let a = rng.random_range(0..count);
            let mut b = rng.random_range(0..count - 1);
            if b >= a {
                b += 1;
            }
            let (a, b) = (index(a), index(b));
            if view.in_flight(b) < view.in_flight(a) {
                Some(b)
            } else {
                Some(a)
            }
        }
    }
}

/// A weighted random usable endpoint.
fn weighted_random_pick(
    weights: &[u64],
    view: &dyn EndpointView,
    rng: &mut ChaCha8Rng,
) -> Option<usize> {
    let total: u64 = (0..weights.len())
        .filter(|&i| view.usable(i))
        .map(|i| weights[i])
        .sum();
    if total == 0 {
        return None;
    }
    let mut point = rng.random_range(0..total);
    for (i, &w) in weights.iter().enumerate() {
        if !view.usable(i) {
            continue;
        }
        if point < w {
            return Some(i);
        }
        point -= w;
    }
    None
}

/// Builds the ring: each endpoint gets `virtual_nodes` × its weight nodes,
/// the n-th at xxh3 of `address_n`. An endpoint's nodes depend on nothing
/// else, so adding an endpoint moves only the keys that land on its nodes.
pub(crate) fn build_ring(
    endpoints: &[EndpointConfig],
    config: RingHashConfig,
) -> Vec<(u64, usize)> {
    let mut ring = Vec::new();
    for (index, endpoint) in endpoints.iter().enumerate() {
        let nodes = u64::from(endpoint.weight) * u64::from(config.virtual_nodes);
        for n in 0..nodes {
            let hash = xxh3_64(format!("{}_{n}", endpoint.address).as_bytes());
            ring.push((hash, index));
        }
    }
    ring.sort_unstable();
    ring
}

/// The first usable endpoint at or after `hash` on the ring, going round.
pub(crate) fn ring_pick(
    ring: &[(u64, usize)],
    hash: u64,
    usable: impl Fn(usize) -> bool,
) -> Option<usize> {
    if ring.is_empty() {
        return None;
    }
    let start = ring.partition_point(|&(h, _)| h < hash);
    (0..ring.len())
        .map(|k| ring[(start + k) % ring.len()].1)
        .find(|&i| usable(i))
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn smooth_weighted_gives_nginx_sequence() {
        let weights = [5, 1, 1];
        let mut current = [0; 3];
        let picks: String = (0..14)
            .map(|_| {
                let i = smooth_weighted_pick(&weights, &mut current, |_| true).unwrap();
                ["A", "B", "C"][i]
            })
            .collect();
        assert_eq!(picks, "AABACAAAABACAA");
    }

    #[test]
    fn smooth_weighted_skips_unusable() {
        let weights = [5, 1, 1];
        let mut current = [0; 3];
        let picks: Vec<usize> = (0..6)
            .map(|_| smooth_weighted_pick(&weights, &mut current, |i| i != 0).unwrap())
            .collect();
        assert_eq!(picks, [1, 2, 1, 2, 1, 2]);
        assert_eq!(
            smooth_weighted_pick(&weights, &mut current, |_| false),
            None
        );
    }
}
