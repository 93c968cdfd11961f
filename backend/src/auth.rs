//! Admin authentication: `Authorization: Bearer <token>`, or a session cookie obtained by posting
//! the token to `POST /v1/session` (what the dashboard does, so the token never sits in
//! JavaScript-readable storage).
//!
//! Tokens are compared in constant time, over fixed-length HMAC tags so that the length does not
//! leak either. A session cookie is `nonce.expiry.mac` with an HMAC-SHA256 keyed by the admin
//! token: every replica with the same token accepts it (no shared session store), and changing
//! the token ends every session. Logging out revokes the nonce on the replica that served the
//! logout.
//!
//! The MAC is RustCrypto's `hmac` over `sha2` (RFC 2104, tested against RFC 4231), keyed once
//! here and cloned per use, and every check goes through its constant-time `verify_slice`: no
//! hand-rolled MAC and no hand-written comparison.

use std::collections::HashMap;
use std::sync::Mutex;
use std::time::Duration;

use hmac::digest::InvalidLength;
use hmac::{Hmac, Mac};
use rand::RngCore;
use sha2::Sha256;

use crate::clock;

/// Name of the session cookie.
pub const SESSION_COOKIE: &str = "sluice_session";
/// How long a session lasts.
pub const SESSION_TTL: Duration = Duration::from_secs(12 * 60 * 60);

/// Key of the MAC that turns a token into a fixed-length tag for comparison (kept apart from the
/// session MAC, which is keyed by the token itself).
const TOKEN_TAG_KEY: &[u8] = b"sluice admin token tag v1";

type HmacSha256 = Hmac<Sha256>;

/// Why an [`Auth`] could not be set up.
#[derive(Debug, thiserror::Error)]
pub enum AuthError {
    /// The MAC refused its key. HMAC takes keys of any length (a long one is hashed first), so
    /// this does not happen with `hmac`'s HMAC-SHA256; it is passed on rather than assumed away.
    #[error("the admin token cannot key HMAC-SHA256: {0}")]
    Key(InvalidLength),
}

/// HMAC-SHA256 keyed by `key`, ready to be cloned and fed.
fn keyed(key: &[u8]) -> Result<HmacSha256, AuthError> {
    <HmacSha256 as Mac>::new_from_slice(key).map_err(AuthError::Key)
}

/// The admin token and the sessions derived from it.
pub struct Auth {
    /// Keyed by [`TOKEN_TAG_KEY`]: tags candidate tokens.
    tagger: HmacSha256,
    /// The tag of the admin token.
    token_tag: [u8; 32],
    /// Keyed by the admin token: signs and checks session cookies.
    sessions: HmacSha256,
    /// Logged-out nonces and their expiry (seconds since the epoch).
    revoked: Mutex<HashMap<String, u64>>,
}

/// A fresh random admin token (32 random bytes, hex).
pub fn generate_token() -> String {
    let mut bytes = [0u8; 32];
    rand::rng().fill_bytes(&mut bytes);
    hex::encode(bytes)
}

impl Auth {
    /// Auth for `token`.
    pub fn new(token: &str) -> Result<Auth, AuthError> {
        let tagger = keyed(TOKEN_TAG_KEY)?;
        let token_tag = tagger
            .clone()
            .chain_update(token.as_bytes())
            .finalize()
            .into_bytes()
            .into();
        Ok(Auth {
            tagger,
            token_tag,
            sessions: keyed(token.as_bytes())?,
            revoked: Mutex::new(HashMap::new()),
        })
    }

    /// Whether `candidate` is the admin token (constant time).
    pub fn token_matches(&self, candidate: &str) -> bool {
        self.tagger
            .clone()
            .chain_update(candidate.as_bytes())
            .verify_slice(&self.token_tag)
            .is_ok()
    }

    /// Whether an `Authorization` header value carries the admin token.
    pub fn bearer_matches(&self, header: &str) -> bool {
        let mut parts = header.trim().splitn(2, ' ');
        match (parts.next(), parts.next()) {
            (Some(scheme), Some(token)) if scheme.eq_ignore_ascii_case("bearer") => {
                self.token_matches(token.trim())
            }
            _ => false,
        }
    }

    /// A new session cookie value, valid for [`SESSION_TTL`].
    pub fn new_session(&self) -> String {
        self.new_session_at(clock::now_secs())
    }

