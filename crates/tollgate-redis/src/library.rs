//! The Lua code of every call: one Redis Functions library (`FCALL`), or the same code as scripts (`EVALSHA`) where Functions are missing.
//!
//! `prelude.lua`, `check.lua` and `lease.lua` are joined into one library,
//! loaded once per node with `FUNCTION LOAD` (Redis 7 and later): its
//! functions are made at load, so a call runs only its own code, where a
//! script makes every one of its functions again on each call. The
//! library's name carries a hash of its code, so instances of two versions
//! never replace each other's code. On a Redis without Functions (or a user
//! not allowed `FUNCTION`), the same code runs as two scripts, each ending
//! with a call of its entry on `KEYS`, `ARGV`.
//!
//! Each entry comes in two encodings ([`Encoding`]), the format a counter
//! with no state yet is created in; both read and write either format.
//!
//! Either way a node may lose the code (a restart without persistence, a
//! failover to a node that never had it, `FUNCTION FLUSH` or `SCRIPT
//! FLUSH`): the call's "missing" error is answered by loading it and
//! calling once more.

use std::sync::LazyLock;

use redis::{Cmd, ErrorKind, RedisError, Script};

const PRELUDE: &str = include_str!("prelude.lua");
const CHECK: &str = include_str!("check.lua");
const LEASE: &str = include_str!("lease.lua");

/// The format a counter with no state in Redis yet is created in.
///
/// Both formats live under the same key, `tg{…}`, told apart by its Redis
/// type. Whatever the setting, every call keeps a counter's state in the
/// format it finds it in: a string is packed, a hash (a list for a sliding
/// log) is the format releases before the packed encoding know, and a
/// missing key gets a new state in this encoding (`prelude.lua`). So
/// instances of an older release and instances in either setting share one
/// state, as long as no older instance meets a packed string (it answers
/// WRONGTYPE, handled by its `on_store_error` rule).
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq)]
pub enum Encoding {
    /// A hash under `tg{…}`, as releases before the packed encoding wrote
    /// it (the default: safe while any older instance may still run).
    #[default]
    Hash,
    /// One packed string under `tg{…}` (fewer Redis commands per check);
    /// a hash found is converted in place when first touched. Only once no instance
    /// of an older release is left.
    Packed,
}

impl Encoding {
    /// The setting's name (`hash`, `packed`).
    pub fn name(self) -> &'static str {
        match self {
            Encoding::Hash => "hash",
            Encoding::Packed => "packed",
        }
    }

    /// The Lua code's letter for it.
    fn letter(self) -> char {
        match self {
            Encoding::Hash => 'h',
            Encoding::Packed => 'p',
        }
    }
}

/// One entry in one encoding: its function's name and its script.
struct Callable {
    function: String,
    script: Script,
    script_text: String,
}

/// The library's text, and each entry's function and script per encoding, made once.
struct Code {
    library: String,
    /// Indexed by [`Code::index`].
    callables: Vec<Callable>,
}

impl Code {
    fn index(entry: Entry, encoding: Encoding) -> usize {
        (entry as usize) * 2 + encoding as usize
    }
}

static CODE: LazyLock<Code> = LazyLock::new(|| {
    // Script computes the SHA1 of its code; 16 hex digits name the version.
    // The code both ways of calling share.
    let body = format!("{PRELUDE}{CHECK}{LEASE}");
    let version = Script::new(&body).get_hash()[..16].to_owned();
    let name = format!("tollgate_{version}");
    let mut library = format!("#!lua name={name}\n{body}");
    let mut callables = Vec::with_capacity(4);
    for entry in [Entry::Check, Entry::Lease] {
        let (lua, text) = match entry {
            Entry::Check => ("check", CHECK),
            Entry::Lease => ("lease", LEASE),
        };
        for encoding in [Encoding::Hash, Encoding::Packed] {
            let (e, letter) = (encoding.name(), encoding.letter());
            let function = format!("{name}_{lua}_{e}");
            library.push_str(&format!(
                "redis.register_function('{function}', \
                 function(keys, args) return {lua}(keys, args, '{letter}') end)\n"
            ));
            let script_text = format!("{PRELUDE}{text}return {lua}(KEYS, ARGV, '{letter}')\n");
            callables.push(Callable {
                function,
                script: Script::new(&script_text),
                script_text,
            });
        }
    }
    Code { library, callables }
});

/// Which of the library's two calls.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub(crate) enum Entry {
    /// `check.lua`: decide and consume the counters of a request.
    Check = 0,
    /// `lease.lua`: grant or return a lease on one counter.
    Lease = 1,
}

/// How a store calls the code on its Redis.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub(crate) enum Calls {
    /// `FCALL` of the library's functions.
    Functions,
    /// `EVALSHA` of the scripts.
    Scripts,
}

impl Calls {
    /// The command that calls `entry` in `encoding` on `keys` keys; its keys and values follow.
    pub(crate) fn command(self, entry: Entry, encoding: Encoding, keys: usize) -> Cmd {
        let callable = &CODE.callables[Code::index(entry, encoding)];
        // Room for the arguments of a one-counter check (2 + 1 + 8) and
        // their bytes, so building the command grows nothing.
        let mut cmd = Cmd::with_capacity(16, 160);
        match self {
            Calls::Functions => cmd.arg("FCALL").arg(&callable.function),
            Calls::Scripts => cmd.arg("EVALSHA").arg(callable.script.get_hash()),
        };
        cmd.arg(keys);
        cmd
    }

    /// The command that loads `entry`'s code in `encoding` on a node (the whole library for Functions).
    pub(crate) fn load(self, entry: Entry, encoding: Encoding) -> Cmd {
        let code = &*CODE;
        match self {
            Calls::Functions => redis::cmd("FUNCTION")
                .arg("LOAD")
                .arg("REPLACE")
                .arg(&code.library)
                .take(),
            Calls::Scripts => redis::cmd("SCRIPT")
                .arg("LOAD")
                .arg(&code.callables[Code::index(entry, encoding)].script_text)
                .take(),
        }
    }

    /// How to call, from the answer to loading the library once at connect.
    ///
    /// A load the server refused (no `FUNCTION` command before Redis 7, or
    /// a user not allowed it) means scripts; Err is a failure to reach it.
    pub(crate) fn from_load(answer: Result<(), RedisError>) -> Result<Calls, RedisError> {
        match answer {
            Ok(()) => Ok(Calls::Functions),
            Err(e) if matches!(e.kind(), ErrorKind::Server(_) | ErrorKind::Extension) => {
                tracing::warn!(
                    error = %e,
                    "Redis refused FUNCTION LOAD: calling the check as a script (EVALSHA), \
                     which costs Redis more CPU per call"
                );
                Ok(Calls::Scripts)
            }
            Err(e) => Err(e),
        }
    }
}

/// Whether `e` says the node lacks the code (restarted, failed over, flushed).
///
/// Redis answers a missing function with a plain `ERR Function not found`,
/// so the text is the only sign (a pipeline's error lists each call's).
pub(crate) fn is_missing(e: &RedisError) -> bool {
    e.code() == Some("NOSCRIPT") || e.to_string().contains("Function not found")
}
