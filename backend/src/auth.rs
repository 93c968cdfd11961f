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
//!
//! # Named identities
//!
//! Several admins may each hold a token of their own, with a name (`--admin-tokens-file`: one
//! `name token` per line), so the audit trail says who made a change. `--admin-token` alone is
//! one identity named [`DEFAULT_ADMIN_NAME`]. A candidate token is compared with every
//! identity's tag (all of them, whatever matches first, so the time says nothing about which).
//! A session carries its name inside the signed cookie (`nonce.expiry.hexname.mac`), so every
//! replica knows who it is without a session store. With one identity, sessions are keyed by
//! its token as before; with several, by all of them: changing any token ends every session.

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

/// The name of the identity `--admin-token` signs in as.
pub const DEFAULT_ADMIN_NAME: &str = "admin";
/// Longest identity name.
pub const MAX_ADMIN_NAME_LEN: usize = 32;

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
    /// No identity at all (neither `--admin-token` nor a tokens file).
    #[error("no admin token: give --admin-token or --admin-tokens-file")]
    NoIdentity,
}

/// Why a tokens file was refused (`--admin-tokens-file`), naming the line.
#[derive(Debug, thiserror::Error)]
#[error("line {line}: {reason}")]
pub struct TokensFileError {
    /// 1-based line number.
    pub line: usize,
    /// What is wrong with it.
    pub reason: String,
}

/// Whether `name` may name an identity: 1 to [`MAX_ADMIN_NAME_LEN`] of `[A-Za-z0-9_.@-]`.
pub fn valid_admin_name(name: &str) -> bool {
    (1..=MAX_ADMIN_NAME_LEN).contains(&name.len())
        && name
            .bytes()
            .all(|b| b.is_ascii_alphanumeric() || b"_.@-".contains(&b))
}

/// Parses a tokens file: one `name token` per line (blank lines and `#` comments skipped);
/// names valid and distinct, tokens at least 16 characters and distinct.
pub fn parse_tokens_file(text: &str) -> Result<Vec<(String, String)>, TokensFileError> {
    let mut out: Vec<(String, String)> = Vec::new();
    for (i, raw) in text.lines().enumerate() {
        let line = raw.trim();
        if line.is_empty() || line.starts_with('#') {
            continue;
        }
        let refuse = |reason: &str| TokensFileError {
            line: i + 1,
            reason: reason.to_owned(),
        };
        let mut parts = line.split_whitespace();
        let (Some(name), Some(token), None) = (parts.next(), parts.next(), parts.next()) else {
            return Err(refuse("expected `name token`"));
        };
        if !valid_admin_name(name) {
            return Err(refuse(&format!(
                "the name must be 1-{MAX_ADMIN_NAME_LEN} of [A-Za-z0-9_.@-]"
            )));
        }
        if token.len() < 16 {
            return Err(refuse("the token must be at least 16 characters"));
        }
        if out.iter().any(|(n, _)| n == name) {
            return Err(refuse("the name is given twice"));
        }
        if out.iter().any(|(_, t)| t == token) {
            return Err(refuse(
                "the token is given twice (each admin needs their own)",
            ));
        }
        out.push((name.to_owned(), token.to_owned()));
    }
    if out.is_empty() {
        return Err(TokensFileError {
            line: 0,
            reason: "no `name token` line".to_owned(),
        });
    }
    Ok(out)
}

/// Why a token file (`--admin-token-file`) was refused; never says the token.
#[derive(Debug, thiserror::Error)]
pub enum TokenFileError {
    /// The file cannot be read.
    #[error("cannot read it: {0}")]
    Read(#[from] std::io::Error),
    /// Its first line is empty.
    #[error("its first line is empty (it holds the token)")]
    Empty,
    /// Its first line is not one token.
    #[error("its first line holds whitespace inside the token")]
    Spaces,
}

/// Reads an admin token from a file: its first line, trimmed (a trailing newline, as editors
/// and secret mounts leave, is not part of the token).
pub fn read_token_file(path: &std::path::Path) -> Result<String, TokenFileError> {
    let text = std::fs::read_to_string(path)?;
    let token = text.lines().next().unwrap_or_default().trim();
    if token.is_empty() {
        return Err(TokenFileError::Empty);
    }
    if token.contains(char::is_whitespace) {
        return Err(TokenFileError::Spaces);
    }
    Ok(token.to_owned())
}

/// HMAC-SHA256 keyed by `key`, ready to be cloned and fed.
fn keyed(key: &[u8]) -> Result<HmacSha256, AuthError> {
    <HmacSha256 as Mac>::new_from_slice(key).map_err(AuthError::Key)
}

/// The admin identities and the sessions derived from them.
pub struct Auth {
    /// Keyed by [`TOKEN_TAG_KEY`]: tags candidate tokens.
    tagger: HmacSha256,
    /// Each identity's name and the tag of its token.
    tokens: Vec<(String, [u8; 32])>,
    /// Keyed by the token (or, with several identities, all of them): signs and checks session
    /// cookies.
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
    /// Auth for `token` alone, named [`DEFAULT_ADMIN_NAME`].
    pub fn new(token: &str) -> Result<Auth, AuthError> {
        Auth::named(&[(DEFAULT_ADMIN_NAME.to_owned(), token.to_owned())])
    }

