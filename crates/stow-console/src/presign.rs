//! Share links: a presigned GET (AWS Signature Version 4 in the query
//! string) for one object on the S3 port, signed with the server's keys.
//!
//! The link is verified by the S3 port like any presigned request (and
//! refused there once expired); the console only signs it. Pure functions
//! over strings and a clock value, unit-tested against AWS's published
//! example.

use std::time::{Duration, SystemTime, UNIX_EPOCH};

use sha2::{Digest, Sha256};

/// The longest life a share link may have (SigV4's limit: 7 days).
pub const MAX_EXPIRY: Duration = Duration::from_secs(7 * 24 * 3600);

/// What a presigned GET is made of.
pub struct PresignRequest<'a> {
    /// The S3 endpoint, `http://host:port` (no trailing slash).
    pub endpoint: &'a str,
    /// The server's region.
    pub region: &'a str,
    /// The server's access key.
    pub access_key: &'a str,
    /// The server's secret key.
    pub secret_key: &'a str,
    /// The bucket (path-style addressing).
    pub bucket: &'a str,
    /// The object key.
    pub key: &'a str,
    /// How long the link works (1 s to [`MAX_EXPIRY`]).
    pub expires: Duration,
    /// When it is signed.
    pub now: SystemTime,
}

/// Whether a link to `key` reaches it: a browser (and most HTTP clients)
/// removes `.` and `..` path segments before it sends the request, so a
/// key with one would be asked for under another path and the signature
/// would not match. (Encoding the dots would not help: `%2E` segments are
/// removed too. A `%` in a key is sent as `%25`, so `%2E` in a key is no
/// dot.)
pub fn survives_browsers(key: &str) -> bool {
    !key.split('/').any(|seg| seg == "." || seg == "..")
}

/// The presigned URL for `req`: `GET <endpoint>/<bucket>/<key>?X-Amz-…`,
/// with only `host` signed and the payload unsigned.
pub fn presigned_get(req: &PresignRequest<'_>) -> String {
    let (date, stamp) = amz_date(req.now);
    let host = req
        .endpoint
        .split_once("://")
        .map_or(req.endpoint, |(_, rest)| rest);
    let host = host.split('/').next().unwrap_or(host);
    let path = format!(
        "/{}/{}",
        uri_encode(req.bucket, false),
        uri_encode(req.key, false)
    );
    let scope = format!("{date}/{}/s3/aws4_request", req.region);
    let mut query = [
        ("X-Amz-Algorithm", "AWS4-HMAC-SHA256".to_string()),
        ("X-Amz-Credential", format!("{}/{scope}", req.access_key)),
        ("X-Amz-Date", stamp.clone()),
        ("X-Amz-Expires", req.expires.as_secs().to_string()),
        ("X-Amz-SignedHeaders", "host".to_string()),
    ]
    .map(|(k, v)| (uri_encode(k, true), uri_encode(&v, true)));
    query.sort();
    let canonical_query = query
        .iter()
        .map(|(k, v)| format!("{k}={v}"))
        .collect::<Vec<_>>()
        .join("&");
    let canonical_request =
        format!("GET\n{path}\n{canonical_query}\nhost:{host}\n\nhost\nUNSIGNED-PAYLOAD");
    let string_to_sign = format!(
        "AWS4-HMAC-SHA256\n{stamp}\n{scope}\n{}",
        hex(&Sha256::digest(canonical_request.as_bytes()))
    );
    let mut key = hmac(
        format!("AWS4{}", req.secret_key).as_bytes(),
        date.as_bytes(),
    );
    for part in [req.region, "s3", "aws4_request"] {
        key = hmac(&key, part.as_bytes());
    }
    let signature = hex(&hmac(&key, string_to_sign.as_bytes()));
    format!(
        "{}{path}?{canonical_query}&X-Amz-Signature={signature}",
        req.endpoint.trim_end_matches('/')
    )
}

/// SigV4's URI encoding: every byte but `A-Z a-z 0-9 - _ . ~` as `%XX`;
/// `/` too when `slash` (query values), kept otherwise (paths).
pub fn uri_encode(s: &str, slash: bool) -> String {
    let mut out = String::with_capacity(s.len());
    for b in s.bytes() {
        if b.is_ascii_alphanumeric()
            || matches!(b, b'-' | b'_' | b'.' | b'~')
            || (b == b'/' && !slash)
        {
            out.push(b as char);
        } else {
            out.push_str(&format!("%{b:02X}"));
        }
    }
    out
}

/// `(YYYYMMDD, YYYYMMDDTHHMMSSZ)` of `t` in UTC.
fn amz_date(t: SystemTime) -> (String, String) {
    let secs = t.duration_since(UNIX_EPOCH).map_or(0, |d| d.as_secs());
    let (days, rest) = (secs / 86_400, secs % 86_400);
    let (y, m, d) = civil_from_days(days);
    let date = format!("{y:04}{m:02}{d:02}");
    let stamp = format!(
        "{date}T{:02}{:02}{:02}Z",
        rest / 3600,
        (rest % 3600) / 60,
        rest % 60
    );
    (date, stamp)
}

/// The Gregorian (year, month, day) of a count of days since 1970-01-01
/// (Howard Hinnant's `civil_from_days`, for days ≥ 0).
fn civil_from_days(days: u64) -> (u64, u64, u64) {
    let z = days + 719_468;
    let era = z / 146_097;
    let doe = z - era * 146_097;
    let yoe = (doe - doe / 1460 + doe / 36_524 - doe / 146_096) / 365;
    let doy = doe - (365 * yoe + yoe / 4 - yoe / 100);
    let mp = (5 * doy + 2) / 153;
    let d = doy - (153 * mp + 2) / 5 + 1;
    let m = if mp < 10 { mp + 3 } else { mp - 9 };
    let y = yoe + era * 400 + u64::from(m <= 2);
    (y, m, d)
}

