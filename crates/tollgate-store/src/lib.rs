//! Keyed rate-limit state (being written).
