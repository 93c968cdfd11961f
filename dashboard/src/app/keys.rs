//! The one-user view: a key search showing where the key stands on every action (a peek that
//! consumes nothing), and the keys each action denied most over the last 5 minutes, each a link
//! to its view. Keys are untrusted text: only ever text nodes and attributes.

use std::time::Duration;

use leptos::prelude::*;
use sluice_core::wire::{KeyView, TopDeniedBody};

use super::reset::{ResetAllButton, ResetButton};
use super::rlqs::RlqsShares;
use super::search_box::SearchBox;
use super::{api, Auth, Ctx, Tab, HISTORY_REFRESH_MS};
use crate::keys::{key_query, key_rows, top_denied, KeyRow, TopDenied};
use crate::live_view::cached_denied_note;
use crate::scope::{key_view_with_rest, more_text};

#[component]
pub fn KeysPanel(ctx: Ctx) -> impl IntoView {
    let typed = RwSignal::new(String::new());
    let message = RwSignal::new(String::new());
    let view_body = RwSignal::new(None::<KeyView>);
    let top = RwSignal::new(None::<TopDeniedBody>);
    let top_error = RwSignal::new(String::new());
    let busy = RwSignal::new(false);
    // A read asked for while one was on its way (a key typed while the view refreshed): run
    // once that one ends, not at the next tick, 4 s later.
    let again = RwSignal::new(false);
    // What the last reset in the key view removed.
    let reset_result = RwSignal::new(String::new());

    // Reads the looked-up key's states (if any) and the top-denied lists, while the view shows.
    let refresh = move || {
        if ctx.auth.get_untracked() != Auth::SignedIn || ctx.tab.get_untracked() != Tab::Keys {
            return;
        }
        if busy.get_untracked() {
            again.set(true);
            return;
        }
        busy.set(true);
        let key = ctx.key.get_untracked();
        leptos::task::spawn_local(async move {
            if let Some(key) = key {
                match api::key_view(&key).await {
                    // An answer for a key no longer asked about is dropped.
                    Ok(body) if ctx.key.get_untracked().as_deref() == Some(body.key.as_str()) => {
                        view_body.set(Some(body));
                        message.set(String::new());
                    }
                    Ok(_) => {}
                    Err(e) if e.is_unauthorized() => ctx.server_failed("Keys", &e),
                    Err(e) => message.set(format!("Could not look the key up: {}", e.message)),
                }
            }
            match api::top_denied().await {
                Ok(body) => {
                    top.set(Some(body));
                    top_error.set(String::new());
                }
                Err(e) if e.is_unauthorized() => ctx.server_failed("Keys", &e),
                Err(e) => top_error.set(format!(
                    "Could not read the most denied keys: {}",
                    e.message
                )),
            }
            busy.set(false);
        });
    };
    // At once when the view opens or the key changes; then every few seconds.
    Effect::new(move |_| {
        if ctx.tab.get() == Tab::Keys {
            ctx.key.track();
            refresh();
        }
    });
    Effect::new(move |_| {
        if !busy.get() && again.get() {
            again.set(false);
            refresh();
        }
    });
    // And at once after a reset, so the freed key shows its room without waiting.
    Effect::new(move |_| {
        if !reset_result.get().is_empty() {
            refresh();
        }
    });
    if let Ok(handle) = set_interval_with_handle(refresh, Duration::from_millis(HISTORY_REFRESH_MS))
    {
        on_cleanup(move || handle.clear());
    }

    let look_up = move |key: String| {
        typed.set(key.clone());
        if ctx.key.get_untracked().as_deref() != Some(key.as_str()) {
            view_body.set(None);
            reset_result.set(String::new());
        }
        ctx.key.set(Some(key));
    };
    let submit = move |ev: leptos::ev::SubmitEvent| {
        ev.prevent_default();
        match key_query(&typed.get_untracked()) {
            Ok(key) => look_up(key),
            Err(why) => message.set(why.to_owned()),
        }
    };
    // The backend answers the actions where the key has state (`scope=active`); a few others
    // are drawn back by name as a key never seen there reads, and the rest counted. The rules
    // as of each answer (read untracked): a rule added since shows with the next read, as the
    // backend's own rows do.
    let filled = Memo::new(move |_| {
        view_body.with(|v| match v {
            Some(v) => ctx.rules.with_untracked(|rules| {
                let (full, more) = key_view_with_rest(v, rules);
                (key_rows(&full), more)
            }),
            None => (Vec::new(), 0),
        })
    });
    let rows = Memo::new(move |_| filled.with(|(rows, _)| rows.clone()));
    let lists = Memo::new(move |_| top.get().map(|t| top_denied(&t)).unwrap_or_default());

    view! {
        <section class="card keys" aria-labelledby="keys-title">
            <div class="section-head">
                <h2 id="keys-title">"Keys"</h2>
                <p class="hint">"Where one key stands on every action (those where it has no state read full). Looking consumes nothing."</p>
            </div>
            <form class="key-search" id="key-search-form" on:submit=submit>
                <label for="key-search">"Key"</label>
                <div class="key-search-row">
                    <SearchBox id="key-search" placeholder="e.g. a user id" value=typed />
                    <button type="submit" class="primary" id="key-search-button">"Look up"</button>
                </div>
                <p class="field-error" id="key-search-error">{move || message.get()}</p>
            </form>
            <div class="key-result" id="key-result" hidden=move || view_body.get().is_none()>
                <div class="key-title-row">
                    <h3 class="key-title">
                        "Key "
                        <span class="shown-key" id="shown-key">{move || view_body.get().map(|v| v.key).unwrap_or_default()}</span>
                    </h3>
                    <ResetAllButton
                        ctx=ctx
                        key=Signal::derive(move || view_body.with(|v| v.as_ref().map(|v| v.key.clone())))
                        actions=Signal::derive(move || ctx.rules.with(|r| r.rules.len()))
                        done=reset_result
                    />
                </div>
                <Show
                    when=move || !rows.get().is_empty()
                    fallback=|| view! { <p class="empty">"No rules: nothing limits this key."</p> }
                >
                    <table class="key-table">
                        <thead>
                            <tr>
                                <th scope="col">"Action"</th>
                                <th scope="col">"Level"</th>
                                <th scope="col" class="num">"Remaining"</th>
                                <th scope="col">"Retry after"</th>
                                <th scope="col">"Last seen"</th>
                                <th scope="col">"Denied (per minute)"</th>
                                <th scope="col"><span class="sr-only">"Reset"</span></th>
                            </tr>
                        </thead>
                        <tbody>
                            <For
                                each=move || rows.get()
                                key=|r: &KeyRow| r.action.clone()
                                children=move |r: KeyRow| {
                                    // One row per action for as long as the key shows, so a reset
                                    // being confirmed survives the refreshes; its values follow.
                                    let key = view_body.get_untracked().map(|v| v.key).unwrap_or_default();
                                    let action = r.action.clone();
                                    let row = Memo::new(move |_| {
                                        rows.get().into_iter().find(|x| x.action == action).unwrap_or_else(|| r.clone())
                                    });
                                    view! { <KeyStateRow ctx=ctx key=key row=row done=reset_result /> }
                                }
                            />
                        </tbody>
                    </table>
                </Show>
                <p class="more" id="key-more">
                    {move || filled.with(|(_, more)| more_text(*more, "actions where this key has no state (all of their capacity left)"))}
                </p>
                <p class="reset-result" id="key-reset-result" role="status">{move || reset_result.get()}</p>
                <RlqsShares ctx=ctx tab=Tab::Keys key=Signal::derive(move || ctx.key.get()) />
            </div>
            <h3 class="top-title">"Most denied, last 5 minutes"</h3>
            <p class="hint" id="top-denied-note">
                {move || ctx.history.with(|h| h.as_ref().map(cached_denied_note)).unwrap_or_else(|| "Counts are the backend's denials per key.".into())}
            </p>
            <p class="field-error" id="top-denied-error">{move || top_error.get()}</p>
            <Show
                when=move || !lists.get().is_empty()
                fallback=|| view! { <p class="empty" id="top-denied-empty">"No denials in the last 5 minutes."</p> }
            >
                <div class="top-grid" id="top-denied">
                    <For
                        each=move || lists.get()
                        key=|t: &TopDenied| (t.action.clone(), t.keys.clone())
                        children=move |t: TopDenied| {
                            view! {
                                <article class="top-card" data-action=t.action.clone()>
                                    <h4 class="action-name">{t.action.clone()}</h4>
                                    <ol class="top-keys">
                                        {t
                                            .keys
                                            .into_iter()
                                            .map(|(key, denied)| {
                                                let wanted = key.clone();
                                                let title = key.clone();
                                                view! {
                                                    <li class="top-key" data-denied=denied.to_string()>
                                                        <button
                                                            type="button"
                                                            class="link key-link"
                                                            title=title
                                                            on:click=move |_| look_up(wanted.clone())
                                                        >
                                                            {key}
                                                        </button>
                                                        <span class="denied-count">{format!("{denied} denied")}</span>
                                                    </li>
                                                }
                                            })
                                            .collect_view()}
                                    </ol>
                                </article>
                            }
                        }
                    />
                </div>
            </Show>
        </section>
    }
}

