//! What a policy says about one request: [`Policy::decide`]. Pure: the
//! request is an action, a resource ARN, whether the caller is anonymous
//! and a [`Context`] that answers condition keys.

use std::net::IpAddr;

use super::document::{cidr, Condition, Effect, Op, Policy, Principals, SetOp, Statement};
use super::glob;

/// The values of condition keys for one request (`None`: the key is not
/// in the request).
pub(crate) trait Context {
    /// The values of `key` (lower-cased).
    fn values(&self, key: &str) -> Option<Vec<String>>;
}

/// One request as a policy sees it.
pub(crate) struct Ask<'a> {
    /// An unsigned request.
    pub(crate) anonymous: bool,
    /// The S3 action, e.g. `s3:GetObject`.
    pub(crate) action: &'a str,
    /// The resource's ARN: `arn:aws:s3:::bucket` or `arn:aws:s3:::bucket/key`.
    pub(crate) resource: &'a str,
    pub(crate) context: &'a dyn Context,
}

/// What the policy says.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub(crate) enum Decision {
    /// A Deny statement matches: refused, whoever asks.
    Deny,
    /// An Allow statement matches and no Deny does.
    Allow,
    /// No statement matches: the policy says nothing.
    Silent,
}

impl Policy {
    /// Every statement that matches `ask`: a Deny beats any Allow.
    pub(crate) fn decide(&self, ask: &Ask<'_>) -> Decision {
        let mut decision = Decision::Silent;
        for s in &self.statements {
            if !statement_matches(s, ask) {
                continue;
            }
            match s.effect {
                Effect::Deny => return Decision::Deny,
                Effect::Allow => decision = Decision::Allow,
            }
        }
        decision
    }
}

fn statement_matches(s: &Statement, ask: &Ask<'_>) -> bool {
    let principal = match &s.principals {
        Principals::Everyone => true,
        // With one user, every named principal is that user.
        Principals::Named(_) => !ask.anonymous,
        Principals::AllBut(names) => ask.anonymous && !names.iter().any(|n| n == "*"),
    };
    let action = s
        .actions
        .iter()
        .any(|a| a == "*" || glob::matches(a, ask.action, true))
        != s.not_action;
    let resource = s
        .resources
        .iter()
        .any(|r| glob::matches(r, ask.resource, false))
        != s.not_resource;
    principal && action && resource && s.conditions.iter().all(|c| condition_holds(c, ask.context))
}

/// One condition against the request's values of its key. A missing key
/// satisfies `…IfExists` and the negated operators and nothing else (as
/// AWS evaluates them); `Null` asks whether it is missing.
fn condition_holds(c: &Condition, context: &dyn Context) -> bool {
    let values = context.values(&c.key);
    if c.op == Op::Null {
        let missing = values.is_none();
        return c
            .values
            .iter()
            .any(|v| v.eq_ignore_ascii_case("true") == missing);
    }
    let Some(values) = values else {
        return c.if_exists || c.op.negated() || c.set == SetOp::All;
    };
    let positive = |value: &str| c.values.iter().any(|want| compare(c.op, value, want));
    match (c.set, c.op.negated()) {
        // Negated: no value may match what the policy names.
        (SetOp::Any, true) => !values.iter().any(|v| positive(v)),
        (SetOp::Any, false) => values.iter().any(|v| positive(v)),
        (SetOp::All, true) => values.iter().all(|v| !positive(v)),
        (SetOp::All, false) => values.iter().all(|v| positive(v)),
    }
}

/// Whether `value` matches `want` under the operator's positive form
/// (`StringNotEquals` compares as `StringEquals`; the caller negates).
fn compare(op: Op, value: &str, want: &str) -> bool {
    let num = |s: &str| s.trim().parse::<f64>().ok();
    let numeric = |f: fn(f64, f64) -> bool| match (num(value), num(want)) {
        (Some(v), Some(w)) => f(v, w),
        _ => false,
    };
    match op {
        Op::StringEquals | Op::StringNotEquals => value == want,
        Op::StringEqualsIgnoreCase | Op::StringNotEqualsIgnoreCase => {
            value.to_lowercase() == want.to_lowercase()
        }
        Op::StringLike | Op::StringNotLike => glob::matches(want, value, false),
        Op::NumericEquals | Op::NumericNotEquals => numeric(|v, w| v == w),
        Op::NumericLessThan => numeric(|v, w| v < w),
        Op::NumericLessThanEquals => numeric(|v, w| v <= w),
        Op::NumericGreaterThan => numeric(|v, w| v > w),
        Op::NumericGreaterThanEquals => numeric(|v, w| v >= w),
        Op::Bool => value.eq_ignore_ascii_case(want),
        Op::IpAddress | Op::NotIpAddress => in_range(value, want),
        Op::Null => false,
    }
}

