//! [`error_chain`]: an error worded with its sources, for connect failures and counted errors.

use std::fmt::Write as _;

/// An error and its sources, like `transport error: connection refused`.
pub fn error_chain(error: &dyn std::error::Error) -> String {
    let mut text = error.to_string();
    let mut source = error.source();
    while let Some(cause) = source {
        let _ = write!(text, ": {cause}");
        source = cause.source();
    }
    text
}
