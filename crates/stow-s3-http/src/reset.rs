//! `POST /_stow/reset`: empties the served store, for test suites that
//! want a clean S3 state per test on one long-lived server.
//!
//! Answered only by a server whose [`crate::ServerConfig::allow_reset`] is
//! set (`stow-s3 serve --allow-reset`; the packages' launchers pass it);
//! any other server refuses it with `405 MethodNotAllowed` before looking
//! at the signature, and changes nothing. With the flag the request goes
//! through `s3s` like any S3 request, so it is SigV4-verified (header or
//! presigned) with the server's key pair: an unsigned request is `403
//! AccessDenied`, a bad signature `403 SignatureDoesNotMatch`. The store
//! then empties itself in one transaction ([`stow_store::Store::reset`])
//! and the answer is `200` with a JSON body:
//! `{"reset": true, "buckets": N, "objects": N, "bytes": N, "uploads": N,
//! "receipts": N}` (what was removed).

use http::{header, HeaderMap, HeaderValue, Method, StatusCode, Uri};
use s3s::route::S3Route;
use s3s::validation::{AwsNameValidation, NameValidation};
use s3s::{Body, S3Error, S3ErrorCode, S3Request, S3Response, S3Result};
use std::sync::Arc;
use stow_store::ObjectBackend;

use crate::errors::to_s3;

/// The path of the reset call.
pub const RESET_PATH: &str = "/_stow/reset";

/// The refusal of a reset by a server that was not started to allow one,
/// or of a method other than POST on its path.
pub(crate) fn refusal(allowed: bool) -> S3Error {
    let message = if allowed {
        "/_stow/reset answers POST only"
    } else {
        "this server was not started with --allow-reset; /_stow/reset is refused"
    };
    S3Error::with_message(S3ErrorCode::MethodNotAllowed, message)
}

/// The reset route inside `s3s`, reached after SigV4 verification.
pub(crate) struct ResetRoute {
    pub store: Arc<dyn ObjectBackend>,
}

#[async_trait::async_trait]
impl S3Route for ResetRoute {
    fn is_match(
        &self,
        method: &Method,
        uri: &Uri,
        _headers: &HeaderMap,
        _extensions: &mut http::Extensions,
    ) -> bool {
        method == Method::POST && uri.path() == RESET_PATH
    }

    // The default `check_access` refuses a request without verified
    // credentials (an anonymous one) with AccessDenied.

    async fn call(&self, _req: S3Request<Body>) -> S3Result<S3Response<Body>> {
        let store = Arc::clone(&self.store);
        let report = tokio::task::spawn_blocking(move || store.reset())
            .await
            .map_err(S3Error::internal_error)?
            .map_err(to_s3)?;
        tracing::info!(
            buckets = report.buckets,
            objects = report.objects,
            uploads = report.uploads,
            receipts = report.receipts,
            "store reset"
        );
        let body = serde_json::json!({
            "reset": true,
            "buckets": report.buckets,
            "objects": report.objects,
            "bytes": report.bytes,
            "uploads": report.uploads,
            "receipts": report.receipts,
        });
        let mut resp = S3Response::with_status(Body::from(body.to_string()), StatusCode::OK);
        resp.headers.insert(
            header::CONTENT_TYPE,
            HeaderValue::from_static("application/json"),
        );
        Ok(resp)
    }
}

/// S3's bucket naming rules, plus the `_stow` of the reset path: `s3s`
/// parses a path before a route sees it, and `/_stow/reset` reads as bucket
/// `_stow`. No S3 operation can use that bucket: the store refuses the
/// name (`InvalidBucketName`).
pub(crate) struct WithAdminPath;

impl NameValidation for WithAdminPath {
    fn validate_bucket_name(&self, name: &str) -> bool {
        name == "_stow" || AwsNameValidation::new().validate_bucket_name(name)
    }
}
