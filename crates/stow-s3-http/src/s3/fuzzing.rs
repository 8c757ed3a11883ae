//! Entry point for the fuzzer (`fuzz/`, issue 28) and the regression run
//! of its corpus: the request parts this crate parses itself (s3s parses
//! the rest), from hostile bytes, never a panic, hang or unbounded
//! allocation. Not an API.

use super::{acl, convert, tagging};

/// One header value of a request, the first byte choosing which of our
/// parsers reads the rest: an HTTP date (conditional headers), a
/// continuation token, an `x-amz-tagging` header, a canned ACL, the
/// conditional-write headers, the trailer header, or an object key and
/// bucket name as the store checks them.
pub fn request_headers(bytes: &[u8]) {
    let Some((&pick, rest)) = bytes.split_first() else {
        return;
    };
    let text = String::from_utf8_lossy(rest);
    match pick % 8 {
        0 => {
            let _ = convert::parse_http_date(&text);
        }
        1 => {
            // A token we made decodes to the key it was made from.
            if let Ok(key) = convert::decode_token(&text) {
                let again = convert::decode_token(&convert::encode_token(&key));
                assert_eq!(again.ok().as_deref(), Some(key.as_str()));
            }
        }
        2 => {
            let _ = tagging::tags_of_header(Some(&text));
        }
        3 => {
            let _ = acl::canned(Some(&text));
        }
        4 | 5 => {
            let name = if pick % 8 == 4 {
                "if-match"
            } else {
                "if-none-match"
            };
            let mut headers = http::HeaderMap::new();
            if let Ok(v) = http::HeaderValue::from_bytes(rest) {
                headers.insert(name, v);
            }
            let _ = convert::header_condition(&headers);
        }
        6 => {
            let mut headers = http::HeaderMap::new();
            if let Ok(v) = http::HeaderValue::from_bytes(rest) {
                headers.insert("x-amz-trailer", v);
            }
            let _ = convert::trailer_alg(&headers);
        }
        _ => {
            let _ = stow_store::validate::object_key(&text);
            let _ = stow_store::validate::bucket_name(&text);
        }
    }
}
