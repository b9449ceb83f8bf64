//! The config watcher reloads once per quiet burst of changes: in place, rename-replace, a ConfigMap `..data` swap, a new file, a forced trigger.
//!
//! These run on the real file system, so the debouncer's quiet period is
//! real time; every wait is for a reload callback, with a bounded timeout.

use std::ffi::OsStr;
use std::io::Write;
use std::path::{Path, PathBuf};
use std::sync::Arc;
use std::sync::atomic::{AtomicBool, Ordering};
use std::time::Duration;

use tokio::sync::mpsc::{UnboundedReceiver, unbounded_channel};
use tollgate_runtime::{AbortOnDrop, ConfigEntries, ConfigWatcher, DEFAULT_DEBOUNCE, Trigger};

/// How long one reload may take to be called.
const BUDGET: Duration = Duration::from_secs(10);

/// A scratch directory, removed when dropped.
fn scratch(name: &str) -> tempfile::TempDir {
    tempfile::Builder::new()
        .prefix(&format!("tollgate-runtime-{name}-"))
        .tempdir()
        .expect("the scratch directory is created")
}

/// The entries a test directory's configuration is made of: `*.conf` and nothing else.
struct ConfFiles;

impl ConfigEntries for ConfFiles {
    fn concerns(name: &OsStr) -> bool {
        name.to_string_lossy().ends_with(".conf")
    }
}

/// One reload as the callback saw it: why, and what the configuration read then.
#[derive(Debug)]
struct Reload {
    trigger: Trigger,
    text: String,
}

/// What a running watcher reloaded, in order.
struct Reloads {
    seen: UnboundedReceiver<Reload>,
    trigger: tollgate_runtime::ReloadTrigger,
    _running: AbortOnDrop,
}

impl Reloads {
    /// Watches `paths` and, on each reload, reads `read` (a file, or every `*.conf` of a directory, sorted).
    fn start(paths: &[PathBuf], debounce: Duration, read: &Path) -> Reloads {
        Reloads::start_with(paths, debounce, read, || {})
    }

    /// [`start`](Self::start), calling `during` at the start of every reload.
    fn start_with(
        paths: &[PathBuf],
        debounce: Duration,
        read: &Path,
        during: impl Fn() + Send + Sync + 'static,
    ) -> Reloads {
        let watcher = ConfigWatcher::new::<ConfFiles>(paths, debounce).expect("watching starts");
        let trigger = watcher.trigger();
        let (sender, seen) = unbounded_channel();
        let read = read.to_path_buf();
        let running = watcher.spawn(move |trigger| {
            during();
            let _ = sender.send(Reload {
                trigger,
                text: read_config(&read),
            });
        });
        Reloads {
            seen,
            trigger,
            _running: running,
        }
    }

    /// The next reload, awaited at most [`BUDGET`].
    async fn next(&mut self) -> Reload {
        tokio::time::timeout(BUDGET, self.seen.recv())
            .await
            .expect("a reload within the budget")
            .expect("the watcher runs")
    }
}

/// The file at `path`, or every `*.conf` file of the directory at `path` in name order, one after the other.
fn read_config(path: &Path) -> String {
    if path.is_dir() {
        let mut names: Vec<PathBuf> = std::fs::read_dir(path)
            .expect("readable")
            .map(|e| e.expect("an entry").path())
            .filter(|p| p.extension() == Some(OsStr::new("conf")))
            .collect();
        names.sort();
        names.iter().map(|p| read_config(p)).collect()
    } else {
        std::fs::read_to_string(path).unwrap_or_default()
    }
}

