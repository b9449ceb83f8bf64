//! Finding the limits files at a path, reading them, and refusing a configuration with nothing in it.

use std::fs;
use std::io;
use std::path::{Path, PathBuf};

use super::{LoadOptions, Loaded, load_sources};
use crate::diagnostics::Diagnostics;
use crate::tree::Position;

/// What an empty-configuration message tells the operator to do about it.
const ALLOW_EMPTY_HINT: &str = "every request would be unlimited; pass --allow-empty-config (TOLLGATE_ALLOW_EMPTY_CONFIG) if that is intended";

/// The limits files at `path`: the file itself, or the `*.yaml` / `*.yml`
/// entries directly in the directory, sorted by name.
///
/// Entries whose names start with a dot (`.hidden.yaml`, Kubernetes'
/// `..data`) are skipped. Every other entry with a limits file's name is
/// listed, whatever it is: symbolic links are followed when the files are
/// read, and an entry that is not a readable file (a dangling link, a link
/// to a directory) becomes an error then rather than disappearing.
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
        files.push(entry.path());
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
///
/// Unless [`LoadOptions::allow_empty`] is set, a configuration that reads
/// no file, or whose files define no rate limit, is an error at `path`.
pub fn load_path_observed(
    path: &Path,
    options: LoadOptions,
    mut observe: impl FnMut(&Path, Result<&[u8], &io::Error>),
) -> io::Result<Loaded> {
    let files = limits_files(path)?;
    let mut sources = Vec::with_capacity(files.len());
    let mut unreadable = Diagnostics::new();
    for file in files {
        if let Some(problem) = not_a_file(&file) {
            let error = io::Error::new(io::ErrorKind::InvalidInput, problem.clone());
            observe(&file, Err(&error));
            unreadable.error(&file, FIRST, problem);
            continue;
        }
        match fs::read(&file) {
            Ok(bytes) => {
                observe(&file, Ok(&bytes));
                match String::from_utf8(bytes) {
                    Ok(text) => sources.push((file, text)),
                    Err(_) => unreadable.error(&file, FIRST, "the file is not UTF-8 text"),
                }
            }
            Err(error) => {
                observe(&file, Err(&error));
                unreadable.error(&file, FIRST, format!("cannot read the file: {error}"));
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
    loaded.file_count = file_count;
    if !options.allow_empty {
        refuse_empty(path, &mut loaded);
    }
    loaded.diagnostics.sort();
    Ok(loaded)
}

/// Line 1, column 1: where a problem with a whole file is reported.
const FIRST: Position = Position { line: 1, column: 1 };

/// Why the limits entry `file` cannot be read as a file, or `None` when it is a regular file (or a link to one).
fn not_a_file(file: &Path) -> Option<String> {
    match fs::metadata(file) {
        Ok(metadata) if metadata.is_file() => None,
        Ok(metadata) if metadata.is_dir() => {
            Some("a directory (or a link to one), not a limits file".to_owned())
        }
        Ok(_) => Some("not a regular file (a device, socket or pipe)".to_owned()),
        Err(error) => match fs::read_link(file) {
            Ok(target) => Some(format!(
                "a dangling symbolic link: its target {} cannot be read ({error})",
                target.display()
            )),
            // Read as usual, so the message is the reader's own.
            Err(_) => None,
        },
    }
}

/// Adds an error at `path` when `loaded` read no file or (with no other error) defines no rate limit.
fn refuse_empty(path: &Path, loaded: &mut Loaded) {
    let message = if loaded.file_count == 0 {
        format!(
            "no limits file: {} holds no `*.yaml` or `*.yml` file; {ALLOW_EMPTY_HINT}",
            path.display()
        )
    } else if !loaded.diagnostics.has_errors() && loaded.rule_set.rule_count() == 0 {
        format!(
            "the configuration defines no rate limit ({} file(s) read); {ALLOW_EMPTY_HINT}",
            loaded.file_count
        )
    } else {
        return;
    };
    loaded.diagnostics.error(path, FIRST, message);
}

#[cfg(test)]
mod tests {
    use super::*;

    const ONE_RULE: &str =
        "domain: d\ndescriptors:\n  - key: k\n    rate_limit: {unit: hour, requests_per_unit: 3}\n";

    fn scratch(name: &str) -> PathBuf {
        let dir = std::env::temp_dir().join(format!(
            "tollgate-rules-files-{}-{name}",
            std::process::id()
        ));
        let _ = fs::remove_dir_all(&dir);
        fs::create_dir_all(&dir).expect("created");
        dir
    }

    fn errors(loaded: &Loaded) -> Vec<String> {
        loaded
            .diagnostics
            .errors()
            .map(ToString::to_string)
            .collect()
    }

    #[test]
    fn an_empty_directory_is_an_error_unless_allowed() {
        let dir = scratch("empty");
        let loaded = load_path(&dir, LoadOptions::default()).expect("readable");
        let found = errors(&loaded);
        assert_eq!(found.len(), 1, "{found:?}");
        assert!(found[0].contains("no limits file"), "{found:?}");
        assert!(found[0].contains(&*dir.to_string_lossy()), "{found:?}");
        let allowed = LoadOptions {
            allow_empty: true,
            ..LoadOptions::default()
        };
        assert!(
            !load_path(&dir, allowed)
                .expect("readable")
                .diagnostics
                .has_errors()
        );
        fs::remove_dir_all(&dir).expect("removed");
    }

    #[test]
    fn a_file_without_a_rule_is_an_error_unless_allowed() {
        let dir = scratch("no-rule");
        let file = dir.join("a.yaml");
        fs::write(&file, "domain: d\n").expect("written");
        let found = errors(&load_path(&file, LoadOptions::default()).expect("readable"));
        assert!(
            found.len() == 1 && found[0].contains("defines no rate limit"),
            "{found:?}"
        );
        fs::write(&file, "domain: d\ndescriptors:\n  - key: k\n").expect("written");
        let found = errors(&load_path(&dir, LoadOptions::default()).expect("readable"));
        assert!(
            found.len() == 1 && found[0].contains("defines no rate limit"),
            "{found:?}"
        );
        fs::write(&file, ONE_RULE).expect("written");
        assert!(errors(&load_path(&dir, LoadOptions::default()).expect("readable")).is_empty());
        fs::remove_dir_all(&dir).expect("removed");
    }

    #[test]
    fn dangling_links_and_links_to_directories_are_errors_naming_the_link() {
        let dir = scratch("links");
        fs::write(dir.join("a.yaml"), ONE_RULE).expect("written");
        std::os::unix::fs::symlink("gone/limits.yaml", dir.join("b.yaml")).expect("linked");
        fs::create_dir(dir.join("sub")).expect("created");
        std::os::unix::fs::symlink("sub", dir.join("c.yaml")).expect("linked");
        let loaded = load_path(&dir, LoadOptions::default()).expect("readable");
        let found = errors(&loaded);
        assert_eq!(found.len(), 2, "{found:?}");
        assert!(
            found[0].contains(
                "b.yaml:1:1: error: a dangling symbolic link: its target gone/limits.yaml"
            ),
            "{found:?}"
        );
        assert!(
            found[1].contains("c.yaml:1:1: error: a directory"),
            "{found:?}"
        );
        assert_eq!(loaded.file_count, 3);
        fs::remove_dir_all(&dir).expect("removed");
    }
}