    fn new_session_at(&self, now_secs: u64) -> String {
        let mut nonce = [0u8; 16];
        rand::rng().fill_bytes(&mut nonce);
        let expiry = now_secs.saturating_add(SESSION_TTL.as_secs());
        let payload = format!("{}.{expiry}", hex::encode(nonce));
        let mac = self
            .sessions
            .clone()
            .chain_update(payload.as_bytes())
            .finalize()
            .into_bytes();
        format!("{payload}.{}", hex::encode(mac))
    }

    /// Whether a session cookie value is genuine, unexpired and not logged out here.
    pub fn session_valid(&self, value: &str) -> bool {
        self.session_valid_at(value, clock::now_secs())
    }

    fn session_valid_at(&self, value: &str, now_secs: u64) -> bool {
        let Some((payload, mac_hex)) = value.rsplit_once('.') else {
            return false;
        };
        let Some((nonce, expiry)) = payload.split_once('.') else {
            return false;
        };
        let Ok(mac) = hex::decode(mac_hex) else {
            return false;
        };
        let genuine = self
            .sessions
            .clone()
            .chain_update(payload.as_bytes())
            .verify_slice(&mac)
            .is_ok();
        if !genuine {
            return false;
        }
        let Ok(expiry) = expiry.parse::<u64>() else {
            return false;
        };
        if expiry <= now_secs {
            return false;
        }
        let revoked = self.revoked.lock().unwrap_or_else(|p| p.into_inner());
        !revoked.contains_key(nonce)
    }

    /// Logs a session out on this replica (its cookie is also cleared in the browser).
    pub fn revoke(&self, value: &str) {
        let now = clock::now_secs();
        if !self.session_valid_at(value, now) {
            return;
        }
        let mut parts = value.split('.');
        if let (Some(nonce), Some(expiry)) = (
            parts.next(),
            parts.next().and_then(|e| e.parse::<u64>().ok()),
        ) {
            let mut revoked = self.revoked.lock().unwrap_or_else(|p| p.into_inner());
            revoked.retain(|_, exp| *exp > now);
            revoked.insert(nonce.to_owned(), expiry);
        }
    }
}

/// The value of the session cookie in a `Cookie` header, if any.
pub fn session_from_cookie_header(header: &str) -> Option<&str> {
    header.split(';').find_map(|pair| {
        let (name, value) = pair.trim().split_once('=')?;
        (name == SESSION_COOKIE).then_some(value.trim())
    })
}

/// `Set-Cookie` value for a new session.
pub fn set_cookie(value: &str) -> String {
    format!(
        "{SESSION_COOKIE}={value}; HttpOnly; SameSite=Strict; Path=/; Max-Age={}",
        SESSION_TTL.as_secs()
    )
}

/// `Set-Cookie` value that clears the session cookie.
pub fn clear_cookie() -> String {
    format!("{SESSION_COOKIE}=; HttpOnly; SameSite=Strict; Path=/; Max-Age=0")
}

#[cfg(test)]
mod tests {
    use super::*;

    fn auth(token: &str) -> Auth {
        Auth::new(token).expect("HMAC takes any key")
    }

    fn unhex(s: &str) -> Vec<u8> {
        hex::decode(s).expect("hex")
    }

    /// RFC 4231 section 4: (key, data, HMAC-SHA-256). Case 5 (output truncated to 128 bits) is
    /// left out: sluice never truncates. Cases 6 and 7 use a 131-byte key, longer than SHA-256's
    /// 64-byte block, which HMAC must hash first.
    fn rfc4231() -> Vec<(&'static str, Vec<u8>, Vec<u8>, &'static str)> {
        vec![
            (
                "case 1",
                vec![0x0b; 20],
                b"Hi There".to_vec(),
                "b0344c61d8db38535ca8afceaf0bf12b881dc200c9833da726e9376c2e32cff7",
            ),
            (
                "case 2",
                b"Jefe".to_vec(),
                b"what do ya want for nothing?".to_vec(),
                "5bdcc146bf60754e6a042426089575c75a003f089d2739839dec58b964ec3843",
            ),
            (
                "case 3",
                vec![0xaa; 20],
                vec![0xdd; 50],
                "773ea91e36800e46854db8ebd09181a72959098b3ef8c122d9635514ced565fe",
            ),
            (
                "case 4",
                unhex("0102030405060708090a0b0c0d0e0f10111213141516171819"),
                vec![0xcd; 50],
                "82558a389a443c0ea4cc819899f2083a85f0faa3e578f8077a2e3ff46729665b",
            ),
            (
                "case 6",
                vec![0xaa; 131],
                b"Test Using Larger Than Block-Size Key - Hash Key First".to_vec(),
                "60e431591ee0b67f0d8a26aacbf5b77f8e0bc6213728c5140546040f0ee37f54",
            ),
            (
                "case 7",
                vec![0xaa; 131],
                b"This is a test using a larger than block-size key and a larger than block-size data. The key needs to be hashed before being used by the HMAC algorithm.".to_vec(),
                "9b09ffa71b942fcb27635fbcd5b0e944bfdc63644f0713938a7f51535c3a35e2",
            ),
        ]
    }