#[cfg(unix)]
fn symlink(target: impl AsRef<Path>, link: &Path) {
    std::os::unix::fs::symlink(target, link).expect("the link is made");
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_file_written_in_place_is_reloaded() {
    let scratch = scratch("in-place");
    let dir = scratch.path().to_path_buf();
    let file = dir.join("a.conf");
    std::fs::write(&file, "one").expect("written");
    let mut reloads = Reloads::start(std::slice::from_ref(&dir), DEFAULT_DEBOUNCE, &dir);

    std::fs::write(&file, "two").expect("written");
    let reload = reloads.next().await;
    assert_eq!(reload.trigger, Trigger::FileChange);
    assert_eq!(reload.text, "two");
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_single_file_renamed_over_is_reloaded() {
    let scratch = scratch("rename");
    let dir = scratch.path().to_path_buf();
    let file = dir.join("proxy.yaml");
    std::fs::write(&file, "one").expect("written");
    let mut reloads = Reloads::start(std::slice::from_ref(&file), DEFAULT_DEBOUNCE, &file);

    let next = dir.join("proxy.yaml.next");
    std::fs::write(&next, "two").expect("written");
    std::fs::rename(&next, &file).expect("renamed over");
    let reload = reloads.next().await;
    assert_eq!(reload.trigger, Trigger::FileChange);
    assert_eq!(reload.text, "two");
}

#[cfg(unix)]
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_configmap_data_swap_is_reloaded_for_a_file_and_a_directory() {
    for single_file in [true, false] {
        let scratch = scratch(if single_file { "cm-file" } else { "cm-dir" });
        let dir = scratch.path().to_path_buf();
        std::fs::create_dir(dir.join("..v1")).expect("created");
        std::fs::write(dir.join("..v1/limits.conf"), "one").expect("written");
        symlink("..v1", &dir.join("..data"));
        symlink("..data/limits.conf", &dir.join("limits.conf"));
        let path = if single_file {
            dir.join("limits.conf")
        } else {
            dir.clone()
        };
        let mut reloads = Reloads::start(std::slice::from_ref(&path), DEFAULT_DEBOUNCE, &path);

        // Kubernetes' swap: a new version directory, a new link, renamed over `..data`.
        std::fs::create_dir(dir.join("..v2")).expect("created");
        std::fs::write(dir.join("..v2/limits.conf"), "two").expect("written");
        symlink("..v2", &dir.join("..data_tmp"));
        std::fs::rename(dir.join("..data_tmp"), dir.join("..data")).expect("swapped");
        std::fs::remove_dir_all(dir.join("..v1")).expect("the old version is removed");
        let reload = reloads.next().await;
        assert_eq!(reload.trigger, Trigger::FileChange);
        assert_eq!(reload.text, "two", "single file: {single_file}");
    }
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_new_file_in_a_watched_directory_is_reloaded() {
    let scratch = scratch("new-file");
    let dir = scratch.path().to_path_buf();
    std::fs::write(dir.join("a.conf"), "a").expect("written");
    let mut reloads = Reloads::start(std::slice::from_ref(&dir), DEFAULT_DEBOUNCE, &dir);

    std::fs::write(dir.join("b.conf"), "b").expect("written");
    assert_eq!(reloads.next().await.text, "ab");
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_forced_trigger_reloads_although_nothing_changed() {
    let scratch = scratch("forced");
    let dir = scratch.path().to_path_buf();
    std::fs::write(dir.join("a.conf"), "a").expect("written");
    let mut reloads = Reloads::start(std::slice::from_ref(&dir), DEFAULT_DEBOUNCE, &dir);

    assert!(reloads.trigger.force());
    let reload = reloads.next().await;
    assert_eq!(reload.trigger, Trigger::Forced);
    assert_eq!(reload.text, "a");
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_burst_of_changes_to_several_files_is_one_reload() {
    let scratch = scratch("burst");
    let dir = scratch.path().to_path_buf();
    let mut reloads = Reloads::start(std::slice::from_ref(&dir), DEFAULT_DEBOUNCE, &dir);

    for name in ["a", "b", "c", "d", "e"] {
        std::fs::write(dir.join(format!("{name}.conf")), name).expect("written");
        std::fs::write(dir.join(format!("{name}.log")), name).expect("written");
    }
    let reload = reloads.next().await;
    assert_eq!(reload.trigger, Trigger::FileChange);
    assert_eq!(reload.text, "abcde");
    // The next reload is the next change's: the burst gave no second one.
    std::fs::write(dir.join("f.conf"), "f").expect("written");
    let reload = reloads.next().await;
    assert_eq!(reload.text, "abcdef");
}

/// A regression test: the old watchers reloaded after a fixed time or a
/// fixed number of events, so a file still being written was read half-written.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_file_written_slowly_is_reloaded_once_after_the_last_write_and_never_half_written() {
    /// Shorter than the writes take all together (WRITES × GAP), and far longer than one GAP.
    const DEBOUNCE: Duration = Duration::from_millis(500);
    const WRITES: usize = 100;
    const GAP: Duration = Duration::from_millis(10);

    let scratch = scratch("slow");
    let dir = scratch.path().to_path_buf();
    let file = dir.join("limits.conf");
    std::fs::write(&file, "old").expect("written");
    let written = Arc::new(AtomicBool::new(false));
    let done = Arc::clone(&written);
    let (during_tx, mut during) = unbounded_channel();
    let mut reloads =
        Reloads::start_with(std::slice::from_ref(&file), DEBOUNCE, &file, move || {
            let _ = during_tx.send(done.load(Ordering::SeqCst));
        });

    let text: String = (0..WRITES).map(|i| format!("line {i:03}\n")).collect();
    let writer = {
        let (file, text, written) = (file.clone(), text.clone(), Arc::clone(&written));
        std::thread::spawn(move || {
            let mut out = std::fs::File::create(&file).expect("created");
            for line in text.lines() {
                writeln!(out, "{line}").expect("written");
                out.flush().expect("flushed");
                std::thread::sleep(GAP);
            }
            written.store(true, Ordering::SeqCst);
        })
    };
    let reload = reloads.next().await;
    writer.join().expect("the writer finished");
    let after_the_last_write = during.recv().await.expect("recorded");
    assert!(
        after_the_last_write,
        "reloaded while the file was being written"
    );
    assert_eq!(reload.text, text, "reloaded a half-written file");
    assert_eq!(reload.trigger, Trigger::FileChange);
    // Once: the next reload is the one this forces, not a second file change.
    assert!(reloads.trigger.force());
    let next = reloads.next().await;
    assert_eq!(next.trigger, Trigger::Forced);
    assert_eq!(next.text, text);
}
