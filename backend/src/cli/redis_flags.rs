//! The Redis TLS and credential flags turned into [`RedisSecurity`], with envoyproxy/ratelimit's
//! variables (`REDIS_TLS`, `REDIS_TLS_CACERT`, `REDIS_TLS_CLIENT_CERT`, `REDIS_TLS_CLIENT_KEY`,
//! `REDIS_TLS_SKIP_HOSTNAME_VERIFICATION`, `REDIS_AUTH`) read as fallbacks, so a deployment's
//! environment can be copied over. A sluice flag (or its `SLUICE_*` variable) wins over the
//! peer's variable; when both are set and differ, a warning names both.
//!
//! As in the peer, the peer's TLS files count only when TLS is on (`REDIS_TLS=true`, a
//! `rediss://` URL or `--redis-tls`): otherwise they are ignored, with a warning. sluice's own
//! TLS flags switch TLS on by themselves; `--redis-tls=false` with one of them is refused.

use std::path::{Path, PathBuf};

use crate::store::redis::{
    HostnameCheck, RedisConfigError, RedisField, RedisSecurity, RedisTls, TlsFiles,
};

/// The flags (flattened into the command line).
#[derive(Debug, Default, clap::Args)]
pub struct RedisSecurityFlags {
    /// TLS to every Redis node (and sentinel), even with redis:// URLs or bare sentinel
    /// addresses; `rediss://` URLs turn it on too, and so does any --redis-tls-* file.
    /// `--redis-tls=false` refuses the TLS files. Falls back to the peer's REDIS_TLS.
    #[arg(long, env = "SLUICE_REDIS_TLS", value_name = "BOOL", num_args = 0..=1,
          default_missing_value = "true", value_parser = clap::builder::BoolishValueParser::new())]
    pub redis_tls: Option<bool>,

    /// PEM bundle of the CA(s) Redis's certificate must chain to (replaces the system's roots).
    /// Falls back to the peer's REDIS_TLS_CACERT.
    #[arg(long, env = "SLUICE_REDIS_TLS_CA_CERT", value_name = "FILE")]
    pub redis_tls_ca_cert: Option<PathBuf>,

    /// PEM client certificate (chain) sluice presents to Redis (`tls-auth-clients yes`); needs
    /// --redis-tls-client-key. Falls back to the peer's REDIS_TLS_CLIENT_CERT.
    #[arg(long, env = "SLUICE_REDIS_TLS_CLIENT_CERT", value_name = "FILE")]
    pub redis_tls_client_cert: Option<PathBuf>,

    /// PEM private key of --redis-tls-client-cert. Falls back to the peer's REDIS_TLS_CLIENT_KEY.
    #[arg(long, env = "SLUICE_REDIS_TLS_CLIENT_KEY", value_name = "FILE")]
    pub redis_tls_client_key: Option<PathBuf>,

    /// Accept a Redis certificate that does not name the host connected to (the chain is still
    /// verified against the CA), e.g. GCP Memorystore. Not with --redis-sentinel. Falls back to
    /// the peer's REDIS_TLS_SKIP_HOSTNAME_VERIFICATION.
    #[arg(long, env = "SLUICE_REDIS_TLS_SKIP_HOSTNAME_VERIFICATION", value_name = "BOOL",
          num_args = 0..=1, default_missing_value = "true",
          value_parser = clap::builder::BoolishValueParser::new())]
    pub redis_tls_skip_hostname_verification: Option<bool>,

    /// The Redis ACL user (AUTH user password), for every node (with Sentinel: the master);
    /// replaces a user in the URLs. Falls back to the user of the peer's REDIS_AUTH=user:password.
    #[arg(long, env = "SLUICE_REDIS_USER", value_name = "USER",
          value_parser = clap::builder::NonEmptyStringValueParser::new())]
    pub redis_user: Option<String>,

    /// The Redis password, for every node (with Sentinel: the master); replaces a password in the
    /// URLs. Prefer --redis-password-file. Falls back to the peer's REDIS_AUTH.
    #[arg(long, env = "SLUICE_REDIS_PASSWORD", value_name = "PASSWORD", hide_env_values = true,
          conflicts_with = "redis_password_file",
          value_parser = clap::builder::NonEmptyStringValueParser::new())]
    pub redis_password: Option<String>,

    /// A file holding the Redis password (one trailing newline ignored); read once at start, so a
    /// rotated password takes a restart.
    #[arg(long, env = "SLUICE_REDIS_PASSWORD_FILE", value_name = "FILE")]
    pub redis_password_file: Option<PathBuf>,
}

