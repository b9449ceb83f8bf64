//! Traffic profiles: how requests arrive, with every parameter checked.

use std::time::Duration;

use tollgate_core::ConfigError;

use super::arrivals::{Arrivals, RateCurve, SquarePhases};

/// The fastest rate a profile accepts: one request per nanosecond.
pub const MAX_RATE: f64 = 1e9;

/// How requests arrive, with every rate in requests per second.
#[derive(Clone, Copy, Debug, PartialEq)]
pub enum Traffic {
    /// Evenly spaced arrivals: one every `1 / rate` seconds, the first at the start.
    Steady {
        /// Requests per second.
        rate: f64,
    },
    /// A Poisson process: independent, exponentially distributed gaps with mean `1 / rate`.
    Poisson {
        /// Mean requests per second.
        rate: f64,
    },
    /// A square wave: `peak` requests per second for the first `duty` of every
    /// `period`, `base` requests per second for the rest.
    ///
    /// Arrivals are evenly spaced within each phase, and each phase starts
    /// with an arrival (when its rate is above zero).
    Square {
        /// Requests per second during the high phase.
        peak: f64,
        /// Requests per second during the low phase (may be 0).
        base: f64,
        /// The length of one high phase plus one low phase.
        period: Duration,
        /// The fraction of each period spent at `peak`, in `(0, 1]`.
        duty: f64,
    },
    /// A ramp: the rate climbs (or falls) linearly from `from` to `to` over
    /// `over`, then stays at `to`.
    ///
    /// Arrivals are spaced by the rate at each instant: the `k`-th falls
    /// where the expected count first reaches `k`, so the first is at the start.
    Ramp {
        /// Requests per second at the start (may be 0).
        from: f64,
        /// Requests per second from `over` on (may be 0).
        to: f64,
        /// How long the climb takes.
        over: Duration,
    },
    /// A spike: `base` requests per second, except `peak` from `at` for `length`.
    ///
    /// Arrivals are evenly spaced within each part, as for [`Traffic::Ramp`].
    Spike {
        /// Requests per second outside the spike (may be 0).
        base: f64,
        /// Requests per second during the spike.
        peak: f64,
        /// When the spike begins, from the start of the run.
        at: Duration,
        /// How long the spike lasts.
        length: Duration,
    },
}

impl Traffic {
    /// The duty cycle a square wave has unless told otherwise.
    pub const DEFAULT_DUTY: f64 = 0.5;

    /// Evenly spaced traffic at `rate` requests per second, validated.
    pub fn steady(rate: f64) -> Result<Self, ConfigError> {
        let traffic = Traffic::Steady { rate };
        traffic.validate()?;
        Ok(traffic)
    }

    /// Poisson traffic averaging `rate` requests per second, validated.
    pub fn poisson(rate: f64) -> Result<Self, ConfigError> {
        let traffic = Traffic::Poisson { rate };
        traffic.validate()?;
        Ok(traffic)
    }

    /// A square wave with the default duty cycle of one half, validated.
    pub fn square(peak: f64, base: f64, period: Duration) -> Result<Self, ConfigError> {
        Self::square_with_duty(peak, base, period, Self::DEFAULT_DUTY)
    }

    /// A square wave spending `duty` of each `period` at `peak`, validated.
    pub fn square_with_duty(
        peak: f64,
        base: f64,
        period: Duration,
        duty: f64,
    ) -> Result<Self, ConfigError> {
        let traffic = Traffic::Square {
            peak,
            base,
            period,
            duty,
        };
        traffic.validate()?;
        Ok(traffic)
    }

    /// A ramp from `from` to `to` requests per second over `over`, validated.
    pub fn ramp(from: f64, to: f64, over: Duration) -> Result<Self, ConfigError> {
        let traffic = Traffic::Ramp { from, to, over };
        traffic.validate()?;
        Ok(traffic)
    }

    /// `base` requests per second with a spike to `peak` from `at` for `length`, validated.
    pub fn spike(
        base: f64,
        peak: f64,
        at: Duration,
        length: Duration,
    ) -> Result<Self, ConfigError> {
        let traffic = Traffic::Spike {
            base,
            peak,
            at,
            length,
        };
        traffic.validate()?;
        Ok(traffic)
    }