/// Whether the address `value` lies in the range `want` (an address or a
/// CIDR range).
fn in_range(value: &str, want: &str) -> bool {
    let (Ok(addr), Some((net, len))) = (value.parse::<IpAddr>(), cidr(want)) else {
        return false;
    };
    // An IPv4 caller of a dual-stack listener arrives as ::ffff:a.b.c.d.
    let addr = addr.to_canonical();
    match (addr, net) {
        (IpAddr::V4(a), IpAddr::V4(n)) => {
            let mask = u32::MAX.checked_shl(32 - u32::from(len)).unwrap_or(0);
            u32::from(a) & mask == u32::from(n) & mask
        }
        (IpAddr::V6(a), IpAddr::V6(n)) => {
            let mask = u128::MAX.checked_shl(128 - u32::from(len)).unwrap_or(0);
            u128::from(a) & mask == u128::from(n) & mask
        }
        _ => false,
    }
}

#[cfg(test)]
mod tests {
    use std::collections::HashMap;

    use super::*;

    struct Keys(HashMap<&'static str, Vec<&'static str>>);

    impl Context for Keys {
        fn values(&self, key: &str) -> Option<Vec<String>> {
            self.0
                .get(key)
                .map(|v| v.iter().map(|s| s.to_string()).collect())
        }
    }

    fn keys(pairs: &[(&'static str, &'static str)]) -> Keys {
        let mut m: HashMap<&'static str, Vec<&'static str>> = HashMap::new();
        for &(k, v) in pairs {
            m.entry(k).or_default().push(v);
        }
        Keys(m)
    }

