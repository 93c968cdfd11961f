//! Each Envoy's share of the keys held over RLQS (Envoy's own quota filter, docs/rlqs.md) and
//! the rule's whole bucket they split: under a looked-up key in the Keys view, and every key in
//! the Live view. Read from `GET /v1/rlqs/shares` every [`RLQS_REFRESH_MS`] while its view shows.
//! Keys, domains and addresses are untrusted text: only ever text nodes and attributes.

use std::time::Duration;

use leptos::prelude::*;
use sluice_core::wire::RlqsSharesBody;

use super::{api, Auth, Ctx, Tab};
use crate::rlqs::{cards, more_keys, KeyCard, RLQS_REFRESH_MS};

/// The shares of the keys `key` names (all when it is `None`), in `tab`. Hidden while no key it
/// asks about is held over RLQS (a backend no Envoy asks for quota shows nothing), and in the
/// Keys view until a key is looked up.
#[component]
pub fn RlqsShares(ctx: Ctx, tab: Tab, key: Signal<Option<String>>) -> impl IntoView {
    let body = RwSignal::new(None::<RlqsSharesBody>);
    let error = RwSignal::new(String::new());
    let busy = RwSignal::new(false);
    let refresh = move || {
        let wanted = key.get_untracked();
        let shown = ctx.auth.get_untracked() == Auth::SignedIn && ctx.tab.get_untracked() == tab;
        if !shown || busy.get_untracked() || (tab == Tab::Keys && wanted.is_none()) {
            return;
        }
        busy.set(true);
        leptos::task::spawn_local(async move {
            match api::rlqs_shares(wanted.as_deref()).await {
                // An answer for a key no longer asked about is dropped.
                Ok(b) if key.get_untracked() == wanted => {
                    body.set(Some(b));
                    error.set(String::new());
                }
                Ok(_) => {}
                Err(e) if e.is_unauthorized() => ctx.server_failed("RLQS shares", &e),
                Err(e) => error.set(format!("Could not read the RLQS shares: {}", e.message)),
            }
            busy.set(false);
        });
    };
    // At once when the view opens or the key changes (the old key's shares go first); then
    // every few seconds.
    Effect::new(move |last: Option<Option<String>>| {
        let wanted = key.get();
        if last.is_some_and(|l| l != wanted) {
            body.set(None);
        }
        if ctx.tab.get() == tab {
            refresh();
        }
        wanted
    });
    if let Ok(handle) = set_interval_with_handle(refresh, Duration::from_millis(RLQS_REFRESH_MS)) {
        on_cleanup(move || handle.clear());
    }
    let shown = Memo::new(move |_| body.with(|b| b.as_ref().map(cards).unwrap_or_default()));
    let hidden = move || shown.with(Vec::is_empty) && error.with(String::is_empty);
    view! {
        <section class="rlqs" data-view=format!("{tab:?}").to_lowercase() hidden=hidden>
            <h3 class="rlqs-title">"Shares held over RLQS"</h3>
            <p class="hint">"Each Envoy's quota filter enforces its share itself, with no call per request; sluice pays every share from the key in advance, so together they stay within the rule's bucket."</p>
            <p class="field-error">{move || error.get()}</p>
            {move || shown.get().into_iter().map(|c| view! { <RlqsCard ctx=ctx card=c /> }).collect_view()}
            <p class="more">{move || body.with(|b| b.as_ref().map(more_keys).unwrap_or_default())}</p>
        </section>
    }
}

#[component]
fn RlqsCard(ctx: Ctx, card: KeyCard) -> impl IntoView {
    let wanted = card.key.clone();
    let look_up = move |_| {
        ctx.key.set(Some(wanted.clone()));
        ctx.tab.set(Tab::Keys);
    };
    view! {
        <article class="rlqs-key" data-action=card.action.clone() data-key=card.key.clone()>
            <header class="rlqs-head">
                <h4>
                    <span class="action-name">{card.action.clone()}</span>
                    " · "
                    <button type="button" class="link key-link" title=card.key.clone() on:click=look_up>{card.key.clone()}</button>
                </h4>
                <span class="rlqs-total">"the rule's bucket: " {card.total_text.clone()}</span>
            </header>
            <ul class="rlqs-holders">
                {card.holders.into_iter().map(|h| view! {
                    <li class="rlqs-holder" data-stream=h.stream.to_string() data-open=h.open.to_string()
                        data-max-tokens=h.max_tokens.to_string() data-tokens-per-fill=h.tokens_per_fill.to_string()>
                        <span class="level-bar" aria-hidden="true">
                            <span class="level-bar-fill" style:transform=format!("scaleX({:.4})", h.fill)></span>
                        </span>
                        <span class="rlqs-share">{h.share_text}</span>
                        <span class="desc">{format!("{} · {} · {}", h.envoy, h.domain, h.state)}</span>
                        <span class="desc">{format!("{} · TTL {}", h.used_text, h.ttl_text)}</span>
                    </li>
                }).collect_view()}
            </ul>
            <p class="rlqs-sum">{card.sum_text}</p>
            <p class="more">{card.more}</p>
        </article>
    }
}