    #[test]
    fn the_mac_matches_rfc4231_including_keys_over_one_block() {
        for (case, key, data, expected) in rfc4231() {
            let mac = keyed(&key)
                .expect("key")
                .chain_update(&data)
                .finalize()
                .into_bytes();
            assert_eq!(hex::encode(mac), expected, "RFC 4231 {case}");
        }
    }

    #[test]
    fn verification_accepts_rfc4231_tags_and_refuses_any_changed_bit_or_length() {
        for (case, key, data, expected) in rfc4231() {
            let tag = unhex(expected);
            let check = |tag: &[u8]| {
                keyed(&key)
                    .expect("key")
                    .chain_update(&data)
                    .verify_slice(tag)
                    .is_ok()
            };
            assert!(check(&tag), "{case}: the genuine tag");
            for byte in [0, 17, 31] {
                let mut bad = tag.clone();
                bad[byte] ^= 0x01;
                assert!(!check(&bad), "{case}: bit flipped in byte {byte}");
            }
            assert!(!check(&tag[..31]), "{case}: a short tag");
            assert!(!check(&[]), "{case}: an empty tag");
        }
    }

    #[test]
    fn bearer_must_carry_the_exact_token() {
        let auth = auth("s3cret");
        assert!(auth.bearer_matches("Bearer s3cret"));
        assert!(auth.bearer_matches("bearer s3cret"));
        assert!(!auth.bearer_matches("Bearer s3cre"));
        assert!(!auth.bearer_matches("Bearer s3cret2"));
        assert!(!auth.bearer_matches("Bearer "));
        assert!(!auth.bearer_matches("Basic s3cret"));
        assert!(!auth.bearer_matches("s3cret"));
    }

    #[test]
    fn sessions_verify_under_the_same_token_only_and_can_be_revoked() {
        let a = auth("t1");
        let session = a.new_session();
        assert!(a.session_valid(&session));
        assert!(
            auth("t1").session_valid(&session),
            "another replica with the same token"
        );
        assert!(!auth("t2").session_valid(&session));
        let mut forged = session.clone();
        forged.replace_range(0..1, if forged.starts_with('0') { "1" } else { "0" });
        assert!(!a.session_valid(&forged));
        assert!(!a.session_valid("garbage"));
        a.revoke(&session);
        assert!(!a.session_valid(&session));
    }

    #[test]
    fn a_session_expires_after_its_ttl() {
        let a = auth("t1");
        let now = 1_700_000_000;
        let session = a.new_session_at(now);
        let ttl = SESSION_TTL.as_secs();
        assert!(a.session_valid_at(&session, now));
        assert!(a.session_valid_at(&session, now + ttl - 1));
        assert!(!a.session_valid_at(&session, now + ttl));
        // A longer expiry written into the cookie breaks its MAC.
        let (payload, mac) = session.rsplit_once('.').expect("mac");
        let (nonce, _) = payload.split_once('.').expect("expiry");
        let extended = format!("{nonce}.{}.{mac}", now + 10 * ttl);
        assert!(!a.session_valid_at(&extended, now));
    }

    #[test]
    fn a_token_longer_than_one_block_keys_sessions_like_any_other() {
        let long = "k".repeat(131);
        let a = auth(&long);
        assert!(a.token_matches(&long));
        assert!(!a.token_matches(&long[..130]));
        let session = a.new_session();
        assert!(a.session_valid(&session));
        assert!(!auth(&long[..130]).session_valid(&session));
    }

    #[test]
    fn cookie_header_parsing_finds_the_session() {
        assert_eq!(
            session_from_cookie_header("a=1; sluice_session=xyz; b=2"),
            Some("xyz")
        );
        assert_eq!(session_from_cookie_header("a=1"), None);
    }
}
