//! `tollgate simulate`: run algorithms against a traffic profile in virtual time.
//!
//! The flags (`args`) become the lab's algorithm and traffic specs and one
//! scenario (`build`), which runs through the in-memory store or Redis
//! (`run`); decisions go to their file (`sink`) and the summary is printed
//! as text or JSON (`report`). With `--modes`, the platform scenario (many
//! keys and instances, every fleet mode as a lane) runs instead (`platform`).

mod args;
mod build;
mod platform;
mod report;
mod run;
mod sink;

pub use args::SimulateArgs;
pub use run::run;
