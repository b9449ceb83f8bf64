//! Running a scenario one tick at a time: every arrival through every lane's stores.

use std::collections::HashMap;
use std::fmt;
use std::time::Duration;

use tollgate_core::{
    AnyAlgorithm, AnyWordAlgorithm, Decision, FixedWindow, NANOS_PER_SEC, Outcome, Timestamp,
};

use super::clients::ClientSide;
use super::hash::mix64;
use super::leased::LeasedFleet;
use super::quota::QuotaFleet;
use super::{
    Counts, Lane, LaneDecision, LaneReport, LaneTick, Placement, RunError, RunReport,
    SampledDecision, Scenario, Tick,
};
use crate::DecisionRecord;
use crate::admitted_window::AdmittedWindow;
use crate::record::outcome_name;
use crate::store::{SimulatedStore, StoreFactory};
use crate::traffic::SourceArrivals;

/// The client an arrival belongs to: a seeded hash of its index, so clients
/// and round-robin sidecars are independent of each other.
///
/// A stateless hash (SplitMix64's finalizer over index and seed), not a
/// random stream: any arrival's client is found from its index alone, so
/// lanes, ticks and batches need not share a generator's state.
fn client_of(index: u64, seed: u64, clients: u64) -> u64 {
    if clients == 1 {
        return 0;
    }
    mix64(index.wrapping_add(seed.wrapping_mul(0x9E37_79B9_7F4A_7C15))) % clients
}

/// A scenario being run, one tick at a time.
pub struct Runner {
    arrivals: SourceArrivals,
    pending: Option<u64>,
    lanes: Vec<LaneState>,
    start: Timestamp,
    cost: u64,
    seed: u64,
    clients: u64,
    state_client: u64,
    tick_ns: u64,
    duration_ns: u64,
    ticks: u64,
    next_tick: u64,
    next_index: u64,
    samples_per_tick: usize,
    /// Why a store stopped answering; the run ends there.
    failure: Option<String>,
    /// Decide each tick store by store in batches (remote stores).
    batched: bool,
}

impl fmt::Debug for Runner {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.debug_struct("Runner")
            .field("next_tick", &self.next_tick)
            .field("ticks", &self.ticks)
            .finish_non_exhaustive()
    }
}

impl Runner {
    /// The run of a scenario that passed [`Scenario::validate`], before its first tick.
    pub(super) fn new(scenario: &Scenario, stores: &dyn StoreFactory) -> Self {
        let keys = scenario.clients as usize;
        let lanes = scenario
            .lanes
            .iter()
            .map(|lane| LaneState::new(lane, scenario, stores, keys))
            .collect();
        Runner {
            arrivals: scenario.source.arrivals(scenario.duration, scenario.seed),
            pending: None,
            lanes,
            start: scenario.start,
            cost: scenario.cost,
            seed: scenario.seed,
            clients: u64::from(scenario.clients),
            state_client: u64::from(scenario.state_client),
            tick_ns: u64::try_from(scenario.tick.as_nanos()).unwrap_or(u64::MAX),
            duration_ns: u64::try_from(scenario.duration.as_nanos()).unwrap_or(u64::MAX),
            ticks: scenario.ticks(),
            next_tick: 0,
            next_index: 0,
            samples_per_tick: scenario.samples_per_tick,
            failure: None,
            batched: stores.is_remote(),
        }
    }

    /// The number of ticks the run reports in all.
    pub fn ticks(&self) -> u64 {
        self.ticks
    }

    /// Decides every arrival of the next tick in every lane; `None` once the run is over.
    pub fn next_tick(&mut self) -> Option<Tick> {
        self.next_tick_with(None)
    }