    /// Auth for `admin_token` (named [`DEFAULT_ADMIN_NAME`]; empty: none) and the named
    /// identities of a tokens file.
    pub fn for_config(admin_token: &str, named: &[(String, String)]) -> Result<Auth, AuthError> {
        let mut all = Vec::with_capacity(named.len() + 1);
        if !admin_token.is_empty() {
            all.push((DEFAULT_ADMIN_NAME.to_owned(), admin_token.to_owned()));
        }
        all.extend(named.iter().cloned());
        Auth::named(&all)
    }

    /// Auth for `(name, token)` identities (at least one).
    pub fn named(identities: &[(String, String)]) -> Result<Auth, AuthError> {
        let tagger = keyed(TOKEN_TAG_KEY)?;
        let tokens = identities
            .iter()
            .map(|(name, token)| {
                let tag = tagger
                    .clone()
                    .chain_update(token.as_bytes())
                    .finalize()
                    .into_bytes()
                    .into();
                (name.clone(), tag)
            })
            .collect();
        let sessions = match identities {
            [] => return Err(AuthError::NoIdentity),
            [(_, token)] => keyed(token.as_bytes())?,
            several => {
                let mut key = Vec::new();
                for (name, token) in several {
                    key.extend_from_slice(name.as_bytes());
                    key.push(0);
                    key.extend_from_slice(token.as_bytes());
                    key.push(0);
                }
                keyed(&key)?
            }
        };
        Ok(Auth {
            tagger,
            tokens,
            sessions,
            revoked: Mutex::new(HashMap::new()),
        })
    }

    /// The name of the identity whose token `candidate` is. Every identity's tag is checked, in
    /// constant time each, whatever matched before.
    pub fn identify(&self, candidate: &str) -> Option<&str> {
        let mac = self.tagger.clone().chain_update(candidate.as_bytes());
        let mut found = None;
        for (name, tag) in &self.tokens {
            if mac.clone().verify_slice(tag).is_ok() && found.is_none() {
                found = Some(name.as_str());
            }
        }
        found
    }

    /// Whether `candidate` is an admin token (constant time).
    pub fn token_matches(&self, candidate: &str) -> bool {
        self.identify(candidate).is_some()
    }

    /// The identity an `Authorization` header's Bearer token names.
    pub fn bearer_name(&self, header: &str) -> Option<&str> {
        let mut parts = header.trim().splitn(2, ' ');
        match (parts.next(), parts.next()) {
            (Some(scheme), Some(token)) if scheme.eq_ignore_ascii_case("bearer") => {
                self.identify(token.trim())
            }
            _ => None,
        }
    }

    /// Whether an `Authorization` header value carries an admin token.
    pub fn bearer_matches(&self, header: &str) -> bool {
        self.bearer_name(header).is_some()
    }

    /// Every identity's name, in the order given.
    pub fn names(&self) -> Vec<&str> {
        self.tokens.iter().map(|(n, _)| n.as_str()).collect()
    }

    /// A new session cookie value for the first identity, valid for [`SESSION_TTL`].
    pub fn new_session(&self) -> String {
        let name = self.tokens.first().map_or(DEFAULT_ADMIN_NAME, |(n, _)| n);
        self.new_session_at(name, clock::now_secs())
    }

    /// A new session cookie value for the identity `name`, valid for [`SESSION_TTL`].
    pub fn new_session_for(&self, name: &str) -> String {
        self.new_session_at(name, clock::now_secs())
    }

    fn new_session_at(&self, name: &str, now_secs: u64) -> String {
        let mut nonce = [0u8; 16];
        rand::rng().fill_bytes(&mut nonce);
        let expiry = now_secs.saturating_add(SESSION_TTL.as_secs());
        let payload = format!(
            "{}.{expiry}.{}",
            hex::encode(nonce),
            hex::encode(name.as_bytes())
        );
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
        self.session_name(value).is_some()
    }

    /// The identity of a genuine, unexpired session not logged out here.
    pub fn session_name(&self, value: &str) -> Option<String> {
        self.session_name_at(value, clock::now_secs())
    }

    fn session_valid_at(&self, value: &str, now_secs: u64) -> bool {
        self.session_name_at(value, now_secs).is_some()
    }

