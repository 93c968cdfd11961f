//! The reset button of one key under one action (in the live view's funnels and the key view):
//! asks first, then removes the key's state (`DELETE /v1/keys?action=A&key=K`) and says what was
//! removed; and the key view's reset of one key on every action at once. Keys are untrusted
//! text: only ever text nodes and attributes.

use leptos::prelude::*;

use super::{api, Ctx};
use crate::reset::{reset_all_text, reset_text};

/// `done` receives the sentence saying what the reset removed (or why it failed), shown by the
/// view that holds the button, so the answer stays when the button's row is redrawn.
#[component]
pub fn ResetButton(ctx: Ctx, action: String, key: String, done: RwSignal<String>) -> impl IntoView {
    let asking = RwSignal::new(false);
    let busy = RwSignal::new(false);
    // The question takes the focus when it appears, so a keyboard user answers it with Enter
    // (or moves on to Keep) instead of starting again from the top of the page.
    let confirm_ref = NodeRef::<leptos::html::Button>::new();
    Effect::new(move |_| {
        if let Some(button) = confirm_ref.get() {
            let _ = button.focus();
        }
    });
    let reset = {
        let (action, key) = (action.clone(), key.clone());
        move |_| {
            if busy.get_untracked() {
                return;
            }
            let (action, key) = (action.clone(), key.clone());
            busy.set(true);
            leptos::task::spawn_local(async move {
                match api::reset_key(&action, &key).await {
                    Ok(body) => {
                        let text = reset_text(&body);
                        done.set(text.clone());
                        ctx.confirm(text);
                    }
                    Err(e) if e.is_unauthorized() => ctx.server_failed("Reset", &e),
                    Err(e) => {
                        let text = format!("Could not reset “{key}” on {action}: {}", e.message);
                        done.set(text.clone());
                        ctx.fail(text);
                    }
                }
                busy.set(false);
                asking.set(false);
            });
        }
    };
    let label = format!("Reset {key} on {action}");
    view! {
        <span class="reset" data-key=key.clone() data-action=action.clone()>
            <Show
                when=move || asking.get()
                fallback=move || {
                    view! {
                        <button type="button" class="quiet reset-key" title="Forget this key's state: it starts fresh" aria-label=label.clone() on:click=move |_| asking.set(true)>
                            "Reset"
                        </button>
                    }
                }
            >
                <span class="confirm-text">"Reset this key?"</span>
                <button type="button" class="danger confirm-reset" node_ref=confirm_ref disabled=move || busy.get() on:click=reset.clone()>"Reset"</button>
                <button type="button" class="quiet keep-key" on:click=move |_| asking.set(false)>"Keep"</button>
            </Show>
        </span>
    }
}

/// The key view's "reset on every action": one question, one request (`action=*`), one audit
/// entry per action. The question puts the focus on "Keep", the safe answer.
#[component]
pub fn ResetAllButton(
    ctx: Ctx,
    key: Signal<Option<String>>,
    actions: Signal<usize>,
    done: RwSignal<String>,
) -> impl IntoView {
    let asking = RwSignal::new(false);
    let busy = RwSignal::new(false);
    let keep_ref = NodeRef::<leptos::html::Button>::new();
    Effect::new(move |_| {
        if let Some(button) = keep_ref.get() {
            let _ = button.focus();
        }
    });
    let reset = move |_| {
        let Some(key) = key.get_untracked() else {
            return;
        };
        if busy.get_untracked() {
            return;
        }
        busy.set(true);
        leptos::task::spawn_local(async move {
            match api::reset_all(&key).await {
                Ok(body) => {
                    let text = reset_all_text(&body);
                    done.set(text.clone());
                    ctx.confirm(text);
                }
                Err(e) if e.is_unauthorized() => ctx.server_failed("Reset", &e),
                Err(e) => {
                    let text = format!("Could not reset “{key}” on every action: {}", e.message);
                    done.set(text.clone());
                    ctx.fail(text);
                }
            }
            busy.set(false);
            asking.set(false);
        });
    };
    view! {
        <span class="reset reset-all">
            <Show
                when=move || asking.get()
                fallback=move || {
                    view! {
                        <button type="button" class="quiet" id="reset-all" disabled=move || actions.get() == 0
                            title="Forget this key's state on every action at once" on:click=move |_| asking.set(true)>
                            "Reset on every action"
                        </button>
                    }
                }
            >
                <span class="confirm-text" id="reset-all-question">
                    {move || format!("Reset this key on all {} actions?", actions.get())}
                </span>
                <button type="button" class="danger" id="confirm-reset-all" disabled=move || busy.get() on:click=reset>"Reset all"</button>
                <button type="button" class="quiet" id="keep-all" node_ref=keep_ref on:click=move |_| asking.set(false)>"Keep"</button>
            </Show>
        </span>
    }
}
