use super::*;
use serde_json::json;

fn form() -> RuleForm {
    RuleForm {
        action: "reply".into(),
        ..RuleForm::blank()
    }
}

fn error_of(f: &RuleForm) -> InputError {
    f.validate(EditMode::Create, &[]).unwrap_err()
}

#[test]
fn the_blank_form_is_the_design_example() {
    let rule = form().validate(EditMode::Create, &[]).unwrap();
    assert_eq!(
        rule.to_json(),
        json!({"action": "reply", "algorithm": "gcra", "capacity": 16,
               "rate": {"count": 30, "period": "1m"}, "mode": "enforce", "description": ""})
    );
}

#[test]
fn a_calendar_budget_round_trips_and_its_zone_is_judged() {
    let f = RuleForm {
        algorithm: Algorithm::FixedWindow,
        capacity: "1000000".into(),
        calendar: "month".into(),
        zone: "+08:00".into(),
        ..form()
    };
    assert!(!f.shows(Field::Window) && f.shows(Field::Zone));
    let rule = f.validate(EditMode::Create, &[]).unwrap();
    assert_eq!(
        rule.to_json()["calendar"],
        json!({"unit": "month", "zone": "+08:00"})
    );
    let back = RuleForm::from_rule(&rule);
    assert_eq!(
        (back.calendar.as_str(), back.zone.as_str()),
        ("month", "+08:00")
    );
    // A named zone (the dashboard's core carries the tz database, as the backend's does) is
    // kept as the database spells it; an unknown one is refused next to Zone.
    let paris = RuleForm {
        zone: "europe/paris".into(),
        ..f.clone()
    };
    let rule = paris.validate(EditMode::Create, &[]).unwrap();
    assert_eq!(RuleForm::from_rule(&rule).zone, "Europe/Paris");
    let e = error_of(&RuleForm {
        zone: "Europe/Pariss".into(),
        ..f.clone()
    });
    assert_eq!(e.field, Field::Zone);
    assert!(e.message.contains("Europe/Paris"), "{}", e.message);
    // Another algorithm keeps its window and ignores the calendar typed.
    let sliding = RuleForm {
        algorithm: Algorithm::SlidingWindow,
        ..f
    };
    assert!(sliding.to_json().get("calendar").is_none());
    assert!(sliding.shows(Field::Window) && !sliding.shows(Field::Calendar));
}

#[test]
fn messages_land_next_to_the_right_input() {
    let e = error_of(&RuleForm {
        capacity: "0".into(),
        ..form()
    });
    assert_eq!(
        e,
        InputError {
            field: Field::Capacity,
            message: "must be at least 1".into()
        }
    );
    let e = error_of(&RuleForm {
        capacity: "abc".into(),
        ..form()
    });
    assert_eq!(e.field, Field::Capacity);
    // The words are core's (the server's); they quote what was typed.
    assert!(e.message.contains("\"abc\""), "{}", e.message);
    assert_eq!(
        error_of(&RuleForm {
            capacity: "-3".into(),
            ..form()
        })
        .field,
        Field::Capacity
    );
    assert_eq!(
        error_of(&RuleForm {
            capacity: "1.5".into(),
            ..form()
        })
        .field,
        Field::Capacity
    );
    // Each message is true for the field and quotes what was typed.
    let says = |capacity: &str| {
        error_of(&RuleForm {
            capacity: capacity.into(),
            ..form()
        })
        .message
    };
    assert_eq!(says("-1"), "must be a whole number (1 or more); got -1");
    assert_eq!(
        says("1e3"),
        r#"must be a whole number (1 or more); got "1e3""#
    );
    assert_eq!(says("1.5"), "must be a whole number (1 or more); got 1.5");
    assert_eq!(
        error_of(&RuleForm {
            capacity: " ".into(),
            ..form()
        })
        .message,
        "is required"
    );
    assert_eq!(
        error_of(&RuleForm {
            rate_count: "0".into(),
            ..form()
        })
        .field,
        Field::RateCount
    );
    assert_eq!(
        error_of(&RuleForm {
            rate_period: "soon".into(),
            ..form()
        })
        .field,
        Field::RatePeriod
    );
    let empty_period = error_of(&RuleForm {
        rate_period: "".into(),
        ..form()
    });
    assert_eq!(empty_period.field, Field::RatePeriod);
    assert_eq!(empty_period.message, "is required");
    let empty_count = error_of(&RuleForm {
        rate_count: " ".into(),
        ..form()
    });
    assert_eq!(empty_count.field, Field::RateCount);
    assert_eq!(empty_count.message, "is required");
    assert_eq!(
        error_of(&RuleForm {
            action: "a b".into(),
            ..form()
        })
        .field,
        Field::Action
    );
    let windowed = RuleForm {
        algorithm: Algorithm::FixedWindow,
        window: "1x".into(),
        ..form()
    };
    assert_eq!(error_of(&windowed).field, Field::Window);
    let no_window = RuleForm {
        window: "".into(),
        ..windowed
    };
    assert_eq!(error_of(&no_window).field, Field::Window);
    assert!(
        error_of(&no_window).message.starts_with("is required"),
        "{}",
        error_of(&no_window).message
    );
    let long = RuleForm {
        description: "x".repeat(2000),
        ..form()
    };
    assert_eq!(error_of(&long).field, Field::Description);
}

