//! The bounds every rule and request is validated against, in one place.
//!
//! Rule bounds exist because the Redis twins of the algorithms run in Lua 5.1, whose numbers are
//! IEEE doubles: every integer the scripts handle must stay below 2^53 to stay exact. The bounds
//! are chosen so that the largest product any script forms (capacity × window in milliseconds, or
//! a meter's tolerance in nanoseconds) fits.
//!
//! `cl.throttle` has redis-cell's bounds instead (its i64 nanoseconds): the gcra script keeps
//! times as exact (seconds, nanoseconds) pairs, so it needs none of the 2^53 ones.

use crate::time::NANOS_PER_SEC;

/// Largest capacity for any algorithm.
pub const MAX_CAPACITY: u64 = 10_000_000;
/// Largest capacity for `sliding_log`, whose memory grows with it (one entry per request).
pub const MAX_SLIDING_LOG_CAPACITY: u64 = 10_000;
/// Shortest duration: one millisecond (durations are whole milliseconds).
pub const MIN_SPAN_MS: u64 = 1;
/// Longest window or period: seven days.
pub const MAX_SPAN_MS: u64 = 7 * 24 * 60 * 60 * 1000;
/// Longest fixed_window duration window: 365 days (the peer envoyproxy/ratelimit's `year`).
/// fixed_window's script works in whole ms (window index × W, end − now), never forming
/// capacity × window, and returns the reset as an exact decimal string of ns built from those ms
/// (fixed_window.lua's ns_text), so only ms need stay below 2^53 (checked below). Other
/// algorithms keep [`MAX_SPAN_MS`].
pub const MAX_FIXED_WINDOW_SPAN_MS: u64 = 365 * 24 * 60 * 60 * 1000;
/// Longest calendar window: a month of 31 days plus a day (fixed_window's `calendar`; a named
/// zone's offset may change within a window: an hour for daylight saving, and tzdb's largest
/// change backwards is about a day). Longer than
/// [`MAX_SPAN_MS`], which bounds capacity × window for sliding_window's Lua product: fixed_window's
/// script never forms that product, only the window's span in ns (checked below).
pub const MAX_CALENDAR_SPAN_MS: u64 = 32 * 24 * 60 * 60 * 1000;
/// Largest `count` in a rate.
pub const MAX_RATE_COUNT: u64 = 1_000_000_000;
/// Longest burst a rule's meter may hold (emission interval × capacity): 90 days in
/// nanoseconds. 90 days is 7.8e15 ns, below 2^53 ≈ 9.007e15, which the leaky_bucket and
/// token_bucket scripts need (`cl.throttle` is bounded by [`CELL_MAX_NS`] instead).
pub const MAX_HORIZON_NS: u64 = 90 * 24 * 60 * 60 * 1_000_000_000;
/// Largest nanosecond span redis-cell can hold (i64::MAX): its tolerance T × (max_burst + 1)
/// and increment T × quantity must not pass it, nor may any `CL.THROTTLE` argument.
pub const CELL_MAX_NS: u64 = i64::MAX as u64;
/// Longest `CL.THROTTLE` period in seconds: redis-cell converts it to i64 nanoseconds, which
/// wraps beyond 9,223,372,036 s (~292 years).
pub const CELL_MAX_PERIOD_S: u64 = CELL_MAX_NS / NANOS_PER_SEC;
/// Largest quantity one request may ask for (rules; `cl.throttle` is bounded by
/// [`CELL_MAX_NS`]).
pub const MAX_QUANTITY: u64 = 1_000_000_000;
/// Smallest reservation a cost route asks for (`cost.reserve` in the filter): a reservation of
/// 0 asks for nothing, so it passes a spent budget and its whole usage is debited afterwards (the
/// check-then-debit overshoot reservations exist to stop). One unit is refused by a spent budget,
/// and the commit refunds or debits the difference to the actual cost either way.
pub const MIN_RESERVATION: u64 = 1;
/// Longest action name.
pub const MAX_ACTION_LEN: usize = 64;
/// Longest rule description, in bytes.
pub const MAX_DESCRIPTION_LEN: usize = 1024;
/// Largest request body either listener reads (413 beyond). The filter keeps every callout far
/// below it by sending long keys as a digest, so no key a client sends can make the backend
/// refuse its request.
pub const MAX_BODY_BYTES: usize = 64 * 1024;
/// Longest subject (key) carried and stored as it is: the filter sends a longer one as a
/// `sha256:` digest, and the Redis store keys a longer one by digest, so no key a client sends is
/// refused or grows a request or a Redis key without bound.
pub const MAX_LITERAL_KEY_BYTES: usize = 128;
/// Most descriptors one rate limit service (RLS) request may carry (Envoy sends one per matching
/// `rate_limits` entry).
pub const MAX_RLS_DESCRIPTORS: usize = 64;
/// Largest RLS request message decoded: four times Envoy's default limit on a request's headers
/// (60 KiB), so descriptors built from headers fit even when one header feeds several of them.
pub const MAX_RLS_MESSAGE_BYTES: usize = 256 * 1024;
/// Most units one lease grant may carry (a rule's `lease.max`).
pub const MAX_LEASE_UNITS: u64 = 100_000;
/// Longest a lease may be spent (a rule's `lease.ttl`): a minute. Leases trade exactness for
/// speed for at most this long; longer would hide rule changes and failures for too long.
pub const MAX_LEASE_TTL_MS: u64 = 60_000;
/// How long a key's lease grants can be given back ([`crate::budget::BudgetRecord`]'s lease pool):
/// the longest lease, plus a minute for the filter's return to be sent and retried.
pub const LEASE_RETURN_SPAN_MS: u64 = MAX_LEASE_TTL_MS + 60_000;
/// Most actions one filter report carries; the filter's counters table holds no more, so a
/// report stays far below [`MAX_BODY_BYTES`].
pub const MAX_REPORT_ACTIONS: usize = 256;
/// Most decision ids one filter report names as given up on (`FilterReport::gave_up`): the
/// first ones since the last accepted report are kept (a stall's edge is its first timeout),
/// 1,024 of at most 20 digits and a comma each, far below [`MAX_BODY_BYTES`].
pub const MAX_REPORT_GAVE_UP: usize = 1_024;
/// Most per-key overrides one action's rule may carry. Every replica holds all of them in its rule
/// cache and reloads them on every rules change, so they are bounded like the rules themselves.
pub const MAX_OVERRIDES_PER_ACTION: usize = 1_000;
/// Most checks one all-or-nothing request (`POST /v1/throttle/all`, a filter route's `checks`,
/// one RLS request's descriptors decided together) may carry: every check's state is held (memory
/// shard locks, one Redis script's keys) for the whole decision, so the set stays small.
pub const MAX_CHECKS: usize = 8;
/// How long an allowed reservation (a throttle request carrying a `reservation_id`) counts as in
/// flight without its commit: 10 minutes. A reservation whose request was reset, timed out or
/// kept its reservation (no usage came back) is never committed; past this it no longer counts
/// (its units stay debited, as the budget rules say). 10 minutes outlasts a long streamed LLM
/// answer and every commit retry (a few seconds), and is well within the commit id's memory
/// ([`crate::commit::COMMIT_ID_TTL_MS`]), so a commit arriving late still removes nothing twice.
pub const RESERVATION_IN_FLIGHT_MS: u64 = 600_000;
/// Most reservations in flight one key's budget record lists: each store keeps (id, units, time)
/// per reservation, so a key with more (a sprayer of tiny reservations) is counted up to this
/// many, newest not recorded, and the view says the figure is a lower bound.
pub const MAX_IN_FLIGHT_PER_KEY: usize = 1_024;
/// Most commit receipts one key (one action's state for one subject) keeps at once. Every fresh
/// commit id writes one, kept [`crate::commit::COMMIT_ID_TTL_MS`], so a caller spraying ids
/// would otherwise grow the store without end. Past the bound the receipt closest to its expiry
/// is shed (counted in `sluice_commit_receipts_shed_total{action}`): a retry of that commit is
/// then applied again, which can only debit again (its reservation's record went with its first
/// commit, [`crate::budget::bounded_commit`]), never give back twice. 1,024 keeps the receipts of
/// at least the last 1,024 commits of a key: minutes of retries at any realistic rate per key.
/// Per key, not per action: a key's receipts share its Cluster slot, so the bound is kept in the
/// commit's own atomic step.
pub const MAX_RECEIPTS_PER_KEY: usize = 1_024;
/// Most a meter's level may hold with a cost budget's debt carried (gcra, leaky_bucket,
/// token_bucket; in nanoseconds of drain time): 100 days. A commit's debit beyond what fits is
/// carried above the meter's tolerance (the budget spent above its size, paid back as it drains),
/// up to this level, which keeps the Lua twins exact (below 2^53, and within the prelude's
/// 104-day clamp of stored times). What a commit would carry beyond it is dropped.
pub const MAX_CARRIED_LEVEL_NS: u64 = 100 * 24 * 60 * 60 * 1_000_000_000;
/// Most a fixed_window or sliding_window count may hold with a cost budget's debt carried: 14
/// million units, so that sliding_window's previous count × window (ms) stays below 2^53 in its
/// Lua twin. What a commit would carry beyond it is dropped. (A sliding_log carries up to its
/// capacity more entries: [`crate::commit::carry_bound`].)
pub const MAX_CARRIED_COUNT: u64 = 14_000_000;
/// Most filter-report sequence records the backend keeps per action (one per reporter: the
/// highest `seq` applied, so that a resent copy of a report is counted once). `POST /v1/report`
/// accepts any reporter id, so without a bound a client could mint ids until the store fills;
/// at the bound the least recently applied record is dropped (counted in
/// `sluice_report_marks_dropped_total`), but never one applied within
/// [`REPORT_MARK_SETTLE_MS`]. Actions without a rule share one set of this size. 16,384 covers
/// a fleet of 1,000 Envoys of 16 workers reporting one action; a record costs Redis at most 256
/// bytes (221 measured, docs/storage.md), so a full set at most 4 MiB.
pub const MAX_REPORTERS_PER_ACTION: usize = 16_384;
/// How long after it was last applied a report sequence record is kept whatever the bound: 10
/// minutes. A filter sends a report whose answer it did not get again at its next tick (a
/// second); a record younger than this may still see such a copy, and dropping it would count
/// the copy twice. When every record of a full set is younger, a new reporter's report is not
/// applied: it is answered 503 and the filter sends it again (nothing is lost, only delayed).
pub const REPORT_MARK_SETTLE_MS: u64 = 600_000;
/// Audit entries the store keeps (newest first; older ones are dropped as new ones arrive).
pub const AUDIT_KEEP: usize = 1_000;

