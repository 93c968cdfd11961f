//! The rules table, with create / edit / delete, a search box and pages of 50 rows. The
//! editor replaces the table while open.

use std::collections::HashSet;

use leptos::prelude::*;

use super::search_box::SearchBox;
use super::{api, editor::Editor, Ctx, Editing};
use crate::editor::{EditMode, RuleForm};
use crate::history::QUIET_TEXT;
use crate::overrides::{self, overrides_of, OverrideRow};
use crate::rules_view::{self, rows, RuleRow};
use crate::scope;

#[component]
pub fn RulesPanel(ctx: Ctx) -> impl IntoView {
    view! {
        {move || match ctx.editing.get() {
            Some(editing) => view! { <Editor ctx=ctx editing=editing /> }.into_any(),
            None => view! { <RulesTable ctx=ctx /> }.into_any(),
        }}
    }
}

#[component]
fn RulesTable(ctx: Ctx) -> impl IntoView {
    let table = Memo::new(move |_| ctx.rules.with(rows));
    // The search box and the page shown: only one page of rows is ever drawn (thousands of
    // rules from a ratelimit configuration directory stay a page of 50).
    let query = RwSignal::new(String::new());
    let page_no = RwSignal::new(0usize);
    // A new search starts at its first page.
    Effect::new(move |_| {
        query.track();
        page_no.set(0);
    });
    let shown = Memo::new(move |_| table.with(|t| scope::page(t, &query.get(), page_no.get())));
    // Actions seen within 24 h (from the history the page reads every few seconds): a rule
    // whose action is not among them is quiet. Nothing is marked before the history arrives.
    let seen = Memo::new(move |_| ctx.history.with(|h| h.as_ref().map(scope::seen_actions)));
    // The action whose delete is awaiting confirmation.
    let confirming = RwSignal::new(None::<String>);
    view! {
        <section class="card rules" aria-labelledby="rules-title">
            <div class="section-head">
                <h2 id="rules-title">"Rules"</h2>
                <button
                    class="primary"
                    id="new-rule"
                    on:click=move |_| {
                        ctx.editing.set(Some(Editing { mode: EditMode::Create, form: RuleForm::blank() }))
                    }
                >
                    "New rule"
                </button>
            </div>
            <Show
                when=move || !table.with(Vec::is_empty)
                fallback=|| view! { <p class="empty">"No rules yet. Create one with “New rule”."</p> }
            >
                <div class="rules-find" role="search">
                    <label for="rule-search" class="sr-only">"Find rules"</label>
                    <SearchBox id="rule-search" placeholder="Find by action or description" value=query />
                    <span class="rules-count" id="rules-count" role="status">{move || shown.with(|p| p.text.clone())}</span>
                    <span class="pager" hidden=move || shown.with(|p| p.pages <= 1)>
                        <button
                            class="quiet"
                            id="rules-prev"
                            disabled=move || shown.with(|p| p.page == 0)
                            on:click=move |_| page_no.set(shown.with_untracked(|p| p.page.saturating_sub(1)))
                        >
                            "Previous"
                        </button>
                        <span class="page-of" id="rules-page">{move || shown.with(|p| format!("page {} of {}", p.page + 1, p.pages))}</span>
                        <button
                            class="quiet"
                            id="rules-next"
                            disabled=move || shown.with(|p| p.page + 1 >= p.pages)
                            on:click=move |_| page_no.set(shown.with_untracked(|p| p.page + 1))
                        >
                            "Next"
                        </button>
                    </span>
                </div>
                <table class="rules-table">
                    <thead>
                        <tr>
                            <th scope="col">"Action"</th>
                            <th scope="col">"Algorithm"</th>
                            <th scope="col" class="num">"Capacity"</th>
                            <th scope="col">"Rate or window"</th>
                            <th scope="col">"Lease"</th>
                            <th scope="col">"Mode"</th>
                            <th scope="col"><span class="sr-only">"Changes"</span></th>
                        </tr>
                    </thead>
                    <tbody>
                        <For
                            each=move || shown.with(|p| p.rows.clone())
                            key=|row: &RuleRow| (row.action.clone(), row.limit.clone(), row.capacity.clone(), row.mode.clone(), row.algorithm.clone(), row.description.clone(), row.lease.clone())
                            children=move |row: RuleRow| view! { <Row ctx=ctx row=row confirming=confirming seen=seen /> }
                        />
                    </tbody>
                </table>
            </Show>
        </section>
    }
}

