//! The counts table and its reports against the fake host: what is sent, when, and that a report
//! that fails loses nothing.

use sluice_core::limits::MAX_REPORT_ACTIONS;
use sluice_core::wire::FilterReport;

use super::*;
use crate::fake_host::FakeHost;

fn config(extra: &str) -> Config {
    let json = format!(
        r#"{{"backend": {{"protocol": "http", "cluster": "sluice_backend", "authority": "sluice"}}, {extra}
        "routes": [
          {{"action": "reply", "key": {{"source": "path"}}}},
          {{"action": "login", "key": {{"source": "path"}}}},
          {{"action": "reply", "quantity": 5, "key": {{"source": "path"}}}}]}}"#
    );
    Config::from_json(json.as_bytes()).unwrap()
}

fn root() -> FakeHost {
    FakeHost::request("GET", "/")
}

/// The body of the last report sent, validated as the backend validates it.
fn last_report(h: &FakeHost) -> FilterReport {
    let call = h.effects.callouts.last().unwrap();
    let report: FilterReport = serde_json::from_slice(&call.body).unwrap();
    report.validate().unwrap();
    report
}

fn token(h: &FakeHost) -> u32 {
    h.next_token - 1
}

#[test]
fn actions_are_indexed_once_per_distinct_name() {
    let c = config("");
    assert_eq!(c.actions, ["reply", "login"]);
    let indexes: Vec<usize> = c.routes.iter().map(|r| r.action_index).collect();
    assert_eq!(indexes, [0, 1, 0]);
}

#[test]
fn nothing_is_sent_while_everything_is_zero() {
    let c = config("");
    let w = Worker::new(&c);
    let mut h = root();
    w.tick(&mut h, &c);
    assert!(h.effects.callouts.is_empty());
}

#[test]
fn a_tick_sends_the_non_zero_actions_to_the_report_endpoint() {
    let c = config("");
    let w = Worker::new(&c);
    for _ in 0..3 {
        w.record(0, Event::Leased);
    }
    w.record(0, Event::CachedDenied);
    w.record(0, Event::failed("timeout", FailureMode::Allow));
    w.record(0, Event::failed("unavailable", FailureMode::Deny));
    w.record(0, Event::failed("grpc_4", FailureMode::Deny));
    w.record(0, Event::failed("bad_response", FailureMode::Allow));
    let mut h = root();
    w.tick(&mut h, &c);
    let call = h.effects.callouts.last().unwrap();
    assert_eq!(call.cluster, "sluice_backend");
    assert!(call.headers.contains(&(":path", "/v1/report".into())));
    assert!(call.headers.contains(&(":method", "POST".into())));
    assert!(call.headers.contains(&(":authority", "sluice".into())));
    assert_eq!(call.timeout_ms, 1000);
    let report = last_report(&h);
    assert_eq!(report.actions.len(), 1, "login had nothing to say");
    let a = &report.actions[0];
    assert_eq!(a.action, "reply");
    assert_eq!(
        (
            a.leased,
            a.cached_denied,
            a.failed_timeout,
            a.failed_error,
            a.passed_unchecked
        ),
        (3, 1, 2, 2, 2)
    );
    // Accepted: the next tick has nothing to send.
    let t = token(&h);
    w.on_report_response(&mut h, t, Some(b"204"));
    assert_eq!(h.counter(Counter::ReportsSent), 1);
    w.tick(&mut h, &c);
    assert_eq!(h.effects.callouts.len(), 1);
    assert!(w.unreported().iter().all(Counts::is_zero));
}

#[test]
fn a_failed_report_is_sent_again_as_it_was_then_the_next_one_follows() {
    let c = config("");
    let w = Worker::new(&c);
    let mut h = root();
    w.record(1, Event::CachedDenied);
    w.tick(&mut h, &c);
    let first = token(&h);
    let sent = last_report(&h);
    assert_eq!(sent.reporter.as_deref(), Some(w.reporter()));
    assert_eq!(sent.seq, Some(1));
    // While the first is in flight, counts go on and no second report is sent.
    w.record(1, Event::CachedDenied);
    w.record(0, Event::Leased);
    w.tick(&mut h, &c);
    assert_eq!(h.effects.callouts.len(), 1, "one in flight at a time");
    assert_eq!(
        w.unreported()[1].cached_denied,
        2,
        "in flight counts as unreported"
    );
    // Each way a report can fail sends the same report again: same seq, same counts, nothing of
    // what came meanwhile (a copy the backend did count is then recognised as one).
    for (i, status) in [Some(&b"503"[..]), Some(b"504"), Some(b"400"), None]
        .into_iter()
        .enumerate()
    {
        let t = if i == 0 { first } else { token(&h) };
        w.on_report_response(&mut h, t, status);
        assert_eq!(
            w.unreported()[1].cached_denied,
            2,
            "{status:?}: nothing lost"
        );
        w.tick(&mut h, &c);
        assert_eq!(last_report(&h), sent, "{status:?}");
    }
    assert_eq!(h.counter(Counter::ReportsFailed), 4);
    assert_eq!(
        h.effects.warnings.borrow().len(),
        1,
        "logged once per outage"
    );
    let t = token(&h);
    w.on_report_response(&mut h, t, Some(b"204"));
    // Accepted: what came meanwhile goes out next, under the next seq.
    w.tick(&mut h, &c);
    let next = last_report(&h);
    assert_eq!(next.seq, Some(2));
    assert_eq!(next.reporter, sent.reporter);
    let login = next.actions.iter().find(|a| a.action == "login").unwrap();
    assert_eq!(login.cached_denied, 1);
    let reply = next.actions.iter().find(|a| a.action == "reply").unwrap();
    assert_eq!(reply.leased, 1);
    let t = token(&h);
    w.on_report_response(&mut h, t, Some(b"204"));
    assert!(w.unreported().iter().all(Counts::is_zero));
    // A stray answer changes nothing.
    w.record(0, Event::Leased);
    w.on_report_response(&mut h, 999, Some(b"204"));
    assert_eq!(w.unreported()[0].leased, 1);
}

