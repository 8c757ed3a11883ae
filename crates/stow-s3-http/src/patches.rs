//! Where this server mends what `s3s` and clients do on the wire, around
//! the S3 call: error bodies that name their request, GetObjectAttributes'
//! unquoted ETag, ListObjectVersions' entries in one order, SigV4 requests
//! dated by `Date` alone, and connections a botocore bug would misread
//! after `Expect: 100-continue`.

use http::{header, HeaderValue, Request, Response, StatusCode};

use crate::respond::Body;

/// The message of an error `s3s` answers without one (clients show
/// "Unknown" for a body without `<Message>`).
fn missing_message(code: &str) -> String {
    match code {
        "SignatureDoesNotMatch" => {
            "The signature does not match the one computed from the request \
             and the secret key: check the secret key and how the request is signed."
                .to_string()
        }
        "InvalidBucketName" => {
            "The bucket name is not valid (3 to 63 lower-case letters, digits, dots and hyphens)."
                .to_string()
        }
        other => format!("The request was refused: {other}."),
    }
}

/// An S3 error body names the request (`<RequestId>`) as its
/// `x-amz-request-id` header does, so a report quoting either finds it,
/// and carries a `<Message>` (see [`missing_message`]).
pub(crate) fn error_with_request_id(resp: Response<Body>, id: &str) -> Response<Body> {
    let (mut parts, body) = resp.into_parts();
    let Some(xml) = body.bytes() else {
        return Response::from_parts(parts, body);
    };
    let mut text = String::from_utf8_lossy(&xml).into_owned();
    let Some(end) = text.rfind("</Error>") else {
        return Response::from_parts(parts, body);
    };
    if !text.contains("<Message>") {
        let code = match (text.find("<Code>"), text.find("</Code>")) {
            (Some(a), Some(b)) if a + 6 <= b => text[a + 6..b].to_string(),
            _ => String::new(),
        };
        text.insert_str(
            end,
            &format!("<Message>{}</Message>", missing_message(&code)),
        );
    }
    let Some(end) = text.rfind("</Error>") else {
        return Response::from_parts(parts, body);
    };
    let element = format!("<RequestId>{id}</RequestId>");
    let text = match (text.find("<RequestId>"), text.find("</RequestId>")) {
        (Some(a), Some(b)) if a < b => {
            format!(
                "{}{element}{}",
                &text[..a],
                &text[b + "</RequestId>".len()..]
            )
        }
        _ => format!("{}{element}{}", &text[..end], &text[end..]),
    };
    if let Ok(v) = HeaderValue::from_str(&text.len().to_string()) {
        parts.headers.insert(header::CONTENT_LENGTH, v);
    }
    Response::from_parts(parts, Body::from(text))
}

/// GetObjectAttributes names the ETag without quotes on AWS (unlike every
/// other response), and SDKs compare it as sent; `s3s` always quotes it.
pub(crate) fn unquote_attributes_etag(resp: Response<Body>) -> Response<Body> {
    let (mut parts, body) = resp.into_parts();
    let Some(xml) = body.bytes().filter(|_| parts.status == StatusCode::OK) else {
        return Response::from_parts(parts, body);
    };
    let text = String::from_utf8_lossy(&xml)
        .replace("<ETag>\"", "<ETag>")
        .replace("\"</ETag>", "</ETag>");
    if let Ok(v) = HeaderValue::from_str(&text.len().to_string()) {
        parts.headers.insert(header::CONTENT_LENGTH, v);
    }
    Response::from_parts(parts, Body::from(text))
}

/// The private response header by which ListObjectVersions hands this
/// layer the order of its entries, one letter each: `V` a version, `M` a
/// delete marker. It never leaves the server.
pub(crate) const VERSION_ORDER_HEADER: &str = "x-stow-version-order";