#[component]
fn Row(
    ctx: Ctx,
    row: RuleRow,
    confirming: RwSignal<Option<String>>,
    seen: Memo<Option<HashSet<String>>>,
) -> impl IntoView {
    let action = row.action.clone();
    let is_quiet = {
        let action = action.clone();
        move || seen.with(|s| s.as_ref().is_some_and(|s| !s.contains(&action)))
    };
    let is_confirming = {
        let action = action.clone();
        move || confirming.get().as_deref() == Some(action.as_str())
    };
    let edit = {
        let rule = row.rule.clone();
        move |_| {
            ctx.editing.set(Some(Editing {
                mode: EditMode::Edit,
                form: RuleForm::from_rule(&rule),
            }));
        }
    };
    let ask = {
        let action = action.clone();
        move |_| confirming.set(Some(action.clone()))
    };
    let delete = {
        let action = action.clone();
        move |_| {
            let action = action.clone();
            confirming.set(None);
            leptos::task::spawn_local(async move {
                match api::delete_rule(&action).await {
                    Ok(()) => {
                        ctx.rules.update(|body| rules_view::remove(body, &action));
                        ctx.confirm(format!("Deleted the rule for {action}."));
                    }
                    Err(e) => ctx.server_failed(&format!("Could not delete {action}"), &e),
                }
            });
        }
    };
    let add = {
        let rule = row.rule.clone();
        move |_| {
            ctx.editing.set(Some(Editing {
                mode: EditMode::Create,
                form: RuleForm::new_override(&rule),
            }));
        }
    };
    let list = {
        let action = action.clone();
        Memo::new(move |_| ctx.rules.with(|body| overrides_of(body, &action)))
    };
    let description = row.description.clone();
    // A rule a ratelimit config owns is edited in its file: no Edit or Delete (its description names the file).
    let owned = sluice_core::wire::ratelimit::file_owner(&description).is_some();
    view! {
        <tr data-action=action.clone()>
            <th scope="row" data-label="Action">
                <span class="action-name">{action.clone()}</span>
                {(!description.is_empty()).then(|| view! { <span class="desc">{description.clone()}</span> })}
                <span class="quiet-mark" hidden=move || !is_quiet()>{QUIET_TEXT}</span>
            </th>
            <td data-label="Algorithm">{row.algorithm.clone()}</td>
            <td data-label="Capacity" class="num">{row.capacity.clone()}</td>
            <td data-label="Rate or window">{row.limit.clone()}</td>
            <td data-label="Lease" class=if row.lease == "off" { "lease lease-off" } else { "lease" }>{row.lease.clone()}</td>
            <td data-label="Mode"><span class=format!("mode mode-{}", row.mode)>{row.mode.clone()}</span></td>
            <td class="row-actions">
                <Show
                    when=is_confirming
                    fallback=move || {
                        let edit = edit.clone();
                        let ask = ask.clone();
                        let add = add.clone();
                        view! {
                            <button class="edit" hidden=owned on:click=edit>"Edit"</button>
                            <button class="add-override" on:click=add>"Add override"</button>
                            <button class="danger-quiet delete" hidden=owned on:click=ask>"Delete"</button>
                        }
                    }
                >
                    <span class="confirm-text">{move || rules_view::delete_question(list.with(Vec::len))}</span>
                    <button class="danger confirm-delete" on:click=delete.clone()>"Delete"</button>
                    <button class="quiet" on:click=move |_| confirming.set(None)>"Keep"</button>
                </Show>
            </td>
        </tr>
        <tr class="overrides-row" data-overrides-of=action.clone() hidden=move || list.with(Vec::is_empty)>
            <td colspan="7">
                <p class="overrides-title">{format!("Per-key overrides of {action}")}</p>
                <ul class="overrides">
                    <For
                        each=move || list.get()
                        key=|o: &OverrideRow| (o.key.clone(), o.summary.clone(), o.rule.description().to_owned(), rules_view::lease_text(&o.rule))
                        children=move |o: OverrideRow| view! { <Override ctx=ctx row=o /> }
                    />
                </ul>
            </td>
        </tr>
    }
}

/// One override under its rule: the key (as text only), its rule in a line, Edit and Delete
/// (with an inline confirmation).
#[component]
fn Override(ctx: Ctx, row: OverrideRow) -> impl IntoView {
    let confirming = RwSignal::new(false);
    // The question takes the focus when it appears (Enter deletes, Tab reaches Keep).
    let confirm_ref = NodeRef::<leptos::html::Button>::new();
    Effect::new(move |_| {
        if let Some(button) = confirm_ref.get() {
            let _ = button.focus();
        }
    });
    let action = row.rule.action().to_string();
    let key = row.key.clone();
    let edit = {
        let (key, rule) = (key.clone(), row.rule.clone());
        move |_| {
            ctx.editing.set(Some(Editing {
                mode: EditMode::Edit,
                form: RuleForm::from_override(&key, &rule),
            }));
        }
    };
    let delete = {
        let (action, key) = (action.clone(), key.clone());
        move |_| {
            let (action, key) = (action.clone(), key.clone());
            confirming.set(false);
            leptos::task::spawn_local(async move {
                match api::delete_override(&action, &key).await {
                    Ok(()) => {
                        ctx.rules
                            .update(|body| overrides::remove(body, &action, &key));
                        ctx.confirm(format!(
                            "Deleted the override of “{key}”: the rule for {action} applies again."
                        ));
                    }
                    Err(e) => {
                        ctx.server_failed(&format!("Could not delete the override of “{key}”"), &e)
                    }
                }
            });
        }
    };
    let description = row.rule.description().to_owned();
    // `.` and `..` cannot be named in a path from here (see overrides::nameable_in_path).
    let fixed = !overrides::nameable_in_path(&key);
    view! {
        <li class="override" data-key=key.clone()>
            <span class="override-key" title=key.clone()>{key.clone()}</span>
            <span class="override-summary">{row.summary.clone()}</span>
            {(!description.is_empty()).then(|| view! { <span class="desc">{description.clone()}</span> })}
            <span class="override-actions">
                <Show
                    when=move || confirming.get()
                    fallback=move || {
                        let edit = edit.clone();
                        view! {
                            <button class="edit-override" disabled=fixed on:click=edit>"Edit"</button>
                            <button class="danger-quiet delete-override" disabled=fixed on:click=move |_| confirming.set(true)>"Delete"</button>
                        }
                    }
                >
                    <span class="confirm-text">"Delete this override?"</span>
                    <button class="danger confirm-delete-override" node_ref=confirm_ref on:click=delete.clone()>"Delete"</button>
                    <button class="quiet" on:click=move |_| confirming.set(false)>"Keep"</button>
                </Show>
            </span>
        </li>
    }
}
