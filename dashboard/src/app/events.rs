//! The SSE stream (`GET /v1/events`): rules on connect and on change, level snapshots about
//! twice a second, a heartbeat every second (each noted in `Ctx::last_event`, which the header's
//! badge turns amber, then red, when they stop). `EventSource` cannot send headers; the session
//! cookie authenticates it.

use std::cell::{Cell, RefCell};
use std::time::Duration;

use leptos::prelude::*;
use wasm_bindgen::closure::Closure;
use wasm_bindgen::JsCast;
use web_sys::{EventSource, MessageEvent};

use super::{Ctx, Link};
use sluice_core::wire::{EventKind, LevelsBody, RulesBody, RulesVersion};

thread_local! {
    static SOURCE: RefCell<Option<EventSource>> = const { RefCell::new(None) };
    /// The rules version the page read just before opening the stream, until its first
    /// `rules` event.
    static JUST_READ: Cell<Option<u64>> = const { Cell::new(None) };
}

/// Opens the stream (closing any previous one) and feeds the page's signals from it.
pub fn connect(ctx: Ctx) {
    disconnect();
    JUST_READ.with(|j| j.set(Some(ctx.rules.with_untracked(|r| r.version))));
    ctx.link.set(Link::Connecting);
    let source = match EventSource::new("/v1/events") {
        Ok(source) => source,
        Err(_) => {
            ctx.link.set(Link::Lost);
            return;
        }
    };
    let on_rules = Closure::<dyn FnMut(MessageEvent)>::new(move |event: MessageEvent| {
        if let Some(text) = event.data().as_string() {
            // The snapshot sent on connect repeats what the page read just before connecting:
            // its version alone says so (only then: a backend restarted under the browser's
            // own reconnect may number different rules the same).
            if let Some(read) = JUST_READ.with(Cell::take) {
                let version = serde_json::from_str::<RulesVersion>(&text).map(|v| v.version);
                if version.ok() == Some(read) {
                    ctx.heard();
                    return;
                }
            }
            match serde_json::from_str::<RulesBody>(&text) {
                Ok(body) => {
                    ctx.heard();
                    ctx.apply_rules(body)
                }
                Err(e) => ctx.fail(format!("could not read a rules update: {e}")),
            }
        }
    });
    let on_levels = Closure::<dyn FnMut(MessageEvent)>::new(move |event: MessageEvent| {
        if let Some(text) = event.data().as_string() {
            if let Ok(body) = serde_json::from_str::<LevelsBody>(&text) {
                ctx.levels.set(body);
                ctx.heard();
                ctx.link.set(Link::Live);
            }
        }
    });
    let on_heartbeat = Closure::<dyn FnMut(MessageEvent)>::new(move |_: MessageEvent| {
        ctx.heard();
        ctx.link.set(Link::Live);
    });
    let on_open = Closure::<dyn FnMut()>::new(move || ctx.link.set(Link::Live));
    let on_error = Closure::<dyn FnMut()>::new(move || {
        let closed = SOURCE.with(|s| {
            s.borrow()
                .as_ref()
                .is_some_and(|s| s.ready_state() == EventSource::CLOSED)
        });
        if closed {
            // The browser gave up (the session may have ended): check, then start again.
            ctx.link.set(Link::Lost);
            set_timeout(move || ctx.recheck(), Duration::from_secs(3));
        } else {
            ctx.link.set(Link::Connecting);
        }
    });
    let _ = source.add_event_listener_with_callback(
        EventKind::Rules.name(),
        on_rules.as_ref().unchecked_ref(),
    );
    let _ = source.add_event_listener_with_callback(
        EventKind::Levels.name(),
        on_levels.as_ref().unchecked_ref(),
    );
    let _ = source.add_event_listener_with_callback(
        EventKind::Heartbeat.name(),
        on_heartbeat.as_ref().unchecked_ref(),
    );
    source.set_onopen(Some(on_open.as_ref().unchecked_ref()));
    source.set_onerror(Some(on_error.as_ref().unchecked_ref()));
    // The handlers live as long as the page; one set per sign-in.
    on_rules.forget();
    on_levels.forget();
    on_heartbeat.forget();
    on_open.forget();
    on_error.forget();
    SOURCE.with(|s| *s.borrow_mut() = Some(source));
}

/// Closes the stream (on sign-out).
pub fn disconnect() {
    SOURCE.with(|s| {
        if let Some(source) = s.borrow_mut().take() {
            source.set_onerror(None);
            source.close();
        }
    });
}