/// A flag whose value sluice refuses, named as it was given (the flag and its variable), found
/// when the configuration is built so it is never reported later as an unreachable store.
#[derive(Debug, thiserror::Error)]
#[error("{flag} ({env}): {reason}")]
pub struct FlagError {
    /// The flag, e.g. `--key-prefix`.
    pub flag: &'static str,
    /// Its environment twin, e.g. `SLUICE_KEY_PREFIX`.
    pub env: &'static str,
    /// What is wrong with the value.
    pub reason: RedisConfigError,
}

impl FlagError {
    /// The refusal named by the flag of its field.
    pub(crate) fn redis(reason: RedisConfigError) -> FlagError {
        let (flag, env) = redis_flag(reason.field());
        FlagError { flag, env, reason }
    }
}

/// The flag (and variable) that sets a Redis setting.
pub(super) fn redis_flag(field: RedisField) -> (&'static str, &'static str) {
    match field {
        RedisField::Url => ("--redis-url", "SLUICE_REDIS_URL"),
        RedisField::ClusterUrls => ("--redis-cluster", "SLUICE_REDIS_CLUSTER"),
        RedisField::Sentinel => ("--redis-sentinel", "SLUICE_REDIS_SENTINEL"),
        RedisField::Timeout => ("--redis-timeout-ms", "SLUICE_REDIS_TIMEOUT_MS"),
        RedisField::MaxInFlight => ("--max-in-flight", "SLUICE_MAX_IN_FLIGHT"),
        RedisField::KeyPrefix => ("--key-prefix", "SLUICE_KEY_PREFIX"),
        RedisField::TlsCaCert => ("--redis-tls-ca-cert", "SLUICE_REDIS_TLS_CA_CERT"),
        RedisField::TlsClientCert => ("--redis-tls-client-cert", "SLUICE_REDIS_TLS_CLIENT_CERT"),
        RedisField::TlsClientKey => ("--redis-tls-client-key", "SLUICE_REDIS_TLS_CLIENT_KEY"),
        RedisField::TlsSkipHostname => (
            "--redis-tls-skip-hostname-verification",
            "SLUICE_REDIS_TLS_SKIP_HOSTNAME_VERIFICATION",
        ),
        RedisField::Password => ("--redis-password", "SLUICE_REDIS_PASSWORD"),
        RedisField::PasswordFile => ("--redis-password-file", "SLUICE_REDIS_PASSWORD_FILE"),
        RedisField::Tls => ("--redis-tls", "SLUICE_REDIS_TLS"),
    }
}

/// The peer's variables, by name.
const PEER_TLS: &str = "REDIS_TLS";
const PEER_CA: &str = "REDIS_TLS_CACERT";
const PEER_CERT: &str = "REDIS_TLS_CLIENT_CERT";
const PEER_KEY: &str = "REDIS_TLS_CLIENT_KEY";
const PEER_SKIP: &str = "REDIS_TLS_SKIP_HOSTNAME_VERIFICATION";
const PEER_AUTH: &str = "REDIS_AUTH";

