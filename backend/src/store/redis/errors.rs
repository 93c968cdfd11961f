//! Mapping Redis errors to [`StoreError`]: what went wrong, in terms a user can act on.
//!
//! The split that matters downstream is "the store is down" (503: the filter may fail open and
//! the caller may retry elsewhere) versus "the store answered, and the answer is an error" (500:
//! retrying will not help, and failing open would let every request through unmetered while a
//! bug lasts). A script that raised an error, was called with an argument it cannot use, called
//! a command this Redis does not have, or returned a reply of the wrong shape is the second kind:
//! [`StoreError::Script`], naming the script.
//!
//! A third kind: Redis answered `OOM command not allowed when used memory > 'maxmemory'`. Redis
//! is up, but at `maxmemory` with a policy that has nothing left to evict (`noeviction`, or a
//! `volatile-*` policy with no key carrying a TTL left), so it refuses every write until someone
//! resizes it: [`StoreError::Full`] (503 `store_full`), from a script or from any command. It is
//! not [`StoreError::Unavailable`], because the fix is the Redis setting, not waiting for Redis
//! to come back; see docs/storage.md, "Sizing Redis".

use redis::{ErrorKind, RedisError, ServerErrorKind};

use super::sizing::RECOMMENDED_POLICY;
use crate::store::StoreError;

/// What a failed command was: a Lua script (named as in `backend/lua/<name>.lua`) or a plain
/// command.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub(crate) enum Call {
    /// A script of `backend/lua`.
    Script(&'static str),
    /// A plain command (PING, HGET).
    Command,
}

/// Maps an error from a call on `key` (the key named in a WRONGTYPE error).
pub(crate) fn map(error: &RedisError, key: &str, call: Call) -> StoreError {
    let text = error.to_string();
    if error.code() == Some("WRONGTYPE") || text.contains("WRONGTYPE") {
        return StoreError::WrongType {
            key: key.to_owned(),
            detail: text,
        };
    }
    if is_out_of_memory(error) {
        return StoreError::Full(full_message(error));
    }
    match call {
        Call::Script(script) if is_script_failure(error) => StoreError::Script {
            script,
            message: text,
        },
        _ => match super::security::explain(error) {
            Some(hint) => StoreError::Unavailable(format!("{text} ({hint})")),
            None => StoreError::Unavailable(text),
        },
    }
}

/// Whether Redis refused a command for lack of memory: the error code `OOM` (the redis crate has
/// no kind of its own for it: an extension error), whether a plain command or a `redis.call`
/// inside a script drew it.
fn is_out_of_memory(error: &RedisError) -> bool {
    error.code() == Some("OOM")
}

/// Redis's own words (`OOM command not allowed when used memory > 'maxmemory'`, without the
/// client's quoting of the code) and what to do about them.
fn full_message(error: &RedisError) -> String {
    let said = match error.detail() {
        Some(detail) => format!("OOM {detail}"),
        None => error.to_string(),
    };
    format!(
        "Redis refused a write: {said} (Redis is at maxmemory and its maxmemory-policy has nothing \
         to evict: use {RECOMMENDED_POLICY} or raise maxmemory, see docs/storage.md, Sizing Redis)"
    )
}

/// Whether an error of a script call is the script's own failure rather than an outage: a
/// generic `ERR` reply (a Lua runtime error, `redis.error_reply`, a command refusing an argument,
/// an unknown command; Redis appends "script: <sha>, on @user_script:N") or a reply sluice cannot
/// convert. Outages keep their own codes (`BUSY`, `LOADING`, `CLUSTERDOWN`, `TRYAGAIN`,
/// `MASTERDOWN`, `READONLY`, I/O errors) and stay [`StoreError::Unavailable`]; `OOM` is taken out
/// before this (see [`is_out_of_memory`]).
fn is_script_failure(error: &RedisError) -> bool {
    match error.kind() {
        ErrorKind::Server(ServerErrorKind::ResponseError) => {
            !error.to_string().contains("max number of clients reached")
        }
        ErrorKind::UnexpectedReturnType | ErrorKind::Parse => true,
        _ => false,
    }
}

/// Parses a whole number Redis holds under `key`; anything else is [`StoreError::Corrupt`].
pub(crate) fn parse_u64(text: &str, key: &str) -> Result<u64, StoreError> {
    text.parse()
        .map_err(|_| StoreError::Corrupt(format!("{key} holds {text:?}, not a whole number")))
}

