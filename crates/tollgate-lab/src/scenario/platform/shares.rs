//! The shares lane: every instance a [`Holder`], one authority (in memory, or the production one on Redis), calls and replies each half a round trip.
//!
//! Time is driven by the arrivals: before each one, everything due by then
//! happens in order — every `tick` (the holders' batch interval) each live
//! holder may send its due call; a call reaches the authority half a round
//! trip later, and its reply the holder another half later. A request on a
//! key the holder has no answer for yet waits for that reply (its wait is
//! the added latency); one still unanswered after the call timeout is denied.
//! The authority answers at the call's virtual arrival time whatever it is
//! (on Redis, through the production scripts with that time supplied), so
//! the figures do not depend on how fast the store really is.

use std::cmp::Reverse;
use std::collections::BinaryHeap;

use tollgate_core::Timestamp;
use tollgate_core::share::{
    Holder, HolderPolicy, LEAVE_KEYS_PER_CALL, Share, SyncCall, SyncReply, Verdict,
};

use super::authority::SharesAuthority;
use super::lane::PlatformLane;
use super::report::LaneStats;
use super::trace::Arrival;

/// The key the platform-wide limit is kept under (beside the per-key keys).
const PLATFORM: u32 = u32::MAX;

/// What arrives when.
#[derive(Clone, Copy, Debug, PartialEq, Eq, PartialOrd, Ord)]
enum Event {
    /// Every live holder may send its due call.
    Tick,
    /// Instance `i`'s call reaches the authority.
    Call(usize),
    /// Instance `i`'s reply reaches it.
    Reply(usize),
}

/// One instance: its holder, its messages on the way, its waiting requests.
struct Instance {
    holder: Holder<u32>,
    call: Option<SyncCall<u32>>,
    reply: Option<SyncReply<u32>>,
    /// (arrived at, key) of the requests waiting for a reply.
    waiting: Vec<(Timestamp, u32)>,
    live: bool,
}

/// The shares lane.
pub(super) struct SharesLane {
    authority: Box<dyn SharesAuthority>,
    policy: HolderPolicy,
    instances: Vec<Instance>,
    limit: Share,
    platform: Option<Share>,
    events: BinaryHeap<Reverse<(u64, u64, Event)>>,
    order: u64,
    half_rtt_ns: u64,
    tick_ns: u64,
    timeout_ns: u64,
    next_holder: u64,
    last_forget: Timestamp,
}

impl SharesLane {
    /// `instances` holders of `limit` per key and `platform`, from `start`.
    pub(super) fn new(
        instances: u32,
        limit: Share,
        platform: Option<Share>,
        start: Timestamp,
        rtt_ns: u64,
        policy: HolderPolicy,
        authority: Box<dyn SharesAuthority>,
    ) -> Self {
        let nanos = |d: std::time::Duration| u64::try_from(d.as_nanos()).unwrap_or(u64::MAX);
        let mut lane = SharesLane {
            authority,
            policy,
            instances: Vec::new(),
            limit,
            platform,
            events: BinaryHeap::new(),
            order: 0,
            half_rtt_ns: rtt_ns / 2,
            tick_ns: nanos(policy.batch_interval).max(1_000),
            timeout_ns: nanos(policy.call_timeout),
            next_holder: 0,
            last_forget: start,
        };
        lane.resize(start, instances, &mut None);
        lane.schedule(start.as_nanos(), Event::Tick);
        lane
    }

    fn schedule(&mut self, at_ns: u64, event: Event) {
        self.order += 1;
        self.events.push(Reverse((at_ns, self.order, event)));
    }

    /// Brings the live instances to `n`: new ones join with nothing, leaving ones send their last call.
    fn resize(&mut self, now: Timestamp, n: u32, stats: &mut Option<&mut LaneStats>) {
        let n = n as usize;
        for (i, instance) in self.instances.iter_mut().enumerate() {
            if i >= n && instance.live {
                instance.live = false;
                // A lost leave (a failed store) only keeps its shares until its registration lapses.
                for call in instance.holder.leave(now, LEAVE_KEYS_PER_CALL) {
                    if let Some(stats) = stats.as_deref_mut() {
                        stats.called(call.reports.len() as u64);
                    }
                    if self.authority.sync(now, &call).is_none_or(|r| !r.accepted) {
                        break;
                    }
                }
                for (arrived, key) in instance.waiting.drain(..) {
                    if let Some(stats) = stats.as_deref_mut() {
                        stats.decided(
                            key,
                            now,
                            false,
                            now.saturating_since(arrived).as_nanos() as u64,
                        );
                    }
                }
            }
        }
        for i in 0..n {
            if i >= self.instances.len() || !self.instances[i].live {
                self.next_holder += 1;
                let instance = Instance {
                    holder: Holder::new(self.next_holder, self.policy, now),
                    call: None,
                    reply: None,
                    waiting: Vec::new(),
                    live: true,
                };
                if i < self.instances.len() {
                    self.instances[i] = instance;
                } else {
                    self.instances.push(instance);
                }
            }
        }
    }

