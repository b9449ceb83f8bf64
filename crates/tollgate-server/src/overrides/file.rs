//! A single instance's overrides kept in a file (`--overrides-file`): read at start, written whole on every change by a rename.

use std::io::{self, Write as _};
use std::path::Path;

use serde::{Deserialize, Serialize};
use tollgate_rules::LoadOptions;

use super::{Override, OverrideBounds, OverrideRecord, OverrideSet};

/// The file's contents.
#[derive(Debug, Default, Serialize, Deserialize)]
#[serde(deny_unknown_fields)]
struct OverridesFile {
    overrides: Vec<OverrideRecord>,
}

/// Reads the overrides kept at `path` (none when there is no file yet), each
/// checked as when it was set; the first problem, naming the file, otherwise.
pub fn read(
    path: &Path,
    bounds: OverrideBounds,
    options: LoadOptions,
) -> Result<OverrideSet, String> {
    let text = match std::fs::read_to_string(path) {
        Ok(text) => text,
        Err(error) if error.kind() == io::ErrorKind::NotFound => return Ok(OverrideSet::default()),
        Err(error) => return Err(format!("cannot read {}: {error}", path.display())),
    };
    let file: OverridesFile = serde_json::from_str(&text)
        .map_err(|error| format!("{} is not an overrides file: {error}", path.display()))?;
    if file.overrides.len() > bounds.max_overrides {
        return Err(format!(
            "{} holds {} overrides, more than --max-overrides ({})",
            path.display(),
            file.overrides.len(),
            bounds.max_overrides
        ));
    }
    let mut overrides = Vec::with_capacity(file.overrides.len());
    for (index, record) in file.overrides.into_iter().enumerate() {
        let domain = record.domain.clone();
        let (loaded, _) = Override::load(record, bounds, options).map_err(|error| {
            format!(
                "{}: override {index} (domain `{domain}`) is refused: {error}",
                path.display()
            )
        })?;
        overrides.push(loaded);
    }
    Ok(OverrideSet::of(overrides))
}

/// Writes `set` to `path` whole: to a new file beside it, flushed to disk, then renamed over it.
pub fn write(path: &Path, set: &OverrideSet) -> io::Result<()> {
    let file = OverridesFile {
        overrides: set.iter().map(|o| o.record.clone()).collect(),
    };
    let text = serde_json::to_vec_pretty(&file).map_err(io::Error::other)?;
    let dir = match path.parent() {
        Some(dir) if !dir.as_os_str().is_empty() => dir,
        _ => Path::new("."),
    };
    let mut temporary = tempfile::NamedTempFile::new_in(dir)?;
    temporary.write_all(&text)?;
    temporary.as_file().sync_all()?;
    temporary.persist(path).map_err(|error| error.error)?;
    Ok(())
}

#[cfg(test)]
mod tests {
    use super::*;

    fn record(body: &str) -> OverrideRecord {
        OverrideRecord {
            domain: "api".to_owned(),
            body: body.to_owned(),
        }
    }

    #[test]
    fn what_is_written_reads_back_and_a_bad_file_is_named() {
        let dir = tempfile::tempdir().expect("a directory");
        let path = dir.path().join("overrides.json");
        let bounds = OverrideBounds::default();
        let options = LoadOptions::default();
        assert!(
            read(&path, bounds, options)
                .expect("no file yet")
                .is_empty()
        );
        let (one, _) = Override::load(
            record("key: tenant\nvalue: acme\nrate_limit: {unit: second, requests_per_unit: 5}\n"),
            bounds,
            options,
        )
        .expect("loads");
        let key = one.key.clone();
        write(&path, &OverrideSet::of([one])).expect("written");
        let back = read(&path, bounds, options).expect("reads");
        assert_eq!(back.len(), 1);
        assert_eq!(
            back.get(&key).expect("kept").rule.limits[0].requests_per_unit,
            5
        );
        let few = OverrideBounds {
            max_overrides: 0,
            ..bounds
        };
        assert!(
            read(&path, few, options)
                .expect_err("over")
                .contains("--max-overrides")
        );

        std::fs::write(
            &path,
            r#"{"overrides":[{"domain":"api","body":"key: tenant\nrate_limit: {unit: fortnight, requests_per_unit: 1}\n"}]}"#,
        )
        .expect("written");
        let error = read(&path, bounds, options).expect_err("bad unit");
        assert!(
            error.contains("overrides.json: override 0 (domain `api`)"),
            "{error}"
        );
        assert!(error.contains("override:2:"), "{error}");
        std::fs::write(&path, "not json").expect("written");
        assert!(
            read(&path, bounds, options)
                .expect_err("not json")
                .contains("is not an overrides file")
        );
    }
}
