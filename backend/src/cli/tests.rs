//! Tests of [`super`] (`cli.rs`), kept beside it so that file holds only production code.

use super::*;
use crate::store::redis::RedisField;
use clap::CommandFactory;

#[test]
fn the_command_line_is_consistent() {
    Cli::command().debug_assert();
}

#[test]
fn every_flag_has_an_environment_twin() {
    for arg in Cli::command().get_arguments() {
        let id = arg.get_id().as_str();
        if id == "help" || id == "version" {
            continue;
        }
        let env = arg.get_env().and_then(|e| e.to_str()).unwrap_or_default();
        // envoyproxy/ratelimit's settings, read under their own names (crate::tls::flags).
        if arg.is_hide_set() && env.starts_with("GRPC_") {
            continue;
        }
        assert!(
            env.starts_with("SLUICE_"),
            "--{id} has no SLUICE_* environment variable"
        );
    }
}

#[test]
fn the_grpc_listener_is_on_by_default_and_its_old_name_still_works() {
    let at = |port| GrpcListen::At(SocketAddr::from(([127, 0, 0, 1], port)));
    let parse = |args: &[&str]| Cli::try_parse_from(args).expect("parses").grpc_listen();
    assert_eq!(parse(&["sluice"]).expect("default"), at(8082));
    let off = parse(&["sluice", "--grpc-listen", "off"]).expect("off");
    assert_eq!(off, GrpcListen::Off);
    let old = parse(&["sluice", "--rls-listen", "127.0.0.1:9"]).expect("old name");
    assert_eq!(old, at(9));
    let same = [
        "sluice",
        "--rls-listen",
        "127.0.0.1:9",
        "--grpc-listen",
        "127.0.0.1:9",
    ];
    assert_eq!(parse(&same).expect("same value"), at(9));
    let e = parse(&[
        "sluice",
        "--rls-listen",
        "127.0.0.1:9",
        "--grpc-listen",
        "off",
    ])
    .expect_err("conflict");
    assert_eq!(e.to_string(), "--grpc-listen (SLUICE_GRPC_LISTEN) is off but its old name --rls-listen (SLUICE_RLS_LISTEN) is 127.0.0.1:9; give only --grpc-listen");
    assert!(Cli::try_parse_from(["sluice", "--grpc-listen", "8082"]).is_err());
}

#[test]
fn redis_url_and_cluster_exclude_each_other() {
    let both = Cli::try_parse_from([
        "sluice",
        "--redis-url",
        "redis://a/",
        "--redis-cluster",
        "redis://b/",
    ]);
    assert!(both.is_err());
    let cluster = Cli::try_parse_from(["sluice", "--redis-cluster", "redis://a:1,redis://b:2"])
        .expect("parses");
    match cluster.store_choice().expect("valid") {
        StoreChoice::Redis(c) => assert_eq!(
            c.target,
            RedisTarget::Cluster(vec!["redis://a:1".into(), "redis://b:2".into()])
        ),
        other => panic!("expected a cluster, got {other:?}"),
    }
    let memory = Cli::try_parse_from(["sluice"]).expect("parses");
    assert!(matches!(
        memory.store_choice().expect("valid"),
        StoreChoice::Memory
    ));
}