impl RedisSecurityFlags {
    /// The security settings these flags (and the peer's variables, read by `env`) ask for,
    /// with every file read and checked; `url_tls`: a Redis URL says `rediss://`.
    pub fn security(
        &self,
        url_tls: bool,
        env: &dyn Fn(&str) -> Option<String>,
    ) -> Result<RedisSecurity, FlagError> {
        let peer = |name: &str| env(name).filter(|v| !v.trim().is_empty());
        let peer_tls = peer_bool(peer(PEER_TLS), PEER_TLS, "--redis-tls", RedisField::Tls)?;
        let peer_skip = peer_bool(
            peer(PEER_SKIP),
            PEER_SKIP,
            "--redis-tls-skip-hostname-verification",
            RedisField::TlsSkipHostname,
        )?;
        let tls_on = pick(self.redis_tls, peer_tls, "--redis-tls", PEER_TLS);
        let own_given: Option<&'static str> = if self.redis_tls_ca_cert.is_some() {
            Some("--redis-tls-ca-cert")
        } else if self.redis_tls_client_cert.is_some() {
            Some("--redis-tls-client-cert")
        } else if self.redis_tls_client_key.is_some() {
            Some("--redis-tls-client-key")
        } else if self.redis_tls_skip_hostname_verification == Some(true) {
            Some("--redis-tls-skip-hostname-verification")
        } else {
            None
        };
        let tls = match (tls_on, own_given) {
            (Some(false), Some(what)) => {
                return Err(FlagError::redis(RedisConfigError::TlsOff { what }))
            }
            (Some(true), _) | (None, Some(_)) => true,
            (Some(false), None) => false,
            (None, None) => url_tls,
        };
        let peer_ca = peer(PEER_CA).map(PathBuf::from);
        let peer_cert = peer(PEER_CERT).map(PathBuf::from);
        let peer_key = peer(PEER_KEY).map(PathBuf::from);
        let tls = if tls {
            let ca = pick_path(
                &self.redis_tls_ca_cert,
                &peer_ca,
                "--redis-tls-ca-cert",
                PEER_CA,
            );
            let cert = pick_path(
                &self.redis_tls_client_cert,
                &peer_cert,
                "--redis-tls-client-cert",
                PEER_CERT,
            );
            let key = pick_path(
                &self.redis_tls_client_key,
                &peer_key,
                "--redis-tls-client-key",
                PEER_KEY,
            );
            let skip = pick(
                self.redis_tls_skip_hostname_verification,
                peer_skip,
                "--redis-tls-skip-hostname-verification",
                PEER_SKIP,
            );
            let hostname = if skip == Some(true) {
                HostnameCheck::Skip
            } else {
                HostnameCheck::Verify
            };
            let files = TlsFiles { ca, cert, key };
            let tls = RedisTls::load(&files, hostname).map_err(|reason| {
                // A file that came from the peer's variable is named by that variable.
                let from_peer = match reason.field() {
                    RedisField::TlsCaCert if self.redis_tls_ca_cert.is_none() => Some(PEER_CA),
                    RedisField::TlsClientCert if self.redis_tls_client_cert.is_none() => {
                        Some(PEER_CERT)
                    }
                    RedisField::TlsClientKey if self.redis_tls_client_key.is_none() => {
                        Some(PEER_KEY)
                    }
                    _ => None,
                };
                let mut error = FlagError::redis(reason);
                if let Some(name) = from_peer {
                    error.env = name;
                }
                error
            })?;
            Some(Box::new(tls))
        } else {
            for (name, set) in [
                (PEER_CA, peer_ca.is_some()),
                (PEER_CERT, peer_cert.is_some()),
                (PEER_KEY, peer_key.is_some()),
                (PEER_SKIP, peer_skip.is_some()),
            ] {
                if set {
                    tracing::warn!(
                        "{name} is ignored: TLS to Redis is off (as envoyproxy/ratelimit, its TLS \
                     settings count only with REDIS_TLS=true, --redis-tls or rediss:// URLs)"
                    );
                }
            }
            None
        };
        let (peer_user, peer_password) = match peer(PEER_AUTH) {
            // As the peer: "user:password", or a password alone.
            Some(auth) => match auth.split_once(':') {
                Some((user, password)) => (Some(user.to_owned()), Some(password.to_owned())),
                None => (None, Some(auth)),
            },
            None => (None, None),
        };
        let own_password = match &self.redis_password_file {
            Some(path) => Some(read_password(path).map_err(FlagError::redis)?),
            None => self.redis_password.clone(),
        };
        let password = pick(
            own_password,
            peer_password,
            "--redis-password (or --redis-password-file)",
            PEER_AUTH,
        );
        let user = pick(
            self.redis_user.clone(),
            peer_user,
            "--redis-user",
            "REDIS_AUTH's user",
        );
        Ok(RedisSecurity {
            tls,
            user,
            password,
        })
    }
}

