//! The lazy stream of arrival times a traffic profile generates.

use std::time::Duration;

use rand::{Rng, SeedableRng};
use rand_chacha::ChaCha8Rng;
use rand_distr::Exp1;

use super::Traffic;

/// Nanoseconds in one second, as a float for rate arithmetic.
const NANOS_PER_SEC_F64: f64 = 1e9;

/// Evenly spaced arrivals at a rate: the `k`-th falls at `k / rate` seconds, to the nearest nanosecond.
#[derive(Clone, Copy, Debug)]
struct EvenSpacing {
    /// Requests per second; 0 means none at all.
    rate: f64,
}

impl EvenSpacing {
    fn new(rate: f64) -> Self {
        EvenSpacing { rate }
    }

    /// The offset of the `k`-th arrival in nanoseconds, or `None` at rate 0.
    ///
    /// Computed from `k` rather than by adding gaps, so rounding never accumulates.
    fn offset(&self, k: u64) -> Option<u64> {
        (self.rate > 0.0).then(|| (k as f64 * NANOS_PER_SEC_F64 / self.rate).round() as u64)
    }
}

/// The lengths of a square wave's phases in nanoseconds.
#[derive(Clone, Copy, Debug)]
pub(super) struct SquarePhases {
    period: u64,
    pub(super) high: u64,
}

impl SquarePhases {
    pub(super) fn new(period: Duration, duty: f64) -> Self {
        let period = u64::try_from(period.as_nanos()).unwrap_or(u64::MAX);
        let high = ((period as f64) * duty).round() as u64;
        SquarePhases {
            period,
            high: high.min(period),
        }
    }
}

/// The lazy stream of arrival times from [`Traffic::arrivals`], in nanoseconds from the start.
#[derive(Clone, Debug)]
pub struct Arrivals {
    /// Arrivals at or after this offset are not generated.
    end: u64,
    source: Source,
}

#[derive(Clone, Debug)]
enum Source {
    Empty,
    Steady {
        spacing: EvenSpacing,
        next: u64,
    },
    Poisson {
        rate: f64,
        rng: Box<ChaCha8Rng>,
        /// The offset of the last arrival, kept unrounded so gaps do not drift.
        clock_ns: f64,
    },
    Square {
        phases: SquarePhases,
        peak: EvenSpacing,
        base: EvenSpacing,
        /// The offset at which the current period began.
        period_start: u64,
        in_high_phase: bool,
        /// The index of the next arrival within the current phase.
        next: u64,
    },
    Curve {
        curve: RateCurve,
        /// The segment the next arrival is searched from.
        segment: usize,
        /// The expected count at the start of `segment`.
        segment_first: f64,
        /// The index of the next arrival.
        next: u64,
    },
}

impl Arrivals {
    /// The arrivals of `traffic` over `duration` (see [`Traffic::arrivals`]); none for an invalid profile.
    pub(super) fn new(traffic: &Traffic, duration: Duration, seed: u64) -> Self {
        let end = u64::try_from(duration.as_nanos()).unwrap_or(u64::MAX);
        let source = if traffic.validate().is_err() {
            Source::Empty
        } else {
            match *traffic {
                Traffic::Steady { rate } => Source::Steady {
                    spacing: EvenSpacing::new(rate),
                    next: 0,
                },
                Traffic::Poisson { rate } => Source::Poisson {
                    rate,
                    rng: Box::new(ChaCha8Rng::seed_from_u64(seed)),
                    clock_ns: 0.0,
                },
                Traffic::Square {
                    peak,
                    base,
                    period,
                    duty,
                } => Source::Square {
                    phases: SquarePhases::new(period, duty),
                    peak: EvenSpacing::new(peak),
                    base: EvenSpacing::new(base),
                    period_start: 0,
                    in_high_phase: true,
                    next: 0,
                },
                Traffic::Ramp { .. } | Traffic::Spike { .. } => Source::Curve {
                    curve: RateCurve::new(traffic),
                    segment: 0,
                    segment_first: 0.0,
                    next: 0,
                },
            }
        };
        Arrivals { end, source }
    }
}

/// One stretch of a piecewise-linear rate: from `start` s for `length` s, `from` to `to` req/s.
#[derive(Clone, Copy, Debug)]
struct RateSegment {
    start: f64,
    /// Seconds; infinite for the last segment.
    length: f64,
    from: f64,
    to: f64,
}

