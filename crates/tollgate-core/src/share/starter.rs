//! Starter slots: a small part of every key's limit held back for the instances that own a slot, so a key's first use on an instance is decided there with no call.
//!
//! With `slots = S` and `divisor = d`, every key of limit `ℓ = (r, b)`
//! keeps `S` parts of `s(ℓ) = (r / (S·d), b / (S·d))` out of its pool
//! (the *reserve*, about `ℓ / d`), whether or not the key has a book: a
//! key nobody has seen is a pool of `ℓ − S·s(ℓ)`, full. The authority
//! assigns each of the first `S` registered holders one slot for the life
//! of its registration; a slot's owner adds `s(ℓ)` to its part of *every*
//! key, starting empty when it learns of the slot and refilling at
//! `s(ℓ).rate`, so it decides a key's first use from that part at once
//! and reports the key only when its demand outgrows it or the part runs
//! dry. A limit too small for a whole token per slot (`b < S·d`) has no
//! reserve and no starter: its first use waits for a call, as without
//! slots.
//!
//! The price is the reserve: on a key that one instance alone keeps busy,
//! the parts of the other `S − 1` slots stay unused (at most `ℓ / d` of
//! the limit). The policy is the fleet's, not one instance's: the store
//! keeps the one every authority uses (see `tollgate_redis::shares`).

use super::Share;

/// How many starter slots each key keeps, and what part of the limit they hold together.
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq, Hash)]
pub struct StarterPolicy {
    /// Slots per key (0: no starters, every first use waits for a call).
    pub slots: u32,
    /// The slots hold together about `1 / divisor` of each key's limit.
    pub divisor: u64,
}

impl StarterPolicy {
    /// No starter slots.
    pub const OFF: StarterPolicy = StarterPolicy {
        slots: 0,
        divisor: 0,
    };

    /// Whether any slot exists.
    pub fn is_on(self) -> bool {
        self.slots > 0 && self.divisor > 0
    }

    /// One slot's part of a key of `limit`: zero when the policy is off
    /// or the limit is too small for a whole token and some rate per slot.
    pub fn part(self, limit: Share) -> Share {
        if !self.is_on() {
            return Share::ZERO;
        }
        let parts = u64::from(self.slots).saturating_mul(self.divisor);
        let part = Share {
            rate: limit.rate / parts,
            burst: limit.burst / parts,
        };
        if part.rate == 0 || part.burst == 0 {
            Share::ZERO
        } else {
            part
        }
    }

    /// What every key of `limit` keeps out of its pool: all slots' parts.
    pub fn reserve(self, limit: Share) -> Share {
        let part = self.part(limit);
        Share {
            rate: part.rate.saturating_mul(u64::from(self.slots)),
            burst: part.burst.saturating_mul(u64::from(self.slots)),
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn the_reserve_is_about_a_divisorth_and_too_small_limits_have_none() {
        let policy = StarterPolicy {
            slots: 16,
            divisor: 16,
        };
        let limit = Share::per_second(1_000, 1_000);
        assert_eq!(
            policy.part(limit),
            Share {
                rate: 3_906,
                burst: 3
            }
        );
        assert_eq!(
            policy.reserve(limit),
            Share {
                rate: 62_496,
                burst: 48
            }
        );
        // 100 tokens cannot give 256 parts a whole token each.
        assert_eq!(policy.part(Share::per_second(100, 100)), Share::ZERO);
        assert_eq!(policy.reserve(Share::per_second(100, 100)), Share::ZERO);
        assert_eq!(StarterPolicy::OFF.reserve(limit), Share::ZERO);
    }
}
