//! Tests of [`super`] (`config.rs`), kept beside it so that file holds only production code.

use super::*;

fn parse_text(text: &str) -> Result<DomainFile, Vec<String>> {
    parse(Path::new("c.yaml"), text).map_err(|e| e.into_iter().map(|e| e.to_string()).collect())
}

#[test]
fn the_readmes_example_2_parses() {
    let f = parse_text(
        "domain: messaging\ndescriptors:\n  - key: message_type\n    value: marketing\n    descriptors:\n      - key: to_number\n        rate_limit:\n          unit: day\n          requests_per_unit: 5\n  - key: to_number\n    rate_limit:\n      unit: day\n      requests_per_unit: 100\n",
    )
    .expect("parses");
    assert_eq!(f.domain, "messaging");
    assert_eq!(f.descriptors.len(), 2);
    let nested = &f.descriptors[0].descriptors[0];
    assert_eq!(nested.key, "to_number");
    assert_eq!(
        nested.rate_limit.as_ref().map(|r| r.quota.clone()),
        Some(Quota::PerUnit {
            unit: RlsUnit(Unit::Day),
            requests_per_unit: 5
        })
    );
}

#[test]
fn every_unit_the_peer_accepts_and_case_does_not_matter() {
    for (name, ms) in [
        ("second", 1_000),
        ("Minute", 60_000),
        ("HOUR", 3_600_000),
        ("day", 86_400_000),
        ("week", 7 * 86_400_000),
        ("month", 30 * 86_400_000),
        ("year", 365 * 86_400_000),
    ] {
        assert_eq!(
            RlsUnit::parse(name).map(RlsUnit::millis),
            Some(ms),
            "{name}"
        );
    }
    assert_eq!(RlsUnit::parse("unknown"), None);
    assert_eq!(RlsUnit::parse("fortnight"), None);
}

#[test]
fn every_refusal_names_the_file_and_field() {
    let errors = parse_text(
        "domain: d\ndescriptors:\n  - key: a\n    rate_limit: {unit: fortnight, requests_per_unit: 1}\n  - key: b\n    rate_limit: {unlimited: true, unit: second}\n  - value: x\n  - key: c\n    colour: red\n  - key: c\n  - key: w\n    share_threshold: true\n  - key: r\n    rate_limit: {unit: second, requests_per_unit: 1, name: n, replaces: [{name: n}, {name: ''}]}\n",
    )
    .expect_err("refused");
    let expect = [
        "c.yaml: descriptors[0].rate_limit.unit: invalid rate limit unit 'fortnight'",
        "c.yaml: descriptors[1].rate_limit.unit: should not specify rate limit unit when unlimited",
        "c.yaml: descriptors[2].key: descriptor has empty key",
        "c.yaml: descriptors[3].colour: unknown key",
        "c.yaml: descriptors[4].key: duplicate descriptor composite key 'c' (first at descriptors[3])",
        "c.yaml: descriptors[5].share_threshold: share_threshold can only be used with wildcard",
        "c.yaml: descriptors[6].rate_limit.replaces[0].name: replaces should not contain name of same descriptor",
        "c.yaml: descriptors[6].rate_limit.replaces[1].name: should not have an empty replaces entry",
    ];
    for e in expect {
        assert!(
            errors.iter().any(|x| x.starts_with(e)),
            "{e} not in {errors:#?}"
        );
    }
    assert_eq!(errors.len(), expect.len(), "{errors:#?}");
}

#[test]
fn empty_domain_unknown_top_key_and_bad_yaml_are_refused() {
    let e = parse_text("descriptors: []\nextra: 1\n").expect_err("refused");
    assert!(e.iter().any(|e| e.starts_with("c.yaml: domain: ")), "{e:?}");
    assert!(
        e.iter()
            .any(|e| e.starts_with("c.yaml: extra: unknown key")),
        "{e:?}"
    );
    let e = parse_text("domain: d\ndescriptors: [\n").expect_err("syntax");
    assert!(e[0].starts_with("c.yaml: line "), "{e:?}");
}

#[test]
fn the_algorithm_extension_needs_a_per_unit_rate_limit() {
    let f = parse_text(
        "domain: d\ndescriptors:\n  - key: u\n    algorithm: gcra\n    capacity: 5\n    rate_limit: {unit: minute, requests_per_unit: 30}\n",
    )
    .expect("parses");
    assert_eq!(
        f.descriptors[0].extension,
        Some(Extension {
            algorithm: Algorithm::Gcra,
            capacity: Some(5)
        })
    );
    let e = parse_text("domain: d\ndescriptors:\n  - key: u\n    algorithm: gcra\n")
        .expect_err("no limit");
    assert!(
        e[0].starts_with("c.yaml: descriptors[0].algorithm: "),
        "{e:?}"
    );
    let e = parse_text(
        "domain: d\ndescriptors:\n  - key: u\n    algorithm: magic\n    rate_limit: {unit: minute, requests_per_unit: 30}\n",
    )
    .expect_err("unknown");
    assert!(
        e[0].starts_with("c.yaml: descriptors[0].algorithm: unknown algorithm"),
        "{e:?}"
    );
}

#[test]
fn a_files_sluice_semantics_is_read_and_a_bad_one_names_the_field() {
    let body = "descriptors:\n  - key: k\n    rate_limit: {unit: day, requests_per_unit: 1}\n";
    let f = parse_text(&format!("domain: d\nsluice_semantics: sluice\n{body}")).expect("parses");
    assert_eq!(f.semantics, Some(Semantics::SLUICE));
    let f = parse_text(&format!("domain: d\n{body}")).expect("parses");
    assert_eq!(f.semantics, None, "the peer's by default");
    let f = parse_text(&format!(
        "domain: d\nsluice_semantics: strict_counting\n{body}"
    ))
    .expect("parses");
    assert_eq!(f.semantics, Semantics::parse("strict_counting").ok());
    let e = parse_text(&format!("domain: d\nsluice_semantics: strictest\n{body}")).unwrap_err();
    assert!(
        e[0].starts_with("c.yaml: sluice_semantics: unknown point 'strictest'"),
        "{e:?}"
    );
    let e = parse_text(&format!("domain: d\nsluice_semantics: [sluice]\n{body}")).unwrap_err();
    assert!(
        e[0].starts_with("c.yaml: sluice_semantics: must be a string"),
        "{e:?}"
    );
    // Sluice's key only at the top: inside a descriptor it is unknown, as to the peer.
    let e = parse_text("domain: d\ndescriptors:\n  - key: k\n    sluice_semantics: sluice\n")
        .unwrap_err();
    assert!(
        e.iter()
            .any(|e| e.contains("descriptors[0].sluice_semantics: unknown key")),
        "{e:?}"
    );
}
