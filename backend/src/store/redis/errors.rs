//! Mapping Redis errors to [`StoreError`]: what went wrong, in terms a user can act on.

use redis::RedisError;

use crate::store::StoreError;

/// Maps an error from a command on `key` (the key named in a WRONGTYPE error).
pub(crate) fn map(error: &RedisError, key: &str) -> StoreError {
    let text = error.to_string();
    if error.code() == Some("WRONGTYPE") || text.contains("WRONGTYPE") {
        return StoreError::WrongType {
            key: key.to_owned(),
            detail: text,
        };
    }
    StoreError::Unavailable(text)
}
