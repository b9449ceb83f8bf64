//! The bypass suite: a hostile client tries every trick against every algorithm, in memory and on a real Redis, and an admission counter checks that no limit is ever exceeded.
//!
//! Each trick has its own file; [`target`] builds the engines (one rule per
//! algorithm, five per day, so a test never sees a refill) and counts
//! admissions. Time in memory is a coarse clock over a hand-stepped wall;
//! on Redis it is Redis `TIME`, and [`target::Target::ceiling`] allows a
//! second window only when the run crossed a day boundary.

mod clock_steps;
mod concurrency;
mod huge_costs;
mod key_flood;
mod refunds;
mod reload_race;
mod target;
