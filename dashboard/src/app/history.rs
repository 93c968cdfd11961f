//! The history view: per action, the five outcomes over the last 5 minutes or hour as a stacked
//! chart with the values under the pointer, and a warning panel when requests passed unchecked.

use leptos::prelude::*;
use sluice_core::wire::HistoryRange;

use super::{Ctx, Tab};
use crate::history::{
    charts, step_after, unchecked, ActionChart, Outcome, BOTTOM, HEIGHT, LEFT, RIGHT, WIDTH,
};
use crate::scope::{history_with_quiet, more_text};

#[component]
pub fn HistoryPanel(ctx: Ctx) -> impl IntoView {
    // Charts are laid out only while the view shows (the history is read on every view: the
    // rules table and the tab's mark use it).
    // The history holds the active actions only (`scope=active`); a few quiet rules are drawn
    // back by name and the rest counted.
    let filled = Memo::new(move |_| {
        if ctx.tab.get() != Tab::History {
            return (Vec::new(), 0);
        }
        ctx.history.with(|h| match h {
            Some(h) => ctx.rules.with(|rules| {
                let (full, more) = history_with_quiet(h, rules);
                // The actions with traffic first, the quiet ones after them (each by name).
                let mut drawn = charts(&full);
                drawn.sort_by_key(|c| c.quiet.is_some());
                (drawn, more)
            }),
            None => (Vec::new(), 0),
        })
    });
    let all = Memo::new(move |_| filled.with(|(charts, _)| charts.clone()));
    let failures = Memo::new(move |_| ctx.history.get().map(|h| unchecked(&h)).unwrap_or_default());
    let range_button = move |range: HistoryRange, id: &'static str, label: &'static str| {
        view! {
            <button
                class="range"
                id=id
                aria-pressed=move || (ctx.range.get() == range).to_string()
                on:click=move |_| ctx.range.set(range)
            >
                {label}
            </button>
        }
    };
    view! {
        <section class="card history" aria-labelledby="history-title">
            <div class="section-head">
                <h2 id="history-title">"History"</h2>
                <div class="range-toggle" role="group" aria-label="Range">
                    {range_button(HistoryRange::FiveMinutes, "range-5m", "5 min")}
                    {range_button(HistoryRange::OneHour, "range-1h", "1 hour")}
                </div>
            </div>
            <p class="hint">
                "Requests per 10 s by outcome, from every replica and every Envoy's reports; times in UTC; the hatched step at the right is still filling. Refreshed every few seconds."
            </p>
            <div class="unchecked-panel" id="unchecked-panel" role="alert" hidden=move || failures.get().is_empty()>
                <h3>"Requests passed unchecked"</h3>
                <p>
                    "Callouts to sluice failed (timed out or errored) and the filter's failure mode let these requests through without a decision:"
                </p>
                <ul>
                    {move || {
                        failures
                            .get()
                            .into_iter()
                            .map(|u| {
                                view! {
                                    <li
                                        class="unchecked-item"
                                        data-action=u.action.clone()
                                        data-passed-unchecked=u.passed_unchecked.to_string()
                                        data-failed=u.failed.to_string()
                                    >
                                        {u.text}
                                    </li>
                                }
                            })
                            .collect_view()
                    }}
                </ul>
            </div>
            <p class="field-error history-error" id="history-error">
                {move || ctx.history_error.get().map(|e| format!("Could not read the history: {e}")).unwrap_or_default()}
            </p>
            <figure class="legend" aria-hidden="true">
                {Outcome::ALL
                    .into_iter()
                    .map(|o| view! { <span class=format!("key {}", o.class())>{o.label()}</span> })
                    .collect_view()}
            </figure>
            <Show
                when=move || !all.get().is_empty()
                fallback=|| view! { <p class="empty">"No history yet: rules and traffic show up here within 10 s."</p> }
            >
                <div class="history-grid">
                    <For
                        each=move || all.get()
                        key=|c: &ActionChart| c.action.clone()
                        children=move |c: ActionChart| {
                            let name = c.action.clone();
                            let chart = Memo::new(move |_| all.get().into_iter().find(|x| x.action == name));
                            view! { <HistoryCard chart=chart /> }
                        }
                    />
                </div>
            </Show>
            <p class="more" id="history-more">
                {move || filled.with(|(_, more)| more_text(*more, "quiet rules (no traffic in 24 h), not drawn"))}
            </p>
        </section>
    }
}