#[component]
fn KeyStateRow(ctx: Ctx, key: String, row: Memo<KeyRow>, done: RwSignal<String>) -> impl IntoView {
    let get = move |f: fn(&KeyRow) -> String| move || row.with(f);
    let action = row.with_untracked(|r| r.action.clone());
    view! {
        <tr class=move || format!("key-state {}", row.with(|r| r.tone.class())) data-action=action.clone() data-remaining=get(|r| r.remaining.clone())
            data-overridden=move || row.with(|r| r.overridden.to_string())>
            <th scope="row" data-label="Action">
                <span class="action-name">{action.clone()}</span>
                <span class="override-mark" hidden=move || !row.with(|r| r.overridden) title="A per-key override applies to this key">"override"</span>
                <span class="desc">{get(|r| r.rule_text.clone())}</span>
                <span class="desc budget-text" hidden=move || row.with(|r| r.budget_text.is_empty())>{get(|r| r.budget_text.clone())}</span>
            </th>
            <td data-label="Level">
                <span class="level-bar" aria-hidden="true">
                    <span class="level-bar-fill" style:transform=move || format!("scaleX({:.4})", row.with(|r| r.fill))></span>
                </span>
                <span class="level-text">{get(|r| r.level_text.clone())}</span>
            </td>
            <td data-label="Remaining" class="num remaining">{get(|r| r.remaining.clone())}</td>
            <td data-label="Retry after" class="retry-after">{get(|r| r.retry_after.clone())}</td>
            <td data-label="Last seen" class="last-seen">{get(|r| r.last_seen.clone())}</td>
            <td data-label="Denied" class="denied-since">
                <span class="denied-text">{get(|r| r.denied_text.clone())}</span>
                <span class="denied-bars" aria-hidden="true">
                    {move || row.with(|r| r.denied_bars.clone()).into_iter().map(|(minute, n, h)| view! {
                        <span class="denied-bar" title=format!("{minute} UTC: {n} denied") style:height=format!("{:.0}%", 15.0 + 85.0 * h)></span>
                    }).collect_view()}
                </span>
            </td>
            <td class="row-actions"><ResetButton ctx=ctx action=action.clone() key=key done=done /></td>
        </tr>
    }
}
