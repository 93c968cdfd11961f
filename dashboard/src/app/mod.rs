//! The Leptos UI (wasm32 only). Components draw the plain models of the crate; state lives in a
//! few signals in [`Ctx`], fed by the admin API and its SSE stream.

mod api;
mod audit;
mod editor;
mod events;
mod history;
mod keys;
mod live_view;
mod reset;
mod rlqs;
mod rules_view;
mod search_box;
mod signin;
mod store_health;
mod whatif;

use std::time::Duration;

use leptos::prelude::*;

use sluice_core::wire::{HistoryBody, HistoryRange, LevelsBody, RulesBody};

use crate::api::ServerError;
use crate::editor::{EditMode, RuleForm};
use crate::freshness::{badge_text, Freshness};

/// Mounts the page.
pub fn start() {
    leptos::mount::mount_to_body(App);
}

/// Where sign-in stands.
#[derive(Debug, Clone, PartialEq)]
pub enum Auth {
    /// Asking the backend whether the cookie is still good.
    Checking,
    /// Showing the sign-in form, with a message if there is one.
    SignedOut(Option<String>),
    /// Signed in.
    SignedIn,
}

/// The SSE connection's state, shown in the header.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Link {
    /// Opening or reopening.
    Connecting,
    /// Receiving.
    Live,
    /// Closed; a check is scheduled.
    Lost,
}

/// The two main views.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Tab {
    /// Rules table and editor.
    Rules,
    /// Live funnels.
    Live,
    /// What happened over the last 5 minutes or hour, and what passed unchecked.
    History,
    /// One key on every action; the keys denied most.
    Keys,
    /// Every recorded change: rules, overrides, resets.
    Audit,
}

/// The editor's starting point.
#[derive(Debug, Clone, PartialEq)]
pub struct Editing {
    /// New or existing rule.
    pub mode: EditMode,
    /// The form's initial contents.
    pub form: RuleForm,
}

/// A passing message (an error or a confirmation), shown as a toast so nothing moves.
#[derive(Debug, Clone, PartialEq)]
pub struct Notice {
    /// Errors stay until dismissed; confirmations fade.
    pub error: bool,
    /// The text.
    pub text: String,
}

/// The page's shared state: all signals, so it is `Copy` and moves into closures freely.
#[derive(Clone, Copy)]
pub struct Ctx {
    /// Sign-in state.
    pub auth: RwSignal<Auth>,
    /// The latest rules.
    pub rules: RwSignal<RulesBody>,
    /// The latest level snapshot.
    pub levels: RwSignal<LevelsBody>,
    /// SSE state.
    pub link: RwSignal<Link>,
    /// Which view shows.
    pub tab: RwSignal<Tab>,
    /// The open editor, if any.
    pub editing: RwSignal<Option<Editing>>,
    /// The current toast.
    pub notice: RwSignal<Option<Notice>>,
    /// The latest history (also marks the rules whose action saw no traffic in 24 h).
    pub history: RwSignal<Option<HistoryBody>>,
    /// Why the last history read failed, if it did.
    pub history_error: RwSignal<Option<String>>,
    /// The range the history view shows.
    pub range: RwSignal<HistoryRange>,
    /// The key the one-user view looks up (set by its search box or a top-denied link).
    pub key: RwSignal<Option<String>>,
    /// When the event stream last said anything (browser clock, ms): the badge's freshness.
    pub last_event: RwSignal<Option<f64>>,
    /// The browser clock, ticked every second, so "updated N s ago" counts on its own.
    pub clock: RwSignal<f64>,
    /// The admin identity this page is signed in as (`GET /v1/session`), shown in the header.
    pub me: RwSignal<Option<String>>,
}

/// The browser's clock, in ms since the epoch.
pub fn now_ms() -> f64 {
    web_sys::js_sys::Date::now()
}

impl Ctx {
    fn new() -> Ctx {
        Ctx {
            auth: RwSignal::new(Auth::Checking),
            rules: RwSignal::new(RulesBody::default()),
            levels: RwSignal::new(LevelsBody::default()),
            link: RwSignal::new(Link::Connecting),
            tab: RwSignal::new(Tab::Rules),
            editing: RwSignal::new(None),
            notice: RwSignal::new(None),
            history: RwSignal::new(None),
            history_error: RwSignal::new(None),
            range: RwSignal::new(HistoryRange::FiveMinutes),
            key: RwSignal::new(None),
            last_event: RwSignal::new(None),
            clock: RwSignal::new(now_ms()),
            me: RwSignal::new(None),
        }
    }