impl RateSegment {
    /// The expected arrivals in the first `t` seconds of the segment.
    fn expected(&self, t: f64) -> f64 {
        if self.length.is_infinite() || self.from == self.to {
            return self.from * t;
        }
        self.from * t + (self.to - self.from) * t * t / (2.0 * self.length)
    }

    /// The expected arrivals over the whole segment (infinite for the last one at a rate above 0).
    fn total(&self) -> f64 {
        if self.length.is_infinite() {
            return if self.from > 0.0 { f64::INFINITY } else { 0.0 };
        }
        self.expected(self.length)
    }

    /// The time into the segment at which the expected count reaches `m` (`m` ≤ the total).
    fn time_of(&self, m: f64) -> f64 {
        if self.length.is_infinite() || self.from == self.to {
            return m / self.from;
        }
        // Solve a·t² + from·t − m = 0 with a = (to − from) / (2·length), in the
        // form that stays accurate when a is small or negative.
        let a = (self.to - self.from) / (2.0 * self.length);
        let root = (self.from * self.from + 4.0 * a * m).max(0.0).sqrt();
        let denominator = self.from + root;
        if denominator <= 0.0 {
            return 0.0;
        }
        2.0 * m / denominator
    }
}

/// The rate of a ramp or a spike over time, as up to three linear segments.
#[derive(Clone, Copy, Debug)]
pub(super) struct RateCurve {
    segments: [RateSegment; 3],
    len: usize,
}

impl RateCurve {
    pub(super) fn new(traffic: &Traffic) -> Self {
        let flat = |start: f64, length: f64, rate: f64| RateSegment {
            start,
            length,
            from: rate,
            to: rate,
        };
        match *traffic {
            Traffic::Ramp { from, to, over } => {
                let over = over.as_secs_f64();
                let climb = RateSegment {
                    start: 0.0,
                    length: over,
                    from,
                    to,
                };
                RateCurve {
                    segments: [climb, flat(over, f64::INFINITY, to), climb],
                    len: 2,
                }
            }
            Traffic::Spike {
                base,
                peak,
                at,
                length,
            } => {
                let (at, length) = (at.as_secs_f64(), length.as_secs_f64());
                RateCurve {
                    segments: [
                        flat(0.0, at, base),
                        flat(at, length, peak),
                        flat(at + length, f64::INFINITY, base),
                    ],
                    len: 3,
                }
            }
            other => RateCurve {
                segments: [flat(0.0, f64::INFINITY, other.mean_rate()); 3],
                len: 1,
            },
        }
    }

    /// The expected arrivals in the first `t` seconds.
    pub(super) fn expected(&self, t: f64) -> f64 {
        let mut sum = 0.0;
        for segment in &self.segments[..self.len] {
            if t <= segment.start {
                break;
            }
            sum += segment.expected((t - segment.start).min(segment.length));
        }
        sum
    }
}

impl Iterator for Arrivals {
    type Item = u64;