#[test]
fn only_the_limit_the_algorithm_uses_is_sent() {
    let f = RuleForm {
        algorithm: Algorithm::SlidingLog,
        capacity: "5".into(),
        ..form()
    };
    let json = f.to_json();
    assert_eq!(json["window"], json!("60s"));
    assert!(json.get("rate").is_none());
    assert!(f.shows(Field::Window) && !f.shows(Field::RateCount));
    let rule = f.validate(EditMode::Create, &[]).unwrap();
    assert_eq!(RuleForm::from_rule(&rule).window, "1m");
}

#[test]
fn the_plot_ignores_the_action_but_not_the_limits() {
    let unnamed = RuleForm::blank();
    assert!(unnamed.validate(EditMode::Create, &[]).is_err());
    let params = unnamed.plot_params().unwrap();
    assert_eq!(params.capacity(), 16);
    assert!(RuleForm {
        capacity: "0".into(),
        ..RuleForm::blank()
    }
    .plot_params()
    .is_none());
    assert!(RuleForm {
        rate_period: "x".into(),
        ..RuleForm::blank()
    }
    .plot_params()
    .is_none());
}

#[test]
fn every_mistake_is_shown_at_once_in_form_order() {
    let f = RuleForm {
        action: "a b".into(),
        capacity: "0".into(),
        rate_period: "soon".into(),
        lease_on: true,
        lease_max: "0".into(),
        ..form()
    };
    let all = f.validate_all(EditMode::Create, &[]).unwrap_err();
    let fields: Vec<Field> = all.iter().map(|e| e.field).collect();
    assert_eq!(
        fields,
        [
            Field::Action,
            Field::Capacity,
            Field::RatePeriod,
            Field::LeaseMax
        ]
    );
    assert_eq!(all[1].message, "must be at least 1");
    // A taken action joins the others.
    let taken = RuleForm {
        capacity: "0".into(),
        ..form()
    }
    .validate_all(EditMode::Create, &["reply".to_owned()])
    .unwrap_err();
    assert_eq!(
        taken.iter().map(|e| e.field).collect::<Vec<_>>(),
        [Field::Action, Field::Capacity]
    );
}

#[test]
fn the_lease_is_off_by_default_sent_when_on_and_ignored_by_the_plot() {
    let off = form();
    assert!(off.to_json().get("lease").is_none());
    assert!(!off.shows(Field::LeaseMax));
    let on = RuleForm {
        lease_on: true,
        lease_max: "32".into(),
        lease_ttl: "500ms".into(),
        ..form()
    };
    assert!(on.shows(Field::LeaseTtl));
    let rule = on.validate(EditMode::Create, &[]).unwrap();
    let lease = rule.lease().unwrap();
    assert_eq!((lease.max, lease.ttl.millis()), (32, 500));
    let reopened = RuleForm::from_rule(&rule);
    assert!(reopened.lease_on);
    assert_eq!(
        (reopened.lease_max.as_str(), reopened.lease_ttl.as_str()),
        ("32", "500ms")
    );
    assert_eq!(on.plot_params(), off.plot_params());
    let bad = RuleForm {
        lease_ttl: "2m".into(),
        ..on
    };
    assert_eq!(
        bad.validate(EditMode::Create, &[]).unwrap_err().field,
        Field::LeaseTtl
    );
    // A wrong lease does not take the plot away.
    assert!(bad.plot_params().is_some());
}