/// HMAC-SHA256 (RFC 2104) over `sha2`.
fn hmac(key: &[u8], message: &[u8]) -> [u8; 32] {
    const BLOCK: usize = 64;
    let mut block = [0u8; BLOCK];
    if key.len() > BLOCK {
        block[..32].copy_from_slice(&Sha256::digest(key));
    } else {
        block[..key.len()].copy_from_slice(key);
    }
    let pad = |byte: u8| block.map(|b| b ^ byte);
    let inner = Sha256::new()
        .chain_update(pad(0x36))
        .chain_update(message)
        .finalize();
    Sha256::new()
        .chain_update(pad(0x5c))
        .chain_update(inner)
        .finalize()
        .into()
}

fn hex(bytes: &[u8]) -> String {
    bytes.iter().map(|b| format!("{b:02x}")).collect()
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn keys_with_dot_segments_do_not_survive_browsers() {
        for key in [
            "a.txt",
            "dir/.hidden",
            "dir/..x",
            "...",
            "a//b",
            "d/%2E%2e/e",
        ] {
            assert!(survives_browsers(key), "{key}");
        }
        for key in [".", "..", "x/../y", "d/./e", "a/.."] {
            assert!(!survives_browsers(key), "{key}");
        }
    }

    #[test]
    fn matches_the_aws_presigned_get_example() {
        // "Authenticating Requests: Using Query Parameters (AWS Signature
        // Version 4)", example: GET examplebucket/test.txt for 24 hours.
        let now = UNIX_EPOCH + Duration::from_secs(1_369_353_600); // 2013-05-24T00:00:00Z
        let url = presigned_get(&PresignRequest {
            endpoint: "https://examplebucket.s3.amazonaws.com",
            region: "us-east-1",
            access_key: "AKIAIOSFODNN7EXAMPLE",
            secret_key: "wJalrXUtnFEMI/K7MDENG/bPxRfiCYEXAMPLEKEY",
            bucket: "",
            key: "test.txt",
            expires: Duration::from_secs(86_400),
            now,
        });
        // The example is virtual-hosted (path `/test.txt`); ours is
        // path-style, so the empty bucket gives `//test.txt`: check the
        // signing pieces against the example with the path it uses.
        assert!(url.contains("X-Amz-Date=20130524T000000Z"));
        assert!(url.contains(
            "X-Amz-Credential=AKIAIOSFODNN7EXAMPLE%2F20130524%2Fus-east-1%2Fs3%2Faws4_request"
        ));
        let key = {
            let mut k = hmac(b"AWS4wJalrXUtnFEMI/K7MDENG/bPxRfiCYEXAMPLEKEY", b"20130524");
            for part in ["us-east-1", "s3", "aws4_request"] {
                k = hmac(&k, part.as_bytes());
            }
            k
        };
        let canonical = "GET\n/test.txt\nX-Amz-Algorithm=AWS4-HMAC-SHA256&X-Amz-Credential=AKIAIOSFODNN7EXAMPLE%2F20130524%2Fus-east-1%2Fs3%2Faws4_request&X-Amz-Date=20130524T000000Z&X-Amz-Expires=86400&X-Amz-SignedHeaders=host\nhost:examplebucket.s3.amazonaws.com\n\nhost\nUNSIGNED-PAYLOAD";
        let to_sign = format!(
            "AWS4-HMAC-SHA256\n20130524T000000Z\n20130524/us-east-1/s3/aws4_request\n{}",
            hex(&Sha256::digest(canonical.as_bytes()))
        );
        assert_eq!(
            hex(&hmac(&key, to_sign.as_bytes())),
            "aeeed9bbccd4d02ee5c0109b86d86835f995330da4c265957d157751f604d404"
        );
    }

    #[test]
    fn hmac_matches_rfc_4231() {
        // Test case 2.
        assert_eq!(
            hex(&hmac(b"Jefe", b"what do ya want for nothing?")),
            "5bdcc146bf60754e6a042426089575c75a003f089d2739839dec58b964ec3843"
        );
        // Test case 6: a key longer than the block.
        assert_eq!(
            hex(&hmac(
                &[0xaa; 131],
                b"Test Using Larger Than Block-Size Key - Hash Key First"
            )),
            "60e431591ee0b67f0d8a26aacbf5b77f8e0bc6213728c5140546040f0ee37f54"
        );
    }

    #[test]
    fn dates_and_encoding() {
        assert_eq!(civil_from_days(0), (1970, 1, 1));
        assert_eq!(civil_from_days(11_016), (2000, 2, 29));
        assert_eq!(civil_from_days(20_819), (2027, 1, 1));
        let t = UNIX_EPOCH + Duration::from_secs(951_782_400 + 3_723);
        assert_eq!(amz_date(t).1, "20000229T010203Z");
        assert_eq!(uri_encode("a b/ü~", false), "a%20b/%C3%BC~");
        assert_eq!(uri_encode("a/b", true), "a%2Fb");
        assert_eq!(
            uri_encode("<img src=x onerror=alert(1)>", false),
            "%3Cimg%20src%3Dx%20onerror%3Dalert%281%29%3E"
        );
    }
}
