//! A counter's algorithm as check.lua's parameters, and the one ARGV element they are written as.

use std::time::Duration;

use tollgate_core::{AnyAlgorithm, AnyWordAlgorithm};
use tollgate_store::{Counter, StoreError};

/// Writes a counter's parameters as check.lua's one ARGV element:
/// `group op kind hits p1 p2 p3`, decimal, one space apart.
///
/// The text is put together on the stack, each number by `itoa`, and
/// handed to `out` in one write: `write!` cost about 1 700 instructions a
/// check (the formatter, and one write into the command per piece).
pub(crate) fn write_params(
    c: &Counter<'_>,
    params: &ScriptParams,
    mut out: impl std::io::Write,
) -> std::io::Result<()> {
    use std::io::Write as _;
    // A u32, two letters, a kind and four u64 with their spaces: at most 98 bytes.
    let mut text = [0u8; 112];
    let mut cursor = std::io::Cursor::new(&mut text[..]);
    let mut digits = itoa::Buffer::new();
    cursor.write_all(digits.format(c.group).as_bytes())?;
    cursor.write_all(if c.give_back { b" r " } else { b" c " })?;
    cursor.write_all(params.kind.as_bytes())?;
    for n in [c.hits, params.p1, params.p2, params.p3] {
        cursor.write_all(b" ")?;
        cursor.write_all(digits.format(n).as_bytes())?;
    }
    let len = usize::try_from(cursor.position()).unwrap_or(usize::MAX);
    out.write_all(text.get(..len).unwrap_or_default())
}

/// The script's name and parameters for one counter.
pub(crate) struct ScriptParams {
    pub(crate) kind: &'static str,
    pub(crate) p1: u64,
    pub(crate) p2: u64,
    /// A fixed window's stagger in µs, or an upstream key's TTL in seconds.
    pub(crate) p3: u64,
}

impl ScriptParams {
    pub(crate) fn of(algorithm: &AnyAlgorithm) -> Result<Self, StoreError> {
        let schedule = |interval: Duration, capacity: u64| ScriptParams {
            kind: "s",
            p1: nanos(interval),
            p2: capacity,
            p3: 0,
        };
        let window = |kind: &'static str, window: Duration, limit: u64| {
            let ns = nanos(window);
            if !ns.is_multiple_of(1_000) {
                return Err(StoreError::Unsupported(format!(
                    "a window of {window:?} is not a whole number of microseconds"
                )));
            }
            Ok(ScriptParams {
                kind,
                p1: ns / 1_000,
                p2: limit,
                p3: 0,
            })
        };
        match algorithm {
            AnyAlgorithm::Word(AnyWordAlgorithm::TokenBucket(a)) => {
                Ok(schedule(a.token_interval(), a.max_tokens()))
            }
            AnyAlgorithm::Word(AnyWordAlgorithm::Gcra(a)) => {
                Ok(schedule(a.emission_interval(), a.burst()))
            }
            AnyAlgorithm::Word(AnyWordAlgorithm::LeakyBucket(a)) => {
                Ok(schedule(a.drain_interval(), a.burst() + 1))
            }
            AnyAlgorithm::Word(AnyWordAlgorithm::FixedWindow(a)) => {
                window("f", a.window(), a.limit())
            }
            AnyAlgorithm::Word(AnyWordAlgorithm::SlidingWindow(a)) => {
                window("w", a.window(), a.limit())
            }
            AnyAlgorithm::SlidingLog(a) => window("l", a.window(), a.limit()),
        }
    }
}

/// `d` in whole nanoseconds, saturating.
pub(crate) fn nanos(d: Duration) -> u64 {
    u64::try_from(d.as_nanos()).unwrap_or(u64::MAX)
}

#[cfg(test)]
mod tests {
    use super::*;

    /// The text check.lua splits: every field at its widest, and at zero.
    #[test]
    fn parameters_are_written_as_decimal_text() {
        for (group, give_back, hits, p) in [
            (u32::MAX, true, u64::MAX, [u64::MAX; 3]),
            (0, false, 0, [0; 3]),
            (7, false, 1, [1_000_000_000, 5, 250]),
        ] {
            let c = Counter {
                group,
                key: b"k",
                tag: 0,
                algorithm: AnyAlgorithm::Word(AnyWordAlgorithm::FixedWindow(
                    tollgate_core::FixedWindow::new(1, Duration::from_secs(1)).unwrap(),
                )),
                hits,
                give_back,
                phase_ns: 0,
            };
            let params = ScriptParams {
                kind: "u",
                p1: p[0],
                p2: p[1],
                p3: p[2],
            };
            let mut out = Vec::new();
            write_params(&c, &params, &mut out).unwrap();
            let op = if give_back { "r" } else { "c" };
            assert_eq!(
                String::from_utf8(out).unwrap(),
                format!("{group} {op} u {hits} {} {} {}", p[0], p[1], p[2])
            );
        }
    }
}