// What the bounds promise, checked when the crate compiles.
const TWO_POW_53: u64 = 1 << 53;
// The Lua products stay exact in doubles: capacity × window in ms, a rule's tolerance, and a
// sliding log entry's age (at most one window, in nanoseconds).
const _: () = assert!(MAX_CAPACITY * MAX_SPAN_MS < TWO_POW_53);
const _: () = assert!(MAX_HORIZON_NS < TWO_POW_53);
const _: () = assert!(MAX_SPAN_MS * 1_000_000 < TWO_POW_53);
// A meter's carried level, and a window's carried count times the longest window, stay exact;
// both hold at least what no debt leaves (a full meter, a full window).
const _: () = assert!(MAX_CARRIED_LEVEL_NS < TWO_POW_53 && MAX_CARRIED_LEVEL_NS >= MAX_HORIZON_NS);
const _: () = assert!(MAX_CARRIED_LEVEL_NS / NANOS_PER_SEC < 9_000_000);
const _: () = assert!(MAX_CARRIED_COUNT * MAX_SPAN_MS < TWO_POW_53);
const _: () = assert!(MAX_CARRIED_COUNT >= MAX_CAPACITY);
// A calendar window's end relative to now, in ns (fixed_window.lua's end_rel), and a count of at
// most MAX_CAPACITY, stay exact.
const _: () = assert!(MAX_CALENDAR_SPAN_MS * 1_000_000 < TWO_POW_53);
const _: () = assert!(MAX_CAPACITY < TWO_POW_53);
// A fixed_window duration window: its index × W and end − now stay exact in ms until the year
// 200,000 and beyond (now_ms + 2 W < 2^53), its end relative to now in ns may not (3.2e16 > 2^53),
// which is why the script returns that as a decimal string, and is exact as u64 ns in core.
const _: () = assert!(MAX_FIXED_WINDOW_SPAN_MS >= MAX_SPAN_MS);
const _: () = assert!(MAX_FIXED_WINDOW_SPAN_MS >= MAX_CALENDAR_SPAN_MS);
const _: () = assert!(6_000_000_000_000_000 + 2 * MAX_FIXED_WINDOW_SPAN_MS < TWO_POW_53);
const _: () = assert!(MAX_FIXED_WINDOW_SPAN_MS * 1_000_000 < u64::MAX / 4);
// The longest cell period is the last whole second of i64 nanoseconds.
const _: () = assert!(CELL_MAX_PERIOD_S == 9_223_372_036);
const _: () = assert!(CELL_MAX_PERIOD_S * NANOS_PER_SEC <= CELL_MAX_NS);
const _: () = assert!((CELL_MAX_PERIOD_S + 1) * NANOS_PER_SEC > CELL_MAX_NS);