/// ListObjectVersions lists versions and delete markers in one sequence,
/// by key and then newest first, as S3 does; `s3s`'s output keeps them in
/// two lists and writes every `<Version>` before every `<DeleteMarker>`.
/// The handler names the order in [`VERSION_ORDER_HEADER`]; here the
/// elements are put back in that order (each list's own order is kept).
pub(crate) fn interleave_versions(resp: Response<Body>) -> Response<Body> {
    let (mut parts, body) = resp.into_parts();
    let Some(order) = parts.headers.remove(VERSION_ORDER_HEADER) else {
        return Response::from_parts(parts, body);
    };
    let Some(xml) = body.bytes() else {
        return Response::from_parts(parts, body);
    };
    let Some(text) = std::str::from_utf8(&xml)
        .ok()
        .and_then(|xml| interleave(xml, order.as_bytes()))
    else {
        return Response::from_parts(parts, Body::from(xml));
    };
    if let Ok(v) = HeaderValue::from_str(&text.len().to_string()) {
        parts.headers.insert(header::CONTENT_LENGTH, v);
    }
    Response::from_parts(parts, Body::from(text))
}

/// The byte spans of every `<name>…</name>` element in `xml`, in order.
fn element_spans(xml: &str, name: &str) -> Vec<(usize, usize)> {
    let (open, close) = (format!("<{name}>"), format!("</{name}>"));
    let mut spans = Vec::new();
    let mut from = 0;
    while let Some(start) = xml[from..].find(&open).map(|i| from + i) {
        let Some(end) = xml[start..].find(&close).map(|i| start + i + close.len()) else {
            break;
        };
        spans.push((start, end));
        from = end;
    }
    spans
}

/// `xml` with its `<Version>` and `<DeleteMarker>` elements in `order`, all
/// where the first of them was (`s3s` writes a result's members by name,
/// so other members may sit between the two lists), or `None` where the
/// document is not the expected shape (it is then left as it was).
fn interleave(xml: &str, order: &[u8]) -> Option<String> {
    let versions = element_spans(xml, "Version");
    let markers = element_spans(xml, "DeleteMarker");
    let counts = |c: u8| order.iter().filter(|&&o| o == c).count();
    if counts(b'V') != versions.len() || counts(b'M') != markers.len() {
        return None;
    }
    let mut all: Vec<(usize, usize)> = versions.iter().chain(&markers).copied().collect();
    all.sort_unstable();
    let first = all.first()?.0;
    let (mut v, mut m) = (versions.iter(), markers.iter());
    let mut entries = String::new();
    for kind in order {
        let (a, b) = match kind {
            b'V' => v.next()?,
            b'M' => m.next()?,
            _ => return None,
        };
        entries.push_str(&xml[*a..*b]);
    }
    let mut out = String::with_capacity(xml.len());
    let mut from = 0;
    for (a, b) in all {
        out.push_str(&xml[from..a]);
        if a == first {
            out.push_str(&entries);
        }
        from = b;
    }
    out.push_str(&xml[from..]);
    Some(out)
}

/// SigV4 lets a request carry its time in `Date` instead of `x-amz-date`
/// (the string to sign holds it in ISO 8601 basic form either way); `s3s`
/// reads only `x-amz-date`, so a header-signed request dated by `Date`
/// alone gets the same instant as `x-amz-date` too. The signed headers are
/// untouched: `date` stays what was signed.
pub(crate) fn date_as_amz_date(headers: &mut http::HeaderMap) {
    let sigv4 = headers
        .get(header::AUTHORIZATION)
        .and_then(|v| v.to_str().ok())
        .is_some_and(|a| a.starts_with("AWS4-HMAC-SHA256"));
    if !sigv4 || headers.contains_key("x-amz-date") {
        return;
    }
    let Some(date) = headers.get(header::DATE).and_then(|v| v.to_str().ok()) else {
        return;
    };
    if let Some(v) = http_date_to_amz(date).and_then(|d| HeaderValue::from_str(&d).ok()) {
        headers.insert("x-amz-date", v);
    }
}

/// An HTTP date (`Tue, 01 Dec 2026 12:00:00 GMT`, or with `+0000`/`-0000`)
/// as `20261201T120000Z`.
fn http_date_to_amz(date: &str) -> Option<String> {
    let fields: Vec<&str> = date.split_whitespace().collect();
    let [_, day, month, year, clock, zone] = fields.as_slice() else {
        return None;
    };
    if !matches!(*zone, "GMT" | "UTC" | "UT" | "Z" | "+0000" | "-0000") {
        return None;
    }
    const MONTHS: [&str; 12] = [
        "Jan", "Feb", "Mar", "Apr", "May", "Jun", "Jul", "Aug", "Sep", "Oct", "Nov", "Dec",
    ];
    let month = MONTHS.iter().position(|m| m.eq_ignore_ascii_case(month))? + 1;
    let day: u32 = day.parse().ok()?;
    let year: u32 = year.parse().ok()?;
    let hms: Vec<u32> = clock
        .split(':')
        .map(|p| p.parse().ok())
        .collect::<Option<_>>()?;
    let [h, m, s] = hms.as_slice() else {
        return None;
    };
    let valid = (1..=31).contains(&day) && *h < 24 && *m < 60 && *s < 61 && year >= 1970;
    valid.then(|| format!("{year:04}{month:02}{day:02}T{h:02}{m:02}{s:02}Z"))
}