    /// The profile's name: `steady`, `poisson`, `square`, `ramp` or `spike`.
    pub fn name(&self) -> &'static str {
        match self {
            Traffic::Steady { .. } => "steady",
            Traffic::Poisson { .. } => "poisson",
            Traffic::Square { .. } => "square",
            Traffic::Ramp { .. } => "ramp",
            Traffic::Spike { .. } => "spike",
        }
    }

    /// Checks every parameter, naming the first one that is wrong.
    pub fn validate(&self) -> Result<(), ConfigError> {
        match *self {
            Traffic::Steady { rate } | Traffic::Poisson { rate } => check_rate("rate", rate, false),
            Traffic::Square {
                peak,
                base,
                period,
                duty,
            } => {
                check_rate("peak", peak, false)?;
                check_rate("base", base, true)?;
                if period.is_zero() {
                    return Err(ConfigError::new("period", "must be longer than zero"));
                }
                if !(duty.is_finite() && duty > 0.0 && duty <= 1.0) {
                    return Err(ConfigError::new(
                        "duty",
                        format!("{duty} is not a fraction in (0, 1]"),
                    ));
                }
                if SquarePhases::new(period, duty).high == 0 {
                    return Err(ConfigError::new(
                        "duty",
                        format!("{duty} of {period:?} is shorter than one nanosecond"),
                    ));
                }
                Ok(())
            }
            Traffic::Ramp { from, to, over } => {
                check_rate("from", from, true)?;
                check_rate("to", to, true)?;
                if from == 0.0 && to == 0.0 {
                    return Err(ConfigError::new(
                        "to",
                        "a ramp from 0 to 0 requests per second sends nothing",
                    ));
                }
                if over.is_zero() {
                    return Err(ConfigError::new("over", "must be longer than zero"));
                }
                Ok(())
            }
            Traffic::Spike {
                base, peak, length, ..
            } => {
                check_rate("base", base, true)?;
                check_rate("peak", peak, false)?;
                if length.is_zero() {
                    return Err(ConfigError::new("length", "must be longer than zero"));
                }
                Ok(())
            }
        }
    }

    /// The mean number of requests per second over a long run.
    ///
    /// A ramp settles at `to` and a spike at `base`; for the mean over a
    /// given run use [`Traffic::expected_arrivals`].
    pub fn mean_rate(&self) -> f64 {
        match *self {
            Traffic::Steady { rate } | Traffic::Poisson { rate } => rate,
            Traffic::Square {
                peak, base, duty, ..
            } => peak * duty + base * (1.0 - duty),
            Traffic::Ramp { to, .. } => to,
            Traffic::Spike { base, .. } => base,
        }
    }

    /// The expected number of arrivals in a run of `duration` (the mean for Poisson).
    pub fn expected_arrivals(&self, duration: Duration) -> f64 {
        match *self {
            Traffic::Ramp { .. } | Traffic::Spike { .. } => {
                RateCurve::new(self).expected(duration.as_secs_f64())
            }
            _ => self.mean_rate() * duration.as_secs_f64(),
        }
    }

    /// The arrival times of a run of `duration`, as nanoseconds from its start.
    ///
    /// The iterator is lazy (it computes each arrival when asked, holding
    /// only a few words of state), yields times in non-decreasing order, all
    /// below `duration`, and is a pure function of the profile, `duration`
    /// and `seed` (only the Poisson profile draws random numbers). The
    /// profile should have passed [`Traffic::validate`]; an invalid one
    /// yields nothing.
    pub fn arrivals(&self, duration: Duration, seed: u64) -> Arrivals {
        Arrivals::new(self, duration, seed)
    }
}

/// Checks that a rate is finite, not above [`MAX_RATE`], and above zero (or zero when allowed).
fn check_rate(parameter: &'static str, rate: f64, zero_allowed: bool) -> Result<(), ConfigError> {
    if !rate.is_finite() {
        return Err(ConfigError::new(
            parameter,
            format!("{rate} is not a finite number of requests per second"),
        ));
    }
    if rate < 0.0 || (rate == 0.0 && !zero_allowed) {
        let floor = if zero_allowed {
            "at least 0"
        } else {
            "above 0"
        };
        return Err(ConfigError::new(
            parameter,
            format!("{rate} requests per second must be {floor}"),
        ));
    }
    if rate > MAX_RATE {
        return Err(ConfigError::new(
            parameter,
            format!("{rate} requests per second is faster than one per nanosecond"),
        ));
    }
    Ok(())
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn bad_profiles_are_rejected_with_the_parameter_named() {
        let cases = [
            (Traffic::steady(0.0).unwrap_err(), "rate"),
            (Traffic::steady(-1.0).unwrap_err(), "rate"),
            (Traffic::poisson(f64::NAN).unwrap_err(), "rate"),
            (Traffic::poisson(f64::INFINITY).unwrap_err(), "rate"),
            (Traffic::steady(2e9).unwrap_err(), "rate"),
            (
                Traffic::square(0.0, 1.0, Duration::from_secs(1)).unwrap_err(),
                "peak",
            ),
            (
                Traffic::square(1.0, -1.0, Duration::from_secs(1)).unwrap_err(),
                "base",
            ),
            (
                Traffic::square(1.0, 0.0, Duration::ZERO).unwrap_err(),
                "period",
            ),
            (
                Traffic::square_with_duty(1.0, 0.0, Duration::from_secs(1), 0.0).unwrap_err(),
                "duty",
            ),
            (
                Traffic::square_with_duty(1.0, 0.0, Duration::from_secs(1), 1.5).unwrap_err(),
                "duty",
            ),
            (
                Traffic::square_with_duty(1.0, 0.0, Duration::from_nanos(3), 0.1).unwrap_err(),
                "duty",
            ),
        ];
        let more = [
            (
                Traffic::ramp(0.0, 0.0, Duration::from_secs(1)).unwrap_err(),
                "to",
            ),
            (
                Traffic::ramp(-1.0, 5.0, Duration::from_secs(1)).unwrap_err(),
                "from",
            ),
            (Traffic::ramp(1.0, 5.0, Duration::ZERO).unwrap_err(), "over"),
            (
                Traffic::spike(1.0, 0.0, Duration::ZERO, Duration::from_secs(1)).unwrap_err(),
                "peak",
            ),
            (
                Traffic::spike(1.0, 5.0, Duration::ZERO, Duration::ZERO).unwrap_err(),
                "length",
            ),
        ];
        for (error, parameter) in cases.into_iter().chain(more) {
            assert_eq!(error.parameter(), parameter, "{error}");
        }
        let e = Traffic::steady(-1.0).unwrap_err();
        assert_eq!(
            e.to_string(),
            "rate: -1 requests per second must be above 0"
        );
        // An invalid profile built by hand yields nothing rather than panicking.
        let bad = Traffic::Steady { rate: -5.0 };
        assert_eq!(bad.arrivals(Duration::from_secs(1), 1).count(), 0);
    }
}
