//! Sign-in: the admin token becomes an HttpOnly session cookie (`POST /v1/session`), which also
//! authenticates the SSE stream.

use leptos::prelude::*;

use super::{api, Auth, Ctx};
use crate::signin::sign_in_failure;

#[component]
pub fn SignIn(ctx: Ctx, message: Option<String>) -> impl IntoView {
    let token = RwSignal::new(String::new());
    let busy = RwSignal::new(false);
    let error = RwSignal::new(message);
    let submit = move |ev: leptos::ev::SubmitEvent| {
        ev.prevent_default();
        if busy.get_untracked() {
            return;
        }
        let value = token.get_untracked();
        if value.is_empty() {
            error.set(Some("Enter the admin token.".into()));
            return;
        }
        busy.set(true);
        leptos::task::spawn_local(async move {
            match api::sign_in(&value).await {
                Ok(()) => {
                    token.set(String::new());
                    ctx.auth.set(Auth::Checking);
                    ctx.recheck();
                }
                Err(e) => error.set(Some(sign_in_failure(&e))),
            }
            busy.set(false);
        });
    };
    view! {
        <section class="signin card" aria-labelledby="signin-title">
            <h2 id="signin-title">"Sign in"</h2>
            <p class="hint">"Use the admin token the sluice backend was started with."</p>
            <form on:submit=submit>
                <label for="token">"Admin token"</label>
                <input
                    id="token"
                    name="token"
                    type="password"
                    autocomplete="current-password"
                    aria-describedby="signin-error"
                    aria-invalid=move || error.get().is_some().to_string()
                    prop:value=move || token.get()
                    on:input=move |ev| token.set(event_target_value(&ev))
                />
                <p id="signin-error" class="field-error" role="alert">
                    {move || error.get().unwrap_or_default()}
                </p>
                <button type="submit" class="primary" disabled=move || busy.get()>
                    {move || if busy.get() { "Signing in…" } else { "Sign in" }}
                </button>
            </form>
        </section>
    }
}
