//! The condition keys of one HTTP request ([`RequestKeys`]): `s3:x-amz-*`
//! from its headers, `s3:prefix`, `s3:delimiter`, `s3:max-keys` and
//! `s3:versionid` from its query, `s3:RequestObjectTag/<k>` and
//! `s3:RequestObjectTagKeys` from `x-amz-tagging`,
//! `s3:ExistingObjectTag/<k>` from the object's tags (read by the caller),
//! and `aws:SecureTransport`, `aws:SourceIp`, `aws:Referer`,
//! `aws:UserAgent`, `aws:PrincipalType`, `aws:EpochTime`. Any other key
//! is missing (so `aws:CurrentTime`, compared by the Date operators, which
//! a policy here is refused for).

use std::collections::BTreeMap;
use std::net::IpAddr;

use http::HeaderMap;

use super::action::{copy_source, percent_decode_with};
use super::eval::Context;

/// The peer's address, put in the request's extensions before `s3s` sees
/// it, for `aws:SourceIp`.
#[derive(Debug, Clone, Copy)]
pub(crate) struct Peer(pub(crate) IpAddr);

/// A request's condition keys.
pub(crate) struct RequestKeys<'a> {
    pub(crate) headers: &'a HeaderMap,
    pub(crate) query: Option<&'a str>,
    pub(crate) peer: Option<IpAddr>,
    pub(crate) anonymous: bool,
    /// The tags of the object the request is about, where a condition
    /// needs them (`None`: not read, or no such object).
    pub(crate) object_tags: Option<&'a BTreeMap<String, String>>,
}

impl RequestKeys<'_> {
    fn header(&self, name: &str) -> Option<Vec<String>> {
        let values: Vec<String> = self
            .headers
            .get_all(name)
            .iter()
            .filter_map(|v| v.to_str().ok())
            .map(str::to_string)
            .collect();
        (!values.is_empty()).then_some(values)
    }

    fn query_param(&self, name: &str) -> Option<Vec<String>> {
        let values: Vec<String> = self
            .query?
            .split('&')
            .filter_map(|pair| {
                let (k, v) = pair.split_once('=').unwrap_or((pair, ""));
                (percent_decode_with(k, true) == name).then(|| percent_decode_with(v, true))
            })
            .collect();
        (!values.is_empty()).then_some(values)
    }

    /// The tags `x-amz-tagging` asks for (form-encoded `k=v&k2=v2`).
    fn request_tags(&self) -> Option<Vec<(String, String)>> {
        let header = self.headers.get("x-amz-tagging")?.to_str().ok()?;
        Some(
            header
                .split('&')
                .filter(|p| !p.is_empty())
                .map(|pair| {
                    let (k, v) = pair.split_once('=').unwrap_or((pair, ""));
                    (percent_decode_with(k, true), percent_decode_with(v, true))
                })
                .collect(),
        )
    }
}

impl Context for RequestKeys<'_> {
    fn values(&self, key: &str) -> Option<Vec<String>> {
        let one = |v: String| Some(vec![v]);
        if let Some(tag) = key.strip_prefix("s3:existingobjecttag/") {
            return self.object_tags?.get(tag).cloned().and_then(one);
        }
        if let Some(tag) = key.strip_prefix("s3:requestobjecttag/") {
            let tags = self.request_tags()?;
            let values: Vec<String> = tags
                .into_iter()
                .filter(|(k, _)| k == tag)
                .map(|(_, v)| v)
                .collect();
            return (!values.is_empty()).then_some(values);
        }
        match key {
            "s3:requestobjecttagkeys" => {
                Some(self.request_tags()?.into_iter().map(|(k, _)| k).collect())
            }
            // The header as a policy compares it: `bucket/key`, decoded.
            "s3:x-amz-copy-source" => {
                one(copy_source(self.headers.get("x-amz-copy-source")?.to_str().ok()?)?.0)
            }
            "s3:prefix" => self.query_param("prefix"),
            "s3:delimiter" => self.query_param("delimiter"),
            "s3:max-keys" => self.query_param("max-keys"),
            "s3:versionid" => self.query_param("versionId"),
            // This server speaks plain HTTP (a TLS proxy in front is not
            // something it can know of).
            "aws:securetransport" => one("false".into()),
            "aws:sourceip" => one(self.peer?.to_string()),
            "aws:referer" => self.header("referer"),
            "aws:useragent" => self.header("user-agent"),
            "aws:principaltype" => one((if self.anonymous {
                "Anonymous"
            } else {
                "Account"
            })
            .into()),
            "aws:epochtime" => one(time::OffsetDateTime::now_utc().unix_timestamp().to_string()),
            _ => key
                .strip_prefix("s3:")
                .filter(|h| h.starts_with("x-amz-"))
                .and_then(|h| self.header(h)),
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn keys_from_headers_and_query() {
        let mut headers = HeaderMap::new();
        headers.insert("x-amz-acl", "public-read".parse().unwrap());
        headers.insert("x-amz-copy-source", "/src/public%2Fa".parse().unwrap());
        headers.insert(
            "x-amz-tagging",
            "security=public&a%20b=c+d".parse().unwrap(),
        );
        let tags = BTreeMap::from([("Team".to_string(), "x".to_string())]);
        let keys = RequestKeys {
            headers: &headers,
            query: Some("list-type=2&prefix=a%2Fb&max-keys=5"),
            peer: Some("127.0.0.1".parse().unwrap()),
            anonymous: true,
            object_tags: Some(&tags),
        };
        let v = |k: &str| keys.values(k);
        assert_eq!(v("s3:x-amz-acl"), Some(vec!["public-read".into()]));
        assert_eq!(v("s3:x-amz-copy-source"), Some(vec!["src/public/a".into()]));
        assert_eq!(v("s3:x-amz-metadata-directive"), None);
        assert_eq!(
            v("s3:requestobjecttag/security"),
            Some(vec!["public".into()])
        );
        assert_eq!(v("s3:requestobjecttag/a b"), Some(vec!["c d".into()]));
        assert_eq!(
            v("s3:requestobjecttagkeys"),
            Some(vec!["security".into(), "a b".into()])
        );
        assert_eq!(v("s3:existingobjecttag/Team"), Some(vec!["x".into()]));
        assert_eq!(v("s3:existingobjecttag/team"), None);
        assert_eq!(v("s3:prefix"), Some(vec!["a/b".into()]));
        assert_eq!(v("s3:max-keys"), Some(vec!["5".into()]));
        assert_eq!(v("s3:delimiter"), None);
        assert_eq!(v("aws:sourceip"), Some(vec!["127.0.0.1".into()]));
        assert_eq!(v("aws:securetransport"), Some(vec!["false".into()]));
        assert_eq!(v("aws:principaltype"), Some(vec!["Anonymous".into()]));
        assert_eq!(v("s3:unknown"), None);
    }
}
