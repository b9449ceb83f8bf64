//! Where `--decisions` go: a CSV, JSON or JSON-lines file, or stdout.

use std::fs::File;
use std::io::{self, BufWriter, Write};
use std::path::{Path, PathBuf};

use serde::Serialize;
use tollgate_lab::{DecisionRecord, LaneDecision};

use super::args::DecisionsFormat;
use crate::CommandError;

/// Where `--decisions` go, remembering the first write error.
pub(super) struct DecisionSink {
    path: PathBuf,
    format: DecisionsFormat,
    out: BufWriter<Box<dyn Write>>,
    written: u64,
    error: Option<io::Error>,
}

impl DecisionSink {
    /// Opens `path`; with `lanes`, CSV rows start with the lane, client and sidecar.
    pub(super) fn open(
        path: &Path,
        format: Option<DecisionsFormat>,
        lanes: bool,
    ) -> Result<Self, CommandError> {
        let to_stdout = path == Path::new("-");
        let format = match format {
            Some(format) => format,
            None if to_stdout => {
                return Err(CommandError::Usage(
                    "--decisions - writes to stdout and needs --decisions-format csv, json or jsonl"
                        .to_owned(),
                ));
            }
            None => match path.extension().and_then(|e| e.to_str()) {
                Some(e) if e.eq_ignore_ascii_case("csv") => DecisionsFormat::Csv,
                Some(e) if e.eq_ignore_ascii_case("json") => DecisionsFormat::Json,
                Some(e) if e.eq_ignore_ascii_case("jsonl") || e.eq_ignore_ascii_case("ndjson") => {
                    DecisionsFormat::Jsonl
                }
                _ => {
                    return Err(CommandError::Usage(format!(
                        "cannot tell the format of --decisions {} from its extension; \
                         name it .csv, .json or .jsonl, or pass --decisions-format",
                        path.display()
                    )));
                }
            },
        };
        let out: Box<dyn Write> = if to_stdout {
            Box::new(io::stdout())
        } else {
            let file = File::create(path).map_err(|e| {
                CommandError::Failed(format!("cannot write decisions to {}: {e}", path.display()))
            })?;
            Box::new(file)
        };
        let mut sink = DecisionSink {
            path: path.to_owned(),
            format,
            out: BufWriter::with_capacity(1 << 16, out),
            written: 0,
            error: None,
        };
        let opening = match format {
            DecisionsFormat::Csv if lanes => writeln!(sink.out, "{}", LaneDecision::CSV_HEADER),
            DecisionsFormat::Csv => writeln!(sink.out, "{}", DecisionRecord::CSV_HEADER),
            DecisionsFormat::Json => sink.out.write_all(b"["),
            DecisionsFormat::Jsonl => Ok(()),
        };
        sink.keep_error(opening);
        Ok(sink)
    }

    pub(super) fn is_stdout(&self) -> bool {
        self.path == Path::new("-")
    }

    fn keep_error(&mut self, result: io::Result<()>) {
        if let (Err(e), None) = (result, &self.error) {
            self.error = Some(e);
        }
    }

    pub(super) fn write(&mut self, record: &DecisionRecord) {
        self.write_with(record, |record, out| record.write_csv_row(out));
    }

    /// Writes one decision of a scenario's lane (a lane column, then the record).
    pub(super) fn write_lane(&mut self, decision: &LaneDecision<'_>) {
        self.write_with(decision, |decision, out| decision.write_csv_row(out));
    }

    fn write_with<T: Serialize>(
        &mut self,
        record: &T,
        csv: impl FnOnce(&T, &mut BufWriter<Box<dyn Write>>) -> io::Result<()>,
    ) {
        if self.error.is_some() {
            return;
        }
        let result = match self.format {
            DecisionsFormat::Csv => csv(record, &mut self.out),
            DecisionsFormat::Json => {
                let separator: &[u8] = if self.written == 0 { b"\n" } else { b",\n" };
                self.out.write_all(separator).and_then(|()| {
                    serde_json::to_writer(&mut self.out, record).map_err(io::Error::from)
                })
            }
            DecisionsFormat::Jsonl => serde_json::to_writer(&mut self.out, record)
                .map_err(io::Error::from)
                .and_then(|()| self.out.write_all(b"\n")),
        };
        self.written += 1;
        self.keep_error(result);
    }

    pub(super) fn finish(mut self) -> Result<(), CommandError> {
        if self.format == DecisionsFormat::Json {
            let closing = self.out.write_all(b"\n]\n");
            self.keep_error(closing);
        }
        let flushed = self.out.flush();
        self.keep_error(flushed);
        let destination = if self.is_stdout() {
            "stdout".to_owned()
        } else {
            self.path.display().to_string()
        };
        match self.error {
            None => Ok(()),
            Some(e) => Err(CommandError::Failed(format!(
                "cannot write decisions to {destination}: {e}"
            ))),
        }
    }
}
