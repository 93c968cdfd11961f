//! How fresh the page's numbers are: the time since the event stream last said anything (a
//! `heartbeat` comes every second, levels twice a second), as the header badge shows it. A
//! stopped backend closes nothing and sends no error, only silence, so silence is what is
//! measured: green while events flow, amber after [`LATE_MS`] without one, red after
//! [`STALE_MS`].

/// Silence after which the badge turns amber: three missed heartbeats.
pub const LATE_MS: f64 = 3_000.0;
/// Silence after which it turns red: the numbers on the page are no longer worth reading.
pub const STALE_MS: f64 = 10_000.0;

/// The badge's state.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Freshness {
    /// Opening or reopening the stream.
    Connecting,
    /// Events arrive.
    Live,
    /// No event for [`LATE_MS`]: the numbers may be old.
    Late,
    /// No event for [`STALE_MS`], or the stream is closed.
    Stale,
}

impl Freshness {
    /// The state for a stream that is `open` (or still connecting), whose last event came at
    /// `last_ms` (none yet), read at `now_ms` (browser clock, ms).
    pub fn at(open: bool, connecting: bool, last_ms: Option<f64>, now_ms: f64) -> Freshness {
        match last_ms {
            _ if !open && !connecting => Freshness::Stale,
            None => Freshness::Connecting,
            Some(last) => {
                let silent = now_ms - last;
                if silent >= STALE_MS {
                    Freshness::Stale
                } else if silent >= LATE_MS {
                    Freshness::Late
                } else if open {
                    Freshness::Live
                } else {
                    Freshness::Connecting
                }
            }
        }
    }

    /// The badge's CSS class suffix (`link-live`, `link-late`, …).
    pub fn class(self) -> &'static str {
        match self {
            Freshness::Connecting => "connecting",
            Freshness::Live => "live",
            Freshness::Late => "late",
            Freshness::Stale => "offline",
        }
    }
}

/// The badge's text: the state and how long ago the last event came ("live · updated 0 s ago",
/// "stale · updated 12 s ago"); "connecting" before any event.
pub fn badge_text(state: Freshness, last_ms: Option<f64>, now_ms: f64) -> String {
    let word = match state {
        Freshness::Connecting => "connecting",
        Freshness::Live => "live",
        Freshness::Late => "late",
        Freshness::Stale => "stale",
    };
    match last_ms {
        Some(last) => {
            let secs = ((now_ms - last).max(0.0) / 1000.0).floor();
            format!("{word} · updated {secs:.0} s ago")
        }
        None => word.to_owned(),
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn silence_turns_the_badge_amber_then_red() {
        let t = 100_000.0;
        assert_eq!(
            Freshness::at(true, false, Some(t), t + 900.0),
            Freshness::Live
        );
        assert_eq!(
            Freshness::at(true, false, Some(t), t + LATE_MS),
            Freshness::Late
        );
        assert_eq!(
            Freshness::at(true, false, Some(t), t + STALE_MS),
            Freshness::Stale
        );
        // Back once an event comes.
        assert_eq!(
            Freshness::at(true, false, Some(t + STALE_MS), t + STALE_MS),
            Freshness::Live
        );
        assert_eq!(Freshness::at(false, true, None, t), Freshness::Connecting);
        assert_eq!(Freshness::at(false, false, Some(t), t), Freshness::Stale);
        assert_eq!(
            Freshness::at(false, true, Some(t), t + 100.0),
            Freshness::Connecting
        );
    }

    #[test]
    fn the_text_says_how_long_ago() {
        assert_eq!(
            badge_text(Freshness::Live, Some(1_000.0), 1_400.0),
            "live · updated 0 s ago"
        );
        assert_eq!(
            badge_text(Freshness::Stale, Some(1_000.0), 13_500.0),
            "stale · updated 12 s ago"
        );
        assert_eq!(badge_text(Freshness::Connecting, None, 0.0), "connecting");
        assert_eq!(Freshness::Late.class(), "late");
    }
}
