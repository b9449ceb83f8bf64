//! The most units admitted in any window of a given length, over admitted times in order.

use std::collections::VecDeque;
use std::time::Duration;

/// The most units admitted in any window `(t − length, t]`, tracked over admitted times in order.
pub(crate) struct AdmittedWindow {
    length: u64,
    /// `(offset ns, units)` admitted within the last `length`, oldest first.
    admitted: VecDeque<(u64, u64)>,
    units: u64,
    pub(crate) max: u64,
}

impl AdmittedWindow {
    pub(crate) fn new(length: Duration) -> Self {
        AdmittedWindow {
            length: u64::try_from(length.as_nanos()).unwrap_or(u64::MAX),
            admitted: VecDeque::new(),
            units: 0,
            max: 0,
        }
    }

    /// The units admitted in `(at − length, at)` and at `at` so far, forgetting older ones.
    pub(crate) fn units_before(&mut self, at: u64) -> u64 {
        while let Some(&(t, u)) = self.admitted.front() {
            if t.saturating_add(self.length) > at {
                break;
            }
            self.admitted.pop_front();
            self.units -= u;
        }
        self.units
    }

    /// Records `units` admitted at `at`, which must not be earlier than the last.
    pub(crate) fn admit(&mut self, at: u64, units: u64) {
        self.units_before(at);
        match self.admitted.back_mut() {
            Some((t, u)) if *t == at => *u += units,
            _ => self.admitted.push_back((at, units)),
        }
        self.units += units;
        self.max = self.max.max(self.units);
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn admitted_window_counts_the_half_open_window_ending_at_each_admission() {
        let mut w = AdmittedWindow::new(Duration::from_nanos(10));
        for (t, u) in [(0, 1), (5, 1), (9, 2), (10, 1), (10, 1), (19, 1), (30, 5)] {
            w.admit(t, u);
        }
        // (0, 10] holds 5, 9, 10, 10 → 1 + 2 + 1 + 1 = 5; [0, 9] holds 4.
        assert_eq!(w.max, 5);
        assert_eq!(w.units, 5, "only the entry at 30 is left");
    }
}
