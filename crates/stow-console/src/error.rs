//! The console's typed refusals and their one mapping to HTTP status and a
//! JSON body (`{"error": {"code", "message"}}`).

use http::StatusCode;
use s3s::S3Error;

/// Why a console request was refused. Each variant has a stable machine
/// code ([`ConsoleError::code`]); S3 refusals keep S3's own code (for
/// example `BucketNotEmpty`), so the page shows what an S3 client would see.
#[derive(Debug, thiserror::Error)]
pub enum ConsoleError {
    /// No session cookie, or one that is unknown or expired.
    #[error("sign in first (no session, or it has expired)")]
    Unauthenticated,
    /// Sign-in with a key pair that is not this server's.
    #[error("the access key or secret key is not this server's")]
    BadCredentials,
    /// Too many failed sign-ins lately: attempts are refused unchecked for
    /// a while (`Retry-After`).
    #[error("too many failed sign-ins; try again in {retry_after} s")]
    TooManySignIns {
        /// Seconds until an attempt is allowed again.
        retry_after: u64,
    },
    /// A request from another origin (Origin / Sec-Fetch-Site).
    #[error("cross-origin request refused: {0}")]
    CrossOrigin(&'static str),
    /// A state-changing request without the session's CSRF token.
    #[error("missing or wrong CSRF token")]
    Csrf,
    /// A Host header that is neither an IP literal nor `localhost`
    /// (refused against DNS rebinding).
    #[error("this console answers only to an IP address or localhost")]
    Host,
    /// A malformed request (missing parameter, bad JSON).
    #[error("{0}")]
    BadRequest(String),
    /// No such console route.
    #[error("no such console route")]
    NotFound,
    /// The route exists but not for this method.
    #[error("method not allowed on this route")]
    Method,
    /// A body larger than the server accepts.
    #[error("the request body is larger than this server accepts")]
    TooLarge,
    /// A request body without Content-Length where one is required.
    #[error("Content-Length is required")]
    LengthRequired,
    /// The S3 operation the request stands for refused it.
    #[error("{message}")]
    S3 {
        /// S3's error code (`NoSuchBucket`, `BucketNotEmpty`, …).
        code: String,
        /// S3's HTTP status for it.
        status: StatusCode,
        /// S3's message.
        message: String,
    },
    /// The checkpoint engine refused (workspace pages): the engine's own
    /// machine code (`WsError::code`, also as a watch service answers it).
    #[error("{message}")]
    Engine {
        /// The engine's code (`not_found`, `in_use`, `workspace_changed`, …).
        code: String,
        /// The engine's message.
        message: String,
    },
    /// A feature this console was started without (a share link when the
    /// S3 port's address is unknown).
    #[error("not available: {0}")]
    NotAvailable(&'static str),
    /// An object that the preview cannot show (not text or a PNG, JPEG,
    /// GIF or WebP image, or too large).
    #[error("{0}")]
    NoPreview(String),
    /// The store refused a read the console makes directly (its usage):
    /// the store's own machine code (`StoreError::code`).
    #[error("{message}")]
    Store {
        /// The store's code.
        code: &'static str,
        /// The store's message.
        message: String,
    },
    /// Something failed inside the server.
    #[error("internal error: {0}")]
    Internal(String),
}

impl ConsoleError {
    /// The stable machine code shown to the page.
    pub fn code(&self) -> &str {
        match self {
            ConsoleError::Unauthenticated => "unauthenticated",
            ConsoleError::BadCredentials => "bad_credentials",
            ConsoleError::TooManySignIns { .. } => "too_many_sign_ins",
            ConsoleError::CrossOrigin(_) => "cross_origin",
            ConsoleError::Csrf => "csrf",
            ConsoleError::Host => "bad_host",
            ConsoleError::BadRequest(_) => "bad_request",
            ConsoleError::NotFound => "not_found",
            ConsoleError::Method => "method_not_allowed",
            ConsoleError::TooLarge => "too_large",
            ConsoleError::LengthRequired => "length_required",
            ConsoleError::S3 { code, .. } | ConsoleError::Engine { code, .. } => code,
            ConsoleError::NotAvailable(_) => "not_available",
            ConsoleError::NoPreview(_) => "no_preview",
            ConsoleError::Store { code, .. } => code,
            ConsoleError::Internal(_) => "internal",
        }
    }

    /// The HTTP status of the refusal.
    pub fn status(&self) -> StatusCode {
        match self {
            ConsoleError::Unauthenticated | ConsoleError::BadCredentials => {
                StatusCode::UNAUTHORIZED
            }
            ConsoleError::TooManySignIns { .. } => StatusCode::TOO_MANY_REQUESTS,
            ConsoleError::CrossOrigin(_) | ConsoleError::Csrf => StatusCode::FORBIDDEN,
            ConsoleError::Host => StatusCode::MISDIRECTED_REQUEST,
            ConsoleError::BadRequest(_) => StatusCode::BAD_REQUEST,
            ConsoleError::NotFound => StatusCode::NOT_FOUND,
            ConsoleError::Method => StatusCode::METHOD_NOT_ALLOWED,
            ConsoleError::TooLarge => StatusCode::PAYLOAD_TOO_LARGE,
            ConsoleError::LengthRequired => StatusCode::LENGTH_REQUIRED,
            ConsoleError::S3 { status, .. } => *status,
            ConsoleError::Engine { code, .. } => engine_status(code),
            ConsoleError::NotAvailable(_) => StatusCode::NOT_IMPLEMENTED,
            ConsoleError::NoPreview(_) => StatusCode::UNPROCESSABLE_ENTITY,
            ConsoleError::Store { .. } | ConsoleError::Internal(_) => {
                StatusCode::INTERNAL_SERVER_ERROR
            }
        }
    }

    /// The JSON body of the refusal.
    pub fn body(&self) -> serde_json::Value {
        serde_json::json!({
            "error": { "code": self.code(), "message": self.to_string() }
        })
    }
}

/// The HTTP status of an engine refusal, by its machine code.
pub fn engine_status(code: &str) -> StatusCode {
    match code {
        "not_found" => StatusCode::NOT_FOUND,
        "invalid_path" | "invalid_input" | "invalid_request" | "invalid_manifest"
        | "sensitive_path" | "invalid_parent" => StatusCode::BAD_REQUEST,
        "in_use" | "in_progress" | "workspace_changed" | "request_conflict" | "already_exists"
        | "refused" => StatusCode::CONFLICT,
        "capacity_exceeded" | "no_space" => StatusCode::INSUFFICIENT_STORAGE,
        "outcome_unknown" | "cancelled" => StatusCode::SERVICE_UNAVAILABLE,
        _ => StatusCode::INTERNAL_SERVER_ERROR,
    }
}

impl From<stow_checkpoint::WsError> for ConsoleError {
    fn from(e: stow_checkpoint::WsError) -> Self {
        ConsoleError::Engine {
            code: e.code().to_string(),
            message: e.to_string(),
        }
    }
}

impl From<stow_store::StoreError> for ConsoleError {
    fn from(e: stow_store::StoreError) -> Self {
        ConsoleError::Store {
            code: e.code(),
            message: e.to_string(),
        }
    }
}

impl From<S3Error> for ConsoleError {
    fn from(e: S3Error) -> Self {
        let code = e.code().as_str().to_string();
        let message = e.message().map_or_else(|| code.clone(), str::to_string);
        ConsoleError::S3 {
            status: e.status_code().unwrap_or(StatusCode::INTERNAL_SERVER_ERROR),
            code,
            message,
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn engine_refusals_keep_the_engine_code() {
        let e = ConsoleError::from(stow_checkpoint::WsError::NotFound("checkpoint x".into()));
        assert_eq!(e.code(), "not_found");
        assert_eq!(e.status(), StatusCode::NOT_FOUND);
        let e = ConsoleError::from(stow_checkpoint::WsError::WorkspaceChanged("p".into()));
        assert_eq!(e.code(), "workspace_changed");
        assert_eq!(e.status(), StatusCode::CONFLICT);
        assert_eq!(e.body()["error"]["code"], "workspace_changed");
        assert_eq!(
            engine_status("io_failure"),
            StatusCode::INTERNAL_SERVER_ERROR
        );
        assert_eq!(engine_status("invalid_request"), StatusCode::BAD_REQUEST);
    }
}
