//! The key a request is metered under, as sent to the backend: injective and bounded.
//!
//! Two rules, and why:
//!
//! - **Injective.** Header values are bytes. Valid UTF-8 is kept, except that `%` becomes `%25`,
//!   and each byte of an invalid UTF-8 sequence becomes `%XX`: two different byte strings never
//!   share a bucket, and binary values are limited like any other.
//! - **Bounded.** A key whose encoded form is longer than [`MAX_KEY_BYTES`] is sent as
//!   [`DIGEST_PREFIX`] + the lowercase hex SHA-256 of its *raw* bytes (71 bytes). Without a bound,
//!   a client could send a key (30 KB of `\xff`, which encodes to 90 KB, or 50,000 `"`, which JSON
//!   doubles) that pushes the callout body past the backend's 64 KiB limit: the backend answers
//!   413, and under `failure_mode: allow` the request passes unmetered. With it, the callout body
//!   is under 1 KB whatever the client sends, and every key is metered.
//!
//! A short key that happens to start with [`DIGEST_PREFIX`] is digested too, so a sent key starting
//! with `sha256:` is always a digest and never the literal value of another key: the mapping from
//! raw bytes to sent key stays one-to-one (up to SHA-256 collisions). The digest is of the raw
//! bytes, so an operator can compute a long key's bucket from the header value:
//! `printf '%s' "$value" | sha256sum`.

use sha2::{Digest, Sha256};

/// Longest key (in bytes, after encoding) sent as it is; longer ones are sent as a digest.
pub use sluice_core::limits::MAX_LITERAL_KEY_BYTES as MAX_KEY_BYTES;

/// What a digested key starts with; no key is ever sent literally with this prefix.
pub const DIGEST_PREFIX: &str = "sha256:";

/// The key sent for a value a client controls (header, path, address bytes).
pub fn from_bytes(raw: &[u8]) -> String {
    match encode_bounded(raw, MAX_KEY_BYTES) {
        Some(encoded) if !encoded.starts_with(DIGEST_PREFIX) => encoded,
        _ => digest(raw),
    }
}

/// Appends [`from_bytes`]`(raw)` to `out`. The usual value (UTF-8 without `%`, short, not
/// starting with [`DIGEST_PREFIX`]) is itself: copied straight in, with no string of its own
/// (the filter builds a leased hit's lease identity around the key in one reused buffer).
pub fn push_from_bytes(out: &mut Vec<u8>, raw: &[u8]) {
    let itself = raw.len() <= MAX_KEY_BYTES
        && !raw.contains(&b'%')
        && !raw.starts_with(DIGEST_PREFIX.as_bytes())
        && std::str::from_utf8(raw).is_ok();
    if itself {
        out.extend_from_slice(raw);
    } else {
        out.extend_from_slice(from_bytes(raw).as_bytes());
    }
}

/// Appends [`from_constant`]`(value)` to `out` (a short constant copied straight in).
pub fn push_from_constant(out: &mut Vec<u8>, value: &str) {
    if value.len() <= MAX_KEY_BYTES && !value.starts_with(DIGEST_PREFIX) {
        out.extend_from_slice(value.as_bytes());
    } else {
        out.extend_from_slice(from_constant(value).as_bytes());
    }
}

/// The key sent for a configured constant (not encoded: the operator wrote it), under the same
/// bound and prefix rule as client values.
pub fn from_constant(value: &str) -> String {
    if value.len() <= MAX_KEY_BYTES && !value.starts_with(DIGEST_PREFIX) {
        value.to_owned()
    } else {
        digest(value.as_bytes())
    }
}

/// The injective encoding of `bytes`, without a bound (see the module docs).
pub fn encode(bytes: &[u8]) -> String {
    encode_bounded(bytes, usize::MAX).unwrap_or_default()
}

/// The encoding of `bytes`, or `None` as soon as it would be longer than `max` bytes (so a huge
/// value costs no huge string).
fn encode_bounded(bytes: &[u8], max: usize) -> Option<String> {
    // The usual value (UTF-8 without `%`) encodes as itself: one check and one copy.
    if let Ok(text) = std::str::from_utf8(bytes) {
        if !bytes.contains(&b'%') {
            return (text.len() <= max).then(|| text.to_owned());
        }
    }
    let mut out = String::with_capacity(bytes.len().min(max));
    for chunk in bytes.utf8_chunks() {
        for c in chunk.valid().chars() {
            if c == '%' {
                out.push_str("%25");
            } else {
                out.push(c);
            }
            if out.len() > max {
                return None;
            }
        }
        for &b in chunk.invalid() {
            push_pct(&mut out, b);
        }
        if out.len() > max {
            return None;
        }
    }
    Some(out)
}

fn push_pct(out: &mut String, b: u8) {
    out.push('%');
    out.push(hex_digit(b >> 4, b'A'));
    out.push(hex_digit(b & 15, b'A'));
}

/// `sha256:` + the lowercase hex SHA-256 of `raw`.
fn digest(raw: &[u8]) -> String {
    let hash = Sha256::digest(raw);
    let mut out = String::with_capacity(DIGEST_PREFIX.len() + 2 * hash.len());
    out.push_str(DIGEST_PREFIX);
    for b in hash {
        out.push(hex_digit(b >> 4, b'a'));
        out.push(hex_digit(b & 15, b'a'));
    }
    out
}

