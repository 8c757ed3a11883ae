//! Small builders of responses outside the S3 operations (errors before
//! `s3s`, admin routes), and header reading.

use http::{header, HeaderValue, Request, Response, StatusCode};
use hyper::body::Incoming;
use s3s::S3Error;

/// The body type every response of the server carries.
pub(crate) type Body = s3s::Body;

pub(crate) fn xml_error(err: S3Error) -> Response<Body> {
    match err.to_http_response() {
        Ok(resp) => resp,
        Err(_) => plain(StatusCode::INTERNAL_SERVER_ERROR, "internal error"),
    }
}

/// 32 hex characters identifying one request in logs and responses.
pub(crate) fn request_id() -> String {
    let n: u128 = rand::random();
    format!("{n:032x}")
}

pub(crate) fn plain(status: StatusCode, text: &str) -> Response<Body> {
    let mut resp = Response::new(Body::from(text.to_string()));
    *resp.status_mut() = status;
    resp
}

pub(crate) fn json(status: StatusCode, value: serde_json::Value) -> Response<Body> {
    let mut resp = Response::new(Body::from(value.to_string()));
    *resp.status_mut() = status;
    resp.headers_mut().insert(
        header::CONTENT_TYPE,
        HeaderValue::from_static("application/json"),
    );
    resp
}

pub(crate) fn header_str<'a>(req: &'a Request<Incoming>, name: &str) -> Option<&'a str> {
    req.headers().get(name).and_then(|v| v.to_str().ok())
}
