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
//! Either way a node may lose the code (a restart without persistence, a
//! failover to a node that never had it, `FUNCTION FLUSH` or `SCRIPT
//! FLUSH`): the call's "missing" error is answered by loading it and
//! calling once more.

use std::sync::LazyLock;

use redis::{Cmd, ErrorKind, RedisError, Script};

/// The code both ways of calling share.
const BODY: &str = concat!(
    include_str!("prelude.lua"),
    include_str!("check.lua"),
    include_str!("lease.lua")
);

/// The check script for a Redis without Functions.
const CHECK_SCRIPT: &str = concat!(
    include_str!("prelude.lua"),
    include_str!("check.lua"),
    "return check(KEYS, ARGV)\n"
);

/// The lease script for a Redis without Functions.
const LEASE_SCRIPT: &str = concat!(
    include_str!("prelude.lua"),
    include_str!("lease.lua"),
    "return lease(KEYS, ARGV)\n"
);

/// The library's text and names, and the scripts, made once.
struct Code {
    library: String,
    check_function: String,
    lease_function: String,
    check_script: Script,
    lease_script: Script,
}

static CODE: LazyLock<Code> = LazyLock::new(|| {
    // Script computes the SHA1 of its code; 16 hex digits name the version.
    let version = Script::new(BODY).get_hash()[..16].to_owned();
    let name = format!("tollgate_{version}");
    let check_function = format!("{name}_check");
    let lease_function = format!("{name}_lease");
    let library = format!(
        "#!lua name={name}\n{BODY}\
         redis.register_function('{check_function}', check)\n\
         redis.register_function('{lease_function}', lease)\n"
    );
    Code {
        library,
        check_function,
        lease_function,
        check_script: Script::new(CHECK_SCRIPT),
        lease_script: Script::new(LEASE_SCRIPT),
    }
});

/// Which of the library's two calls.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub(crate) enum Entry {
    /// `check.lua`: decide and consume the counters of a request.
    Check,
    /// `lease.lua`: grant or return a lease on one counter.
    Lease,
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
    /// The command that calls `entry` on `keys` keys; its keys and values follow.
    pub(crate) fn command(self, entry: Entry, keys: usize) -> Cmd {
        let code = &*CODE;
        let mut cmd = match (self, entry) {
            (Calls::Functions, Entry::Check) => {
                redis::cmd("FCALL").arg(&code.check_function).take()
            }
            (Calls::Functions, Entry::Lease) => {
                redis::cmd("FCALL").arg(&code.lease_function).take()
            }
            (Calls::Scripts, Entry::Check) => redis::cmd("EVALSHA")
                .arg(code.check_script.get_hash())
                .take(),
            (Calls::Scripts, Entry::Lease) => redis::cmd("EVALSHA")
                .arg(code.lease_script.get_hash())
                .take(),
        };
        cmd.arg(keys);
        cmd
    }

    /// The command that loads `entry`'s code on a node (the whole library for Functions).
    pub(crate) fn load(self, entry: Entry) -> Cmd {
        let code = &*CODE;
        match (self, entry) {
            (Calls::Functions, _) => redis::cmd("FUNCTION")
                .arg("LOAD")
                .arg("REPLACE")
                .arg(&code.library)
                .take(),
            (Calls::Scripts, Entry::Check) => {
                redis::cmd("SCRIPT").arg("LOAD").arg(CHECK_SCRIPT).take()
            }
            (Calls::Scripts, Entry::Lease) => {
                redis::cmd("SCRIPT").arg("LOAD").arg(LEASE_SCRIPT).take()
            }
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
