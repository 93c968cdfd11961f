use super::*;

fn parse(json: &str) -> Result<Config, FieldError> {
    Config::from_json(json.as_bytes())
}

/// A config of the backend object `backend` and one route keyed by the path.
fn with_backend(backend: &str) -> Result<Config, FieldError> {
    parse(&format!(
        r#"{{"backend": {backend}, "routes": [{{"action": "a", "key": {{"source": "path"}}}}]}}"#
    ))
}

const MINIMAL: &str = r#"{"backend": {"cluster": "sluice_backend"},
    "routes": [{"action": "reply", "key": {"source": "header", "name": "X-User"}}]}"#;

#[test]
fn minimal_config_gets_the_documented_defaults() {
    let c = parse(MINIMAL).unwrap();
    assert_eq!(c.backend.timeout_ms, 25);
    assert_eq!(c.backend.authority, "sluice-backend");
    assert_eq!(c.backend.path, "/v1/throttle");
    assert_eq!(c.backend.protocol, Protocol::GrpcStream);
    // GrpcService { envoy_grpc (1) { cluster_name (1), authority (2) } }
    assert!(c.backend.grpc_service.contains("sluice_backend"));
    assert!(c.report.via_exchange && c.report.cluster.is_none());
    assert_eq!(c.failure_mode, FailureMode::Allow);
    assert_eq!(c.failure_status, 503);
    assert_eq!(c.grpc_denied_status, 8, "RESOURCE_EXHAUSTED");
    assert_eq!(c.unknown_action, UnknownAction::Allow);
    assert_eq!(c.headers, HeaderFamilies::default());
    assert_eq!(c.denial_cache, DenialCache::default());
    assert_eq!(c.routes[0].quantity, 1);
    assert_eq!(c.routes[0].matcher, Match::default());
    assert_eq!(
        c.routes[0].key,
        KeySource::Header {
            name: "x-user".into(),
            on_missing: None
        }
    );
}

