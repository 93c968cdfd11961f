//! The audit page: every recorded change (rules, overrides, resets), newest first, with when, who,
//! what, the action and key, and the fields that changed (before → after). Read every few seconds
//! while it shows. Keys and `who` are stored text: only ever text nodes and attributes.

use std::time::Duration;

use leptos::prelude::*;
use sluice_core::wire::AuditBody;

use super::{api, Auth, Ctx, Tab, HISTORY_REFRESH_MS};
use crate::audit::{audit_rows, kind_choices, AuditFilter, AuditRow, ABSENT};

/// How many entries the page asks for (the store keeps up to 1,000).
pub const AUDIT_SHOWN: usize = 100;

#[component]
pub fn AuditPanel(ctx: Ctx) -> impl IntoView {
    let body = RwSignal::new(None::<AuditBody>);
    let error = RwSignal::new(String::new());
    let busy = RwSignal::new(false);
    // The filters as typed; the list reads again when one changes.
    let filter = RwSignal::new(AuditFilter::default());
    let refresh = move || {
        if ctx.auth.get_untracked() != Auth::SignedIn
            || ctx.tab.get_untracked() != Tab::Audit
            || busy.get_untracked()
        {
            return;
        }
        busy.set(true);
        let wanted = filter.get_untracked();
        leptos::task::spawn_local(async move {
            match api::audit(AUDIT_SHOWN, &wanted).await {
                // An answer for filters no longer set is dropped (the next read is on its way).
                Ok(_) if filter.get_untracked() != wanted => {}
                Ok(b) => {
                    body.set(Some(b));
                    error.set(String::new());
                }
                Err(e) if e.is_unauthorized() => ctx.server_failed("Audit", &e),
                Err(e) => error.set(format!("Could not read the audit trail: {}", e.message)),
            }
            busy.set(false);
        });
    };
    Effect::new(move |_| {
        filter.track();
        if ctx.tab.get() == Tab::Audit {
            busy.set(false);
            refresh();
        }
    });
    let set = move |f: fn(&mut AuditFilter, String)| {
        move |ev: leptos::ev::Event| {
            let value = event_target_value(&ev);
            filter.update(|x| f(x, value));
        }
    };
    if let Ok(handle) = set_interval_with_handle(refresh, Duration::from_millis(HISTORY_REFRESH_MS))
    {
        on_cleanup(move || handle.clear());
    }
    let rows = Memo::new(move |_| body.get().map(|b| audit_rows(&b)).unwrap_or_default());
    view! {
        <section class="card audit" aria-labelledby="audit-title">
            <div class="section-head">
                <h2 id="audit-title">"Audit"</h2>
                <p class="hint">"Every change to rules, overrides and keys' state, newest first, as every replica sees it."</p>
            </div>
            <form class="audit-filters" id="audit-filters" on:submit=|ev: leptos::ev::SubmitEvent| ev.prevent_default()>
                <div class="field">
                    <label for="audit-action">"Action"</label>
                    <select id="audit-action" on:change=set(|f, v| f.action = v)>
                        <option value="" selected=move || filter.with(|f| f.action.is_empty())>"any"</option>
                        // One option per rule, drawn only while the view shows and without a
                        // reactive attribute each: thousands of rules stay one quick list.
                        {move || {
                            if ctx.tab.get() != Tab::Audit {
                                return Vec::new();
                            }
                            let chosen = filter.with_untracked(|f| f.action.clone());
                            ctx.rules.with(|body| {
                                body.rules
                                    .iter()
                                    .map(|r| {
                                        let name = r.action().as_str().to_owned();
                                        let (selected, value) = (name == chosen, name.clone());
                                        view! { <option value=value selected=selected>{name}</option> }
                                    })
                                    .collect::<Vec<_>>()
                            })
                        }}
                    </select>
                </div>
                <div class="field">
                    <label for="audit-key">"Key"</label>
                    <input id="audit-key" type="search" autocomplete="off" spellcheck="false" placeholder="any"
                        prop:value=move || filter.with(|f| f.key.clone())
                        on:change=set(|f, v| f.key = v) />
                </div>
                <div class="field">
                    <label for="audit-kind">"Kind"</label>
                    <select id="audit-kind" on:change=set(|f, v| f.kind = v)>
                        <option value="">"any"</option>
                        {kind_choices()
                            .into_iter()
                            .map(|(name, words)| view! { <option value=name>{words}</option> })
                            .collect_view()}
                    </select>
                </div>
                <button type="button" class="quiet" id="audit-clear" disabled=move || !filter.with(AuditFilter::is_set)
                    on:click=move |_| filter.set(AuditFilter::default())>
                    "Clear filters"
                </button>
            </form>
            <p class="field-error" id="audit-error">{move || error.get()}</p>
            <Show
                when=move || !rows.get().is_empty()
                fallback=move || {
                    view! {
                        <p class="empty" id="audit-empty">
                            {move || match (body.get().is_some(), filter.with(AuditFilter::is_set)) {
                                (false, _) => "Reading the audit trail…",
                                (true, true) => "No recorded change matches these filters.",
                                (true, false) => "No changes recorded yet.",
                            }}
                        </p>
                    }
                }
            >
                <ol class="audit-list" id="audit-list">
                    <For
                        each=move || rows.get()
                        key=|r: &AuditRow| (r.at_ms, r.kind, r.action.clone(), r.key.clone(), r.version.clone(), r.who.clone())
                        children=|r: AuditRow| view! { <Entry row=r /> }
                    />
                </ol>
            </Show>
        </section>
    }
}

#[component]
fn Entry(row: AuditRow) -> impl IntoView {
    let changes = row.changes.clone();
    let one_sided = row.one_sided;
    view! {
        <li class=format!("audit-entry kind-{}", row.kind) data-kind=row.kind data-at=row.at_ms.to_string() data-action=row.action.clone() data-key=row.key.clone()>
            <div class="audit-head">
                <time class="audit-when">{row.when.clone()}</time>
                <span class="audit-what">{row.what.clone()}</span>
                <span class="action-name audit-action">{row.action.clone()}</span>
                {row.key.clone().map(|k| {
                    let title = k.clone();
                    view! { <span class="audit-key" title=title>{k}</span> }
                })}
                <span class="audit-version">{row.version.clone()}</span>
                <span class="audit-who">{format!("by {}", row.who)}</span>
            </div>
            {(!row.note.is_empty()).then(|| view! { <p class="audit-note">{row.note.clone()}</p> })}
            {(!changes.is_empty()).then(|| view! {
                <ul class=if one_sided { "audit-changes one-sided" } else { "audit-changes" }>
                    {changes
                        .into_iter()
                        .map(|c| {
                            let field = c.field.clone();
                            view! {
                            <li class="change" data-field=field>
                                <code class="change-field">{c.field}</code>
                                {(!one_sided || c.after == ABSENT).then(|| view! { <del class="change-before">{c.before.clone()}</del> })}
                                {(!one_sided).then(|| view! { <span class="arrow" aria-label="became">" → "</span> })}
                                {(!one_sided || c.before == ABSENT).then(|| view! { <ins class="change-after">{c.after.clone()}</ins> })}
                            </li>
                            }
                        })
                        .collect_view()}
                </ul>
            })}
        </li>
    }
}