#[test]
fn a_new_rule_may_not_take_an_existing_action() {
    let taken = vec!["reply".to_owned()];
    assert_eq!(
        form().validate(EditMode::Create, &taken).unwrap_err().field,
        Field::Action
    );
    assert!(form().validate(EditMode::Edit, &taken).is_ok());
}

#[test]
fn editing_round_trips_a_rule() {
    let rule = Rule::from_json(&json!({"action": "login", "algorithm": "token_bucket",
        "capacity": 10, "rate": {"count": 5, "period": "1s"}, "mode": "shadow",
        "description": "logins"}))
    .unwrap();
    let f = RuleForm::from_rule(&rule);
    assert_eq!(f.validate(EditMode::Edit, &[]).unwrap(), rule);
}

#[test]
fn server_refusals_go_next_to_the_named_field() {
    let e = ServerError::from_response(
        400,
        r#"{"error":"invalid_rule","field":"rate.period","message":"rate.period: must be at most 7d; got \"8d\""}"#,
    );
    let f = InputError::from_server(&e);
    assert_eq!(f.field, Field::RatePeriod);
    assert_eq!(f.message, "must be at most 7d; got \"8d\"");
    let other = InputError::from_server(&ServerError::from_response(500, "boom"));
    assert_eq!(other.field, Field::Rule);
    assert!(other.message.contains("boom"));
}

#[test]
fn an_override_is_judged_like_a_rule_and_its_key_by_core() {
    let rule = form().validate(EditMode::Create, &[]).unwrap();
    let fresh = RuleForm::new_override(&rule);
    assert!(fresh.shows(Field::Key));
    assert!(!form().shows(Field::Key));
    // No key yet: the key's message, next to every other field's, in form order.
    let all = RuleForm {
        capacity: "0".into(),
        ..fresh.clone()
    }
    .validate_all(EditMode::Create, &[])
    .unwrap_err();
    assert_eq!(
        all.iter().map(|e| e.field).collect::<Vec<_>>(),
        [Field::Key, Field::Capacity]
    );
    assert_eq!(all[0].message, "must not be empty");
    let long = RuleForm {
        key: Some("k".repeat(129)),
        ..fresh.clone()
    };
    assert_eq!(error_of(&long).field, Field::Key);
    let dots = RuleForm {
        key: Some("..".into()),
        ..fresh.clone()
    };
    assert!(error_of(&dots).message.contains("URL path"));
    // A key with an override already is taken for a new one, not for its own edit.
    let vip = RuleForm {
        key: Some("v/i p%".into()),
        capacity: "160".into(),
        ..fresh
    };
    let taken = vip
        .validate_all(EditMode::Create, &["v/i p%".to_owned()])
        .unwrap_err();
    assert_eq!(taken[0].field, Field::Key);
    let saved = vip
        .validate(EditMode::Edit, &["v/i p%".to_owned()])
        .unwrap();
    assert_eq!(saved.capacity(), 160);
    assert_eq!(saved.action().as_str(), "reply");
    // The key is the path's, never part of the body.
    assert!(vip.to_json().get("key").is_none());
    assert_eq!(
        RuleForm::from_override("v/i p%", &saved).key.as_deref(),
        Some("v/i p%")
    );
    // The server's refusal of the key lands on the key.
    let server = ServerError::from_response(
        400,
        r#"{"error":"invalid_request","field":"key","message":"key: is 200 bytes"}"#,
    );
    assert_eq!(
        InputError::from_server(&server),
        InputError {
            field: Field::Key,
            message: "is 200 bytes".into()
        }
    );
}
