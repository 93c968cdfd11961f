//! `GET /v1/events`: server-sent events for the dashboard. Event `rules` (data: the
//! `GET /v1/rules` body) on connect and on every change; event `levels` (data: the
//! `GET /v1/levels?scope=active` body: actions with an active key or a rate, not every rule)
//! about every 500 ms while anyone listens; event `heartbeat` (data:
//! `{"at_ms": …}`) every second, so a page sees at once when events stop (a stopped backend
//! sends no error, only silence). Streams end at shutdown.

use std::convert::Infallible;
use std::sync::Arc;
use std::time::Duration;

use axum::extract::State;
use axum::response::sse::{Event, KeepAlive, Sse};
use futures::{Stream, StreamExt};
use sluice_core::wire::{EventKind, Heartbeat, HEARTBEAT_MS};
use tokio_stream::wrappers::{IntervalStream, WatchStream};

use crate::clock::now_ms;
use crate::state::App;

/// The event stream.
#[utoipa::path(get, path = "/v1/events", tag = "admin",
    responses(
        (status = 200, description = "text/event-stream: `rules` events (data: the GET /v1/rules body) on connect and on change; `levels` events (data: the GET /v1/levels?scope=active body) about every 500 ms; `heartbeat` events (data: `{\"at_ms\": …}`) every second", content_type = "text/event-stream", body = String),
        (status = 401, body = sluice_core::wire::ApiError),
    ),
    security(("bearer" = []), ("session" = [])))]
pub async fn events(
    State(app): State<Arc<App>>,
) -> Sse<impl Stream<Item = Result<Event, Infallible>>> {
    let rules = WatchStream::new(app.rules.subscribe()).map(|set| {
        let data = serde_json::to_string(&set.body()).unwrap_or_else(|_| "{}".into());
        Event::default().event(EventKind::Rules.name()).data(data)
    });
    let levels =
        WatchStream::from_changes(app.levels.subscribe()).filter_map(|snapshot| async move {
            snapshot.map(|text| {
                Event::default()
                    .event(EventKind::Levels.name())
                    .data(&*text)
            })
        });
    // After a stall, one beat, not the missed ones in a burst.
    let every = crate::clock::ticker(Duration::from_millis(HEARTBEAT_MS));
    let heartbeat = IntervalStream::new(every).map(|_| {
        let beat = Heartbeat { at_ms: now_ms() };
        let data = serde_json::to_string(&beat).unwrap_or_else(|_| "{}".into());
        Event::default()
            .event(EventKind::Heartbeat.name())
            .data(data)
    });
    let mut stopping = app.stopping.clone();
    let stop = async move {
        let _ = stopping.wait_for(|s| *s).await;
    };
    let stream = futures::stream::select(futures::stream::select(rules, levels), heartbeat)
        .take_until(Box::pin(stop))
        .map(Ok);
    Sse::new(stream).keep_alive(KeepAlive::new().interval(Duration::from_secs(15)))
}
