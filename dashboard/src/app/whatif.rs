//! The what-if plot: the rule being edited, run over a traffic pattern with sluice-core in the
//! browser. Drawn as inline SVG of fixed proportions, so nothing moves as the numbers change.

use leptos::prelude::*;
use sluice_core::{Params, Span};

use crate::whatif::chart::{Charts, Tick, COUNT_HEIGHT, LEFT, LEVEL_HEIGHT, RIGHT, WIDTH};
use crate::whatif::simulation::{self, Pattern};

/// `baseline`: the rule as saved, when editing one: drawn over the same traffic beside the
/// edited rule, so a change is seen before it is saved.
#[component]
pub fn WhatIf(params: Signal<Option<Params>>, baseline: Option<Params>) -> impl IntoView {
    let pattern = RwSignal::new(Pattern::BurstThenSteady);
    // The offered traffic stays put while the rule changes (so a new capacity or rate shows its
    // effect on the same traffic): it starts at twice the rate of the rule as opened, and the
    // user may type another. Emptied, it follows the current rule.
    let initial = params
        .get_untracked()
        .map(|p| simulation::default_offered_per_s(&p).to_string());
    let offered_text = RwSignal::new(initial.unwrap_or_default());
    let offered = Memo::new(move |_| {
        let typed = offered_text
            .get()
            .trim()
            .parse::<f64>()
            .ok()
            .filter(|r| r.is_finite() && *r >= 0.0);
        match (typed, params.get()) {
            (Some(rate), _) => Some(rate),
            (None, Some(p)) => Some(simulation::default_offered_per_s(&p)),
            (None, None) => None,
        }
    });
    // The span shown stays put too; emptied, it follows the current rule.
    let span_text = RwSignal::new(
        params
            .get_untracked()
            .map(|p| simulation::horizon_text(simulation::auto_horizon_ns(&p)))
            .unwrap_or_default(),
    );
    let span = Memo::new(move |_| {
        let text = span_text.get();
        let text = text.trim();
        if text.is_empty() {
            Ok(None)
        } else {
            Span::parse(text)
                .map(|s| Some(s.nanos()))
                .map_err(|e| e.to_string())
        }
    });
    let cost_text = RwSignal::new(String::new());
    let cost = Memo::new(move |_| simulation::Cost::parse(&cost_text.get()));
    let charts = Memo::new(move |_| {
        let p = params.get()?;
        let rate = offered.get()?;
        let cost = cost.get().ok()?;
        let horizon = span
            .get()
            .ok()
            .flatten()
            .unwrap_or_else(|| simulation::auto_horizon_ns(&p));
        let edited = simulation::simulate_costed(&p, &p, pattern.get(), rate, horizon, cost);
        // Unchanged rules need no second line.
        let saved = baseline
            .filter(|b| *b != p)
            .map(|b| simulation::simulate_costed(&b, &p, pattern.get(), rate, horizon, cost));
        Some(Charts::compared(&edited, saved.as_ref()))
    });
    let comparing =
        move || charts.with(|c| c.as_ref().is_some_and(|c| c.baseline_capacity_y.is_some()));
    let placeholder = move || {
        params
            .get()
            .map_or("twice the rule's rate".to_owned(), |p| {
                simulation::default_offered_per_s(&p).to_string()
            })
    };
    let ticks_x = move |height: f64| {
        move || {
            charts.get().map(|c| {
                c.x_ticks
                    .into_iter()
                    .map(|t| {
                        view! {
                            <text class="tick" x=format!("{:.1}", t.at) y=format!("{:.1}", height - 7.0) text-anchor="middle">
                                {t.label}
                            </text>
                        }
                    })
                    .collect_view()
            })
        }
    };
    let ticks_y = move |pick: fn(&Charts) -> Vec<Tick>| {
        move || {
            charts.get().map(|c| {
                pick(&c)
                    .into_iter()
                    .map(|t| {
                        view! {
                            <line class="grid" x1=format!("{LEFT}") x2=format!("{}", WIDTH - RIGHT) y1=format!("{:.1}", t.at) y2=format!("{:.1}", t.at) />
                            <text class="tick" x=format!("{}", LEFT - 6.0) y=format!("{:.1}", t.at + 4.0) text-anchor="end">
                                {t.label}
                            </text>
                        }
                    })
                    .collect_view()
            })
        }
    };
    view! {
        <aside class="whatif" aria-labelledby="whatif-title">
            <h3 id="whatif-title">"What if"</h3>
            <div class="whatif-controls">
                <div class="field">
                    <label for="whatif-pattern">"Traffic"</label>
                    <select
                        id="whatif-pattern"
                        on:change=move |ev| {
                            if let Some(p) = Pattern::parse(&event_target_value(&ev)) {
                                pattern.set(p);
                            }
                        }
                    >
                        {Pattern::ALL
                            .into_iter()
                            .map(|p| view! { <option value=p.name() selected=move || pattern.get() == p>{p.label()}</option> })
                            .collect_view()}
                    </select>
                </div>
                <div class="field">
                    <label for="whatif-rate">"Offered, per second"</label>
                    <input
                        id="whatif-rate"
                        type="text"
                        inputmode="decimal"
                        autocomplete="off"
                        placeholder=placeholder
                        prop:value=move || offered_text.get()
                        on:input=move |ev| offered_text.set(event_target_value(&ev))
                    />
                </div>
                <WhatifInput id="whatif-span" label="Over" placeholder="auto" text=span_text
                    invalid=Signal::derive(move || span.get().is_err()) />
                <WhatifInput id="whatif-cost" label="Cost per request" placeholder="1" text=cost_text
                    invalid=Signal::derive(move || cost.get().is_err()) />
                <p class="field-error whatif-error" id="whatif-span-error">
                    {move || span.get().err().map(|e| format!("Over: {e}")).unwrap_or_default()}
                </p>
                <p class="field-error whatif-error" id="whatif-cost-error">
                    {move || cost.get().err().map(|e| format!("Cost: {e}")).unwrap_or_default()}
                </p>
            </div>
            <figure class="chart-box">
                <figcaption>
                    <span class="key offered">"offered"</span>
                    <span class="key allowed">"allowed"</span>
                    <span class="key saved" hidden=move || !comparing()>"allowed by the saved rule"</span>
                    " requests so far"
                </figcaption>
                <svg id="whatif-count-chart" class="chart" viewBox=format!("0 0 {WIDTH} {COUNT_HEIGHT}") role="img" aria-label="Requests offered and allowed so far, over time">
                    {ticks_y(|c| c.count_ticks.clone())}
                    {move || charts.get().map(|c| view! {
                        <path class="allowed-area" d=c.allowed_path />
                        <path class="offered-line" d=c.offered_path />
                        {(!c.baseline_allowed_path.is_empty()).then(|| view! { <path class="saved-line" d=c.baseline_allowed_path.clone() /> })}
                    })}
                    {ticks_x(COUNT_HEIGHT)}
                </svg>
            </figure>
            <figure class="chart-box">
                <figcaption>
                    <span class="key level">"funnel level"</span>
                    <span class="key capacity">"capacity"</span>
                    <span class="key saved" hidden=move || !comparing()>"saved rule"</span>
                </figcaption>
                <svg id="whatif-level-chart" class="chart level" viewBox=format!("0 0 {WIDTH} {LEVEL_HEIGHT}") role="img" aria-label="Funnel level over time">
                    {ticks_y(|c| c.level_ticks.clone())}
                    {move || charts.get().map(|c| {
                        let y = format!("{:.1}", c.capacity_y);
                        view! {
                            {c.baseline_capacity_y.map(|b| {
                                let b = format!("{b:.1}");
                                view! { <line class="saved-capacity-line" x1=format!("{LEFT}") x2=format!("{}", WIDTH - RIGHT) y1=b.clone() y2=b /> }
                            })}
                            {(!c.baseline_level_path.is_empty()).then(|| view! { <path class="saved-line" d=c.baseline_level_path.clone() /> })}
                            <line class="capacity-line" x1=format!("{LEFT}") x2=format!("{}", WIDTH - RIGHT) y1=y.clone() y2=y />
                            <path class="level-line" d=c.level_path />
                        }
                    })}
                    {ticks_x(LEVEL_HEIGHT)}
                </svg>
            </figure>
            <p class="summary" id="whatif-summary" aria-live="polite">
                {move || match charts.get() {
                    Some(c) => c.summary,
                    None => "Fix the rule to see what it would do.".to_owned(),
                }}
            </p>
        </aside>
    }
}

/// One text input of the plot's controls whose refusal is shown under them (`{id}-error`).
#[component]
fn WhatifInput(
    id: &'static str,
    label: &'static str,
    placeholder: &'static str,
    text: RwSignal<String>,
    invalid: Signal<bool>,
) -> impl IntoView {
    view! {
        <div class="field">
            <label for=id>{label}</label>
            <input
                id=id
                type="text"
                autocomplete="off"
                spellcheck="false"
                placeholder=placeholder
                aria-describedby=format!("{id}-error")
                aria-invalid=move || invalid.get().to_string()
                prop:value=move || text.get()
                on:input=move |ev| text.set(event_target_value(&ev))
            />
        </div>
    }
}
