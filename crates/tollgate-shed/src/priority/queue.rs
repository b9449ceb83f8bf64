//! The waiting line's order: requests by class and age, and which one a free slot goes to; pure, over timestamps.
//!
//! Each waiting request has a rank: its class (sheddable 0, default 1,
//! critical 2) plus the time it has waited divided by `aging`. Ranks of two
//! waiters keep their order as time passes unless one started lower and
//! waited longer, so the order is a fixed key: `arrival + (2 − class) ×
//! aging`, smallest first, ties by arrival order. A sheddable request that
//! has waited `2 × aging` ranks with a critical one that arrives then, and
//! goes before every later one.
//!
//! A free slot goes to the first waiter in that order whose *effective
//! class* may use it: its class raised one step per `aging` waited, up to
//! critical (so an aged request also reaches the reserved slots).

use std::collections::BTreeMap;
use std::time::Duration;

use tollgate_core::Timestamp;

use super::config::{ClassLimits, Priority};

/// Where a waiter stands in the line (smaller goes first).
#[derive(Clone, Copy, Debug, PartialEq, Eq, PartialOrd, Ord, Hash)]
pub(crate) struct Ticket {
    key: u64,
    seq: u64,
}

fn rank(priority: Priority) -> u64 {
    match priority {
        Priority::Sheddable => 0,
        Priority::Default => 1,
        Priority::Critical => 2,
    }
}

fn class_of_rank(rank: u64) -> Priority {
    match rank {
        0 => Priority::Sheddable,
        1 => Priority::Default,
        _ => Priority::Critical,
    }
}

struct Waiter<T> {
    priority: Priority,
    arrived: Timestamp,
    payload: T,
}

/// What [`WaitQueue::push`] did.
pub(crate) enum Pushed<T> {
    /// In line, with its ticket; `displaced` is the waiter it pushed out of a full line.
    Queued {
        ticket: Ticket,
        displaced: Option<T>,
    },
    /// The line is full of waiters that go first: the payload comes back.
    Full(T),
}

/// The bounded line of waiting requests.
pub(crate) struct WaitQueue<T> {
    aging: Duration,
    max_queued: usize,
    next_seq: u64,
    waiters: BTreeMap<Ticket, Waiter<T>>,
}

impl<T> WaitQueue<T> {
    /// An empty line of at most `max_queued`, where `aging` of waiting is worth one class.
    pub(crate) fn new(max_queued: usize, aging: Duration) -> Self {
        WaitQueue {
            aging: aging.max(Duration::from_nanos(1)),
            max_queued,
            next_seq: 0,
            waiters: BTreeMap::new(),
        }
    }

    /// Waiters in line.
    pub(crate) fn len(&self) -> usize {
        self.waiters.len()
    }

    fn aging_nanos(&self) -> u64 {
        u64::try_from(self.aging.as_nanos()).unwrap_or(u64::MAX)
    }

    /// The class a waiter of `priority` that arrived at `arrived` counts as at `now`.
    pub(crate) fn effective(
        &self,
        priority: Priority,
        arrived: Timestamp,
        now: Timestamp,
    ) -> Priority {
        let waited = now.saturating_since(arrived).as_nanos() / self.aging.as_nanos();
        class_of_rank(rank(priority).saturating_add(u64::try_from(waited).unwrap_or(u64::MAX)))
    }

    /// Puts a request in line; when the line is full, the waiter that would go last leaves it (the newcomer itself if none goes after it).
    pub(crate) fn push(&mut self, priority: Priority, now: Timestamp, payload: T) -> Pushed<T> {
        let key = now
            .as_nanos()
            .saturating_add((2 - rank(priority)).saturating_mul(self.aging_nanos()));
        let ticket = Ticket {
            key,
            seq: self.next_seq,
        };
        let mut displaced = None;
        if self.waiters.len() >= self.max_queued {
            match self.waiters.last_key_value() {
                Some((last, _)) if *last > ticket => {
                    let last = *last;
                    displaced = self.waiters.remove(&last).map(|w| w.payload);
                }
                _ => return Pushed::Full(payload),
            }
        }
        self.next_seq += 1;
        self.waiters.insert(
            ticket,
            Waiter {
                priority,
                arrived: now,
                payload,
            },
        );
        Pushed::Queued { ticket, displaced }
    }

    /// Takes the first waiter (in line order) whose effective class may use a slot with `in_flight` taken.
    pub(crate) fn pop_admissible(
        &mut self,
        now: Timestamp,
        in_flight: usize,
        limits: &ClassLimits,
    ) -> Option<T> {
        let ticket = self
            .waiters
            .iter()
            .find(|(_, w)| limits.of(self.effective(w.priority, w.arrived, now)) > in_flight)
            .map(|(t, _)| *t)?;
        self.waiters.remove(&ticket).map(|w| w.payload)
    }

    /// Takes a waiter out of line (it gave up or its deadline passed); `None` when it already left.
    pub(crate) fn remove(&mut self, ticket: Ticket) -> Option<T> {
        self.waiters.remove(&ticket).map(|w| w.payload)
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    const AGING: Duration = Duration::from_millis(100);

    fn limits() -> ClassLimits {
        ClassLimits {
            critical: 10,
            default: 8,
            sheddable: 6,
        }
    }

    fn at(ms: u64) -> Timestamp {
        Timestamp::from_millis(1_000 + ms)
    }

    #[test]
    fn classes_go_first_and_age_buys_one_class_per_aging() {
        let mut q = WaitQueue::new(10, AGING);
        q.push(Priority::Sheddable, at(0), "old sheddable");
        q.push(Priority::Default, at(50), "default");
        q.push(Priority::Critical, at(150), "critical");
        q.push(Priority::Critical, at(250), "late critical");
        // Keys: 200, 150, 150, 250: the default (earlier) ties the critical and goes first.
        let order: Vec<_> = (0..4)
            .map(|_| q.pop_admissible(at(300), 0, &limits()).unwrap())
            .collect();
        assert_eq!(
            order,
            ["default", "critical", "old sheddable", "late critical"]
        );
    }

    #[test]
    fn a_waiter_takes_only_slots_its_effective_class_may_use() {
        let mut q = WaitQueue::new(10, AGING);
        q.push(Priority::Sheddable, at(0), "s");
        // 7 in flight: over the sheddable share (6), under the default share (8).
        assert_eq!(q.pop_admissible(at(99), 7, &limits()), None);
        assert_eq!(
            q.effective(Priority::Sheddable, at(0), at(100)),
            Priority::Default
        );
        assert_eq!(q.pop_admissible(at(100), 7, &limits()), Some("s"));
        q.push(Priority::Sheddable, at(0), "s2");
        assert_eq!(q.pop_admissible(at(199), 9, &limits()), None);
        assert_eq!(q.pop_admissible(at(200), 9, &limits()), Some("s2"));
    }

    #[test]
    fn a_full_line_sends_away_whoever_would_go_last() {
        let mut q = WaitQueue::new(2, AGING);
        assert!(matches!(
            q.push(Priority::Default, at(0), 1),
            Pushed::Queued {
                displaced: None,
                ..
            }
        ));
        assert!(matches!(
            q.push(Priority::Sheddable, at(0), 2),
            Pushed::Queued {
                displaced: None,
                ..
            }
        ));
        assert!(matches!(
            q.push(Priority::Sheddable, at(1), 3),
            Pushed::Full(3)
        ));
        assert!(matches!(
            q.push(Priority::Critical, at(1), 4),
            Pushed::Queued {
                displaced: Some(2),
                ..
            }
        ));
        assert_eq!(q.len(), 2);
    }
}