#[test]
fn redis_sentinel_excludes_the_other_targets_and_names_its_flag() {
    for other in [
        ["--redis-url", "redis://a/"],
        ["--redis-cluster", "redis://b/"],
    ] {
        let both = Cli::try_parse_from([
            "sluice",
            "--redis-sentinel",
            "m@h:26379",
            other[0],
            other[1],
        ]);
        assert!(both.is_err(), "{other:?} accepted beside --redis-sentinel");
    }
    for spec in ["m@h:26379,h2", "m,h:26379,h2:26379"] {
        let cli = Cli::try_parse_from(["sluice", "--redis-sentinel", spec]).expect("parses");
        match cli.store_choice().expect("valid") {
            StoreChoice::Redis(c) => assert_eq!(
                c.target,
                RedisTarget::Sentinel(SentinelTarget {
                    master: "m".into(),
                    sentinels: vec!["redis://h:26379".into(), "redis://h2:26379".into()],
                    master_password: None,
                })
            ),
            other => panic!("expected Sentinel, got {other:?}"),
        }
    }
    let with_password = Cli::try_parse_from([
        "sluice",
        "--redis-sentinel",
        "m@h",
        "--redis-sentinel-master-password",
        "pw",
    ])
    .expect("parses");
    match with_password.store_choice().expect("valid") {
        StoreChoice::Redis(RedisConfig {
            target: RedisTarget::Sentinel(t),
            ..
        }) => assert_eq!(t.master_password.as_deref(), Some("pw")),
        other => panic!("expected Sentinel, got {other:?}"),
    }
    assert!(Cli::try_parse_from([
        "sluice",
        "--redis-url",
        "redis://a/",
        "--redis-sentinel-master-password",
        "pw",
    ])
    .is_err());
    let e = refused(&["sluice", "--redis-sentinel", "h:26379,h2:26379"]);
    assert_eq!(
        (e.flag, e.env),
        ("--redis-sentinel", "SLUICE_REDIS_SENTINEL")
    );
    assert!(e.to_string().contains("master's name"), "{e}");
}

#[test]
fn the_redis_defaults_are_the_stores_defaults() {
    let cli =
        Cli::try_parse_from(["sluice", "--redis-url", "redis://127.0.0.1:6379/"]).expect("parses");
    let StoreChoice::Redis(from_flags) = cli.store_choice().expect("valid") else {
        panic!("expected Redis");
    };
    let defaults = RedisConfig::new(from_flags.target.clone());
    assert_eq!(from_flags.timeout, defaults.timeout);
    assert_eq!(from_flags.max_in_flight, defaults.max_in_flight);
    assert_eq!(from_flags.key_prefix, defaults.key_prefix);
}

fn refused(args: &[&str]) -> FlagError {
    let cli = Cli::try_parse_from(args).expect("clap accepts it");
    match cli.store_choice() {
        Err(e) => e,
        Ok(choice) => panic!("{args:?} accepted as {choice:?}"),
    }
}

#[test]
fn bad_redis_settings_are_refused_at_build_naming_the_flag() {
    let e = refused(&["sluice", "--redis-url", "redis://h/", "--key-prefix", "a{b"]);
    assert_eq!((e.flag, e.env), ("--key-prefix", "SLUICE_KEY_PREFIX"));
    assert!(
        e.to_string()
            .starts_with("--key-prefix (SLUICE_KEY_PREFIX): key prefix \"a{b\""),
        "{e}"
    );
    let e = refused(&["sluice", "--redis-url", "redis://h/", "--key-prefix", ""]);
    assert_eq!(e.flag, "--key-prefix");
    let e = refused(&["sluice", "--redis-url", "http://h/"]);
    assert_eq!(e.flag, "--redis-url");
    let e = refused(&[
        "sluice",
        "--redis-cluster",
        "redis://a:1,not a url,redis://c:3",
    ]);
    assert_eq!(e.flag, "--redis-cluster");
    assert!(e.to_string().contains("node URL #2"), "{e}");
}

#[test]
fn out_of_range_numbers_never_get_past_the_parser() {
    for args in [
        ["sluice", "--max-in-flight", "0"],
        ["sluice", "--max-in-flight", "1000001"],
        ["sluice", "--redis-timeout-ms", "0"],
        ["sluice", "--redis-timeout-ms", "60001"],
        ["sluice", "--admin-sign-in-burst", "0"],
    ] {
        assert!(Cli::try_parse_from(args).is_err(), "{args:?}");
    }
}

