//! The platform's arrivals: when each request comes, for which key, to which live instance.

use rand::{Rng, SeedableRng};
use rand_chacha::ChaCha8Rng;
use rand_distr::{Distribution, Exp1, Zipf};

use super::model::{KeyDistribution, PlatformScenario};

/// One request of the trace.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub(super) struct Arrival {
    /// Nanoseconds since the run's start.
    pub(super) at_ns: u64,
    /// The key (0 is the most popular under Zipf).
    pub(super) key: u32,
    /// The instance that receives it, among those live at `at_ns`.
    pub(super) instance: u32,
}

/// The arrivals of a run, generated as they are needed (seeded, so every lane sees the same).
pub(super) struct Trace {
    rng: ChaCha8Rng,
    zipf: Option<Zipf<f64>>,
    keys: u32,
    mean_gap_ns: f64,
    poisson: bool,
    next_ns: f64,
    end_ns: u64,
    schedule: Vec<(u64, u32)>,
    instances: u32,
    /// Scale steps taken by the last `next`, for the runner to apply first.
    scaled: Vec<(u64, u32)>,
}

impl Trace {
    /// The trace of `scenario`.
    pub(super) fn new(scenario: &PlatformScenario) -> Self {
        let zipf = match scenario.distribution {
            KeyDistribution::Uniform => None,
            KeyDistribution::Zipf(s) => Zipf::new(f64::from(scenario.keys), s).ok(),
        };
        let mut schedule: Vec<(u64, u32)> = scenario
            .scale
            .iter()
            .map(|&(at, n)| (u64::try_from(at.as_nanos()).unwrap_or(u64::MAX), n))
            .collect();
        schedule.sort_unstable();
        schedule.reverse();
        Trace {
            rng: ChaCha8Rng::seed_from_u64(scenario.seed),
            zipf,
            keys: scenario.keys.max(1),
            mean_gap_ns: 1e9 / scenario.rate,
            poisson: scenario.poisson,
            next_ns: 0.0,
            end_ns: u64::try_from(scenario.duration.as_nanos()).unwrap_or(u64::MAX),
            schedule,
            instances: scenario.instances.max(1),
            scaled: Vec::new(),
        }
    }

    /// The scale steps (when, instances) taken before the last arrival, oldest first.
    pub(super) fn take_scaled(&mut self) -> std::vec::Drain<'_, (u64, u32)> {
        self.scaled.drain(..)
    }
}

impl Iterator for Trace {
    type Item = Arrival;

    fn next(&mut self) -> Option<Arrival> {
        let gap = if self.poisson {
            let e: f64 = Exp1.sample(&mut self.rng);
            e * self.mean_gap_ns
        } else {
            self.mean_gap_ns
        };
        let at = self.next_ns;
        self.next_ns += gap;
        let at_ns = at as u64;
        if at_ns >= self.end_ns {
            return None;
        }
        while let Some(&(when, n)) = self.schedule.last() {
            if when > at_ns {
                break;
            }
            self.schedule.pop();
            self.instances = n.max(1);
            self.scaled.push((when, self.instances));
        }
        let key = match &self.zipf {
            Some(zipf) => (zipf.sample(&mut self.rng) as u32).clamp(1, self.keys) - 1,
            None => self.rng.random_range(0..self.keys),
        };
        let instance = self.rng.random_range(0..self.instances);
        Some(Arrival {
            at_ns,
            key,
            instance,
        })
    }
}
