//! Every JSON body of sluice's two listeners, defined once: the backend serves these types, the
//! filter and the dashboard read them, and the OpenAPI document derives its schemas from them
//! (feature `openapi`). Adding a field here changes all three at once, which is the point.
//!
//! Requests are parsed with [`parse`], which names the field at fault for every refusal.

mod all;
mod audit;
mod commit;
mod decision;
mod error;
mod events;
mod health;
mod history;
mod keys;
mod levels;
mod media;
mod overrides;
pub mod parse;
pub mod ratelimit;
mod report;
mod rlqs;
mod rule;
mod rule_errors;
mod rules;
mod scope;
mod session;

pub use all::{DeniedCheck, ThrottleAllRequest, ThrottleAllResponse, ThrottleCheck};
pub use audit::{
    AuditBody, AuditEntry, AuditKind, ResetAllBody, ResetBody, SessionBody, EVERY_ACTION,
};
pub use commit::{CommitRequest, CommitResponse};
pub use decision::{ClThrottleRequest, ThrottleRequest, ThrottleResponse};
pub use error::{ApiError, ErrorCode};
pub use events::{EventKind, Heartbeat, HEARTBEAT_MS};
pub use health::{HealthBody, ReadyBody, StoreHealth};
pub use history::{
    ActionHistory, HistoryBody, HistoryRange, StepCounts, HISTORY_SPAN_MS, HISTORY_STEP_MS,
};
pub use keys::{
    ActionTopDenied, DeniedKey, DeniedMinute, KeyActionState, KeyBudget, KeyView, TopDeniedBody,
    TOP_DENIED_KEYS, TOP_DENIED_SPAN_MS,
};
pub use levels::{ActionLevels, KeyLevel, LevelsBody};
pub use media::{is_json_content_type, unsupported_media_type_message, JSON_CONTENT_TYPE};
pub use overrides::{check_override_key, KeyOverride, OverridesBody};
pub use ratelimit::{RatelimitConfigBody, RatelimitLimit};
pub use report::{ActionCounts, FilterReport, ReportId, MAX_REPORTER_LEN};
pub use rlqs::{
    RlqsBucket, RlqsHolder, RlqsKeyShares, RlqsReady, RlqsSharesBody, RlqsSum,
    RLQS_SHARES_MAX_HOLDERS, RLQS_SHARES_MAX_KEYS,
};
pub use rule::{RawCalendar, RawRule};
pub use rule_errors::rule_field_errors;
pub use rules::{RulesBody, RulesVersion};
pub use scope::{ActionScope, SCOPE_PARAM};
pub use session::SessionRequest;