    /// Like [`Runner::next_tick`], also calling `on_decision` for every decision when given.
    pub fn next_tick_with(
        &mut self,
        mut on_decision: Option<&mut dyn FnMut(&LaneDecision<'_>)>,
    ) -> Option<Tick> {
        if self.next_tick >= self.ticks || self.failure.is_some() {
            return None;
        }
        let index = self.next_tick;
        self.next_tick += 1;
        let start_ns = index.saturating_mul(self.tick_ns);
        let end_ns = start_ns.saturating_add(self.tick_ns).min(self.duration_ns);
        for lane in &mut self.lanes {
            lane.begin_tick();
        }
        // Without a per-decision observer, a remote store decides a tick's
        // arrivals at once, pipelined (the same order, so the same answers).
        let batched = self.batched && on_decision.is_none();
        let mut requests = Vec::new();
        while let Some(offset) = self.pending.take().or_else(|| self.arrivals.next()) {
            if offset >= end_ns {
                self.pending = Some(offset);
                break;
            }
            let arrival = self.next_index;
            self.next_index += 1;
            let request = Request {
                arrival,
                offset_ns: offset,
                at: Timestamp::from_nanos(self.start.as_nanos() + offset),
                client: client_of(arrival, self.seed, self.clients),
                cost: self.cost,
            };
            if batched {
                requests.push(request);
                continue;
            }
            for lane in &mut self.lanes {
                lane.decide(
                    &request,
                    self.samples_per_tick,
                    on_decision
                        .as_mut()
                        .map(|f| &mut **f as &mut dyn FnMut(&LaneDecision<'_>)),
                );
            }
        }
        if batched {
            for lane in &mut self.lanes {
                lane.decide_tick(&requests, self.samples_per_tick);
            }
        }
        for lane in &mut self.lanes {
            lane.decide_retries(
                end_ns,
                self.samples_per_tick,
                on_decision
                    .as_mut()
                    .map(|f| &mut **f as &mut dyn FnMut(&LaneDecision<'_>)),
            );
        }
        let tick_end = Timestamp::from_nanos(self.start.as_nanos() + end_ns);
        let lanes = self
            .lanes
            .iter_mut()
            .map(|lane| lane.end_tick(self.state_client, tick_end))
            .collect();
        let failed = self
            .lanes
            .iter()
            .flat_map(|lane| &lane.stores)
            .find_map(|store| store.failure());
        if let Some(failure) = failed {
            // This tick's decisions went partly unanswered: report none of it.
            self.failure = Some(failure.to_owned());
            return None;
        }
        Some(Tick {
            index,
            start_ns,
            end_ns,
            lanes,
        })
    }

    /// Why a store stopped answering, which ended the run early.
    pub fn failure(&self) -> Option<&str> {
        self.failure.as_deref()
    }

    /// The totals of a run that ended, or the store failure that ended it early.
    pub fn finish_checked(self) -> Result<RunReport, RunError> {
        match self.failure.clone() {
            Some(failure) => Err(RunError::Store(failure)),
            None => Ok(self.finish()),
        }
    }

    /// The totals so far (the whole run's once [`Runner::next_tick`] has returned `None`).
    pub fn finish(self) -> RunReport {
        let seconds = self.duration_ns as f64 / NANOS_PER_SEC as f64;
        RunReport {
            arrivals: self.next_index,
            ticks: self.next_tick,
            lanes: self
                .lanes
                .into_iter()
                .map(|lane| lane.report(seconds))
                .collect(),
        }
    }
}

/// One arriving request, as every lane decides it.
struct Request {
    /// Its position in the run, from 0.
    arrival: u64,
    /// When it arrives, in nanoseconds from the start.
    offset_ns: u64,
    /// When it arrives, in virtual time.
    at: Timestamp,
    /// The client (key) it belongs to.
    client: u64,
    /// The units it costs.
    cost: u64,
}

/// A lane's stores and running figures.
struct LaneState {
    label: String,
    algorithm: AnyAlgorithm,
    placement: Placement,
    stores: Vec<Box<dyn SimulatedStore>>,
    total: Counts,
    tick: Counts,
    max_delay_ns: u64,
    samples: Vec<SampledDecision>,
    sampled_rejection: bool,
    admitted_in_window: AdmittedWindow,
    /// For window algorithms in a global placement: each key's exact window of admitted units.
    exact: Option<ExactWindows>,
    /// In a leased placement: the instances' leases on the one store.
    fleet: Option<LeasedFleet>,
    /// Closed-loop clients: refused requests come back as retries.
    clients: Option<ClientSide>,
    /// The run's first instant and each request's cost (for retries).
    start: Timestamp,
    cost: u64,
    /// A staggered fixed window: each key decides at its own offset.
    stagger: Option<FixedWindow>,
    /// In a quota placement: the Envoys and their assignments.
    quota: Option<QuotaFleet>,
}

/// Each key's admitted units over the last window, to judge decisions against the exact log.
struct ExactWindows {
    window: Duration,
    limit: u64,
    keys: HashMap<u64, AdmittedWindow>,
    over: u64,
    under: u64,
}

impl LaneState {
    fn new(lane: &Lane, scenario: &Scenario, stores: &dyn StoreFactory, keys: usize) -> Self {
        let algorithm = lane.algorithm;
        let is_window = matches!(
            algorithm,
            AnyAlgorithm::Word(AnyWordAlgorithm::FixedWindow(_))
                | AnyAlgorithm::Word(AnyWordAlgorithm::SlidingWindow(_))
                | AnyAlgorithm::SlidingLog(_)
        );
        // A leased lane never admits more than the global one: judge it too.
        let judged =
            is_window && matches!(lane.placement, Placement::Global | Placement::Leased { .. });
        let exact = (judged && lane.judged_against_exact).then(|| ExactWindows {
            window: algorithm.window(),
            limit: algorithm.capacity(),
            keys: HashMap::new(),
            over: 0,
            under: 0,
        });
        LaneState {
            label: lane.label.clone(),
            algorithm,
            placement: lane.placement,
            stores: (0..lane.placement.stores())
                .map(|_| stores.store(algorithm, keys))
                .collect(),
            total: Counts::default(),
            tick: Counts::default(),
            max_delay_ns: 0,
            samples: Vec::with_capacity(scenario.samples_per_tick + 1),
            sampled_rejection: false,
            admitted_in_window: AdmittedWindow::new(algorithm.window()),
            exact,
            fleet: match lane.placement {
                Placement::Leased {
                    instances,
                    period_ns,
                } => Some(LeasedFleet::new(
                    algorithm,
                    instances,
                    Duration::from_nanos(period_ns),
                )),
                _ => None,
            },
            clients: lane.clients.is_closed_loop().then(|| {
                ClientSide::new(
                    lane.clients,
                    scenario.seed,
                    scenario.start,
                    lane.algorithm.window(),
                )
            }),
            start: scenario.start,
            cost: scenario.cost,
            quota: match lane.placement {
                Placement::Quota {
                    envoys,
                    report_ns,
                    hot_permille,
                } => Some(QuotaFleet::new(
                    algorithm,
                    envoys,
                    Duration::from_nanos(report_ns),
                    hot_permille,
                )),
                _ => None,
            },
            stagger: match algorithm {
                AnyAlgorithm::Word(AnyWordAlgorithm::FixedWindow(window)) if lane.stagger => {
                    Some(window)
                }
                _ => None,
            },
        }
    }

    /// The time `client`'s key decides at when the clock reads `at` (later by its offset when staggered).
    fn keyed_time(&self, client: u64, at: Timestamp) -> Timestamp {
        match &self.stagger {
            Some(window) => at.saturating_add(std::time::Duration::from_nanos(
                // The service hashes the descriptor; a simulated client has only its number.
                window.stagger_phase(mix64(client)),
            )),
            None => at,
        }
    }

    fn begin_tick(&mut self) {
        self.tick = Counts::default();
        self.max_delay_ns = 0;
        self.samples.clear();
        self.sampled_rejection = false;
        if let Some(fleet) = &mut self.fleet {
            fleet.tick_calls = 0;
        }
        if let Some(clients) = &mut self.clients {
            clients.begin_tick();
        }
        if let Some(quota) = &mut self.quota {
            quota.tick_reports = 0;
        }
    }

    /// Decides the retries due before `end_ns` (virtual nanoseconds since the start), in time order.
    fn decide_retries(
        &mut self,
        end_ns: u64,
        samples_per_tick: usize,
        mut on_decision: Option<&mut dyn FnMut(&LaneDecision<'_>)>,
    ) {
        loop {
            let Some(retry) = self.clients.as_mut().and_then(|c| c.next_due(end_ns)) else {
                return;
            };
            let request = Request {
                arrival: retry.arrival,
                offset_ns: retry.at_ns,
                at: Timestamp::from_nanos(self.start.as_nanos().saturating_add(retry.at_ns)),
                client: retry.client,
                cost: self.cost,
            };
            self.decide_attempt(
                &request,
                retry.attempt,
                samples_per_tick,
                on_decision
                    .as_mut()
                    .map(|f| &mut **f as &mut dyn FnMut(&LaneDecision<'_>)),
            );
        }
    }

    /// Decides one send of a request (attempt 0 is the first) and tells the clients the answer.
    fn decide_attempt(
        &mut self,
        request: &Request,
        attempt: u32,
        samples_per_tick: usize,
        on_decision: Option<&mut dyn FnMut(&LaneDecision<'_>)>,
    ) {
        let decision = self.decide_placed(request, samples_per_tick, on_decision);
        if let Some(clients) = &mut self.clients {
            clients.answered(
                &decision,
                request.arrival,
                request.client,
                request.at,
                request.offset_ns,
                attempt,
            );
        }
    }

    fn decide(
        &mut self,
        request: &Request,
        samples_per_tick: usize,
        on_decision: Option<&mut dyn FnMut(&LaneDecision<'_>)>,
    ) {
        let Some(clients) = &mut self.clients else {
            self.decide_placed(request, samples_per_tick, on_decision);
            return;
        };
        // Closed loop: the retries due first, then this new request, unless
        // its client's throttle drops it.
        let mut on_decision = on_decision;
        if let super::clients::Send::Dropped = clients.admit_new(request.client, request.at) {
            self.decide_retries(request.offset_ns, samples_per_tick, on_decision);
            return;
        }
        self.decide_retries(
            request.offset_ns,
            samples_per_tick,
            on_decision
                .as_mut()
                .map(|f| &mut **f as &mut dyn FnMut(&LaneDecision<'_>)),
        );
        self.decide_attempt(request, 0, samples_per_tick, on_decision);
    }

    /// Decides one request on the lane's store(s) and counts it; its decision.
    fn decide_placed(
        &mut self,
        request: &Request,
        samples_per_tick: usize,
        on_decision: Option<&mut dyn FnMut(&LaneDecision<'_>)>,
    ) -> Decision {
        let Request {
            arrival,
            at,
            client,
            cost,
            ..
        } = *request;
        let at = self.keyed_time(client, at);
        if let Some(quota) = &mut self.quota {
            quota.report_until(request.offset_ns);
            let envoy = quota.envoy_of(arrival);
            let decision = quota.decide(envoy, client, at, cost);
            self.record(request, envoy, decision, samples_per_tick, on_decision);
            return decision;
        }
        if let Some(fleet) = &mut self.fleet {
            // Round robin over the instances, which share the one store.
            let instance = (arrival % fleet.instances() as u64) as usize;
            let decision = fleet.decide(self.stores[0].as_mut(), instance, client, at, cost);
            self.record(request, 0, decision, samples_per_tick, on_decision);
            return decision;
        }
        // A round-robin balancer: arrival k goes to sidecar k mod N.
        let sidecar = (arrival % self.stores.len() as u64) as usize;
        let decision = self.stores[sidecar].check(client, at, cost);
        self.record(request, sidecar, decision, samples_per_tick, on_decision);
        decision
    }

    /// Decides a tick's `requests` store by store, each store's in one
    /// [`SimulatedStore::check_many`] (pipelined on Redis), then counts
    /// them in arrival order as [`LaneState::decide`] would.
    fn decide_tick(&mut self, requests: &[Request], samples_per_tick: usize) {
        if self.fleet.is_some() || self.clients.is_some() || self.quota.is_some() {
            // Each decision depends on the leases or retries the ones before it left: one by one.
            for request in requests {
                self.decide(request, samples_per_tick, None);
            }
            return;
        }
        let sidecars = self.stores.len();
        let mut decisions = vec![None; requests.len()];
        let mut batch = Vec::new();
        let mut answers = Vec::new();
        for (sidecar, store) in self.stores.iter_mut().enumerate() {
            let mine: Vec<usize> = (0..requests.len())
                .filter(|&i| (requests[i].arrival % sidecars as u64) as usize == sidecar)
                .collect();
            if mine.is_empty() {
                continue;
            }
            batch.clear();
            batch.extend(mine.iter().map(|&i| {
                let r = &requests[i];
                (r.client, r.at, r.cost)
            }));
            store.check_many(&batch, &mut answers);
            for (&i, &d) in mine.iter().zip(&answers) {
                decisions[i] = Some((sidecar, d));
            }
        }
        for (request, decided) in requests.iter().zip(decisions) {
            if let Some((sidecar, decision)) = decided {
                self.record(request, sidecar, decision, samples_per_tick, None);
            }
        }
    }

    /// Counts one decision: the tick's figures, the exact-window judgement, samples.
    fn record(
        &mut self,
        request: &Request,
        sidecar: usize,
        decision: Decision,
        samples_per_tick: usize,
        on_decision: Option<&mut dyn FnMut(&LaneDecision<'_>)>,
    ) {
        let Request {
            arrival,
            offset_ns,
            at,
            client,
            cost,
        } = *request;
        let outcome = decision.outcome();
        self.tick.arrivals += 1;
        match outcome {
            Outcome::Allowed => {
                self.tick.admitted += 1;
                let delay = decision.delay_nanos();
                self.tick.delayed += u64::from(delay > 0);
                self.max_delay_ns = self.max_delay_ns.max(delay);
                self.admitted_in_window.admit(offset_ns, cost);
            }
            Outcome::Denied => self.tick.denied += 1,
            Outcome::Exceeds => self.tick.exceeded += 1,
        }
        if let Some(exact) = &mut self.exact {
            let window = exact.window;
            let keyed = exact
                .keys
                .entry(client)
                .or_insert_with(|| AdmittedWindow::new(window));
            let room = keyed.units_before(offset_ns) + cost <= exact.limit;
            match (outcome == Outcome::Allowed, room) {
                (true, false) => exact.over += 1,
                (false, true) => exact.under += 1,
                _ => {}
            }
            if outcome == Outcome::Allowed {
                keyed.admit(offset_ns, cost);
            }
        }
        if let Some(on_decision) = on_decision {
            let keyed = self.keyed_time(client, at);
            let level = self.stores[sidecar].state_level(client, keyed);
            on_decision(&LaneDecision {
                lane: &self.label,
                client,
                sidecar: sidecar as u32,
                record: DecisionRecord::new(arrival, offset_ns, at, &decision, level),
            });
        }
        let rejected = outcome != Outcome::Allowed;
        let take = self.samples.len() < samples_per_tick
            || (rejected && !self.sampled_rejection && samples_per_tick > 0);
        if take {
            self.sampled_rejection |= rejected;
            self.samples.push(SampledDecision {
                index: arrival,
                offset_ns,
                client,
                sidecar: sidecar as u32,
                outcome: outcome_name(outcome),
                remaining: decision.remaining(),
                retry_after_ns: (outcome == Outcome::Denied).then(|| decision.retry_after_nanos()),
                delay_ns: decision.delay_nanos(),
            });
        }
    }

    fn end_tick(&mut self, state_client: u64, tick_end: Timestamp) -> LaneTick {
        self.total.add(&self.tick);
        // One read per sidecar (at most 15), however many clients there are.
        let keyed_end = self.keyed_time(state_client, tick_end);
        let levels: f64 = self
            .stores
            .iter_mut()
            .map(|store| store.state_level(state_client, keyed_end))
            .sum();
        LaneTick {
            counts: self.tick,
            total: self.total,
            state_level: levels / self.stores.len() as f64,
            max_delay_ns: self.max_delay_ns,
            samples: self.samples.clone(),
            store_calls: self.fleet.as_ref().map(|f| f.tick_calls),
            leased_units: self.fleet.as_ref().map(|f| f.outstanding(tick_end)),
            retries: self.clients.as_ref().map(|c| c.tick_retries),
            dropped_by_clients: self.clients.as_ref().map(|c| c.tick_dropped),
            reports: self.quota.as_ref().map(|q| q.tick_reports),
        }
    }

    fn report(self, seconds: f64) -> LaneReport {
        let counts = self.total;
        LaneReport {
            label: self.label,
            placement: self.placement,
            counts,
            acceptance_rate: if counts.arrivals > 0 {
                counts.admitted as f64 / counts.arrivals as f64
            } else {
                0.0
            },
            admitted_rate: if seconds > 0.0 {
                counts.admitted as f64 / seconds
            } else {
                0.0
            },
            window_ns: u64::try_from(self.algorithm.window().as_nanos()).unwrap_or(u64::MAX),
            max_admitted_in_window: self.admitted_in_window.max,
            limit: self.algorithm.capacity(),
            over_admitted: self.exact.as_ref().map(|e| e.over),
            under_admitted: self.exact.as_ref().map(|e| e.under),
            store_calls: self.fleet.as_ref().map(|f| f.calls),
            retries: self.clients.as_ref().map(|c| c.retries),
            dropped_by_clients: self.clients.as_ref().map(|c| c.dropped),
            gave_up: self.clients.as_ref().map(|c| c.gave_up),
            reports: self.quota.as_ref().map(|q| q.reports),
        }
    }
}
