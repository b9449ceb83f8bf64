//! The algorithms against reference models and the properties they promise, as one test binary.
//!
//! The reference models and generators in [`common`] serve every part, so
//! they live in the same binary as the parts that use them.

mod clock_steps;
mod common;
mod contracts;
mod meters;
mod sliding_log;
mod windows;
