//! Limits-file fragments the tests write again and again.

/// The `rate_limit` of a rule that admits exactly `limit` per `unit` with
/// `algorithm`, in flow style: a leaky bucket holds its burst plus one, so
/// it is given `burst: limit − 1`.
#[must_use]
pub fn exact_rate_limit(limit: u64, unit: &str, algorithm: &str) -> String {
    let burst = if algorithm == "leaky_bucket" {
        format!(", burst: {}", limit.saturating_sub(1))
    } else {
        String::new()
    };
    format!("{{unit: {unit}, requests_per_unit: {limit}, algorithm: {algorithm}{burst}}}")
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn a_leaky_bucket_gets_a_burst_one_short_of_the_limit() {
        assert_eq!(
            exact_rate_limit(100, "minute", "leaky_bucket"),
            "{unit: minute, requests_per_unit: 100, algorithm: leaky_bucket, burst: 99}"
        );
        assert_eq!(
            exact_rate_limit(5, "day", "gcra"),
            "{unit: day, requests_per_unit: 5, algorithm: gcra}"
        );
    }
}