    /// Notes that the event stream said something just now.
    pub fn heard(self) {
        self.last_event.set(Some(now_ms()));
    }

    /// Reads the history for the chosen range (every few seconds while signed in, and at once
    /// when the range changes). A session that ended signs out; any other failure is shown in
    /// the history view, not as a toast every few seconds.
    pub fn refresh_history(self) {
        if self.auth.get_untracked() != Auth::SignedIn {
            return;
        }
        let range = self.range.get_untracked();
        leptos::task::spawn_local(async move {
            match api::history(range).await {
                // An answer for a range no longer chosen is dropped (the next one is on its way).
                Ok(body) if body.range == self.range.get_untracked() => {
                    self.history.set(Some(body));
                    self.history_error.set(None);
                }
                Ok(_) => {}
                Err(e) if e.is_unauthorized() => self.server_failed("History", &e),
                Err(e) => self.history_error.set(Some(e.message)),
            }
        });
    }

    /// Shows a rules snapshot. Snapshots come in order on one stream (and a restarted backend
    /// may start its versions again), so the latest one always wins.
    pub fn apply_rules(self, body: RulesBody) {
        self.rules.set(body);
    }

    /// Shows an error until dismissed.
    pub fn fail(self, text: String) {
        self.notice.set(Some(Notice { error: true, text }));
    }

    /// Shows a confirmation for a few seconds.
    pub fn confirm(self, text: String) {
        let notice = Notice { error: false, text };
        self.notice.set(Some(notice.clone()));
        set_timeout(
            move || {
                if self.notice.get_untracked().as_ref() == Some(&notice) {
                    self.notice.set(None);
                }
            },
            Duration::from_secs(4),
        );
    }

    /// Handles a failed call: back to sign-in when the session is gone, a toast otherwise.
    pub fn server_failed(self, what: &str, error: &ServerError) {
        if error.is_unauthorized() {
            self.signed_out(Some("Your session ended; sign in again.".into()));
        } else {
            self.fail(format!("{what}: {}", error.message));
        }
    }

    fn signed_out(self, message: Option<String>) {
        events::disconnect();
        self.editing.set(None);
        self.auth.set(Auth::SignedOut(message));
    }

    /// Loads the rules; on success the page is signed in and the stream opens.
    pub fn recheck(self) {
        leptos::task::spawn_local(async move {
            match api::rules().await {
                Ok(body) => {
                    self.apply_rules(body);
                    // Who this is, beside (not before) showing the page.
                    leptos::task::spawn_local(async move {
                        if let Ok(me) = api::whoami().await {
                            self.me.set(Some(me.name));
                        }
                    });
                    if self.auth.get_untracked() != Auth::SignedIn {
                        self.auth.set(Auth::SignedIn);
                    }
                    events::connect(self);
                }
                Err(e) if e.is_unauthorized() => self.signed_out(None),
                Err(e) => {
                    if self.auth.get_untracked() == Auth::SignedIn {
                        self.link.set(Link::Lost);
                        self.fail(format!("Lost the backend: {}", e.message));
                        set_timeout(move || self.recheck(), Duration::from_secs(3));
                    } else {
                        self.auth.set(Auth::SignedOut(Some(e.message)));
                    }
                }
            }
        });
    }
}

/// How often the history (and the one-user view) is read again.
pub const HISTORY_REFRESH_MS: u64 = 4000;

