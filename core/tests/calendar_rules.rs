//! Calendar windows in rules: the JSON form, its round trip, and refusals naming the field.

use serde_json::json;
use sluice_core::{Calendar, CalendarUnit, Limit, Params, Rule, Zone};

/// The field a refusal names (`None`: accepted).
fn field_of(value: serde_json::Value) -> Option<String> {
    Rule::from_json(&value).err().map(|e| e.field.to_string())
}

#[test]
fn a_monthly_budget_is_one_rule() {
    let rule = Rule::from_json(&json!({
        "action": "tokens", "algorithm": "fixed_window", "capacity": 1_000_000,
        "calendar": {"unit": "month", "zone": "+08:00"}
    }))
    .expect("valid");
    let cal = Calendar {
        unit: CalendarUnit::Month,
        zone: Zone::Offset(480),
    };
    assert_eq!(rule.limit(), Limit::Calendar(cal));
    assert!(matches!(
        rule.params(),
        Params::FixedWindow(p) if p.calendar == Some(cal) && p.window_ms == 31 * 86_400_000
    ));
    let back = Rule::from_json(&rule.to_json()).expect("round trip");
    assert_eq!(back, rule);
    assert_eq!(
        rule.to_json()["calendar"],
        json!({"unit": "month", "zone": "+08:00"})
    );
    // The zone defaults to UTC.
    let utc = Rule::from_json(&json!({
        "action": "t", "algorithm": "fixed_window", "capacity": 5, "calendar": {"unit": "week"}
    }))
    .expect("valid");
    assert_eq!(
        utc.limit(),
        Limit::Calendar(Calendar::utc(CalendarUnit::Week))
    );
}

#[test]
fn refusals_name_the_field() {
    let base = |extra: serde_json::Value| {
        let mut v = json!({"action": "a", "algorithm": "fixed_window", "capacity": 5});
        for (k, x) in extra.as_object().expect("object") {
            v[k] = x.clone();
        }
        v
    };
    let both = base(json!({"window": "60s", "calendar": {"unit": "day"}}));
    assert_eq!(field_of(both).as_deref(), Some("calendar"));
    for zone in ["Europe/Pariss", "+8:00", "utc+1", ""] {
        let bad = base(json!({"calendar": {"unit": "day", "zone": zone}}));
        assert_eq!(field_of(bad).as_deref(), Some("calendar.zone"), "{zone}");
    }
    let mut sliding = base(json!({"calendar": {"unit": "day"}}));
    sliding["algorithm"] = json!("sliding_window");
    assert_eq!(field_of(sliding).as_deref(), Some("calendar"));
    let mut meter =
        base(json!({"calendar": {"unit": "day"}, "rate": {"count": 1, "period": "1s"}}));
    meter["algorithm"] = json!("gcra");
    assert_eq!(field_of(meter).as_deref(), Some("calendar"));
    assert_eq!(
        field_of(base(json!({"calendar": {"unit": "year"}}))).as_deref(),
        Some("calendar.unit")
    );
}

/// A named zone (the backend's and the dashboard's build, feature `tz`): the rule keeps the name
/// as the database spells it, round-trips, and its state lives as long as its longest window.
#[cfg(feature = "tz")]
#[test]
fn a_named_zone_round_trips() {
    let rule = Rule::from_json(&json!({
        "action": "tokens", "algorithm": "fixed_window", "capacity": 1000,
        "calendar": {"unit": "month", "zone": "europe/paris"}
    }))
    .expect("valid");
    assert_eq!(
        rule.to_json()["calendar"],
        json!({"unit": "month", "zone": "Europe/Paris"})
    );
    assert_eq!(Rule::from_json(&rule.to_json()).expect("round trip"), rule);
    let Limit::Calendar(cal) = rule.limit() else {
        panic!("a calendar: {:?}", rule.limit());
    };
    assert!(cal.zone.is_named());
    assert!(matches!(
        rule.params(),
        Params::FixedWindow(p) if p.window_ms == 32 * 86_400_000
    ));
}

/// Without the tz database a zone name is refused, naming the field and saying why, never read
/// as UTC.
#[cfg(not(feature = "tz"))]
#[test]
fn without_tz_a_named_zone_is_refused() {
    let err = Rule::from_json(&json!({
        "action": "tokens", "algorithm": "fixed_window", "capacity": 1000,
        "calendar": {"unit": "month", "zone": "Europe/Paris"}
    }))
    .expect_err("no tz database");
    assert_eq!(err.field.to_string(), "calendar.zone");
    assert!(err.to_string().contains("feature `tz`"), "{err}");
}
