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
            ConsoleError::CrossOrigin(_) => "cross_origin",
            ConsoleError::Csrf => "csrf",
            ConsoleError::Host => "bad_host",
            ConsoleError::BadRequest(_) => "bad_request",
            ConsoleError::NotFound => "not_found",
            ConsoleError::Method => "method_not_allowed",
            ConsoleError::TooLarge => "too_large",
            ConsoleError::LengthRequired => "length_required",
            ConsoleError::S3 { code, .. } => code,
            ConsoleError::Internal(_) => "internal",
        }
    }

    /// The HTTP status of the refusal.
    pub fn status(&self) -> StatusCode {
        match self {
            ConsoleError::Unauthenticated | ConsoleError::BadCredentials => {
                StatusCode::UNAUTHORIZED
            }
            ConsoleError::CrossOrigin(_) | ConsoleError::Csrf => StatusCode::FORBIDDEN,
            ConsoleError::Host => StatusCode::MISDIRECTED_REQUEST,
            ConsoleError::BadRequest(_) => StatusCode::BAD_REQUEST,
            ConsoleError::NotFound => StatusCode::NOT_FOUND,
            ConsoleError::Method => StatusCode::METHOD_NOT_ALLOWED,
            ConsoleError::TooLarge => StatusCode::PAYLOAD_TOO_LARGE,
            ConsoleError::LengthRequired => StatusCode::LENGTH_REQUIRED,
            ConsoleError::S3 { status, .. } => *status,
            ConsoleError::Internal(_) => StatusCode::INTERNAL_SERVER_ERROR,
        }
    }

    /// The JSON body of the refusal.
    pub fn body(&self) -> serde_json::Value {
        serde_json::json!({
            "error": { "code": self.code(), "message": self.to_string() }
        })
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