    fn next(&mut self) -> Option<u64> {
        let end = self.end;
        match &mut self.source {
            Source::Empty => None,
            Source::Steady { spacing, next } => {
                let at = spacing.offset(*next)?;
                if at >= end {
                    return None;
                }
                *next += 1;
                Some(at)
            }
            Source::Poisson {
                rate,
                rng,
                clock_ns,
            } => {
                let gap_secs: f64 = rng.sample(Exp1);
                *clock_ns += gap_secs / *rate * NANOS_PER_SEC_F64;
                if *clock_ns >= end as f64 {
                    return None;
                }
                Some((*clock_ns as u64).min(end - 1))
            }
            Source::Square {
                phases,
                peak,
                base,
                period_start,
                in_high_phase,
                next,
            } => loop {
                let (spacing, phase_start, phase_len) = if *in_high_phase {
                    (*peak, *period_start, phases.high)
                } else {
                    (
                        *base,
                        period_start.saturating_add(phases.high),
                        phases.period - phases.high,
                    )
                };
                if phase_start >= end {
                    return None;
                }
                match spacing.offset(*next) {
                    Some(offset) if offset < phase_len => {
                        let at = phase_start + offset;
                        if at >= end {
                            return None;
                        }
                        *next += 1;
                        return Some(at);
                    }
                    _ => {
                        // This phase is over (or silent): move to the next one.
                        *next = 0;
                        if *in_high_phase {
                            *in_high_phase = false;
                        } else {
                            *in_high_phase = true;
                            *period_start = period_start.saturating_add(phases.period);
                        }
                    }
                }
            },
            Source::Curve {
                curve,
                segment,
                segment_first,
                next,
            } => loop {
                let current = curve
                    .segments
                    .get(*segment)
                    .filter(|_| *segment < curve.len)?;
                let m = *next as f64 - *segment_first;
                let total = current.total();
                if m >= total {
                    *segment += 1;
                    *segment_first += total;
                    continue;
                }
                let at_secs = current.start + current.time_of(m);
                let at = (at_secs * NANOS_PER_SEC_F64).round();
                if at >= end as f64 {
                    return None;
                }
                *next += 1;
                return Some(at as u64);
            },
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    const S: u64 = 1_000_000_000;

    fn count(traffic: Traffic, duration: Duration, seed: u64) -> u64 {
        traffic.arrivals(duration, seed).count() as u64
    }

    #[test]
    fn steady_arrivals_are_evenly_spaced_from_the_start() {
        let times: Vec<u64> = Traffic::steady(4.0)
            .unwrap()
            .arrivals(Duration::from_secs(1), 1)
            .collect();
        assert_eq!(times, vec![0, S / 4, S / 2, 3 * S / 4]);
    }

    #[test]
    fn steady_count_is_exactly_rate_times_duration() {
        // Arrivals at k/rate for every k with k/rate < duration: ⌈rate · duration⌉.
        assert_eq!(
            count(Traffic::steady(10.0).unwrap(), Duration::from_secs(10), 1),
            100
        );
        assert_eq!(
            count(Traffic::steady(3.0).unwrap(), Duration::from_secs(7), 1),
            21
        );
        // 2.5 req/s for 1.1 s: arrivals at 0, 0.4, 0.8 s.
        assert_eq!(
            count(
                Traffic::steady(2.5).unwrap(),
                Duration::from_millis(1100),
                1
            ),
            3
        );
    }

    #[test]
    fn poisson_count_is_within_five_standard_deviations() {
        // N ~ Poisson(λ·t) has mean and variance λ·t; with λ·t = 10 000 the
        // standard deviation is 100, so 5σ = 500. A correct generator falls
        // outside that once in ~1.7 million seeds; a wrong rate (say, gaps
        // with mean 1/(2λ) or 2/λ) misses by thousands.
        for seed in 0..20 {
            let n = count(
                Traffic::poisson(100.0).unwrap(),
                Duration::from_secs(100),
                seed,
            );
            assert!((9_500..=10_500).contains(&n), "seed {seed}: {n} arrivals");
        }
    }

    #[test]
    fn poisson_gaps_are_exponential() {
        // For exponential gaps the fraction shorter than the mean is 1 − 1/e ≈ 0.632;
        // for evenly spaced or uniform gaps it would be 0 or 0.5.
        let times: Vec<u64> = Traffic::poisson(1000.0)
            .unwrap()
            .arrivals(Duration::from_secs(20), 7)
            .collect();
        let gaps: Vec<u64> = times.windows(2).map(|w| w[1] - w[0]).collect();
        let short = gaps.iter().filter(|&&g| g < S / 1000).count() as f64;
        let fraction = short / gaps.len() as f64;
        // 20 000 gaps: the standard error is ~0.0034; allow 5σ.
        assert!(
            (fraction - (1.0 - (-1.0f64).exp())).abs() < 0.017,
            "{fraction}"
        );
        assert!(times.windows(2).all(|w| w[0] <= w[1]));
    }

    #[test]
    fn poisson_depends_on_the_seed_only() {
        let traffic = Traffic::poisson(50.0).unwrap();
        let a: Vec<u64> = traffic.arrivals(Duration::from_secs(10), 3).collect();
        let b: Vec<u64> = traffic.arrivals(Duration::from_secs(10), 3).collect();
        let c: Vec<u64> = traffic.arrivals(Duration::from_secs(10), 4).collect();
        assert_eq!(a, b);
        assert_ne!(a, c);
    }

    #[test]
    fn square_wave_alternates_peak_and_base() {
        // 100 req/s for 5 s, then 10 req/s for 5 s, six times: 6 × (500 + 50).
        let traffic = Traffic::square(100.0, 10.0, Duration::from_secs(10)).unwrap();
        assert_eq!(count(traffic, Duration::from_secs(60), 1), 3_300);
        let times: Vec<u64> = traffic.arrivals(Duration::from_secs(60), 1).collect();
        let in_first_high = times.iter().filter(|&&t| t < 5 * S).count();
        let in_first_low = times
            .iter()
            .filter(|&&t| (5 * S..10 * S).contains(&t))
            .count();
        assert_eq!((in_first_high, in_first_low), (500, 50));
        assert!(times.windows(2).all(|w| w[0] < w[1]));
        assert_eq!(times[500], 5 * S, "the low phase starts with an arrival");
    }

    #[test]
    fn square_wave_with_silent_base_and_short_duty() {
        // 10 req/s for the first 2 s of every 10 s: 20 per period, 3 periods.
        let traffic = Traffic::square_with_duty(10.0, 0.0, Duration::from_secs(10), 0.2).unwrap();
        let times: Vec<u64> = traffic.arrivals(Duration::from_secs(30), 1).collect();
        assert_eq!(times.len(), 60);
        assert!(times.iter().all(|&t| t % (10 * S) < 2 * S));
        // A run that ends mid-phase stops there: 2 periods + 1.5 s of peak.
        assert_eq!(count(traffic, Duration::from_millis(21_500), 1), 55);
    }

    #[test]
    fn ramp_arrivals_follow_the_climbing_rate() {
        // 0 → 100 req/s over 10 s: 500 expected in the climb, then 100 req/s.
        let ramp = Traffic::ramp(0.0, 100.0, Duration::from_secs(10)).unwrap();
        assert_eq!(count(ramp, Duration::from_secs(10), 1), 500);
        assert_eq!(count(ramp, Duration::from_secs(20), 1), 1_500);
        assert_eq!(ramp.expected_arrivals(Duration::from_secs(20)), 1_500.0);
        let times: Vec<u64> = ramp.arrivals(Duration::from_secs(10), 1).collect();
        // The count up to t is 5·t²: the first 5 s hold a quarter of the climb's arrivals.
        assert_eq!(times.iter().filter(|&&t| t < 5 * S).count(), 125);
        assert!(times.windows(2).all(|w| w[0] <= w[1]));
        // A falling ramp: 100 → 0 over 10 s, nothing after.
        let fall = Traffic::ramp(100.0, 0.0, Duration::from_secs(10)).unwrap();
        assert_eq!(count(fall, Duration::from_secs(30), 1), 500);
    }

    #[test]
    fn spike_arrivals_jump_for_its_length() {
        // 10 req/s, 100 req/s from 5 s to 7 s: 50 + 200 + 30 in 10 s.
        let spike =
            Traffic::spike(10.0, 100.0, Duration::from_secs(5), Duration::from_secs(2)).unwrap();
        assert_eq!(count(spike, Duration::from_secs(10), 1), 280);
        assert_eq!(spike.expected_arrivals(Duration::from_secs(10)), 280.0);
        let times: Vec<u64> = spike.arrivals(Duration::from_secs(10), 1).collect();
        assert_eq!(times[50], 5 * S, "the spike starts with an arrival");
        assert_eq!(
            times
                .iter()
                .filter(|&&t| (5 * S..7 * S).contains(&t))
                .count(),
            200
        );
        // With no base traffic only the spike arrives.
        let alone =
            Traffic::spike(0.0, 50.0, Duration::from_secs(1), Duration::from_secs(1)).unwrap();
        let times: Vec<u64> = alone.arrivals(Duration::from_secs(5), 1).collect();
        assert_eq!(times.len(), 50);
        assert!(times.iter().all(|&t| (S..2 * S).contains(&t)));
        // The profile is the same whatever the seed.
        assert_eq!(count(spike, Duration::from_secs(10), 99), 280);
    }

    #[test]
    fn arrivals_are_lazy() {
        // A year at a million requests per second is 3·10¹³ arrivals; taking a
        // few must not try to make them all.
        let traffic = Traffic::poisson(1e6).unwrap();
        let first: Vec<u64> = traffic
            .arrivals(Duration::from_secs(365 * 86_400), 1)
            .take(3)
            .collect();
        assert_eq!(first.len(), 3);
        let steady = Traffic::steady(1e6).unwrap();
        let mut it = steady.arrivals(Duration::from_secs(365 * 86_400), 1);
        assert_eq!(it.nth(999_999), Some(999_999_000));
    }
}
