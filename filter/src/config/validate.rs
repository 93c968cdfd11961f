//! The route checks of the plugin configuration, validated once at configuration time: each
//! refusal names its JSON path (`routes[0].key`). Split from `config.rs`, which holds the types
//! and their defaults.

use sluice_core::FieldError;

use super::*;

/// A route gives either `action` and `key`, or `checks` (2 to MAX_CHECKS, HTTP callouts only);
/// each check is validated like a route's own action, key and quantity. With `checks`, the
/// route's `action` and `key` become the first check's (what logs and failure reports name).
pub(super) fn validate_checks(
    route: &mut Route,
    at: &str,
    protocol: Protocol,
) -> Result<(), FieldError> {
    let key_given = route.key_written.is_some() || route.key != unset_key();
    if let Some(key) = route.key_written.take() {
        route.key = key;
    }
    if route.checks.is_empty() {
        if route.action.is_empty() {
            return Err(FieldError::new(
                format!("{at}.action"),
                "required (or give checks: a list of {action, key})",
            ));
        }
        if !key_given {
            return Err(FieldError::new(
                format!("{at}.key"),
                "required (or give checks: a list of {action, key})",
            ));
        }
        return Ok(());
    }
    if !route.action.is_empty() || key_given {
        return Err(FieldError::new(
            format!("{at}.checks"),
            "give either action and key, or checks, not both",
        ));
    }
    let max = sluice_core::limits::MAX_CHECKS;
    if route.checks.len() < 2 || route.checks.len() > max {
        return Err(FieldError::new(
            format!("{at}.checks"),
            format!(
                "must hold 2 to {max} checks (one limit is action and key); got {}",
                route.checks.len()
            ),
        ));
    }
    if !protocol.speaks_json() {
        return Err(FieldError::new(
            format!("{at}.checks"),
            "all-or-nothing checks need backend.protocol http or grpc_stream (one POST /v1/throttle/all carries them)",
        ));
    }
    for (j, check) in route.checks.iter_mut().enumerate() {
        let here = format!("{at}.checks[{j}]");
        Action::parse(&check.action).map_err(|r| FieldError::new(format!("{here}.action"), r))?;
        let quantity = check.quantity.unwrap_or(route.quantity);
        if !(1..=MAX_QUANTITY).contains(&quantity) {
            return Err(FieldError::new(
                format!("{here}.quantity"),
                format!("must be 1 to {MAX_QUANTITY}; got {quantity}"),
            ));
        }
        check.quantity = Some(quantity);
        validate_key(&mut check.key, &format!("{here}.key"), 1)?;
    }
    if let Some(first) = route.checks.first() {
        route.action = first.action.clone();
        route.key = first.key.clone();
    }
    Ok(())
}

pub(super) fn validate_route(route: &mut Route, at: &str) -> Result<(), FieldError> {
    Action::parse(&route.action).map_err(|r| FieldError::new(format!("{at}.action"), r))?;
    if !(1..=MAX_QUANTITY).contains(&route.quantity) {
        return Err(FieldError::new(
            format!("{at}.quantity"),
            format!("must be 1 to {MAX_QUANTITY}; got {}", route.quantity),
        ));
    }
    let m = &mut route.matcher;
    if let Some(prefix) = &m.path_prefix {
        if !prefix.starts_with('/') {
            return Err(FieldError::new(
                format!("{at}.match.path_prefix"),
                "must start with /",
            ));
        }
    }
    if let Some(path) = &m.path {
        if !path.starts_with('/') {
            return Err(FieldError::new(
                format!("{at}.match.path"),
                "must start with /",
            ));
        }
    }
    if let Some(method) = &m.method {
        if method.is_empty() || !method.bytes().all(|c| c.is_ascii_uppercase()) {
            return Err(FieldError::new(
                format!("{at}.match.method"),
                format!("must be an uppercase HTTP method such as GET or POST; got {method:?}"),
            ));
        }
    }
    for (j, h) in m.headers.iter_mut().enumerate() {
        h.name = header_name(&h.name)
            .map_err(|r| FieldError::new(format!("{at}.match.headers[{j}].name"), r))?;
    }
    validate_key(&mut route.key, &format!("{at}.key"), 1)
}

pub(super) fn validate_key(key: &mut KeySource, at: &str, depth: usize) -> Result<(), FieldError> {
    if depth > MAX_KEY_DEPTH {
        return Err(FieldError::new(
            at,
            format!("on_missing may nest at most {MAX_KEY_DEPTH} deep"),
        ));
    }
    let on_missing = match key {
        KeySource::Header { name, on_missing } => {
            *name = header_name(name).map_err(|r| FieldError::new(format!("{at}.name"), r))?;
            on_missing
        }
        KeySource::ClientIp { on_missing } | KeySource::Path { on_missing } => on_missing,
        KeySource::Constant { value } => {
            if value.is_empty() {
                return Err(FieldError::new(format!("{at}.value"), "must not be empty"));
            }
            return Ok(());
        }
    };
    match on_missing {
        Some(next) => validate_key(next, &format!("{at}.on_missing"), depth + 1),
        None => Ok(()),
    }
}

/// Lowercases and checks a header name (an RFC 9110 token, or an HTTP/2 pseudo-header).
pub(super) fn header_name(name: &str) -> Result<String, String> {
    let body = name.strip_prefix(':').unwrap_or(name);
    let token = |c: u8| c.is_ascii_alphanumeric() || b"!#$%&'*+-.^_`|~".contains(&c);
    if body.is_empty() || !body.bytes().all(token) {
        return Err(format!(
            "must be a header name (letters, digits, - and the like); got {name:?}"
        ));
    }
    Ok(name.to_ascii_lowercase())
}
