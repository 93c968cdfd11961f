//! The what-if plot: the rule being edited, run over a traffic pattern with sluice-core in the
//! browser. Drawn as inline SVG of fixed proportions, so nothing moves as the numbers change.

use leptos::prelude::*;
use sluice_core::Params;

use crate::plot::{self, Charts, Pattern, LEFT, LEVEL_HEIGHT, RATE_HEIGHT, WIDTH};

#[component]
pub fn WhatIf(params: Signal<Option<Params>>) -> impl IntoView {
    let pattern = RwSignal::new(Pattern::BurstThenSteady);
    // The offered traffic stays put while the rule changes (so a new capacity or rate shows its
    // effect on the same traffic): it starts at twice the rate of the rule as opened, and the
    // user may type another. Emptied, it follows the current rule.
    let initial = params.get_untracked().map(|p| plot::default_offered_per_s(&p).to_string());
    let offered_text = RwSignal::new(initial.unwrap_or_default());
    let offered = Memo::new(move |_| {
        let typed = offered_text.get().trim().parse::<f64>().ok().filter(|r| r.is_finite() && *r >= 0.0);
        match (typed, params.get()) {
            (Some(rate), _) => Some(rate),
            (None, Some(p)) => Some(plot::default_offered_per_s(&p)),
            (None, None) => None,
        }
    });
    let charts = Memo::new(move |_| {
        let p = params.get()?;
        let rate = offered.get()?;
        Some(Charts::new(&plot::simulate(&p, pattern.get(), rate)))
    });
    let placeholder = move || {
        params.get().map_or("twice the rule's rate".to_owned(), |p| plot::default_offered_per_s(&p).to_string())
    };
    let ticks_x = move |height: f64| {
        move || {
            charts.get().map(|c| {
                c.x_ticks
                    .into_iter()
                    .map(|t| {
                        view! {
                            <text class="tick" x=format!("{:.1}", t.at) y=format!("{:.1}", height - 6.0) text-anchor="middle">
                                {t.label}
                            </text>
                        }
                    })
                    .collect_view()
            })
        }
    };
    let ticks_y = move |pick: fn(&Charts) -> Vec<plot::Tick>| {
        move || {
            charts.get().map(|c| {
                pick(&c)
                    .into_iter()
                    .map(|t| {
                        view! {
                            <line class="grid" x1=format!("{LEFT}") x2=format!("{}", WIDTH - 8.0) y1=format!("{:.1}", t.at) y2=format!("{:.1}", t.at) />
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
            </div>
            <figure class="chart-box">
                <figcaption>
                    <span class="key offered">"offered"</span>
                    <span class="key allowed">"allowed"</span>
                    " requests per second"
                </figcaption>
                <svg id="whatif-rate-chart" class="chart" viewBox=format!("0 0 {WIDTH} {RATE_HEIGHT}") role="img" aria-label="Requests offered and allowed per second over time">
                    {ticks_y(|c| c.rate_ticks.clone())}
                    <path class="allowed-area" d=move || charts.get().map(|c| c.allowed_path).unwrap_or_default() />
                    <path class="offered-line" d=move || charts.get().map(|c| c.offered_path).unwrap_or_default() />
                    {ticks_x(RATE_HEIGHT)}
                </svg>
            </figure>
            <figure class="chart-box">
                <figcaption>
                    <span class="key level">"funnel level"</span>
                    <span class="key capacity">"capacity"</span>
                </figcaption>
                <svg id="whatif-level-chart" class="chart level" viewBox=format!("0 0 {WIDTH} {LEVEL_HEIGHT}") role="img" aria-label="Funnel level over time">
                    {ticks_y(|c| c.level_ticks.clone())}
                    <line
                        class="capacity-line"
                        x1=format!("{LEFT}")
                        x2=format!("{}", WIDTH - 8.0)
                        y1=move || charts.get().map(|c| format!("{:.1}", c.capacity_y)).unwrap_or_default()
                        y2=move || charts.get().map(|c| format!("{:.1}", c.capacity_y)).unwrap_or_default()
                    />
                    <path class="level-line" d=move || charts.get().map(|c| c.level_path).unwrap_or_default() />
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
