//! The rule editor: fields follow the algorithm, messages come from sluice-core next to their
//! field, server refusals are shown the same way, and the what-if plot follows every keystroke.

use std::collections::HashSet;

use leptos::prelude::*;
use sluice_core::{Algorithm, Mode};
use wasm_bindgen::JsCast;

use super::{api, whatif::WhatIf, Ctx, Editing};
use crate::editor::{EditMode, Field, InputError, RuleForm};
use crate::overrides;
use crate::rule_change::{big_changes, BigChange};
use crate::rules_view;

fn focus(id: &str) {
    if let Some(element) = document().get_element_by_id(id) {
        if let Ok(element) = element.dyn_into::<web_sys::HtmlElement>() {
            let _ = element.focus();
        }
    }
}

#[component]
pub fn Editor(ctx: Ctx, editing: Editing) -> impl IntoView {
    let mode = editing.mode;
    // An override of one key (its action's rule exists; the action is fixed).
    let is_override = editing.form.key.is_some();
    let form = RwSignal::new(editing.form.clone());
    let touched = RwSignal::new(HashSet::<Field>::new());
    let attempted = RwSignal::new(false);
    let saving = RwSignal::new(false);
    // An override may start its key fresh: what the old rule's state left is reset with it.
    let fresh = RwSignal::new(false);
    let server_error = RwSignal::new(None::<InputError>);
    // Every field's error at once (sluice-core's words, the server's).
    let checked = Memo::new(move |_| {
        let form = form.get();
        let existing = if is_override {
            ctx.rules
                .with(|r| overrides::keys_of(r, form.action.trim()))
        } else {
            ctx.rules.with(rules_view::actions)
        };
        form.validate_all(mode, &existing)
    });
    let params = Memo::new(move |_| form.get().plot_params());
    // The rule as saved, when editing one: overlaid on the what-if plot, and what a save is
    // compared with before it goes out.
    let saved = match mode {
        EditMode::Edit => editing.form.validate(EditMode::Edit, &[]).ok(),
        EditMode::Create => None,
    };
    // A new override is drawn against its action's rule: what the key gets instead.
    let baseline = match (&saved, is_override) {
        (Some(rule), _) => Some(rule.params()),
        (None, true) => ctx.rules.with_untracked(|body| {
            body.rules
                .iter()
                .find(|r| r.action().as_str() == editing.form.action)
                .map(|r| r.params())
        }),
        (None, false) => None,
    };
    // Changes by more than 10× waiting for the operator's word.
    let confirming = RwSignal::new(None::<(sluice_core::Rule, Vec<BigChange>)>);
    // The message next to `field`: the server's refusal until the field changes, else
    // sluice-core's, once the field was touched or a save was tried.
    let message = move |field: Field| {
        move || {
            // Algorithm and mode are pickers without a message line: theirs go to the form's.
            let shown_at = |f: Field| match f {
                Field::Algorithm | Field::Mode => Field::Rule,
                other => other,
            };
            if let Some(e) = server_error.get().filter(|e| shown_at(e.field) == field) {
                return e.message;
            }
            let Err(errors) = checked.get() else {
                return String::new();
            };
            let shown = |e: &&InputError| attempted.get() || touched.get().contains(&e.field);
            let mine: Vec<String> = errors
                .iter()
                .filter(|e| shown_at(e.field) == field)
                .filter(shown)
                .map(|e| e.message.clone())
                .collect();
            if !mine.is_empty() {
                return mine.join("; ");
            }
            // After a refused save, the form's line counts what needs fixing.
            if field == Field::Rule && attempted.get() && errors.len() > 1 {
                return format!("{} fields need a fix before saving.", errors.len());
            }
            String::new()
        }
    };
    let edit = move |field: Field, change: fn(&mut RuleForm, String)| {
        move |ev: leptos::ev::Event| {
            let value = event_target_value(&ev);
            form.update(|f| change(f, value));
            touched.update(|t| {
                t.insert(field);
            });
            server_error.set(None);
            confirming.set(None);
        }
    };
    let store = move |rule: sluice_core::Rule| {
        confirming.set(None);
        saving.set(true);
        let key = form.with_untracked(|f| f.key.clone());
        leptos::task::spawn_local(async move {
            let action = rule.action().to_string();
            let sent = match &key {
                Some(key) => api::put_override(key, &rule, fresh.get_untracked()).await,
                None => api::put_rule(&rule).await,
            };
            match sent {
                Ok(stored) => {
                    match &key {
                        Some(key) => {
                            ctx.rules
                                .update(|body| overrides::upsert(body, key, stored));
                            ctx.confirm(format!("Saved the override of “{key}” on {action}."));
                        }
                        None => {
                            ctx.rules.update(|body| rules_view::upsert(body, stored));
                            ctx.confirm(format!("Saved the rule for {action}."));
                        }
                    }
                    ctx.editing.set(None);
                }
                Err(e) if e.is_unauthorized() => ctx.server_failed("Could not save", &e),
                Err(e) => {
                    let field_error = InputError::from_server(&e);
                    focus(field_error.field.id());
                    server_error.set(Some(field_error));
                    ctx.fail(format!("The server refused the rule: {}", e.message));
                }
            }
            saving.set(false);
        });
    };
    let save = move |ev: leptos::ev::SubmitEvent| {
        ev.prevent_default();
        if saving.get_untracked() {
            return;
        }
        attempted.set(true);
        let rule = match checked.get_untracked() {
            Ok(rule) => rule,
            Err(errors) => {
                if let Some(first) = errors.first() {
                    focus(first.field.id());
                }
                return;
            }
        };
        let changes = saved
            .as_ref()
            .map(|before| big_changes(before, &rule))
            .unwrap_or_default();
        if changes.is_empty() {
            store(rule);
        } else {
            confirming.set(Some((rule, changes)));
            // The safe answer has the focus: Enter twice must not save a 20x change. After the
            // question is drawn (a hidden button cannot take the focus).
            set_timeout(|| focus("keep-editing"), std::time::Duration::ZERO);
        }
    };
    let cancel = move |_| ctx.editing.set(None);
    let title = match (mode, &editing.form.key) {
        (EditMode::Create, None) => "New rule".to_owned(),
        (EditMode::Edit, None) => format!("Edit rule “{}”", editing.form.action),
        (EditMode::Create, Some(_)) => format!("New override on “{}”", editing.form.action),
        (EditMode::Edit, Some(key)) => {
            format!("Edit override of “{key}” on “{}”", editing.form.action)
        }
    };
    let shows = move |field: Field| move || !form.get().shows(field);

    view! {
        <section class="card editor" aria-labelledby="editor-title">
            <div class="section-head">
                <h2 id="editor-title">{title}</h2>
            </div>
            <div class="editor-grid">
                <form class="rule-form" id="rule-form" on:submit=save novalidate>
                    <TextField
                        field=Field::Action
                        label="Action"
                        hint="letters, digits, _ . : -"
                        value=Signal::derive(move || form.get().action)
                        message=Signal::derive(message(Field::Action))
                        on_input=edit(Field::Action, |f, v| f.action = v)
                        readonly=mode == EditMode::Edit || is_override
                    />
                    <div hidden=shows(Field::Key)>
                        <TextField
                            field=Field::Key
                            label="Key"
                            hint="as Live and Keys show it, 1–128 bytes"
                            value=Signal::derive(move || form.get().key.unwrap_or_default())
                            message=Signal::derive(message(Field::Key))
                            on_input=edit(Field::Key, |f, v| f.key = Some(v))
                            readonly=mode == EditMode::Edit
                        />
                    </div>
                    <div class="field">
                        <label for=Field::Algorithm.id()>"Algorithm"</label>
                        <select
                            id=Field::Algorithm.id()
                            on:change=edit(Field::Algorithm, |f, v| {
                                if let Some(a) = Algorithm::parse(&v) {
                                    f.algorithm = a;
                                }
                            })
                        >
                            {Algorithm::ALL
                                .into_iter()
                                .map(|a| {
                                    view! {
                                        <option value=a.name() selected=move || form.get().algorithm == a>
                                            {a.name()}
                                        </option>
                                    }
                                })
                                .collect_view()}
                        </select>
                        <p class="field-hint" id="rule-algorithm-hint">{move || algorithm_hint(form.get().algorithm)}</p>
                    </div>
                    <TextField
                        field=Field::Capacity
                        label="Capacity"
                        hint="burst from idle"
                        numeric=true
                        value=Signal::derive(move || form.get().capacity)
                        message=Signal::derive(message(Field::Capacity))
                        on_input=edit(Field::Capacity, |f, v| f.capacity = v)
                    />
                    <div class="pair" hidden=shows(Field::RateCount)>
                        <TextField
                            field=Field::RateCount
                            label="Rate: count"
                            hint=""
                            numeric=true
                            value=Signal::derive(move || form.get().rate_count)
                            message=Signal::derive(message(Field::RateCount))
                            on_input=edit(Field::RateCount, |f, v| f.rate_count = v)
                        />
                        <TextField
                            field=Field::RatePeriod
                            label="per"
                            hint="e.g. 60s"
                            value=Signal::derive(move || form.get().rate_period)
                            message=Signal::derive(message(Field::RatePeriod))
                            on_input=edit(Field::RatePeriod, |f, v| f.rate_period = v)
                        />
                    </div>
                    <div hidden=shows(Field::Window)>
                        <TextField
                            field=Field::Window
                            label="Window"
                            hint="e.g. 60s, 5m, 1h"
                            value=Signal::derive(move || form.get().window)
                            message=Signal::derive(message(Field::Window))
                            on_input=edit(Field::Window, |f, v| f.window = v)
                        />
                    </div>
                    <div class="field" hidden=shows(Field::Calendar)>
                        <label for=Field::Calendar.id()>"Calendar"</label>
                        <select
                            id=Field::Calendar.id()
                            on:change=edit(Field::Calendar, |f, v| f.calendar = v)
                        >
                            {[("", "none: the window above"), ("day", "day (from midnight)"), ("week", "week (from Monday)"), ("month", "month (from the 1st)")]
                                .into_iter()
                                .map(|(unit, label)| {
                                    view! {
                                        <option value=unit selected=move || form.get().calendar == unit>
                                            {label}
                                        </option>
                                    }
                                })
                                .collect_view()}
                        </select>
                        <p class="field-hint">"budgets over calendar periods"</p>
                        <p class="field-error" id="rule-calendar-error">{message(Field::Calendar)}</p>
                    </div>
                    <div hidden=shows(Field::Zone)>
                        <TextField
                            field=Field::Zone
                            label="Zone"
                            hint="UTC, an offset like +08:00, or a zone like Europe/Paris"
                            value=Signal::derive(move || form.get().zone)
                            message=Signal::derive(message(Field::Zone))
                            on_input=edit(Field::Zone, |f, v| f.zone = v)
                        />
                    </div>
                    <div class="field plain">
                        <label for=Field::Mode.id()>"Mode"</label>
                        <select
                            id=Field::Mode.id()
                            on:change=edit(Field::Mode, |f, v| {
                                f.mode = if v == "shadow" { Mode::Shadow } else { Mode::Enforce }
                            })
                        >
                            <option value="enforce" selected=move || form.get().mode == Mode::Enforce>
                                "enforce: deny over the limit"
                            </option>
                            <option value="shadow" selected=move || form.get().mode == Mode::Shadow>
                                "shadow: report only, never deny"
                            </option>
                        </select>
                    </div>
                    <fieldset class="lease-set">
                        <legend class="sr-only">"Lease"</legend>
                        <label class="check">
                            <input
                                type="checkbox"
                                id="rule-lease-on"
                                prop:checked=move || form.get().lease_on
                                on:change=move |ev| {
                                    let on = event_target_checked(&ev);
                                    form.update(|f| f.lease_on = on);
                                    server_error.set(None);
                                    confirming.set(None);
                                }
                            />
                            " Lease quota to Envoy"
                            <span class="label-hint">" off: every request decided exactly"</span>
                        </label>
                        <div class="pair" hidden=shows(Field::LeaseMax)>
                            <TextField
                                field=Field::LeaseMax
                                label="Lease: max"
                                hint="units per grant"
                                numeric=true
                                value=Signal::derive(move || form.get().lease_max)
                                message=Signal::derive(message(Field::LeaseMax))
                                on_input=edit(Field::LeaseMax, |f, v| f.lease_max = v)
                            />
                            <TextField
                                field=Field::LeaseTtl
                                label="for"
                                hint="ttl, e.g. 1s"
                                value=Signal::derive(move || form.get().lease_ttl)
                                message=Signal::derive(message(Field::LeaseTtl))
                                on_input=edit(Field::LeaseTtl, |f, v| f.lease_ttl = v)
                            />
                        </div>
                    </fieldset>
                    <div class="field">
                        <label for=Field::Description.id()>"Description"</label>
                        <textarea
                            id=Field::Description.id()
                            rows="2"
                            aria-describedby="rule-description-error"
                            prop:value=move || form.get().description
                            on:input=edit(Field::Description, |f, v| f.description = v)
                        ></textarea>
                        <p class="field-error" id="rule-description-error">{message(Field::Description)}</p>
                    </div>
                    <Show when=move || is_override>
                        <label class="check" for="override-fresh">
                            <input
                                type="checkbox"
                                id="override-fresh"
                                prop:checked=move || fresh.get()
                                on:change=move |ev| fresh.set(event_target_checked(&ev))
                            />
                            " Start the key fresh (reset its state on this action, so it gets the override's whole capacity now)"
                        </label>
                    </Show>
                    <p class="field-error form-error" id="rule-form-error" role="alert">{message(Field::Rule)}</p>
                    <div class="confirm-change" id="confirm-change" role="alertdialog" aria-labelledby="confirm-change-title" hidden=move || confirming.get().is_none()>
                        <p id="confirm-change-title"><strong>"A big change: save it?"</strong></p>
                        <ul>
                            {move || {
                                confirming
                                    .get()
                                    .map(|(_, changes)| {
                                        changes
                                            .into_iter()
                                            .map(|c| view! { <li class="big-change" data-what=c.what>{c.text}</li> })
                                            .collect_view()
                                    })
                            }}
                        </ul>
                        <div class="form-actions">
                            <button
                                type="button"
                                class="danger"
                                id="confirm-save"
                                on:click=move |_| {
                                    if let Some((rule, _)) = confirming.get_untracked() {
                                        store(rule);
                                    }
                                }
                            >
                                "Save anyway"
                            </button>
                            <button type="button" class="quiet" id="keep-editing" on:click=move |_| confirming.set(None)>
                                "Keep editing"
                            </button>
                        </div>
                    </div>
                    <div class="form-actions">
                        <button type="submit" class="primary" id="save-rule" disabled=move || saving.get()>
                            {move || match (saving.get(), is_override) {
                                (true, _) => "Saving…",
                                (false, false) => "Save rule",
                                (false, true) => "Save override",
                            }}
                        </button>
                        <button type="button" class="quiet" id="cancel-edit" on:click=cancel>"Cancel"</button>
                    </div>
                </form>
                <WhatIf params=params.into() baseline=baseline />
            </div>
        </section>
    }
}