#[component]
fn App() -> impl IntoView {
    let ctx = Ctx::new();
    ctx.recheck();
    // History every few seconds while signed in (the rules table marks quiet actions from it).
    Effect::new(move |_| {
        if ctx.auth.get() == Auth::SignedIn {
            ctx.range.track();
            ctx.refresh_history();
        }
    });
    let _ = set_interval_with_handle(
        move || ctx.refresh_history(),
        Duration::from_millis(HISTORY_REFRESH_MS),
    );
    let _ = set_interval_with_handle(move || ctx.clock.set(now_ms()), Duration::from_secs(1));
    view! {
        <header class="top">
            <div class="brand">
                <span class="logo" aria-hidden="true"></span>
                <h1>"sluice"</h1>
            </div>
            <Show when=move || ctx.auth.get() == Auth::SignedIn>
                <nav class="tabs" aria-label="Views">
                    <TabButton ctx=ctx tab=Tab::Rules label="Rules" />
                    <TabButton ctx=ctx tab=Tab::Live label="Live" />
                    <TabButton ctx=ctx tab=Tab::History label="History" />
                    <TabButton ctx=ctx tab=Tab::Keys label="Keys" />
                    <TabButton ctx=ctx tab=Tab::Audit label="Audit" />
                </nav>
                <div class="session">
                    <span class="who" id="signed-in-as" title="The admin this page acts as: the audit trail names every change after it">
                        {move || ctx.me.get().unwrap_or_default()}
                    </span>
                    <LinkBadge ctx=ctx />
                    <button
                        class="quiet"
                        id="sign-out"
                        on:click=move |_| {
                            leptos::task::spawn_local(async move {
                                if let Err(e) = api::sign_out().await {
                                    ctx.fail(format!("Sign-out failed: {}", e.message));
                                }
                                ctx.signed_out(Some("Signed out.".into()));
                            });
                        }
                    >
                        "Sign out"
                    </button>
                </div>
            </Show>
        </header>
        <main>
            {move || match ctx.auth.get() {
                Auth::Checking => view! { <p class="checking">"Connecting to sluice…"</p> }.into_any(),
                Auth::SignedOut(message) => view! { <signin::SignIn ctx=ctx message=message /> }.into_any(),
                Auth::SignedIn => view! {
                    <div class="view" hidden=move || ctx.tab.get() != Tab::Rules>
                        <rules_view::RulesPanel ctx=ctx />
                    </div>
                    <div class="view" hidden=move || ctx.tab.get() != Tab::Live>
                        <live_view::LivePanel ctx=ctx />
                    </div>
                    <div class="view" hidden=move || ctx.tab.get() != Tab::History>
                        <history::HistoryPanel ctx=ctx />
                    </div>
                    <div class="view" hidden=move || ctx.tab.get() != Tab::Keys>
                        <keys::KeysPanel ctx=ctx />
                    </div>
                    <div class="view" hidden=move || ctx.tab.get() != Tab::Audit>
                        <audit::AuditPanel ctx=ctx />
                    </div>
                }
                .into_any(),
            }}
        </main>
        <Toast ctx=ctx />
    }
}

#[component]
fn TabButton(ctx: Ctx, tab: Tab, label: &'static str) -> impl IntoView {
    // The live view holds the store's warnings; its tab says so from anywhere on the page.
    let warned = Memo::new(move |_| match tab {
        Tab::Live => ctx.levels.with(|l| !l.store.warnings.is_empty()),
        // Requests let through unchecked are the other thing that must be seen from anywhere.
        Tab::History => ctx
            .history
            .get()
            .is_some_and(|h| !crate::history::unchecked(&h).is_empty()),
        _ => false,
    });
    let title = match tab {
        Tab::History => "requests passed unchecked: see History",
        _ => "the store puts rate limiting at risk: see Live",
    };
    view! {
        <button
            class="tab"
            id=format!("tab-{}", label.to_lowercase())
            aria-pressed=move || (ctx.tab.get() == tab).to_string()
            on:click=move |_| ctx.tab.set(tab)
        >
            {label}
            <span class="tab-warning" hidden=move || !warned.get() title=title>
                <span aria-hidden="true">"!"</span>
                <span class="sr-only">{if tab == Tab::History { " (passed unchecked)" } else { " (store warning)" }}</span>
            </span>
        </button>
    }
}

#[component]
fn LinkBadge(ctx: Ctx) -> impl IntoView {
    // Silence is what a stopped backend sends: the badge counts the time since the last event
    // (heartbeats come every second), not only the stream's state.
    let state = Memo::new(move |_| {
        let link = ctx.link.get();
        Freshness::at(
            link == Link::Live,
            link == Link::Connecting,
            ctx.last_event.get(),
            ctx.clock.get(),
        )
    });
    let text = move || badge_text(state.get(), ctx.last_event.get(), ctx.clock.get());
    view! {
        <span
            class=move || format!("badge link-{}", state.get().class())
            id="link-badge"
            role="status"
            title="How long ago the backend last sent an update: amber after 3 s without one, red after 10 s"
        >
            {text}
        </span>
    }
}

#[component]
fn Toast(ctx: Ctx) -> impl IntoView {
    view! {
        <div class="toast-area" aria-live="assertive">
            {move || {
                ctx.notice.get().map(|notice| {
                    view! {
                        <div class=if notice.error { "toast error" } else { "toast ok" } role="alert">
                            <span class="toast-text">{notice.text}</span>
                            <button class="quiet" on:click=move |_| ctx.notice.set(None) aria-label="Dismiss">
                                "×"
                            </button>
                        </div>
                    }
                })
            }}
        </div>
    }
}
