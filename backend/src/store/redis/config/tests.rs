//! Tests of the Redis settings: defaults, validation, redaction.

use super::*;

fn single() -> RedisConfig {
    RedisConfig::new(RedisTarget::Single("redis://127.0.0.1:6379/".into()))
}

#[test]
fn the_defaults_are_valid_and_are_the_command_lines() {
    let c = single();
    assert_eq!(c.validate(), Ok(()));
    assert_eq!(c.timeout, Duration::from_millis(100));
    assert_eq!(c.max_in_flight, 1024);
    assert_eq!(c.key_prefix, "sluice");
}

#[test]
fn a_bad_key_prefix_is_refused_naming_the_field() {
    for prefix in ["", "a{b", "a}b", "{sluice}", "a\nb"] {
        let mut c = single();
        c.key_prefix = prefix.into();
        let e = c.validate().expect_err(prefix);
        assert_eq!(e.field(), RedisField::KeyPrefix, "{prefix:?}: {e}");
        assert!(e.to_string().starts_with("key prefix"), "{e}");
    }
    let mut c = single();
    c.key_prefix = "team-a:sluice".into();
    assert_eq!(c.validate(), Ok(()));
}

#[test]
fn in_flight_and_timeout_out_of_range_are_refused() {
    let mut c = single();
    c.max_in_flight = 0;
    assert_eq!(
        c.validate(),
        Err(RedisConfigError::MaxInFlight { value: 0 })
    );
    c.max_in_flight = MAX_IN_FLIGHT + 1;
    assert_eq!(
        c.validate().map_err(|e| e.field()),
        Err(RedisField::MaxInFlight)
    );
    c.max_in_flight = MAX_IN_FLIGHT;
    assert_eq!(c.validate(), Ok(()));

    for bad in [
        Duration::ZERO,
        Duration::from_micros(999),
        Duration::from_millis(MAX_TIMEOUT_MS + 1),
    ] {
        c.timeout = bad;
        let e = c.validate().expect_err("timeout out of range");
        assert_eq!(e.field(), RedisField::Timeout, "{bad:?}: {e}");
    }
    c.timeout = Duration::from_millis(1);
    assert_eq!(c.validate(), Ok(()));
}

#[test]
fn urls_that_do_not_parse_are_refused_naming_which() {
    for url in [
        "garbage",
        "http://127.0.0.1:6379/",
        "redis://127.0.0.1:6379/x",
    ] {
        let c = RedisConfig::new(RedisTarget::Single(url.into()));
        match c.validate() {
            Err(RedisConfigError::Url { url: shown, reason }) => {
                assert_eq!(shown, url);
                assert!(!reason.is_empty());
            }
            other => panic!("{url}: expected a URL error, got {other:?}"),
        }
    }
    let c = RedisConfig::new(RedisTarget::Cluster(vec![
        "redis://127.0.0.1:7000".into(),
        "redis//127.0.0.1:7001".into(),
    ]));
    match c.validate() {
        Err(RedisConfigError::ClusterUrl { index, url, .. }) => {
            assert_eq!((index, url.as_str()), (2, "redis//127.0.0.1:7001"));
        }
        other => panic!("expected cluster URL #2 refused, got {other:?}"),
    }
    // TLS: rediss:// is a usable URL; a fragment such as #insecure (no certificate check at
    // all) is refused; a Cluster's seeds must agree on TLS.
    assert_eq!(
        RedisConfig::new(RedisTarget::Single("rediss://h/".into())).validate(),
        Ok(())
    );
    let insecure = RedisConfig::new(RedisTarget::Single("rediss://h/#insecure".into()));
    assert_eq!(
        insecure.validate().map_err(|e| e.field()),
        Err(RedisField::Url)
    );
    let mixed = RedisConfig::new(RedisTarget::Cluster(vec![
        "rediss://127.0.0.1:7000".into(),
        "redis://127.0.0.1:7001".into(),
    ]));
    assert!(
        matches!(mixed.validate(), Err(RedisConfigError::Cluster { .. })),
        "{:?}",
        mixed.validate()
    );
    let none = RedisConfig::new(RedisTarget::Cluster(Vec::new()));
    assert_eq!(none.validate(), Err(RedisConfigError::NoClusterUrls));
    let ok = RedisConfig::new(RedisTarget::Cluster(vec![
        "redis://127.0.0.1:7000".into(),
        "redis://127.0.0.1:7001".into(),
    ]));
    assert_eq!(ok.validate(), Ok(()));
}