#[test]
fn max_keys_zero_is_refused_naming_the_flag() {
    let e = Cli::try_parse_from(["sluice", "--max-keys", "0"]).expect_err("0 refused");
    assert!(e.to_string().contains("--max-keys"), "{e}");
    let cli = Cli::try_parse_from([
        "sluice",
        "--max-keys",
        "1000",
        "--admin-token",
        "x".repeat(32).as_str(),
    ])
    .expect("parses");
    let config = cli.into_config().expect("valid");
    assert_eq!(config.max_keys.map(NonZeroUsize::get), Some(1000));
    let cli =
        Cli::try_parse_from(["sluice", "--admin-token", "x".repeat(32).as_str()]).expect("parses");
    assert_eq!(cli.into_config().expect("valid").max_keys, None);
}

#[test]
fn each_redis_field_names_a_real_flag_and_its_variable() {
    let command = Cli::command();
    for field in [
        RedisField::Url,
        RedisField::ClusterUrls,
        RedisField::Timeout,
        RedisField::MaxInFlight,
        RedisField::KeyPrefix,
        RedisField::Sentinel,
        RedisField::TlsCaCert,
        RedisField::TlsClientCert,
        RedisField::TlsClientKey,
        RedisField::TlsSkipHostname,
        RedisField::Password,
        RedisField::PasswordFile,
        RedisField::Tls,
    ] {
        let (flag, env) = redis_flags::redis_flag(field);
        let arg = command
            .get_arguments()
            .find(|a| a.get_long().map(|l| format!("--{l}")).as_deref() == Some(flag))
            .unwrap_or_else(|| panic!("{field:?}: no flag {flag}"));
        assert_eq!(arg.get_env().and_then(|e| e.to_str()), Some(env), "{flag}");
    }
}

#[test]
fn the_peers_http_surface_is_on_with_a_ratelimit_config_on_the_decision_listener() {
    let parse = |args: &[&str]| {
        Cli::try_parse_from(args)
            .expect("parses")
            .ratelimit_http_listen()
    };
    assert_eq!(parse(&["sluice"]), Listen::Off);
    let peer = parse(&["sluice", "--ratelimit-config", "d"]);
    // Issue 40: the surface decides, so by default it is the decision listener's (it used to be
    // the admin listener's, 8080, where it answered without the admin token); moved, the
    // surface follows it (a default never binds a port of its own).
    assert_eq!(peer, Listen::At(SocketAddr::from(([127, 0, 0, 1], 8081))));
    let cli = Cli::try_parse_from(["sluice"]).expect("parses");
    assert_eq!(peer, Listen::At(cli.decision_listen));
    assert_ne!(peer, Listen::At(cli.admin_listen));
    let moved = parse(&[
        "sluice",
        "--ratelimit-config",
        "d",
        "--decision-listen",
        "127.0.0.1:9999",
    ]);
    assert_eq!(moved, Listen::At(SocketAddr::from(([127, 0, 0, 1], 9999))));
    let off = [
        "sluice",
        "--ratelimit-config",
        "d",
        "--ratelimit-http-listen",
        "off",
    ];
    assert_eq!(parse(&off), Listen::Off);
    let own = ["sluice", "--ratelimit-http-listen", "0.0.0.0:18080"];
    assert_eq!(
        parse(&own),
        Listen::At(SocketAddr::from(([0, 0, 0, 0], 18080)))
    );
    let bad = Cli::try_parse_from(["sluice", "--ratelimit-http-listen", "8080"])
        .expect_err("a port alone is no address");
    assert!(bad.to_string().contains("--ratelimit-http-listen"), "{bad}");
}

#[test]
fn the_sign_in_bound_reaches_the_config() {
    let token = "x".repeat(32);
    let config = |extra: &[&str]| {
        let mut args = vec!["sluice", "--admin-token", token.as_str()];
        args.extend_from_slice(extra);
        Cli::try_parse_from(args)
            .expect("parses")
            .into_config()
            .expect("valid")
    };
    assert_eq!(config(&[]).admin_sign_in_burst, crate::sign_ins::BURST);
    assert_eq!(
        config(&["--admin-sign-in-burst", "50"]).admin_sign_in_burst,
        50
    );
}