/// The filter's default wait for one decision (`backend.timeout_ms`), in milliseconds. The
/// backend's defaults are derived from it (docs/failure-modes.md), so that with no flags set the
/// backend never spends longer on a decision than the filter waits for it.
pub const DEFAULT_DECISION_TIMEOUT_MS: u64 = 25;

/// The longest a caller may ask the backend to work on one decision (`timeout_ms` of a decision
/// request; the filter's `backend.timeout_ms` has the same bound), in milliseconds.
pub const MAX_DECISION_TIMEOUT_MS: u64 = 60_000;

/// The backend's gRPC listener's default port, on 127.0.0.1 (`--grpc-listen`): where the filter's
/// default protocol finds it. The filter's log lines name it when a cluster points elsewhere.
pub const DEFAULT_GRPC_PORT: u16 = 8082;

/// [`DEFAULT_GRPC_PORT`]'s address as text, for messages.
pub const DEFAULT_GRPC_LISTEN: &str = "127.0.0.1:8082";

const _: () = {
    // The text and the port say the same thing.
    let text = DEFAULT_GRPC_LISTEN.as_bytes();
    let port = DEFAULT_GRPC_PORT;
    let digits = [
        b'0' + (port / 1000 % 10) as u8,
        b'0' + (port / 100 % 10) as u8,
        b'0' + (port / 10 % 10) as u8,
        b'0' + (port % 10) as u8,
    ];
    assert!(port >= 1000 && port < 10000 && text.len() == 14);
    assert!(text[10] == digits[0] && text[11] == digits[1]);
    assert!(text[12] == digits[2] && text[13] == digits[3]);
};