/// sluice's value if set, else the peer's; a warning when both are set and differ.
fn pick<T: PartialEq>(own: Option<T>, peer: Option<T>, flag: &str, peer_name: &str) -> Option<T> {
    match (own, peer) {
        (Some(own), Some(peer)) => {
            if own != peer {
                tracing::warn!("{flag} and {peer_name} differ; {flag} wins");
            }
            Some(own)
        }
        (own, peer) => own.or(peer),
    }
}

fn pick_path<'a>(
    own: &'a Option<PathBuf>,
    peer: &'a Option<PathBuf>,
    flag: &str,
    peer_name: &str,
) -> Option<&'a Path> {
    pick(own.as_deref(), peer.as_deref(), flag, peer_name)
}

/// A peer's boolean as Go's `strconv.ParseBool` reads it.
fn peer_bool(
    value: Option<String>,
    name: &'static str,
    flag: &'static str,
    field: RedisField,
) -> Result<Option<bool>, FlagError> {
    let Some(value) = value else {
        return Ok(None);
    };
    match value.trim() {
        "1" | "t" | "T" | "TRUE" | "true" | "True" => Ok(Some(true)),
        "0" | "f" | "F" | "FALSE" | "false" | "False" => Ok(Some(false)),
        _ => Err(FlagError {
            flag,
            env: name,
            reason: RedisConfigError::NotABool { field, value },
        }),
    }
}