    /// Decides a request on `key` at instance `i` at `now`: `None` while it must wait.
    fn judge(&mut self, i: usize, key: u32, now: Timestamp) -> Option<bool> {
        let holder = &mut self.instances[i].holder;
        match holder.check(&key, self.limit, now, 1) {
            Verdict::Deny => return Some(false),
            Verdict::Wait => return None,
            Verdict::Admit => {}
        }
        if let Some(platform) = self.platform {
            match holder.check(&PLATFORM, platform, now, 1) {
                Verdict::Deny => return Some(false),
                Verdict::Wait => return None,
                Verdict::Admit => {
                    let taken = holder.take(&PLATFORM, now, 1);
                    return Some(taken && holder.take(&key, now, 1));
                }
            }
        }
        Some(holder.take(&key, now, 1))
    }

    /// Runs every event due by `at_ns`.
    fn run_until(&mut self, at_ns: u64, stats: &mut LaneStats) {
        while let Some(&Reverse((due, _, event))) = self.events.peek() {
            if due > at_ns {
                return;
            }
            self.events.pop();
            let now = Timestamp::from_nanos(due);
            match event {
                Event::Tick => {
                    for i in 0..self.instances.len() {
                        let instance = &mut self.instances[i];
                        if !instance.live || instance.call.is_some() || instance.reply.is_some() {
                            continue;
                        }
                        if let Some(call) = instance.holder.poll(now) {
                            stats.called(call.reports.len() as u64);
                            instance.call = Some(call);
                            self.schedule(due + self.half_rtt_ns, Event::Call(i));
                        }
                    }
                    if now
                        >= self
                            .last_forget
                            .saturating_add(std::time::Duration::from_secs(10))
                    {
                        self.authority.forget_idle(now);
                        self.last_forget = now;
                    }
                    self.schedule(due + self.tick_ns, Event::Tick);
                }
                Event::Call(i) => {
                    // A failed store answers nothing: the holder's call times out (the run then fails).
                    if let Some(call) = self.instances[i].call.take()
                        && let Some(reply) = self.authority.sync(now, &call)
                    {
                        self.instances[i].reply = Some(reply);
                        self.schedule(due + self.half_rtt_ns, Event::Reply(i));
                    }
                }
                Event::Reply(i) => {
                    let Some(reply) = self.instances[i].reply.take() else {
                        continue;
                    };
                    if !self.instances[i].live {
                        continue;
                    }
                    self.instances[i].holder.on_reply(now, reply);
                    let waiting = std::mem::take(&mut self.instances[i].waiting);
                    for (arrived, key) in waiting {
                        let waited = now.saturating_since(arrived).as_nanos() as u64;
                        match self.judge(i, key, now) {
                            Some(admitted) => stats.decided(key, now, admitted, waited),
                            None if waited >= self.timeout_ns => {
                                stats.decided(key, now, false, waited)
                            }
                            None => self.instances[i].waiting.push((arrived, key)),
                        }
                    }
                }
            }
        }
    }
}

impl PlatformLane for SharesLane {
    fn decide(&mut self, arrival: Arrival, now: Timestamp, stats: &mut LaneStats) {
        self.run_until(now.as_nanos(), stats);
        let i = arrival.instance as usize;
        match self.judge(i, arrival.key, now) {
            Some(admitted) => stats.decided(arrival.key, now, admitted, 0),
            None => self.instances[i].waiting.push((now, arrival.key)),
        }
    }

    fn scale(&mut self, now: Timestamp, instances: u32, stats: &mut LaneStats) {
        self.run_until(now.as_nanos(), stats);
        self.resize(now, instances, &mut Some(stats));
    }

    fn finish(&mut self, now: Timestamp, stats: &mut LaneStats) {
        self.run_until(now.as_nanos().saturating_add(self.timeout_ns), stats);
        for instance in &mut self.instances {
            for (arrived, key) in instance.waiting.drain(..) {
                stats.decided(
                    key,
                    now,
                    false,
                    now.saturating_since(arrived).as_nanos() as u64,
                );
            }
        }
    }

    fn store_calls(&self) -> u64 {
        self.authority.store_calls()
    }

    fn failure(&self) -> Option<String> {
        self.authority.failure().map(str::to_owned)
    }
}
