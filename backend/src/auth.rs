//! Admin authentication: `Authorization: Bearer <token>`, or a session cookie obtained by posting
//! the token to `POST /v1/session` (what the dashboard does, so the token never sits in
//! JavaScript-readable storage).
//!
//! Tokens are compared in constant time (over their SHA-256 digests, so the length does not leak
//! either). A session cookie is `nonce.expiry.mac` with an HMAC-SHA256 keyed by the admin token:
//! every replica with the same token accepts it (no shared session store), and changing the token
//! ends every session. Logging out revokes the nonce on the replica that served the logout.

use std::collections::HashMap;
use std::sync::Mutex;
use std::time::{Duration, SystemTime, UNIX_EPOCH};

use rand::RngCore;
use sha2::{Digest, Sha256};
use subtle::ConstantTimeEq;

/// Name of the session cookie.
pub const SESSION_COOKIE: &str = "sluice_session";
/// How long a session lasts.
pub const SESSION_TTL: Duration = Duration::from_secs(12 * 60 * 60);

/// The admin token and the sessions derived from it.
pub struct Auth {
    token_digest: [u8; 32],
    key: Vec<u8>,
    revoked: Mutex<HashMap<String, u64>>,
}

fn unix_secs() -> u64 {
    SystemTime::now()
        .duration_since(UNIX_EPOCH)
        .map(|d| d.as_secs())
        .unwrap_or(0)
}

fn hmac_sha256(key: &[u8], message: &[u8]) -> [u8; 32] {
    const BLOCK: usize = 64;
    let mut block_key = [0u8; BLOCK];
    if key.len() > BLOCK {
        block_key[..32].copy_from_slice(&Sha256::digest(key));
    } else {
        block_key[..key.len()].copy_from_slice(key);
    }
    let mut inner = Sha256::new();
    inner.update(block_key.map(|b| b ^ 0x36));
    inner.update(message);
    let mut outer = Sha256::new();
    outer.update(block_key.map(|b| b ^ 0x5c));
    outer.update(inner.finalize());
    outer.finalize().into()
}

/// A fresh random admin token (32 random bytes, hex).
pub fn generate_token() -> String {
    let mut bytes = [0u8; 32];
    rand::rng().fill_bytes(&mut bytes);
    hex::encode(bytes)
}

impl Auth {
    /// Auth for `token`.
    pub fn new(token: &str) -> Auth {
        Auth {
            token_digest: Sha256::digest(token.as_bytes()).into(),
            key: token.as_bytes().to_vec(),
            revoked: Mutex::new(HashMap::new()),
        }
    }

    /// Whether `candidate` is the admin token (constant time).
    pub fn token_matches(&self, candidate: &str) -> bool {
        let digest: [u8; 32] = Sha256::digest(candidate.as_bytes()).into();
        bool::from(digest.ct_eq(&self.token_digest))
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
        let mut nonce = [0u8; 16];
        rand::rng().fill_bytes(&mut nonce);
        let payload = format!(
            "{}.{}",
            hex::encode(nonce),
            unix_secs() + SESSION_TTL.as_secs()
        );
        let mac = hmac_sha256(&self.key, payload.as_bytes());
        format!("{payload}.{}", hex::encode(mac))
    }

    /// Whether a session cookie value is genuine, unexpired and not logged out here.
    pub fn session_valid(&self, value: &str) -> bool {
        let Some((payload, mac_hex)) = value.rsplit_once('.') else {
            return false;
        };
        let Some((nonce, expiry)) = payload.split_once('.') else {
            return false;
        };
        let Ok(mac) = hex::decode(mac_hex) else {
            return false;
        };
        let expected = hmac_sha256(&self.key, payload.as_bytes());
        if !bool::from(expected.as_slice().ct_eq(mac.as_slice())) {
            return false;
        }
        let Ok(expiry) = expiry.parse::<u64>() else {
            return false;
        };
        if expiry <= unix_secs() {
            return false;
        }
        let revoked = self.revoked.lock().unwrap_or_else(|p| p.into_inner());
        !revoked.contains_key(nonce)
    }

    /// Logs a session out on this replica (its cookie is also cleared in the browser).
    pub fn revoke(&self, value: &str) {
        if !self.session_valid(value) {
            return;
        }
        let mut parts = value.split('.');
        if let (Some(nonce), Some(expiry)) = (
            parts.next(),
            parts.next().and_then(|e| e.parse::<u64>().ok()),
        ) {
            let mut revoked = self.revoked.lock().unwrap_or_else(|p| p.into_inner());
            let now = unix_secs();
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
#[allow(clippy::unwrap_used, clippy::expect_used)]
mod tests {
    use super::*;

    #[test]
    fn hmac_matches_rfc4231_case_2() {
        let mac = hmac_sha256(b"Jefe", b"what do ya want for nothing?");
        assert_eq!(
            hex::encode(mac),
            "5bdcc146bf60754e6a042426089575c75a003f089d2739839dec58b964ec3843"
        );
    }

    #[test]
    fn bearer_must_carry_the_exact_token() {
        let auth = Auth::new("s3cret");
        assert!(auth.bearer_matches("Bearer s3cret"));
        assert!(auth.bearer_matches("bearer s3cret"));
        assert!(!auth.bearer_matches("Bearer s3cre"));
        assert!(!auth.bearer_matches("Bearer s3cret2"));
        assert!(!auth.bearer_matches("Basic s3cret"));
        assert!(!auth.bearer_matches("s3cret"));
    }

    #[test]
    fn sessions_verify_under_the_same_token_only_and_can_be_revoked() {
        let a = Auth::new("t1");
        let session = a.new_session();
        assert!(a.session_valid(&session));
        assert!(
            Auth::new("t1").session_valid(&session),
            "another replica with the same token"
        );
        assert!(!Auth::new("t2").session_valid(&session));
        let mut forged = session.clone();
        forged.replace_range(0..1, if forged.starts_with('0') { "1" } else { "0" });
        assert!(!a.session_valid(&forged));
        assert!(!a.session_valid("garbage"));
        a.revoke(&session);
        assert!(!a.session_valid(&session));
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
