//! A search input as the views share it (the rules table's finder, the key lookup): a native
//! `type=search` field bound to a signal, with no autocomplete or spellcheck (keys and actions
//! are not words).

use leptos::prelude::*;

#[component]
pub fn SearchBox(
    /// The input's id (its label's `for`).
    id: &'static str,
    /// What the empty field suggests.
    placeholder: &'static str,
    /// What the field holds, kept in step both ways.
    value: RwSignal<String>,
) -> impl IntoView {
    view! {
        <input
            id=id
            type="search"
            autocomplete="off"
            spellcheck="false"
            placeholder=placeholder
            prop:value=move || value.get()
            on:input=move |ev| value.set(event_target_value(&ev))
        />
    }
}