#[test]
fn each_worker_draws_its_own_reporter_id() {
    let c = config("");
    let (a, b) = (Worker::new(&c), Worker::new(&c));
    assert_ne!(a.reporter(), b.reporter());
    assert_eq!(a.reporter().len(), 32);
    let report = FilterReport {
        reporter: Some(a.reporter().to_owned()),
        seq: Some(1),
        ..FilterReport::default()
    };
    assert!(report.id().unwrap().is_some(), "the backend takes the id");
}

#[test]
fn a_report_that_cannot_start_is_kept() {
    let c = config("");
    let w = Worker::new(&c);
    let mut h = root();
    h.dispatch_error = Some("BadArgument".into());
    w.record(0, Event::Leased);
    w.tick(&mut h, &c);
    assert_eq!(w.unreported()[0].leased, 1);
    assert_eq!(h.counter(Counter::ReportsFailed), 1);
    h.dispatch_error = None;
    w.tick(&mut h, &c);
    assert_eq!(last_report(&h).actions[0].leased, 1);
}

#[test]
fn reports_can_be_turned_off_and_need_a_cluster_in_grpc_mode() {
    let c = config(r#""report": {"enabled": false},"#);
    assert_eq!(c.report.cluster, None);
    let w = Worker::new(&c);
    w.record(0, Event::Leased);
    let mut h = root();
    w.tick(&mut h, &c);
    assert!(h.effects.callouts.is_empty());

    let grpc = |extra: &str| {
        Config::from_json(
            format!(
                r#"{{"backend": {{"cluster": "rls", "protocol": "grpc"}}, {extra}
                "routes": [{{"action": "a", "key": {{"source": "path"}}}}]}}"#
            )
            .as_bytes(),
        )
        .unwrap()
    };
    assert_eq!(
        grpc("").report.cluster,
        None,
        "the RLS cluster is not the API"
    );
    let c = grpc(r#""report": {"cluster": "sluice_api", "path": "/r", "period_ms": 5000},"#);
    assert_eq!(c.report.cluster.as_deref(), Some("sluice_api"));
    let w = Worker::new(&c);
    w.record(0, Event::failed("grpc_14", FailureMode::Allow));
    w.tick(&mut h, &c);
    let call = h.effects.callouts.last().unwrap();
    assert_eq!(call.cluster, "sluice_api");
    assert!(call.headers.contains(&(":path", "/r".into())));
}

#[test]
fn bad_report_fields_are_named() {
    for (extra, field) in [
        (r#""report": {"path": "v1"},"#, "report.path"),
        (r#""report": {"period_ms": 10},"#, "report.period_ms"),
        (r#""report": {"timeout_ms": 0},"#, "report.timeout_ms"),
        (r#""report": {"cluster": ""},"#, "report.cluster"),
        (r#""report": {"every": 1},"#, "report"),
        (r#""lease": {"slots": 0},"#, "lease.slots"),
    ] {
        let json = format!(
            r#"{{"backend": {{"protocol": "http", "cluster": "c"}}, {extra} "routes": [{{"action": "a", "key": {{"source": "path"}}}}]}}"#
        );
        let err = Config::from_json(json.as_bytes()).unwrap_err();
        assert!(err.field.starts_with(field), "{extra}: {err}");
    }
}

#[test]
fn the_table_is_bounded_by_max_report_actions() {
    let routes: Vec<String> = (0..MAX_REPORT_ACTIONS + 10)
        .map(|i| format!(r#"{{"action": "a{i}", "key": {{"source": "path"}}}}"#))
        .collect();
    let json = format!(
        r#"{{"backend": {{"protocol": "http", "cluster": "c"}}, "routes": [{}]}}"#,
        routes.join(",")
    );
    let c = Config::from_json(json.as_bytes()).unwrap();
    let w = Worker::new(&c);
    for i in 0..MAX_REPORT_ACTIONS + 10 {
        w.record(i, Event::Leased);
    }
    assert_eq!(w.unreported().len(), MAX_REPORT_ACTIONS);
    let mut h = root();
    w.tick(&mut h, &c);
    let report = last_report(&h);
    assert_eq!(report.actions.len(), MAX_REPORT_ACTIONS);
    assert_eq!(report.actions.last().unwrap().action, "a255");
}

#[test]
fn counts_saturate_instead_of_wrapping() {
    let c = config("");
    let w = Worker::new(&c);
    w.counts.borrow_mut()[0].leased = u64::MAX;
    w.record(0, Event::Leased);
    assert_eq!(w.unreported()[0].leased, u64::MAX);
}
