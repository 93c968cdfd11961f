//! The model of the reset button (`app/reset.rs`, in the live view and the key view): the URL of
//! `DELETE /v1/keys?action=A&key=K` and what the page says a reset removed; the same for the key
//! view's "reset on every action" (`action=*`).

use sluice_core::wire::{ResetAllBody, ResetBody, EVERY_ACTION};

use crate::overrides::percent_encode;

/// `DELETE /v1/keys?action=A&key=K`'s URL, both values percent-encoded whole, so a key with `&`,
/// `=`, `#`, `%`, spaces or non-ASCII names itself and nothing else.
pub fn reset_url(action: &str, key: &str) -> String {
    format!(
        "/v1/keys?action={}&key={}",
        percent_encode(action),
        percent_encode(key)
    )
}

/// `DELETE /v1/keys?action=*&key=K`: the key on every action at once.
pub fn reset_all_url(key: &str) -> String {
    format!(
        "/v1/keys?action={}&key={}",
        percent_encode(EVERY_ACTION),
        percent_encode(key)
    )
}

/// What a reset on every action did, in one sentence: `Reset “mallory” on 3 actions (post,
/// reply, like): removed state on 2.`
pub fn reset_all_text(body: &ResetAllBody) -> String {
    let names: Vec<&str> = body.actions.iter().map(|a| a.action.as_str()).collect();
    let held = body
        .actions
        .iter()
        .filter(|a| !a.removed.is_empty())
        .count();
    let on = match names.len() {
        0 => {
            return format!(
                "Reset “{}”: there are no rules, nothing to reset.",
                body.key
            )
        }
        1 => format!("1 action ({})", names[0]),
        n => format!("{n} actions ({})", names.join(", ")),
    };
    format!("Reset “{}” on {on}: removed state on {held}.", body.key)
}

/// What a reset removed, in words: `Reset “alice” on reply: removed its gcra state.`, or that the
/// key held none (nothing was limiting it under that action).
pub fn reset_text(body: &ResetBody) -> String {
    if body.removed.is_empty() {
        return format!(
            "Reset “{}” on {}: it held no state, nothing was removed.",
            body.key, body.action
        );
    }
    let names: Vec<String> = body.removed.iter().map(|a| a.to_string()).collect();
    format!(
        "Reset “{}” on {}: removed its {} state.",
        body.key,
        body.action,
        names.join(" and ")
    )
}

#[cfg(test)]
mod tests {
    use super::*;
    use sluice_core::Algorithm;

    #[test]
    fn any_key_is_one_query_value() {
        assert_eq!(
            reset_url("reply", "a&key=b c#é"),
            "/v1/keys?action=reply&key=a%26key%3Db%20c%23%C3%A9"
        );
        assert_eq!(reset_url("reply", ""), "/v1/keys?action=reply&key=");
    }

    #[test]
    fn a_reset_on_every_action_is_one_request_and_one_sentence() {
        assert_eq!(reset_all_url("a b"), "/v1/keys?action=%2A&key=a%20b");
        let one = |action: &str, removed: Vec<Algorithm>| ResetBody {
            action: action.into(),
            key: "mallory".into(),
            removed,
        };
        let body = ResetAllBody {
            key: "mallory".into(),
            actions: vec![one("post", vec![Algorithm::Gcra]), one("reply", vec![])],
        };
        assert_eq!(
            reset_all_text(&body),
            "Reset “mallory” on 2 actions (post, reply): removed state on 1."
        );
        let none = ResetAllBody {
            key: "x".into(),
            actions: vec![],
        };
        assert!(reset_all_text(&none).contains("no rules"));
    }

    #[test]
    fn a_reset_says_what_it_removed() {
        let mut body = ResetBody {
            action: "reply".into(),
            key: "<b>alice</b>".into(),
            removed: vec![Algorithm::Gcra],
        };
        assert_eq!(
            reset_text(&body),
            "Reset “<b>alice</b>” on reply: removed its gcra state."
        );
        body.removed.push(Algorithm::FixedWindow);
        assert!(reset_text(&body).ends_with("removed its gcra and fixed_window state."));
        body.removed.clear();
        assert!(reset_text(&body).contains("held no state"));
    }
}