    fn session_name_at(&self, value: &str, now_secs: u64) -> Option<String> {
        let (payload, mac_hex) = value.rsplit_once('.')?;
        let mut parts = payload.split('.');
        let (nonce, expiry, name_hex) = (parts.next()?, parts.next()?, parts.next()?);
        if parts.next().is_some() {
            return None;
        }
        let mac = hex::decode(mac_hex).ok()?;
        self.sessions
            .clone()
            .chain_update(payload.as_bytes())
            .verify_slice(&mac)
            .ok()?;
        let expiry = expiry.parse::<u64>().ok()?;
        if expiry <= now_secs {
            return None;
        }
        let revoked = self.revoked.lock().unwrap_or_else(|p| p.into_inner());
        if revoked.contains_key(nonce) {
            return None;
        }
        String::from_utf8(hex::decode(name_hex).ok()?).ok()
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

/// `Set-Cookie` value for a new session; `secure` (the admin listener serves TLS) adds
/// `Secure`, so the browser never sends it over plaintext (to the same host on another port, or
/// after a downgrade).
pub fn set_cookie(value: &str, secure: bool) -> String {
    format!(
        "{SESSION_COOKIE}={value}; HttpOnly; SameSite=Strict; Path=/; Max-Age={}{}",
        SESSION_TTL.as_secs(),
        secure_attribute(secure)
    )
}

/// `Set-Cookie` value that clears the session cookie (`Secure` as [`set_cookie`]'s, or a
/// browser may refuse to overwrite the secure cookie).
pub fn clear_cookie(secure: bool) -> String {
    format!(
        "{SESSION_COOKIE}=; HttpOnly; SameSite=Strict; Path=/; Max-Age=0{}",
        secure_attribute(secure)
    )
}

fn secure_attribute(secure: bool) -> &'static str {
    if secure {
        "; Secure"
    } else {
        ""
    }
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
        let session = a.new_session_at("admin", now);
        let ttl = SESSION_TTL.as_secs();
        assert!(a.session_valid_at(&session, now));
        assert!(a.session_valid_at(&session, now + ttl - 1));
        assert!(!a.session_valid_at(&session, now + ttl));
        // A longer expiry written into the cookie breaks its MAC.
        let (payload, mac) = session.rsplit_once('.').expect("mac");
        let mut parts = payload.split('.');
        let (nonce, _, name) = (parts.next().unwrap(), parts.next(), parts.next().unwrap());
        let extended = format!("{nonce}.{}.{name}.{mac}", now + 10 * ttl);
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
    fn named_identities_sign_in_as_themselves() {
        let named = vec![
            ("alice".to_owned(), "alice-token-0123456789".to_owned()),
            ("bob@ops".to_owned(), "bob-token-0123456789ab".to_owned()),
        ];
        let a = Auth::for_config("", &named).unwrap();
        assert_eq!(a.identify("alice-token-0123456789"), Some("alice"));
        assert_eq!(
            a.bearer_name("Bearer bob-token-0123456789ab"),
            Some("bob@ops")
        );
        assert_eq!(a.identify("nobody"), None);
        let session = a.new_session_for("bob@ops");
        assert_eq!(a.session_name(&session).as_deref(), Some("bob@ops"));
        // Another replica with the same identities knows the session; one with a changed token
        // does not.
        let again = Auth::for_config("", &named).unwrap();
        assert_eq!(again.session_name(&session).as_deref(), Some("bob@ops"));
        let mut changed = named.clone();
        changed[0].1 = "alice-token-changed-0000".into();
        assert_eq!(
            Auth::for_config("", &changed)
                .unwrap()
                .session_name(&session),
            None
        );
        // The plain --admin-token is "admin", beside the named ones.
        let both = Auth::for_config("plain-admin-token-000", &named).unwrap();
        assert_eq!(both.names(), ["admin", "alice", "bob@ops"]);
        assert_eq!(both.identify("plain-admin-token-000"), Some("admin"));
        assert!(matches!(
            Auth::for_config("", &[]),
            Err(AuthError::NoIdentity)
        ));
    }

    #[test]
    fn a_tokens_file_names_each_admin_once() {
        let ok = parse_tokens_file(
            "# who token\n\nalice alice-token-0123456789\n  bob  bob-token-0123456789ab  \n",
        )
        .unwrap();
        assert_eq!(ok.len(), 2);
        assert_eq!(ok[1], ("bob".into(), "bob-token-0123456789ab".into()));
        for (text, line) in [
            ("alice\n", 1),
            ("alice short\n", 1),
            ("a b c\n", 1),
            ("al ice-token-0123456789 x\n", 1),
            ("bad/name token-0123456789abcdef\n", 1),
            ("a token-0123456789abcdef\na token-0123456789abcdeg\n", 2),
            ("a token-0123456789abcdef\nb token-0123456789abcdef\n", 2),
            ("# nothing\n", 0),
        ] {
            assert_eq!(parse_tokens_file(text).unwrap_err().line, line, "{text:?}");
        }
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
