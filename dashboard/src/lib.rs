//! sluice-dashboard: the operator's page for sluice: rules and per-key overrides with validation,
//! live funnel levels, a what-if plot that runs the core algorithms before a rule is saved, key
//! resets and the audit trail.
//!
//! # Where things are
//!
//! One rule names the files: **`app/X.rs` draws, `X.rs` knows.** Each Leptos component file in
//! `app/` (wasm32 only, not unit tested) has a twin of the same name at the crate root holding its
//! model: plain Rust, compiled natively and tested with `cargo test -p sluice-dashboard`.
//!
//! | view (`app/`) | its model | what the model holds |
//! |---|---|---|
//! | `signin.rs` | [`signin`] | what a refused sign-in says |
//! | `rules_view.rs` | [`rules_view`] | the rules table's rows |
//! | `editor.rs` | [`editor`] | the form as typed, its validation through sluice-core, server refusals by field |
//! | `whatif.rs` | [`whatif`] | [`whatif::simulation`] (core's algorithms over a request pattern) and [`whatif::chart`] (its SVG geometry) |
//! | `live_view.rs` | [`live_view`] | funnels from a levels snapshot: order, fill, colour |
//! | `history.rs` | [`history`] | per-action stacked history charts, hover readouts, the "passed unchecked" panel, actions quiet for 24 h |
//! | `keys.rs` | [`keys`] | one key's state on every action; the most denied keys per action |
//! | `rlqs.rs` (in the key view and the live view) | [`rlqs`] | per key held over RLQS: the rule's bucket, each Envoy's share, the sum |
//! | `rules_view.rs` (overrides under a rule), `editor.rs` | [`overrides`] | an action's overrides, an override's URL, keys a browser cannot put in a path |
//! | `reset.rs` (live view, key view) | [`reset`] | the reset URL and what a reset removed |
//! | `audit.rs` | [`audit`] | the audit trail newest first, the kind in words, before → after by field |
//! | `mod.rs` (the header's badge) | [`freshness`] | live, late, stale from the time since the last event |
//! | `store_health.rs` (in the live view) | [`store_health`] | the store line and warning banner; the eviction rate from successive snapshots |
//! | `api.rs` (the admin API calls) | [`api`] | [`api::ServerError`]: how a failed call is described |
//!
//! Files without a twin are shared by several views ([`format`]: numbers and durations as text;
//! [`sustained`]: a rule's long-run rate; [`rule_change`]: a save that
//! changes a limit by more than 10×, which the editor asks to confirm; [`scope`]: what the views
//! show of thousands of rules, the rules table's search and pages, the idle actions the other
//! views fill in from the rules) or have no logic worth a model (`app/mod.rs`: the page's
//! signals; `app/events.rs`: the SSE stream;
//! `app/search_box.rs`: the search field of the rules table and the key view). The wire bodies themselves are sluice-core's
//! (`sluice_core::wire`), never declared here.
//!
//! A new view `app/X.rs` gets its model in `X.rs`; a model that grows a second job becomes a
//! directory `X/` of one-job files, as [`whatif`] did.

pub mod api;
pub mod audit;
pub mod editor;
pub mod format;
pub mod freshness;
pub mod history;
pub mod keys;
pub mod live_view;
pub mod overrides;
pub mod reset;
pub mod rlqs;
pub mod rule_change;
pub mod rules_view;
pub mod scope;
pub mod signin;
pub mod store_health;
pub mod sustained;
pub mod whatif;

/// What the models' unit tests share: the wire bodies they start from, parsed from JSON text.
#[cfg(test)]
mod test_support {
    use sluice_core::wire::RulesBody;
    use sluice_core::Rule;

    /// A `GET /v1/rules` body from its JSON.
    pub fn body(json: &str) -> RulesBody {
        serde_json::from_str(json).unwrap()
    }

    /// One rule from its JSON.
    pub fn rule(json: &str) -> Rule {
        serde_json::from_str(json).unwrap()
    }
}

#[cfg(target_arch = "wasm32")]
pub mod app;
