//! `POST /v1/session`: the dashboard exchanges the admin token for an HttpOnly cookie (so that
//! `EventSource`, which cannot send headers, is authenticated too).

use serde::{Deserialize, Serialize};

/// `POST /v1/session` request.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
#[cfg_attr(feature = "openapi", derive(utoipa::ToSchema))]
#[serde(deny_unknown_fields)]
pub struct SessionRequest {
    /// The admin token the backend was started with.
    pub token: String,
}
