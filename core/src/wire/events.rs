//! The server-sent event names of `GET /v1/events`.

/// Which body an SSE event carries.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash)]
pub enum EventKind {
    /// Data: a [`super::RulesBody`]; sent on connect and on every rule change.
    Rules,
    /// Data: a [`super::LevelsBody`]; sent about twice a second while anyone listens.
    Levels,
    /// Data: a [`Heartbeat`]; sent every [`HEARTBEAT_MS`] whatever else is sent, so a page can
    /// tell a quiet stream from a stopped backend (no event for a while means stale numbers).
    Heartbeat,
}

/// How often the event stream sends a heartbeat.
pub const HEARTBEAT_MS: u64 = 1_000;

/// The data of a `heartbeat` event.
#[derive(Debug, Clone, Copy, PartialEq, Eq, serde::Serialize, serde::Deserialize)]
pub struct Heartbeat {
    /// The backend's clock when it was sent, in ms since the epoch.
    pub at_ms: u64,
}

impl EventKind {
    /// The SSE `event:` name.
    pub fn name(self) -> &'static str {
        match self {
            EventKind::Rules => "rules",
            EventKind::Levels => "levels",
            EventKind::Heartbeat => "heartbeat",
        }
    }
}