#[cfg(test)]
mod tests {
    use super::*;

    fn io(kind: std::io::ErrorKind) -> RedisError {
        RedisError::from(std::io::Error::from(kind))
    }

    #[test]
    fn a_script_error_names_the_script_and_is_not_an_outage() {
        let e = RedisError::from((
            ErrorKind::Server(ServerErrorKind::ResponseError),
            "An error was signalled by the server",
            "user_script:1: attempt to perform arithmetic on a nil value script: abc, on @user_script:1."
                .to_owned(),
        ));
        match map(&e, "k", Call::Script("gcra")) {
            StoreError::Script { script, message } => {
                assert_eq!(script, "gcra");
                assert!(message.contains("arithmetic on a nil value"), "{message}");
            }
            other => panic!("expected Script, got {other:?}"),
        }
        let wrong_shape = RedisError::from((
            ErrorKind::UnexpectedReturnType,
            "Response was of incompatible type",
        ));
        assert!(matches!(
            map(&wrong_shape, "k", Call::Script("rules_load")),
            StoreError::Script {
                script: "rules_load",
                ..
            }
        ));
    }

    #[test]
    fn outages_stay_unavailable_even_from_scripts() {
        for e in [
            io(std::io::ErrorKind::ConnectionRefused),
            io(std::io::ErrorKind::ConnectionReset),
            RedisError::from((ErrorKind::Server(ServerErrorKind::BusyLoading), "loading")),
            RedisError::from((ErrorKind::Server(ServerErrorKind::ClusterDown), "down")),
            RedisError::from((ErrorKind::Server(ServerErrorKind::TryAgain), "again")),
            RedisError::from((
                ErrorKind::Server(ServerErrorKind::ResponseError),
                "refused",
                "max number of clients reached".to_owned(),
            )),
        ] {
            assert!(
                matches!(
                    map(&e, "k", Call::Script("gcra")),
                    StoreError::Unavailable(_)
                ),
                "{e}"
            );
        }
    }

    /// As the redis crate parses Redis's reply to a script whose first write met `maxmemory`.
    fn oom(detail: &str) -> RedisError {
        redis::make_extension_error("OOM".to_owned(), Some(detail.to_owned()))
    }

    #[test]
    fn out_of_memory_is_full_from_scripts_and_commands_alike() {
        let from_script = oom(
            "command not allowed when used memory > 'maxmemory'. script: 9c32604f, on @user_script:1.",
        );
        let from_command = oom("command not allowed when used memory > 'maxmemory'.");
        for (e, call) in [
            (&from_script, Call::Script("gcra")),
            (&from_script, Call::Script("rules_write")),
            (&from_command, Call::Command),
        ] {
            match map(e, "k", call) {
                StoreError::Full(message) => {
                    assert!(
                        message.starts_with(
                            "Redis refused a write: OOM command not allowed when used memory > 'maxmemory'"
                        ),
                        "{message}"
                    );
                    assert!(message.contains("use volatile-lfu"), "{message}");
                }
                other => panic!("{call:?}: expected Full, got {other:?}"),
            }
        }
        // Another extension code is not mistaken for it.
        let busy = redis::make_extension_error("BUSY".to_owned(), Some("OOM soon".to_owned()));
        assert!(matches!(
            map(&busy, "k", Call::Script("gcra")),
            StoreError::Unavailable(_)
        ));
    }

    #[test]
    fn wrongtype_wins_and_plain_commands_are_never_script_errors() {
        let e = RedisError::from((
            ErrorKind::Server(ServerErrorKind::ResponseError),
            "An error was signalled by the server",
            "WRONGTYPE Operation against a key holding the wrong kind of value".to_owned(),
        ));
        assert!(matches!(
            map(&e, "sluice:{a:b}:gcra", Call::Script("gcra")),
            StoreError::WrongType { key, .. } if key == "sluice:{a:b}:gcra"
        ));
        let err = RedisError::from((
            ErrorKind::Server(ServerErrorKind::ResponseError),
            "An error was signalled by the server",
            "something".to_owned(),
        ));
        assert!(matches!(
            map(&err, "PING", Call::Command),
            StoreError::Unavailable(_)
        ));
    }
}
