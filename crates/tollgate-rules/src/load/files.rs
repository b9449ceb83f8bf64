//! Finding the limits files at a path and reading them.

use std::fs;
use std::io;
use std::path::{Path, PathBuf};

use super::{LoadOptions, Loaded, load_sources};
use crate::diagnostics::Diagnostics;
use crate::tree::Position;

/// The limits files at `path`: the file itself, or the `*.yaml` / `*.yml`
/// files directly in the directory, sorted by name.
///
/// Entries whose names start with a dot (`.hidden.yaml`, Kubernetes'
/// `..data`) are skipped; symbolic links are followed.
pub fn limits_files(path: &Path) -> io::Result<Vec<PathBuf>> {
    let metadata = fs::metadata(path)?;
    if !metadata.is_dir() {
        return Ok(vec![path.to_path_buf()]);
    }
    let mut files = Vec::new();
    for entry in fs::read_dir(path)? {
        let entry = entry?;
        let name = entry.file_name();
        let Some(name) = name.to_str() else { continue };
        if name.starts_with('.') || !(name.ends_with(".yaml") || name.ends_with(".yml")) {
            continue;
        }
        let file = entry.path();
        if fs::metadata(&file).is_ok_and(|m| m.is_file()) {
            files.push(file);
        }
    }
    files.sort();
    Ok(files)
}

/// Loads the limits file or directory at `path`.
///
/// Fails only when `path` itself cannot be read; a file inside it that
/// cannot be read becomes an error in the diagnostics.
pub fn load_path(path: &Path, options: LoadOptions) -> io::Result<Loaded> {
    load_path_observed(path, options, |_, _| {})
}

/// [`load_path`], showing `observe` each file as it is read: its path and
/// its bytes, or the error reading it (so a caller can hash what was loaded).
pub fn load_path_observed(
    path: &Path,
    options: LoadOptions,
    mut observe: impl FnMut(&Path, Result<&[u8], &io::Error>),
) -> io::Result<Loaded> {
    let files = limits_files(path)?;
    let mut sources = Vec::with_capacity(files.len());
    let mut unreadable = Diagnostics::new();
    let first = Position { line: 1, column: 1 };
    for file in files {
        match fs::read(&file) {
            Ok(bytes) => {
                observe(&file, Ok(&bytes));
                match String::from_utf8(bytes) {
                    Ok(text) => sources.push((file, text)),
                    Err(_) => unreadable.error(&file, first, "the file is not UTF-8 text"),
                }
            }
            Err(error) => {
                observe(&file, Err(&error));
                unreadable.error(&file, first, format!("cannot read the file: {error}"));
            }
        }
    }
    let file_count = sources.len() + unreadable.error_count();
    let mut loaded = load_sources(
        sources.iter().map(|(f, t)| (f.as_path(), t.as_str())),
        options,
    );
    for diagnostic in unreadable.all() {
        loaded.diagnostics.error(
            &diagnostic.file,
            diagnostic.position,
            diagnostic.message.clone(),
        );
    }
    loaded.diagnostics.sort();
    loaded.file_count = file_count;
    Ok(loaded)
}