#[component]
fn HistoryCard(chart: Memo<Option<ActionChart>>) -> impl IntoView {
    let hovered = RwSignal::new(None::<usize>);
    let text = move |f: fn(&ActionChart) -> String| {
        move || chart.with(|c| c.as_ref().map(f).unwrap_or_default())
    };
    let readout = move || {
        chart.with(|c| {
            let Some(c) = c else { return String::new() };
            hovered
                .get()
                .and_then(|i| c.columns.get(i))
                .map_or_else(|| c.totals_text.clone(), |col| col.readout.clone())
        })
    };
    view! {
        <article
            class="history-card"
            data-action=text(|c| c.action.clone())
            data-allowed=text(|c| c.totals.allowed.to_string())
            data-leased=text(|c| c.totals.leased.to_string())
            data-denied=text(|c| c.totals.denied.to_string())
            data-cached-denied=text(|c| c.totals.cached_denied.to_string())
            data-passed-unchecked=text(|c| c.totals.passed_unchecked.to_string())
        >
            <header class="action-head">
                <h3 class="action-name">{text(|c| c.action.clone())}</h3>
                <span class="quiet-mark" hidden=move || chart.with(|c| c.as_ref().is_none_or(|c| c.quiet.is_none()))>
                    {text(|c| c.quiet.clone().unwrap_or_default())}
                </span>
            </header>
            <svg
                class="chart history-chart"
                viewBox=format!("0 0 {WIDTH} {HEIGHT}")
                role="img"
                aria-label=text(|c| format!("{}: requests per 10 s by outcome", c.action))
                tabindex="0"
                on:mouseleave=move |_| hovered.set(None)
                on:blur=move |_| hovered.set(None)
                // The keyboard reaches the same values: arrows, Home, End; Escape for the totals.
                on:keydown=move |ev: leptos::ev::KeyboardEvent| {
                    let len = chart.with(|c| c.as_ref().map_or(0, |c| c.columns.len()));
                    if let Some(next) = step_after(hovered.get_untracked(), &ev.key(), len) {
                        ev.prevent_default();
                        hovered.set(next);
                    }
                }
            >
                {move || {
                    chart
                        .get()
                        .map(|c| {
                            let grid = c
                                .y_ticks
                                .iter()
                                .map(|t| {
                                    view! {
                                        <line class="grid" x1=format!("{LEFT}") x2=format!("{}", WIDTH - RIGHT) y1=format!("{:.1}", t.at) y2=format!("{:.1}", t.at) />
                                        <text class="tick" x=format!("{}", LEFT - 6.0) y=format!("{:.1}", t.at + 4.0) text-anchor="end">{t.label.clone()}</text>
                                    }
                                })
                                .collect_view();
                            let layers = c
                                .layers
                                .iter()
                                .filter(|l| !l.path.is_empty())
                                .map(|l| view! { <path class=format!("layer {}", l.outcome.class()) d=l.path.clone() /> })
                                .collect_view();
                            let x_ticks = c
                                .x_ticks
                                .iter()
                                .map(|t| {
                                    view! {
                                        <text class="tick" x=format!("{:.1}", t.at) y=format!("{:.1}", HEIGHT - 7.0) text-anchor="middle">{t.label.clone()}</text>
                                    }
                                })
                                .collect_view();
                            let columns = c
                                .columns
                                .iter()
                                .enumerate()
                                .map(|(i, col)| {
                                    // The step still filling is hatched: its counts are so far.
                                    let partial = col.partial.then(|| view! {
                                        <rect class="partial-step" x=format!("{:.2}", col.x) y="0" width=format!("{:.2}", col.width) height=format!("{:.1}", HEIGHT - BOTTOM)>
                                            <title>"this step is still filling"</title>
                                        </rect>
                                    });
                                    view! {
                                        {partial}
                                        <rect
                                            class="column"
                                            data-step=i.to_string()
                                            x=format!("{:.2}", col.x)
                                            y="0"
                                            width=format!("{:.2}", col.width)
                                            height=format!("{:.1}", HEIGHT - BOTTOM)
                                            on:mouseenter=move |_| hovered.set(Some(i))
                                        />
                                    }
                                })
                                .collect_view();
                            view! { {grid} {layers} {x_ticks} {columns} }
                        })
                }}
                // One band over the step under the pointer (drawn last, it lets the pointer through).
                {move || {
                    let band = hovered.get().and_then(|i| chart.with(|c| c.as_ref().and_then(|c| c.columns.get(i).map(|col| (col.x, col.width)))));
                    band.map(|(x, width)| {
                        view! {
                            <rect class="hover-band" x=format!("{x:.2}") y="0" width=format!("{width:.2}") height=format!("{:.1}", HEIGHT - BOTTOM) />
                        }
                    })
                }}
            </svg>
            <p class="readout" aria-live="polite">{readout}</p>
        </article>
    }
}