/// The password in `path`, one trailing newline removed.
fn read_password(path: &Path) -> Result<String, RedisConfigError> {
    let refuse = |reason: String| RedisConfigError::PasswordFile {
        path: path.display().to_string(),
        reason,
    };
    let text = std::fs::read_to_string(path).map_err(|e| refuse(format!("cannot be read: {e}")))?;
    let password = text
        .strip_suffix('\n')
        .map(|t| t.strip_suffix('\r').unwrap_or(t))
        .unwrap_or(&text);
    if password.is_empty() {
        return Err(refuse("is empty".to_owned()));
    }
    Ok(password.to_owned())
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::cli::Cli;
    use crate::config::StoreChoice;
    use clap::Parser;

    fn security_of(args: &[&str], env: &[(&str, &str)]) -> Result<RedisSecurity, FlagError> {
        let cli = Cli::try_parse_from(args).expect("parses");
        let lookup = |name: &str| {
            env.iter()
                .find(|(k, _)| *k == name)
                .map(|(_, v)| (*v).to_owned())
        };
        match cli.store_choice_with(&lookup)? {
            StoreChoice::Redis(config) => Ok(config.security),
            other => panic!("expected Redis, got {other:?}"),
        }
    }

    const URL: [&str; 3] = ["sluice", "--redis-url", "redis://127.0.0.1:6379/"];

    #[test]
    fn the_peers_variables_are_read_as_fallbacks() {
        let s =
            security_of(&URL, &[("REDIS_TLS", "true"), ("REDIS_AUTH", "app:p:w")]).expect("valid");
        assert_eq!(s.tls, Some(Box::default()));
        assert_eq!(s.user.as_deref(), Some("app"));
        assert_eq!(s.password.as_deref(), Some("p:w"), "cut at the first colon");
        let s = security_of(&URL, &[("REDIS_AUTH", "secret")]).expect("valid");
        assert_eq!((s.user, s.password.as_deref()), (None, Some("secret")));
        assert_eq!(s.tls, None);
        let s = security_of(
            &URL,
            &[
                ("REDIS_TLS", "1"),
                ("REDIS_TLS_SKIP_HOSTNAME_VERIFICATION", "T"),
            ],
        )
        .expect("valid");
        assert_eq!(s.hostname(), HostnameCheck::Skip);
    }

    #[test]
    fn a_sluice_flag_wins_over_the_peers_variable() {
        let mut args = URL.to_vec();
        args.extend(["--redis-password", "mine", "--redis-tls=false"]);
        let s = security_of(&args, &[("REDIS_AUTH", "u:theirs"), ("REDIS_TLS", "true")])
            .expect("valid");
        assert_eq!(s.password.as_deref(), Some("mine"));
        assert_eq!(s.user.as_deref(), Some("u"));
        assert_eq!(s.tls, None, "--redis-tls=false wins over REDIS_TLS=true");
    }

    #[test]
    fn the_peers_tls_files_count_only_with_tls_on_as_in_the_peer() {
        let s = security_of(&URL, &[("REDIS_TLS_CACERT", "/nonexistent/ca.pem")]).expect("valid");
        assert_eq!(s.tls, None);
        let e = security_of(
            &URL,
            &[
                ("REDIS_TLS", "true"),
                ("REDIS_TLS_CACERT", "/nonexistent/ca.pem"),
            ],
        )
        .expect_err("missing file");
        assert_eq!((e.flag, e.env), ("--redis-tls-ca-cert", "REDIS_TLS_CACERT"));
        assert!(e.to_string().contains("/nonexistent/ca.pem"), "{e}");
    }

    #[test]
    fn bad_settings_are_refused_naming_the_flag() {
        let e = security_of(&URL, &[("REDIS_TLS", "maybe")]).expect_err("not a bool");
        assert_eq!((e.flag, e.env), ("--redis-tls", "REDIS_TLS"));
        let mut off = URL.to_vec();
        off.extend(["--redis-tls=false", "--redis-tls-ca-cert", "/x.pem"]);
        let e = security_of(&off, &[]).expect_err("TLS off with a CA");
        assert_eq!(e.flag, "--redis-tls");
        let mut own = URL.to_vec();
        own.extend(["--redis-tls-client-cert", "/nonexistent/c.pem"]);
        let e = security_of(&own, &[]).expect_err("a certificate without its key");
        assert_eq!(e.flag, "--redis-tls-client-key");
        let e = security_of(
            &[
                "sluice",
                "--redis-sentinel",
                "m@h:26379",
                "--redis-tls-skip-hostname-verification",
            ],
            &[],
        )
        .expect_err("sentinel cannot skip the hostname");
        assert_eq!(e.flag, "--redis-tls-skip-hostname-verification");
        let e = security_of(&["sluice", "--redis-url", "rediss://h:6379/#insecure"], &[])
            .expect_err("#insecure");
        assert_eq!(e.flag, "--redis-url");
        assert!(e.to_string().contains("--redis-tls-ca-cert"), "{e}");
    }

    #[test]
    fn the_password_file_is_read_without_its_newline() {
        let dir = std::env::temp_dir().join(format!("sluice-pwfile-{}", std::process::id()));
        std::fs::create_dir_all(&dir).expect("dir");
        let file = dir.join("password");
        std::fs::write(&file, "s3cret\n").expect("write");
        let mut args = URL.to_vec();
        let path = file.display().to_string();
        args.extend(["--redis-password-file", &path]);
        let s = security_of(&args, &[("REDIS_AUTH", "other")]).expect("valid");
        assert_eq!(s.password.as_deref(), Some("s3cret"));
        std::fs::write(&file, "").expect("write");
        let e = security_of(&args, &[]).expect_err("empty");
        assert_eq!(e.flag, "--redis-password-file");
        let _ = std::fs::remove_dir_all(&dir);
        let e = security_of(&args, &[]).expect_err("missing");
        assert!(e.to_string().contains("cannot be read"), "{e}");
        let mut rediss = vec!["sluice", "--redis-url", "rediss://h:6379/"];
        rediss.extend(["--redis-password", "pw"]);
        let s = security_of(&rediss, &[]).expect("valid");
        assert_eq!(
            s.tls,
            Some(Box::default()),
            "a rediss:// URL alone: TLS everywhere, with the system's roots"
        );
    }
}