#[test]
fn sentinel_settings_parse_in_both_forms() {
    let ours = SentinelTarget::parse("mymaster@10.0.0.1:26379, 10.0.0.2:26380,h3").expect("ours");
    assert_eq!(ours.master, "mymaster");
    assert_eq!(
        ours.sentinels,
        [
            "redis://10.0.0.1:26379",
            "redis://10.0.0.2:26380",
            "redis://h3:26379"
        ]
    );
    let theirs =
        SentinelTarget::parse("mymaster,10.0.0.1:26379,10.0.0.2:26380,h3").expect("ratelimit's");
    assert_eq!(ours, theirs);
    let with_auth =
        SentinelTarget::parse("m@redis://:pw@10.0.0.1:26379,[::1]:26380,[::1]").expect("urls");
    assert_eq!(
        with_auth.sentinels,
        [
            "redis://:pw@10.0.0.1:26379",
            "redis://[::1]:26380",
            "redis://[::1]:26379"
        ]
    );
    assert!(!with_auth.to_string().contains("pw"), "{with_auth}");
    assert!(!format!("{with_auth:?}").contains("pw"), "{with_auth:?}");
    let with_master_password = SentinelTarget {
        master_password: Some("masterpw".into()),
        ..with_auth.clone()
    };
    assert!(
        !format!("{with_master_password:?}").contains("masterpw"),
        "{with_master_password:?}"
    );
    let c = RedisConfig::new(RedisTarget::Sentinel(with_auth));
    assert_eq!(c.validate(), Ok(()));
}

#[test]
fn bad_sentinel_settings_are_refused_naming_the_field() {
    for spec in [
        "",
        "@10.0.0.1:26379",
        "mymaster",
        "mymaster@",
        "10.0.0.1:26379,10.0.0.2:26379",
        "redis://10.0.0.1:26379",
        "my master@h:1",
        "m@h:1,,h:2",
    ] {
        let e = SentinelTarget::parse(spec).expect_err(spec);
        assert_eq!(e.field(), RedisField::Sentinel, "{spec:?}: {e}");
    }
    let e = SentinelTarget::parse("m@redis://:hunter2@h:1/x,h:2")
        .and_then(|t| RedisConfig::new(RedisTarget::Sentinel(t)).validate())
        .expect_err("bad db");
    assert!(
        matches!(e, RedisConfigError::SentinelUrl { index: 1, .. }),
        "{e:?}"
    );
    assert!(!e.to_string().contains("hunter2"), "{e}");
}

#[test]
fn a_refused_url_never_shows_its_password() {
    assert_eq!(
        redact("redis://user:hunter2@10.0.0.1:6379/x"),
        "redis://user:***@10.0.0.1:6379/x"
    );
    assert_eq!(redact("redis://:hunter2@h/0"), "redis://:***@h/0");
    assert_eq!(redact("redis://h:1/0"), "redis://h:1/0");
    assert_eq!(redact("redis://user@h:1/0"), "redis://user@h:1/0");
    let c = RedisConfig::new(RedisTarget::Single("redis://:hunter2@h/notadb".into()));
    let e = c.validate().expect_err("bad db");
    assert!(!e.to_string().contains("hunter2"), "{e}");
    let single = format!(
        "{:?}",
        RedisTarget::Single("redis://:hunter2@h:6379/0".into())
    );
    assert!(
        !single.contains("hunter2") && single.contains("h:6379"),
        "{single}"
    );
    let cluster = format!(
        "{:?}",
        RedisTarget::Cluster(vec![
            "redis://u:hunter2@a:7000".into(),
            "redis://b:7001".into()
        ])
    );
    assert!(
        !cluster.contains("hunter2") && cluster.contains("b:7001"),
        "{cluster}"
    );
}
