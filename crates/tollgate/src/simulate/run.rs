//! The one run path of `tollgate simulate`: the scenario through its stores, decisions to their sink, the summary out.

use std::io::{self, Write};

use tollgate_core::{Clock, MonotonicClock};
use tollgate_lab::{MemoryStores, RedisStores, RunError, StoreFactory};

use super::args::SimulateArgs;
use super::build::{Plan, lab_error};
use super::report::{Comparison, Report, StoreUsed, summary_text};
use super::sink::DecisionSink;
use crate::CommandError;

/// Runs `tollgate simulate`.
pub fn run(args: &SimulateArgs) -> Result<(), CommandError> {
    if !args.platform.modes.is_empty() {
        return super::platform::run(args);
    }
    if args.instances != 4 && args.lease_period.is_none() {
        return Err(CommandError::Usage(
            "--instances needs --lease-period or --modes".into(),
        ));
    }
    let plan = Plan::from_args(args)?;
    let redis = match &args.redis {
        Some(url) => Some(RedisStores::connect_blocking(url).map_err(CommandError::Failed)?),
        None => None,
    };
    let stores: &dyn StoreFactory = match &redis {
        Some(redis) => redis,
        None => &MemoryStores,
    };
    let clock = MonotonicClock::new();
    let began = clock.now();
    let mut sink = match &args.decisions {
        Some(path) => Some(DecisionSink::open(
            path,
            args.decisions_format,
            !plan.single,
        )?),
        None => None,
    };
    let scenario = &plan.scenario;
    let report = match sink.as_mut() {
        Some(sink) => scenario.run_with_decisions(
            stores,
            |_| {},
            |decision| {
                if plan.single {
                    sink.write(&decision.record);
                } else {
                    sink.write_lane(decision);
                }
            },
        ),
        None => scenario.run(stores, |_| {}),
    }
    .map_err(|e| match e {
        RunError::Config(e) => lab_error(e),
        RunError::Store(message) => CommandError::Failed(message),
    })?;
    let elapsed = clock.now().saturating_since(began);
    let store = match &redis {
        Some(redis) => StoreUsed::redis(redis, &report, args.decisions.is_some(), elapsed),
        None => StoreUsed::memory(),
    };
    drop(redis);
    let decisions_on_stdout = sink.as_ref().is_some_and(|s| s.is_stdout());
    if let Some(sink) = sink {
        sink.finish()?;
    }
    let text = if plan.single {
        let report = Report::of(args, &plan, &report);
        summary_text(args, &report, |r| r.human(args))?
    } else {
        let comparison = Comparison::of(args, plan, report, store);
        summary_text(args, &comparison, |c| c.human(args))?
    };
    // With the decisions on stdout, the summary goes to stderr so stdout stays one format.
    let written = if decisions_on_stdout {
        io::stderr().lock().write_all(text.as_bytes())
    } else {
        let mut out = io::stdout().lock();
        out.write_all(text.as_bytes()).and_then(|()| out.flush())
    };
    written.map_err(|e| CommandError::Failed(format!("cannot write the summary: {e}")))
}