    fn policy(statements: &str) -> Policy {
        Policy::parse(
            &format!(r#"{{"Version":"2012-10-17","Statement":[{statements}]}}"#),
            "bkt",
        )
        .unwrap()
    }

    fn decide(p: &Policy, anonymous: bool, action: &str, resource: &str, k: &Keys) -> Decision {
        p.decide(&Ask {
            anonymous,
            action,
            resource,
            context: k,
        })
    }

    const OBJ: &str = "arn:aws:s3:::bkt/public/a";
    const BUCKET: &str = "arn:aws:s3:::bkt";

    #[test]
    fn actions_and_resources_match_by_wildcard() {
        let p = policy(
            r#"{"Effect":"Allow","Principal":"*","Action":"s3:Get*","Resource":"arn:aws:s3:::bkt/public/*"}"#,
        );
        let none = keys(&[]);
        assert_eq!(
            decide(&p, true, "s3:GetObject", OBJ, &none),
            Decision::Allow
        );
        assert_eq!(
            decide(&p, true, "s3:GetObjectTagging", OBJ, &none),
            Decision::Allow
        );
        assert_eq!(
            decide(&p, true, "s3:PutObject", OBJ, &none),
            Decision::Silent
        );
        assert_eq!(
            decide(
                &p,
                true,
                "s3:GetObject",
                "arn:aws:s3:::bkt/private/a",
                &none
            ),
            Decision::Silent
        );
        assert_eq!(
            decide(&p, true, "s3:GetObject", BUCKET, &none),
            Decision::Silent
        );
        let not = policy(
            r#"{"Effect":"Deny","Principal":"*","NotAction":"s3:GetObject","NotResource":"arn:aws:s3:::bkt/public/*"}"#,
        );
        assert_eq!(
            decide(&not, false, "s3:PutObject", BUCKET, &none),
            Decision::Deny
        );
        assert_eq!(
            decide(&not, false, "s3:PutObject", OBJ, &none),
            Decision::Silent
        );
        assert_eq!(
            decide(&not, false, "s3:GetObject", BUCKET, &none),
            Decision::Silent
        );
    }

    #[test]
    fn deny_beats_allow_in_any_order() {
        let allow =
            r#"{"Effect":"Allow","Principal":"*","Action":"s3:*","Resource":"arn:aws:s3:::bkt/*"}"#;
        let deny = r#"{"Effect":"Deny","Principal":{"AWS":"*"},"Action":"s3:PutObject","Resource":"arn:aws:s3:::bkt/*"}"#;
        for p in [
            policy(&format!("{allow},{deny}")),
            policy(&format!("{deny},{allow}")),
        ] {
            let none = keys(&[]);
            assert_eq!(
                decide(&p, false, "s3:PutObject", OBJ, &none),
                Decision::Deny
            );
            assert_eq!(decide(&p, true, "s3:PutObject", OBJ, &none), Decision::Deny);
            assert_eq!(
                decide(&p, true, "s3:GetObject", OBJ, &none),
                Decision::Allow
            );
        }
    }

    #[test]
    fn named_principals_are_the_one_user_never_anonymous() {
        let p = policy(
            r#"{"Effect":"Deny","Principal":{"AWS":"arn:aws:iam::123:root"},"Action":"*","Resource":"arn:aws:s3:::bkt"}"#,
        );
        let none = keys(&[]);
        assert_eq!(
            decide(&p, false, "s3:ListBucket", BUCKET, &none),
            Decision::Deny
        );
        assert_eq!(
            decide(&p, true, "s3:ListBucket", BUCKET, &none),
            Decision::Silent
        );
        let not = policy(
            r#"{"Effect":"Deny","NotPrincipal":{"AWS":"arn:aws:iam::123:root"},"Action":"*","Resource":"arn:aws:s3:::bkt"}"#,
        );
        assert_eq!(
            decide(&not, true, "s3:ListBucket", BUCKET, &none),
            Decision::Deny
        );
        assert_eq!(
            decide(&not, false, "s3:ListBucket", BUCKET, &none),
            Decision::Silent
        );
    }

    #[test]
    fn string_conditions() {
        let p = policy(
            r#"{"Effect":"Allow","Principal":"*","Action":"s3:GetObject","Resource":"arn:aws:s3:::bkt/*","Condition":{"StringEquals":{"s3:ExistingObjectTag/security":"public"}}}"#,
        );
        let tagged = keys(&[("s3:existingobjecttag/security", "public")]);
        let private = keys(&[("s3:existingobjecttag/security", "private")]);
        assert_eq!(
            decide(&p, true, "s3:GetObject", OBJ, &tagged),
            Decision::Allow
        );
        assert_eq!(
            decide(&p, true, "s3:GetObject", OBJ, &private),
            Decision::Silent
        );
        assert_eq!(
            decide(&p, true, "s3:GetObject", OBJ, &keys(&[])),
            Decision::Silent
        );

        let deny = policy(
            r#"{"Effect":"Deny","Principal":"*","Action":"s3:PutObject","Resource":"arn:aws:s3:::bkt/*","Condition":{"StringNotEquals":{"s3:x-amz-server-side-encryption-customer-algorithm":"AES256"}}}"#,
        );
        let k = "s3:x-amz-server-side-encryption-customer-algorithm";
        assert_eq!(
            decide(&deny, false, "s3:PutObject", OBJ, &keys(&[(k, "AES192")])),
            Decision::Deny
        );
        assert_eq!(
            decide(&deny, false, "s3:PutObject", OBJ, &keys(&[(k, "AES256")])),
            Decision::Silent
        );
        // A negated operator holds where the key is missing.
        assert_eq!(
            decide(&deny, false, "s3:PutObject", OBJ, &keys(&[])),
            Decision::Deny
        );

        let like = policy(
            r#"{"Effect":"Deny","Principal":"*","Action":"s3:PutObject","Resource":"arn:aws:s3:::bkt/*","Condition":{"StringLike":{"s3:x-amz-acl":["public*"]}}}"#,
        );
        assert_eq!(
            decide(
                &like,
                false,
                "s3:PutObject",
                OBJ,
                &keys(&[("s3:x-amz-acl", "public-read")])
            ),
            Decision::Deny
        );
        assert_eq!(
            decide(
                &like,
                false,
                "s3:PutObject",
                OBJ,
                &keys(&[("s3:x-amz-acl", "private")])
            ),
            Decision::Silent
        );
        assert_eq!(
            decide(&like, false, "s3:PutObject", OBJ, &keys(&[])),
            Decision::Silent
        );
    }

    /// A dual-stack listener sees an IPv4 caller as ::ffff:a.b.c.d: IPv4
    /// ranges (and mapped ones) still judge it.
    #[test]
    fn ipv4_mapped_callers_match_ipv4_ranges() {
        assert!(in_range("::ffff:10.1.2.3", "10.1.0.0/16"));
        assert!(!in_range("::ffff:10.2.2.3", "10.1.0.0/16"));
        assert!(in_range("10.1.2.3", "::ffff:10.1.0.0/112"));
        assert!(in_range("::ffff:192.0.2.1", "::ffff:0:0/96"));
        assert!(!in_range("2001:db8::1", "::ffff:0:0/96"));
    }

    #[test]
    fn null_bool_numeric_ip_and_if_exists() {
        let k = "s3:x-amz-server-side-encryption-customer-algorithm";
        let null = policy(&format!(
            r#"{{"Effect":"Deny","Principal":"*","Action":"s3:PutObject","Resource":"arn:aws:s3:::bkt/*","Condition":{{"Null":{{"{k}":"true"}}}}}}"#
        ));
        assert_eq!(
            decide(&null, false, "s3:PutObject", OBJ, &keys(&[])),
            Decision::Deny
        );
        assert_eq!(
            decide(&null, false, "s3:PutObject", OBJ, &keys(&[(k, "AES256")])),
            Decision::Silent
        );

        let secure = policy(
            r#"{"Effect":"Deny","Principal":"*","Action":"s3:*","Resource":"arn:aws:s3:::bkt/*","Condition":{"Bool":{"aws:SecureTransport":false}}}"#,
        );
        assert_eq!(
            decide(
                &secure,
                false,
                "s3:GetObject",
                OBJ,
                &keys(&[("aws:securetransport", "false")])
            ),
            Decision::Deny
        );
        assert_eq!(
            decide(
                &secure,
                false,
                "s3:GetObject",
                OBJ,
                &keys(&[("aws:securetransport", "true")])
            ),
            Decision::Silent
        );

        let max = policy(
            r#"{"Effect":"Deny","Principal":"*","Action":"s3:ListBucket","Resource":"arn:aws:s3:::bkt","Condition":{"NumericGreaterThan":{"s3:max-keys":"10"}}}"#,
        );
        assert_eq!(
            decide(
                &max,
                false,
                "s3:ListBucket",
                BUCKET,
                &keys(&[("s3:max-keys", "11")])
            ),
            Decision::Deny
        );
        assert_eq!(
            decide(
                &max,
                false,
                "s3:ListBucket",
                BUCKET,
                &keys(&[("s3:max-keys", "10")])
            ),
            Decision::Silent
        );

        let ip = policy(
            r#"{"Effect":"Allow","Principal":"*","Action":"s3:GetObject","Resource":"arn:aws:s3:::bkt/*","Condition":{"IpAddress":{"aws:SourceIp":"127.0.0.0/8"}}}"#,
        );
        assert_eq!(
            decide(
                &ip,
                true,
                "s3:GetObject",
                OBJ,
                &keys(&[("aws:sourceip", "127.1.2.3")])
            ),
            Decision::Allow
        );
        assert_eq!(
            decide(
                &ip,
                true,
                "s3:GetObject",
                OBJ,
                &keys(&[("aws:sourceip", "10.0.0.1")])
            ),
            Decision::Silent
        );
        assert_eq!(
            decide(
                &ip,
                true,
                "s3:GetObject",
                OBJ,
                &keys(&[("aws:sourceip", "::1")])
            ),
            Decision::Silent
        );

        let referer = policy(
            r#"{"Effect":"Deny","Principal":"*","Action":"s3:GetObject","Resource":"arn:aws:s3:::bkt/*","Condition":{"StringNotLikeIfExists":{"aws:Referer":"http://www.example.com/*"}}}"#,
        );
        assert_eq!(
            decide(&referer, false, "s3:GetObject", OBJ, &keys(&[])),
            Decision::Deny
        );
        assert_eq!(
            decide(
                &referer,
                false,
                "s3:GetObject",
                OBJ,
                &keys(&[("aws:referer", "http://www.example.com/a")])
            ),
            Decision::Silent
        );
        assert_eq!(
            decide(
                &referer,
                false,
                "s3:GetObject",
                OBJ,
                &keys(&[("aws:referer", "http://example.com")])
            ),
            Decision::Deny
        );
    }

    #[test]
    fn set_operators() {
        let p = policy(
            r#"{"Effect":"Allow","Principal":"*","Action":"s3:PutObject","Resource":"arn:aws:s3:::bkt/*","Condition":{"ForAllValues:StringEquals":{"s3:RequestObjectTagKeys":["a","b"]}}}"#,
        );
        let k = "s3:requestobjecttagkeys";
        assert_eq!(
            decide(&p, true, "s3:PutObject", OBJ, &keys(&[(k, "a"), (k, "b")])),
            Decision::Allow
        );
        assert_eq!(
            decide(&p, true, "s3:PutObject", OBJ, &keys(&[(k, "a"), (k, "c")])),
            Decision::Silent
        );
        assert_eq!(
            decide(&p, true, "s3:PutObject", OBJ, &keys(&[])),
            Decision::Allow
        );
    }
}
