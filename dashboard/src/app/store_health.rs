//! The store, at the top of the live view: a banner with the backend's warnings when a setting
//! lets a key spray switch limiting off, and one line with the kind, keys held against the bound
//! and evictions. Warnings are only ever put into text nodes.

use leptos::prelude::*;

use super::Ctx;
use crate::store_health::{StoreView, RATE_WINDOW_MS};

/// The banner (only while there are warnings) and the store line.
#[component]
pub fn StorePanel(ctx: Ctx) -> impl IntoView {
    // The memo's previous value carries the eviction history from snapshot to snapshot.
    let store = Memo::new(move |previous: Option<&StoreView>| {
        ctx.levels.with(|l| StoreView::next(previous, l))
    });
    // One closure type for every text and one for every flag: each drawn value is a plain
    // function of the view, and the wasm stays small.
    let text = move |f: fn(&StoreView) -> String| move || store.with(f);
    let flag = move |f: fn(&StoreView) -> bool| move || store.with(f);
    let warnings = Memo::new(move |_| store.with(|s| s.warnings.clone()));
    view! {
        <div class="store-warnings" id="store-warnings" role="alert" hidden=flag(|s| s.warnings.is_empty())>
            <h3>"The store puts rate limiting at risk"</h3>
            <ul>
                {move || {
                    warnings
                        .get()
                        .into_iter()
                        .map(|w| view! { <li class="store-warning">{w}</li> })
                        .collect_view()
                }}
            </ul>
        </div>
        <div
            class="store-line"
            id="store-line"
            hidden=flag(|s| !s.known)
            data-kind=text(|s| s.kind.clone())
            data-keys=text(|s| s.keys.map(|k| k.to_string()).unwrap_or_default())
            data-max-keys=text(|s| s.max_keys.map(|k| k.to_string()).unwrap_or_default())
            data-evictions=text(|s| s.evictions.to_string())
        >
            <span class="store-label">"Store"</span>
            <span class="store-kind">{text(|s| s.kind_text.clone())}</span>
            <span class="store-keys" hidden=flag(|s| s.keys_text.is_empty())>
                <span class="store-keys-text">{text(|s| s.keys_text.clone())}</span>
                <span
                    class=text(|s| format!("store-fill {}", s.tone.class()))
                    hidden=flag(|s| s.fill.is_none())
                    role="meter"
                    aria-label="keys held against the bound"
                    aria-valuemin="0"
                    aria-valuemax=text(|s| s.max_keys.unwrap_or(0).to_string())
                    aria-valuenow=text(|s| s.keys.unwrap_or(0).to_string())
                >
                    <span
                        class="store-fill-bar"
                        style:transform=text(|s| format!("scaleX({:.4})", s.fill.unwrap_or(0.0)))
                    ></span>
                </span>
                <span class="store-fill-text">{text(|s| s.fill_text.clone())}</span>
            </span>
            <span class=text(|s| evictions_class(s.evictions).to_owned())>
                <span class="store-evictions-text">{text(|s| s.evictions_text.clone())}</span>
                " · "
                <span class="store-eviction-rate" title=format!("evictions per second over the last {} s", RATE_WINDOW_MS / 1000)>
                    {text(|s| s.eviction_rate_text.clone())}
                </span>
            </span>
        </div>
    }
}

fn evictions_class(evictions: u64) -> &'static str {
    if evictions > 0 {
        "store-evictions evicting"
    } else {
        "store-evictions"
    }
}