fn algorithm_hint(algorithm: Algorithm) -> &'static str {
    match algorithm {
        Algorithm::Gcra => "exact, one timestamp per key (redis-cell's CL.THROTTLE)",
        Algorithm::LeakyBucket => "the funnel: fills per request, leaks continuously",
        Algorithm::TokenBucket => "tokens refill continuously",
        Algorithm::FixedWindow => "one counter per clock-aligned window; 2× bursts at edges",
        Algorithm::SlidingLog => "exact, one entry per request (capacity ≤ 10000)",
        Algorithm::SlidingWindow => "two counters, previous window weighted",
    }
}

#[component]
fn TextField<F>(
    field: Field,
    label: &'static str,
    hint: &'static str,
    value: Signal<String>,
    message: Signal<String>,
    on_input: F,
    #[prop(optional)] numeric: bool,
    #[prop(optional)] readonly: bool,
) -> impl IntoView
where
    F: Fn(leptos::ev::Event) + 'static,
{
    let id = field.id();
    let error_id = format!("{id}-error");
    let hint_id = format!("{id}-hint");
    view! {
        <div class="field">
            <div class="label-row">
                <label for=id>{label}</label>
                <span class="label-hint" id=hint_id.clone()>{hint}</span>
            </div>
            <input
                id=id
                type="text"
                inputmode=if numeric { "numeric" } else { "text" }
                autocomplete="off"
                spellcheck="false"
                readonly=readonly
                aria-describedby=format!("{hint_id} {error_id}")
                aria-invalid=move || (!message.get().is_empty()).to_string()
                prop:value=move || value.get()
                on:input=on_input
            />
            <p class="field-error" id=error_id.clone()>{move || message.get()}</p>
        </div>
    }
}
