//! Text for stdout that a closed pipe does not turn into a panic: `tollgate check … | head -1` ends quietly, as `cat` would.

use std::io::{ErrorKind, Write};

/// Writes `text` to stdout and flushes it; a reader that closed the pipe
/// (`head`) is not an error, since nothing more is wanted.
pub fn print(text: &str) -> std::io::Result<()> {
    let mut stdout = std::io::stdout().lock();
    match stdout
        .write_all(text.as_bytes())
        .and_then(|()| stdout.flush())
    {
        Err(error) if error.kind() == ErrorKind::BrokenPipe => Ok(()),
        other => other,
    }
}
