//! The one content type every state-changing endpoint takes: JSON. Why: a browser sends a
//! cross-site POST without asking first (no CORS preflight) only with `text/plain`,
//! `application/x-www-form-urlencoded` or `multipart/form-data`, or with no type at all (a
//! typeless `Blob`); refusing all but JSON means no page a user visits can make their browser
//! decide, commit, report or change a rule on a listener it can reach.

/// The content type state-changing endpoints take.
pub const JSON_CONTENT_TYPE: &str = "application/json";

/// Whether a `Content-Type` value is JSON: `application/json` or `application/<x>+json`, any
/// case, with or without parameters (`; charset=utf-8`).
pub fn is_json_content_type(value: &str) -> bool {
    let essence = value.split(';').next().unwrap_or("").trim();
    let Some((kind, sub)) = essence.split_once('/') else {
        return false;
    };
    kind.eq_ignore_ascii_case("application")
        && (sub.eq_ignore_ascii_case("json")
            || sub.len() > 5 && sub[sub.len() - 5..].eq_ignore_ascii_case("+json"))
}

/// The message of a 415: what `method path` takes, and what it got (`None`: no type).
pub fn unsupported_media_type_message(method: &str, path: &str, got: Option<&str>) -> String {
    let got = got.map_or_else(|| "none".to_owned(), |t| format!("{t:?}"));
    format!("{method} {path} takes Content-Type: {JSON_CONTENT_TYPE}; got {got}")
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn only_json_types_are_json() {
        for yes in [
            "application/json",
            "Application/JSON; charset=utf-8",
            "application/problem+json",
        ] {
            assert!(is_json_content_type(yes), "{yes}");
        }
        for no in [
            "",
            "text/plain",
            "text/plain; charset=utf-8",
            "application/x-www-form-urlencoded",
            "multipart/form-data; boundary=x",
            "application/jsonx",
            "text/json",
            "application/+json",
        ] {
            assert!(!is_json_content_type(no), "{no}");
        }
    }
}
