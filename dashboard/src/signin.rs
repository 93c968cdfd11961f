//! The model of the sign-in form (`app/signin.rs`): what a refused sign-in says. A wrong token is
//! the common case and gets words that say what to do; anything else shows the server's words.

use crate::api::ServerError;

/// The message shown when sign-in is refused.
pub const WRONG_TOKEN: &str =
    "That token was not accepted. Use the admin token the backend was started with (--admin-token).";

/// The message for a failed sign-in: a clear one for a wrong token, the server's words otherwise.
pub fn sign_in_failure(error: &ServerError) -> String {
    if error.is_unauthorized() {
        WRONG_TOKEN.to_owned()
    } else {
        format!("Could not sign in: {}", error.message)
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn wrong_token_gets_a_clear_message() {
        let e =
            ServerError::from_response(401, r#"{"error":"unauthorized","message":"bad token"}"#);
        assert_eq!(sign_in_failure(&e), WRONG_TOKEN);
        let down = ServerError::network("connection refused");
        assert!(sign_in_failure(&down).contains("could not reach"));
    }
}
