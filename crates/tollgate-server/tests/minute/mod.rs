//! The instant the server tests start their manual clocks at.

/// A minute boundary: a whole number of minutes since the epoch.
pub const MINUTE_START: u64 = 1_699_999_980;