/// The hex digit of a nibble (`n < 16`), letters from `ten` (`b'a'` or `b'A'`).
fn hex_digit(n: u8, ten: u8) -> char {
    char::from(if n < 10 { b'0' + n } else { ten + (n - 10) })
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn pushed_keys_are_the_keys() {
        let long = vec![b'x'; MAX_KEY_BYTES + 1];
        let edge = vec![b'y'; MAX_KEY_BYTES];
        for raw in [
            &b"alice"[..],
            b"",
            b"a%b",
            b"caf\xc3\xa9\xff",
            b"sha256:abc",
            &long,
            &edge,
        ] {
            let mut out = b"act\n".to_vec();
            push_from_bytes(&mut out, raw);
            assert_eq!(&out[4..], from_bytes(raw).as_bytes(), "{raw:?}");
        }
        for value in ["everyone", "sha256:x", &"z".repeat(MAX_KEY_BYTES + 1)] {
            let mut out = Vec::new();
            push_from_constant(&mut out, value);
            assert_eq!(out, from_constant(value).as_bytes(), "{value}");
        }
    }

    #[test]
    fn encoding_is_injective_on_tricky_pairs() {
        assert_ne!(encode(b"%FF"), encode(b"\xff"));
        assert_ne!(encode(b"%25"), encode(b"%"));
        assert_eq!(encode(b"plain-user_1"), "plain-user_1");
        assert_eq!(encode(b"caf\xc3\xa9\xff\xfe%"), "café%FF%FE%25");
        // Valid UTF-8 without `%` is itself; with one, it is escaped.
        assert_eq!(encode("café ☕".as_bytes()), "café ☕");
        assert_eq!(encode(b"a%b"), "a%25b");
        assert_eq!(encode_bounded("é".as_bytes(), 1), None);
        assert_eq!(encode_bounded(b"ab", 2).as_deref(), Some("ab"));
    }

    #[test]
    fn short_keys_are_sent_as_they_are_up_to_the_bound() {
        assert_eq!(from_bytes(b"alice"), "alice");
        let at_bound = "k".repeat(MAX_KEY_BYTES);
        assert_eq!(from_bytes(at_bound.as_bytes()), at_bound);
        // 42 invalid bytes encode to 126; 43 to 129, over the bound.
        assert_eq!(from_bytes(&[0xff; 42]).len(), 126);
        assert!(from_bytes(&[0xff; 43]).starts_with(DIGEST_PREFIX));
    }

    #[test]
    fn long_keys_are_sent_as_the_sha256_of_their_raw_bytes() {
        // SHA-256 of 129 × 'k', computed independently (`printf 'k%.0s' {1..129} | sha256sum`).
        let long = "k".repeat(MAX_KEY_BYTES + 1);
        assert_eq!(
            from_bytes(long.as_bytes()),
            format!("sha256:{}", sha256_hex_of_129_k())
        );
        for raw in [vec![0xffu8; 30_000], vec![b'"'; 50_000], vec![b'%'; 100]] {
            let key = from_bytes(&raw);
            assert_eq!(key.len(), DIGEST_PREFIX.len() + 64, "{} bytes", raw.len());
            assert!(key[DIGEST_PREFIX.len()..]
                .bytes()
                .all(|c| c.is_ascii_digit() || (b'a'..=b'f').contains(&c)));
        }
    }

    #[test]
    fn two_different_long_keys_stay_distinct() {
        let mut a = vec![0xffu8; 30_000];
        let b = a.clone();
        a[29_999] = 0xfe;
        assert_ne!(from_bytes(&a), from_bytes(&b));
        assert_eq!(from_bytes(&b), from_bytes(&vec![0xffu8; 30_000]));
    }

    #[test]
    fn a_literal_digest_lookalike_never_shares_a_bucket_with_a_digest() {
        let long = vec![b'x'; 500];
        let digested = from_bytes(&long);
        // A client sending the digest text itself gets the digest *of that text*.
        let lookalike = from_bytes(digested.as_bytes());
        assert!(lookalike.starts_with(DIGEST_PREFIX));
        assert_ne!(lookalike, digested);
        assert_ne!(from_bytes(b"sha256:"), "sha256:");
        assert_eq!(from_bytes(b"sha257:x"), "sha257:x");
    }

    #[test]
    fn constants_follow_the_same_bound() {
        assert_eq!(from_constant("everyone"), "everyone");
        assert_eq!(
            from_constant("100%"),
            "100%",
            "operator text is not encoded"
        );
        let long = "c".repeat(200);
        assert_eq!(from_constant(&long), from_bytes(long.as_bytes()));
        assert!(from_constant("sha256:abc").starts_with(DIGEST_PREFIX));
        assert_ne!(from_constant("sha256:abc"), "sha256:abc");
    }

    fn sha256_hex_of_129_k() -> &'static str {
        "9094034fb2d0ce2e407c9b260f2806ab2efb352e200722fd6296d9cf1cf7e6f5"
    }
}
