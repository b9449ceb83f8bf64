//! The fuzzers' proptest runner: a fixed seed and a fixed number of cases, so a run is reproducible and bounded.

use proptest::test_runner::{Config, RngAlgorithm, TestRng, TestRunner};

/// A runner of `cases` cases from proptest's deterministic seed, recording no regressions file.
#[must_use]
pub fn fixed_seed_runner(cases: u32) -> TestRunner {
    let config = Config {
        cases,
        failure_persistence: None,
        ..Config::default()
    };
    TestRunner::new_with_rng(config, TestRng::deterministic_rng(RngAlgorithm::ChaCha))
}
