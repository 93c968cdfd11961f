//! Live funnels: per action with traffic, the most active keys filling and draining, from SSE
//! snapshots (which leave idle actions out: they are counted under the cards).
//! Keys are untrusted text and are only ever put into text nodes and attributes.

use leptos::prelude::*;

use super::reset::ResetButton;
use super::rlqs::RlqsShares;
use super::store_health::StorePanel;
use super::{Ctx, Tab};
use crate::live_view::{cached_denials, live_view, ActionView, FunnelView, TOP_KEYS};
use crate::scope::idle_live_text;

#[component]
pub fn LivePanel(ctx: Ctx) -> impl IntoView {
    let actions = Memo::new(move |_| ctx.levels.with(|l| live_view(l, TOP_KEYS)));
    // The snapshot holds the active actions only; the rules it leaves out are counted.
    let idle = Memo::new(move |_| {
        ctx.levels
            .with(|l| ctx.rules.with(|r| idle_live_text(l, r)))
    });
    view! {
        <section class="card live" aria-labelledby="live-title">
            <div class="section-head">
                <h2 id="live-title">"Live"</h2>
                <p class="hint">"The fullest keys of each action with traffic, updated twice a second while the badge above is green. Denied is the backend's; cached 429s are the filters' own denials, which clients got too."</p>
            </div>
            <StorePanel ctx=ctx />
            <Show
                when=move || !actions.get().is_empty()
                fallback=|| view! { <p class="empty">"No active keys: send traffic through the decision API and its keys show here."</p> }
            >
                <div class="actions-grid">
                    <For
                        each=move || actions.get()
                        key=|a: &ActionView| a.action.clone()
                        children=move |a: ActionView| {
                            let name = a.action.clone();
                            let view_of = Memo::new(move |_| actions.get().into_iter().find(|x| x.action == name));
                            view! { <ActionCard ctx=ctx action=a.action.clone() view=view_of /> }
                        }
                    />
                </div>
            </Show>
            <p class="more" id="live-idle">{move || idle.get()}</p>
            <RlqsShares ctx=ctx tab=Tab::Live key=Signal::derive(|| None) />
        </section>
    }
}

#[component]
fn ActionCard(ctx: Ctx, action: String, view: Memo<Option<ActionView>>) -> impl IntoView {
    // What the last reset on this card removed (kept when its funnel redraws or leaves).
    let reset_result = RwSignal::new(String::new());
    let action = StoredValue::new(action);
    let get =
        move |f: fn(&ActionView) -> String| move || view.get().map(|v| f(&v)).unwrap_or_default();
    let cached = move || {
        ctx.history
            .get()
            .and_then(|h| cached_denials(&h, &action.get_value()))
    };
    view! {
        <article class="action-card" data-action=get(|v| v.action.clone())>
            <header class="action-head">
                <h3 class="action-name">{get(|v| v.action.clone())}</h3>
                <span class="algo">{get(|v| format!("{} · capacity {}", v.algorithm, v.capacity))}</span>
            </header>
            <dl class="rates">
                <div><dt>"allowed"</dt><dd class="allowed-rate">{get(|v| v.allowed_text.clone())}</dd></div>
                <div class:denying=move || view.get().is_some_and(|v| v.denying)>
                    <dt title="Denied by the backend (live)">"denied"</dt><dd class="denied-rate">{get(|v| v.denied_text.clone())}</dd>
                </div>
                // What clients also got: 429s from the filter's denial cache, which never reach the
                // backend (from the history's last complete 10 s step).
                <div class:denying=move || cached().is_some_and(|c| c.any)>
                    <dt title="429s from the filter's denial cache, over the last complete 10 s step">"cached 429s"</dt>
                    <dd class="cached-rate">{move || cached().map(|c| c.rate_text).unwrap_or_else(|| "–".into())}</dd>
                </div>
            </dl>
            <Show
                when=move || view.get().is_some_and(|v| !v.funnels.is_empty())
                fallback=|| view! { <p class="quiet-text">"No active keys."</p> }
            >
                <ul class="funnels">
                    <For
                        each=move || view.get().map(|v| v.funnels).unwrap_or_default()
                        key=|f: &FunnelView| f.key.clone()
                        children=move |f: FunnelView| {
                            let key = f.key.clone();
                            let funnel = Memo::new(move |_| {
                                view.get().and_then(|v| v.funnels.into_iter().find(|x| x.key == key))
                            });
                            let reset = view! { <ResetButton ctx=ctx action=action.get_value() key=f.key.clone() done=reset_result /> };
                            view! { <Funnel key=f.key.clone() funnel=funnel reset=reset.into_any() /> }
                        }
                    />
                </ul>
            </Show>
            <p class="reset-result" role="status">{move || reset_result.get()}</p>
            <p class="more">
                {move || view.get().filter(|v| v.more > 0).map(|v| format!("and {} more keys", v.more)).unwrap_or_default()}
            </p>
        </article>
    }
}

#[component]
fn Funnel(key: String, funnel: Memo<Option<FunnelView>>, reset: AnyView) -> impl IntoView {
    let fill = move || funnel.get().map_or(0.0, |f| f.fill);
    let tone = move || funnel.get().map_or("calm", |f| f.tone.class());
    view! {
        <li class=move || format!("funnel-item {}", tone()) data-key=key.clone() data-level=move || funnel.get().map(|f| format!("{:.3}", f.level)).unwrap_or_default()>
            <div class="vessel-frame"><div
                class="vessel"
                role="meter"
                aria-label=format!("funnel of {key}")
                aria-valuemin="0"
                aria-valuemax=move || funnel.get().map(|f| f.capacity.to_string()).unwrap_or_default()
                aria-valuenow=move || funnel.get().map(|f| format!("{:.1}", f.level)).unwrap_or_default()
            >
                <div class="liquid" style:transform=move || format!("scaleY({:.4})", fill())></div>
            </div></div>
            <div class="funnel-text">
                <span class="key-name" title=key.clone()>{key.clone()}</span>
                <span class="level-text">{move || funnel.get().map(|f| f.level_text).unwrap_or_default()}</span>
                <span class="remaining-text">{move || funnel.get().map(|f| format!("{} left", f.remaining)).unwrap_or_default()}</span>
            </div>
            {reset}
        </li>
    }
}