#[test]
fn bad_fields_are_named() {
    let cases = [
        (
            r#"{"backend": {"cluster": ""}, "routes": []}"#,
            "backend.cluster",
        ),
        (
            r#"{"backend": {"cluster": "c", "timeout_ms": 0}, "routes": []}"#,
            "backend.timeout_ms",
        ),
        (
            r#"{"backend": {"cluster": "c", "timeout_ms": "x"}, "routes": []}"#,
            "backend.timeout_ms",
        ),
        (r#"{"backend": {"cluster": "c"}, "routes": []}"#, "routes"),
        (
            r#"{"backend": {"cluster": "c"}, "failure_mode": "maybe", "routes": []}"#,
            "failure_mode",
        ),
        (
            r#"{"backend": {"cluster": "c"}, "failure_status": 200, "routes": [{"action": "a", "key": {"source": "path"}}]}"#,
            "failure_status",
        ),
        (
            r#"{"backend": {"cluster": "c"}, "grpc_denied_status": 0, "routes": [{"action": "a", "key": {"source": "path"}}]}"#,
            "grpc_denied_status",
        ),
        (
            r#"{"backend": {"cluster": "c"}, "grpc_denied_status": 17, "routes": [{"action": "a", "key": {"source": "path"}}]}"#,
            "grpc_denied_status",
        ),
        (
            r#"{"backend": {"cluster": "c"}, "grpc_denied_status": -1, "routes": [{"action": "a", "key": {"source": "path"}}]}"#,
            "grpc_denied_status",
        ),
        (
            r#"{"backend": {"cluster": "c"}, "grpc_denied_status": "8", "routes": [{"action": "a", "key": {"source": "path"}}]}"#,
            "grpc_denied_status",
        ),
        (
            r#"{"backend": {"cluster": "c"}, "routes": [{"action": "a b", "key": {"source": "path"}}]}"#,
            "routes[0].action",
        ),
        (
            r#"{"backend": {"cluster": "c"}, "routes": [{"action": "a", "key": {"source": "path"}, "quantity": 0}]}"#,
            "routes[0].quantity",
        ),
        (
            r#"{"backend": {"cluster": "c"}, "routes": [{"action": "a", "key": {"source": "header", "name": "a b"}}]}"#,
            "routes[0].key.name",
        ),
        (
            r#"{"backend": {"cluster": "c"}, "routes": [{"action": "a", "key": {"source": "constant", "value": ""}}]}"#,
            "routes[0].key.value",
        ),
        (
            r#"{"backend": {"cluster": "c"}, "routes": [{"action": "a", "match": {"method": "get"}, "key": {"source": "path"}}]}"#,
            "routes[0].match.method",
        ),
        (
            r#"{"backend": {"cluster": "c"}, "routes": [{"action": "a", "match": {"path_prefix": "api"}, "key": {"source": "path"}}]}"#,
            "routes[0].match.path_prefix",
        ),
        (
            r#"{"backend": {"cluster": "c"}, "denial_cache": {"slots": 0}, "routes": [{"action": "a", "key": {"source": "path"}}]}"#,
            "denial_cache.slots",
        ),
        (
            r#"{"backend": {"cluster": "c"}, "routes": [{"action": "a", "key": {"source": "path", "on_missing": {"source": "path", "on_missing": {"source": "path", "on_missing": {"source": "path", "on_missing": {"source": "path"}}}}}}]}"#,
            "routes[0].key.on_missing.on_missing.on_missing.on_missing",
        ),
    ];
    for (json, field) in cases {
        let err = parse(json).unwrap_err();
        assert_eq!(err.field, field, "{json} -> {err}");
    }
}

#[test]
fn protocol_grpc_names_the_cluster_in_a_grpc_service() {
    let c = with_backend(r#"{"cluster": "sluice_rls", "protocol": "grpc"}"#).unwrap();
    assert_eq!(c.backend.protocol, Protocol::Grpc);
    // GrpcService { envoy_grpc (1) { cluster_name (1), authority (2) } }
    let mut want = vec![0x0a, 2 + 10 + 2 + 14, 0x0a, 10];
    want.extend(b"sluice_rls");
    want.extend([0x12, 14]);
    want.extend(b"sluice-backend");
    assert_eq!(c.backend.grpc_service.as_bytes(), want);
}

#[test]
fn bad_protocols_and_long_grpc_names_are_refused() {
    let err = with_backend(r#"{"cluster": "c", "protocol": "h3"}"#).unwrap_err();
    assert_eq!(err.field, "backend.protocol", "{err}");
    assert!(
        err.reason.contains("`http`, `grpc`, `grpc_stream`"),
        "{err}"
    );
    let long = "c".repeat(MAX_GRPC_NAME + 1);
    for (field, backend) in [
        (
            "backend.cluster",
            format!(r#"{{"cluster": "{long}", "protocol": "grpc"}}"#),
        ),
        (
            "backend.authority",
            format!(r#"{{"cluster": "c", "authority": "{long}", "protocol": "grpc"}}"#),
        ),
        (
            "backend.cluster",
            format!(r#"{{"cluster": "{long}", "protocol": "grpc_stream"}}"#),
        ),
    ] {
        assert_eq!(with_backend(&backend).unwrap_err().field, field);
    }
    // The same names are fine over HTTP.
    let http = format!(r#"{{"cluster": "{long}", "protocol": "http"}}"#);
    assert!(with_backend(&http).is_ok());
    let mid = "é".repeat(MAX_GRPC_NAME / 2);
    let backend = format!(r#"{{"cluster": "{mid}", "authority": "{mid}", "protocol": "grpc"}}"#);
    let c = with_backend(&backend).unwrap();
    assert!(c.backend.grpc_service.contains(&mid));
}

#[test]
fn unknown_fields_are_refused_with_their_name() {
    let err = parse(r#"{"backend": {"cluster": "c", "timeout": 5}, "routes": []}"#).unwrap_err();
    assert!(err.to_string().contains("timeout"), "{err}");
    let err = parse(r#"{"backend": {"cluster": "c"}, "routs": []}"#).unwrap_err();
    assert!(err.to_string().contains("routs"), "{err}");
}

#[test]
fn not_json_is_refused() {
    let err = parse("nope").unwrap_err();
    assert_eq!(err.field, "(root)");
}

#[test]
fn fallback_chain_parses() {
    let c = parse(
        r#"{"backend": {"cluster": "c"}, "routes": [{"action": "a",
        "key": {"source": "header", "name": "x-user", "on_missing": {"source": "client_ip",
        "on_missing": {"source": "constant", "value": "nobody"}}}}]}"#,
    )
    .unwrap();
    let KeySource::Header {
        on_missing: Some(next),
        ..
    } = &c.routes[0].key
    else {
        panic!()
    };
    assert!(matches!(
        **next,
        KeySource::ClientIp {
            on_missing: Some(_)
        }
    ));
}
