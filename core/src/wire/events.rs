//! The server-sent event names of `GET /v1/events`.

/// Which body an SSE event carries.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash)]
pub enum EventKind {
    /// Data: a [`super::RulesBody`]; sent on connect and on every rule change.
    Rules,
    /// Data: a [`super::LevelsBody`]; sent about twice a second while anyone listens.
    Levels,
}

impl EventKind {
    /// The SSE `event:` name.
    pub fn name(self) -> &'static str {
        match self {
            EventKind::Rules => "rules",
            EventKind::Levels => "levels",
        }
    }
}