/// What a request's `Expect: 100-continue` means for its connection.
///
/// hyper sends `100 Continue` when a handler first reads the body, so a
/// request whose body is never read (an announced empty body, or one
/// refused before reading) gets its final response with no `100 Continue`
/// first. HTTP allows that, but botocore up to at least 1.43 (the AWS CLI
/// v1) then misreads a later response on the same pooled connection and
/// stalls for 30 s (boto/botocore#3755; seen here in about half the `aws s3
/// sync` runs of a tree holding an empty file). Closing such connections
/// (`Connection: close`) leaves nothing to misread.
pub(crate) struct Continuation {
    expected: bool,
    empty_body: bool,
}

impl Continuation {
    pub(crate) fn of<B>(req: &Request<B>) -> Continuation {
        let expected = req
            .headers()
            .get(header::EXPECT)
            .and_then(|v| v.to_str().ok())
            .is_some_and(|v| v.trim().eq_ignore_ascii_case("100-continue"));
        let empty_body = req
            .headers()
            .get(header::CONTENT_LENGTH)
            .and_then(|v| v.to_str().ok())
            .is_some_and(|v| v.trim() == "0");
        Continuation {
            expected,
            empty_body,
        }
    }

    /// Whether the connection must close after a response of `status`:
    /// the request expected `100 Continue` and either announced no body or
    /// was refused (its body possibly unread).
    pub(crate) fn close_after(&self, status: hyper::StatusCode) -> bool {
        self.expected && (self.empty_body || status.as_u16() >= 400)
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn http_dates_become_amz_dates() {
        assert_eq!(
            http_date_to_amz("Tue, 01 Dec 2026 12:03:04 GMT").as_deref(),
            Some("20261201T120304Z")
        );
        assert_eq!(
            http_date_to_amz("Tue, 01 Dec 2026 12:03:04 -0000").as_deref(),
            Some("20261201T120304Z")
        );
        for bad in [
            "",
            "Tue, 01 Dec 2026 12:03:04 +0100",
            "Tue, 41 Dec 2026 12:03:04 GMT",
            "yesterday",
        ] {
            assert_eq!(http_date_to_amz(bad), None, "{bad}");
        }
    }

    #[test]
    fn version_entries_go_back_in_the_listed_order() {
        // As `s3s` writes it: members by name, so the two lists are apart.
        let xml = "<R><DeleteMarker><Key>a</Key><VersionId>3</VersionId></DeleteMarker>\
                   <DeleteMarker><Key>c</Key></DeleteMarker><IsTruncated>false</IsTruncated>\
                   <Version><Key>a</Key><VersionId>2</VersionId></Version><Version><Key>b</Key></Version></R>";
        let out = interleave(xml, b"MVVM").expect("interleaved");
        let keys: Vec<&str> = out
            .match_indices("<Key>")
            .map(|(i, _)| &out[i + 5..i + 6])
            .collect();
        assert_eq!(keys, ["a", "a", "b", "c"]);
        assert!(out.starts_with(
            "<R><DeleteMarker><Key>a</Key><VersionId>3</VersionId></DeleteMarker><Version><Key>a"
        ));
        assert!(out.ends_with(
            "<DeleteMarker><Key>c</Key></DeleteMarker><IsTruncated>false</IsTruncated></R>"
        ));
        assert_eq!(out.len(), xml.len());
        // An order that does not fit the document leaves it alone.
        assert!(interleave(xml, b"MVV").is_none());
        assert!(interleave(xml, b"MMVV!").is_none());
        assert!(interleave("<R></R>", b"").is_none());
    }
}
