//! Which bucket a request's `Host` names: virtual-host addressing for
//! `<bucket>.localhost` and `<bucket>.<base-host>`, path style otherwise.

use s3s::host::{S3Host, VirtualHost};
use s3s::S3Result;

/// Virtual-host addressing for `<bucket>.localhost` and
/// `<bucket>.<base-host>`; every other host (an IP, `localhost` itself)
/// means path-style addressing.
pub(crate) struct LocalHosts {
    pub(crate) bases: Vec<String>,
}

impl S3Host for LocalHosts {
    fn parse_host_header<'a>(&'a self, host: &'a str) -> S3Result<VirtualHost<'a>> {
        let name = if host.starts_with('[') {
            host.split(']')
                .next()
                .map_or(host, |h| &host[..h.len() + 1])
        } else {
            host.rsplit_once(':').map_or(host, |(h, _)| h)
        };
        for base in &self.bases {
            let Some(prefix) = name.len().checked_sub(base.len() + 1) else {
                continue;
            };
            let (bucket, rest) = name.split_at(prefix);
            if rest.len() == base.len() + 1
                && rest.as_bytes()[0] == b'.'
                && rest[1..].eq_ignore_ascii_case(base)
                && !bucket.is_empty()
            {
                return Ok(VirtualHost::new(&rest[1..]).with_bucket(bucket));
            }
        }
        Ok(VirtualHost::new(name))
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn virtual_hosts() {
        let hosts = LocalHosts {
            bases: vec!["localhost".into(), "s3.test".into()],
        };
        let bucket = |h: &str| {
            hosts
                .parse_host_header(h)
                .unwrap()
                .bucket()
                .map(String::from)
        };
        assert_eq!(
            bucket("my-bucket.localhost:9000").as_deref(),
            Some("my-bucket")
        );
        assert_eq!(bucket("a.b.s3.test").as_deref(), Some("a.b"));
        assert_eq!(bucket("localhost:9000"), None);
        assert_eq!(bucket("127.0.0.1:9000"), None);
        assert_eq!(bucket("[::1]:9000"), None);
        assert_eq!(bucket("example.com"), None);
    }
}
