//! A bucket policy document read into statements, with AWS's rules for
//! what PutBucketPolicy accepts: JSON, a `Statement` (one or a list), each
//! with `Effect` `Allow` or `Deny`, a `Principal` (or, with `Deny`, a
//! `NotPrincipal`), `Action` or `NotAction` (`*` or `s3:` names, wildcards
//! allowed), `Resource` or `NotResource` (ARNs that can name this bucket or
//! objects in it), and an optional `Condition` of the operators
//! [`Op`] lists.

use std::net::IpAddr;

use serde_json::{Map, Value};

use super::glob;

/// Why a policy document is refused.
#[derive(Debug, thiserror::Error, PartialEq, Eq)]
pub(crate) enum PolicyError {
    /// Not a policy AWS would take (S3's MalformedPolicy).
    #[error("{0}")]
    Malformed(String),
    /// A valid policy using what this server does not evaluate.
    #[error("{0}")]
    Unsupported(String),
}

fn malformed(reason: impl Into<String>) -> PolicyError {
    PolicyError::Malformed(reason.into())
}

/// Allow or Deny.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub(crate) enum Effect {
    /// The statement grants what it matches.
    Allow,
    /// The statement refuses what it matches, to everyone it names.
    Deny,
}

/// Whom a statement is about.
#[derive(Debug, Clone, PartialEq, Eq)]
pub(crate) enum Principals {
    /// `"*"` or `{"AWS": "*"}`: everyone, anonymous callers included.
    Everyone,
    /// Named principals (ARNs, account or canonical IDs). With one user,
    /// any name stands for the one authenticated user, never for an
    /// anonymous caller.
    Named(Vec<String>),
    /// `NotPrincipal` (with `Deny` only): everyone but the named ones; with
    /// one user that is the anonymous caller, unless `*` is named.
    AllBut(Vec<String>),
}

/// A condition operator (without its `IfExists` suffix and set prefix).
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub(crate) enum Op {
    StringEquals,
    StringNotEquals,
    StringEqualsIgnoreCase,
    StringNotEqualsIgnoreCase,
    StringLike,
    StringNotLike,
    NumericEquals,
    NumericNotEquals,
    NumericLessThan,
    NumericLessThanEquals,
    NumericGreaterThan,
    NumericGreaterThanEquals,
    Bool,
    IpAddress,
    NotIpAddress,
    Null,
}

impl Op {
    fn parse(name: &str) -> Option<Op> {
        use Op::*;
        Some(match name {
            "StringEquals" | "ArnEquals" => StringEquals,
            "StringNotEquals" | "ArnNotEquals" => StringNotEquals,
            "StringEqualsIgnoreCase" => StringEqualsIgnoreCase,
            "StringNotEqualsIgnoreCase" => StringNotEqualsIgnoreCase,
            "StringLike" | "ArnLike" => StringLike,
            "StringNotLike" | "ArnNotLike" => StringNotLike,
            "NumericEquals" => NumericEquals,
            "NumericNotEquals" => NumericNotEquals,
            "NumericLessThan" => NumericLessThan,
            "NumericLessThanEquals" => NumericLessThanEquals,
            "NumericGreaterThan" => NumericGreaterThan,
            "NumericGreaterThanEquals" => NumericGreaterThanEquals,
            "Bool" => Bool,
            "IpAddress" => IpAddress,
            "NotIpAddress" => NotIpAddress,
            "Null" => Null,
            _ => return None,
        })
    }

    /// Whether the operator is a negated one (true where its key is
    /// missing, as AWS evaluates them).
    pub(crate) fn negated(self) -> bool {
        matches!(
            self,
            Op::StringNotEquals
                | Op::StringNotEqualsIgnoreCase
                | Op::StringNotLike
                | Op::NumericNotEquals
                | Op::NotIpAddress
        )
    }
}

/// How a condition treats a key with several values.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub(crate) enum SetOp {
    /// No prefix, or `ForAnyValue:`: some value matches.
    Any,
    /// `ForAllValues:`: every value matches (true where there are none).
    All,
}

/// One condition: an operator over one key and the policy's values.
#[derive(Debug, Clone, PartialEq, Eq)]
pub(crate) struct Condition {
    pub(crate) op: Op,
    pub(crate) set: SetOp,
    /// `…IfExists`: true where the key is missing.
    pub(crate) if_exists: bool,
    /// The condition key, lower-cased (keys are case-insensitive) up to a
    /// tag key (see [`condition_key`]).
    pub(crate) key: String,
    pub(crate) values: Vec<String>,
}

/// An `aws:SourceIp` range with a shorter prefix than this (IPv4) is too
/// wide to keep a grant to everyone from being public: two `/1` ranges
/// hold every address.
const NARROWEST_PUBLIC_V4: u8 = 8;
/// The same for IPv6 ranges.
const NARROWEST_PUBLIC_V6: u8 = 32;

impl Condition {
    /// Whether the condition holds only for fixed values of a key that
    /// names a source or a principal, which keeps a grant to everyone from
    /// being public (as AWS reckons it). It does not where a missing key
    /// satisfies it (`…IfExists`, `ForAllValues:`, a negated operator: here
    /// the principal keys are always missing), where it only asks whether
    /// the key exists (`Null`) or a value is a pattern (`*`, `?`, a policy
    /// variable), or where an address range is wider than
    /// [`NARROWEST_PUBLIC_V4`]/[`NARROWEST_PUBLIC_V6`] (a few such ranges
    /// cover every address).
    fn limits_to_fixed_values(&self) -> bool {
        let wide_range = |v: &str| {
            self.key == "aws:sourceip"
                && match cidr(v) {
                    Some((IpAddr::V4(_), n)) => n < NARROWEST_PUBLIC_V4,
                    Some((IpAddr::V6(_), n)) => n < NARROWEST_PUBLIC_V6,
                    None => false,
                }
        };
        let fixed = |v: &String| !(v.contains(['*', '?']) || v.contains("${") || wide_range(v));
        LIMITING_KEYS.contains(&self.key.as_str())
            && !self.if_exists
            && self.set == SetOp::Any
            && !self.op.negated()
            && !matches!(self.op, Op::Null | Op::Bool)
            && self.values.iter().all(fixed)
    }
}

/// One statement.
#[derive(Debug, Clone, PartialEq, Eq)]
pub(crate) struct Statement {
    pub(crate) effect: Effect,
    pub(crate) principals: Principals,
    /// Action patterns, lower-cased (actions are case-insensitive).
    pub(crate) actions: Vec<String>,
    /// `NotAction`: the statement matches every other action.
    pub(crate) not_action: bool,
    pub(crate) resources: Vec<String>,
    /// `NotResource`: the statement matches every other resource.
    pub(crate) not_resource: bool,
    pub(crate) conditions: Vec<Condition>,
}

/// A bucket policy, read and checked.
#[derive(Debug, Clone, PartialEq, Eq)]
pub(crate) struct Policy {
    pub(crate) statements: Vec<Statement>,
}

/// Condition keys whose fixed values keep a statement that names everyone
/// from being public (AWS's list for "public" policies).
const LIMITING_KEYS: &[&str] = &[
    "aws:sourceip",
    "aws:sourcearn",
    "aws:sourcevpc",
    "aws:sourcevpce",
    "aws:sourceowner",
    "aws:sourceaccount",
    "aws:principalorgid",
    "aws:principalaccount",
    "aws:principalarn",
    "aws:userid",
    "s3:x-amz-server-side-encryption-aws-kms-key-id",
];

impl Policy {
    /// Reads `text` as the policy of `bucket`, refusing what AWS refuses.
    pub(crate) fn parse(text: &str, bucket: &str) -> Result<Policy, PolicyError> {
        let doc: Value = serde_json::from_str(text)
            .map_err(|_| malformed("This policy contains invalid Json"))?;
        let Value::Object(doc) = doc else {
            return Err(malformed("This policy contains invalid Json"));
        };
        for field in doc.keys() {
            if !matches!(field.as_str(), "Version" | "Id" | "Statement") {
                return Err(malformed(format!("Policy has an unknown field {field:?}")));
            }
        }
        match doc.get("Version") {
            None => {}
            Some(Value::String(v)) if v == "2012-10-17" || v == "2008-10-17" => {}
            Some(_) => return Err(malformed("Policy has an invalid Version")),
        }
        let statements = match doc.get("Statement") {
            None => return Err(malformed("Missing required field Statement")),
            Some(Value::Array(list)) => list.iter().collect::<Vec<_>>(),
            Some(one) => vec![one],
        };
        if statements.is_empty() {
            return Err(malformed("Missing required field Statement"));
        }
        let statements = statements
            .into_iter()
            .map(|s| statement(s, bucket))
            .collect::<Result<Vec<_>, _>>()?;
        Ok(Policy { statements })
    }

    /// Whether the policy is public as AWS reckons it: some `Allow`
    /// statement names everyone, unlimited by a condition on a fixed
    /// source or principal (an IP range, an account, an ARN, …).
    pub(crate) fn is_public(&self) -> bool {
        self.statements.iter().any(|s| {
            s.effect == Effect::Allow
                && s.principals == Principals::Everyone
                && !s.conditions.iter().any(Condition::limits_to_fixed_values)
        })
    }

    /// Whether some condition reads an existing object's tags (the only
    /// key that costs a read to know).
    pub(crate) fn reads_object_tags(&self) -> bool {
        self.statements.iter().any(|s| {
            s.conditions
                .iter()
                .any(|c| c.key.starts_with("s3:existingobjecttag/"))
        })
    }
}

/// A string or a list of strings, as most policy fields are.
fn strings(v: &Value, field: &str) -> Result<Vec<String>, PolicyError> {
    let one = |v: &Value| match v {
        Value::String(s) => Ok(s.clone()),
        _ => Err(malformed(format!(
            "{field} must be a string or a list of strings"
        ))),
    };
    let list = match v {
        Value::Array(items) => items.iter().map(one).collect::<Result<Vec<_>, _>>()?,
        other => vec![one(other)?],
    };
    if list.is_empty() {
        return Err(malformed(format!("{field} is empty")));
    }
    Ok(list)
}

fn statement(v: &Value, bucket: &str) -> Result<Statement, PolicyError> {
    let Value::Object(s) = v else {
        return Err(malformed("Each Statement must be an object"));
    };
    for field in s.keys() {
        if !matches!(
            field.as_str(),
            "Sid"
                | "Effect"
                | "Principal"
                | "NotPrincipal"
                | "Action"
                | "NotAction"
                | "Resource"
                | "NotResource"
                | "Condition"
        ) {
            return Err(malformed(format!(
                "Statement has an unknown field {field:?}"
            )));
        }
    }
    let effect = match s.get("Effect") {
        Some(Value::String(e)) if e == "Allow" => Effect::Allow,
        Some(Value::String(e)) if e == "Deny" => Effect::Deny,
        Some(Value::String(e)) => return Err(malformed(format!("Invalid effect: {e}"))),
        Some(_) => return Err(malformed("Invalid effect")),
        None => return Err(malformed("Missing required field Effect")),
    };
    let principals = match (s.get("Principal"), s.get("NotPrincipal")) {
        (Some(p), None) => match principal_names(p)? {
            names if names.iter().any(|n| n == "*") => Principals::Everyone,
            names => Principals::Named(names),
        },
        (None, Some(p)) if effect == Effect::Deny => Principals::AllBut(principal_names(p)?),
        (None, Some(_)) => {
            return Err(malformed(
                "NotPrincipal is accepted with Effect Deny only (an Allow to everyone but someone is refused)",
            ))
        }
        (None, None) => return Err(malformed("Missing required field Principal")),
        (Some(_), Some(_)) => {
            return Err(malformed("A Statement names Principal or NotPrincipal, not both"))
        }
    };
    let (actions, not_action) = either(s, "Action", "NotAction")?;
    for a in &actions {
        check_action(a)?;
    }
    let (resources, not_resource) = either(s, "Resource", "NotResource")?;
    for r in &resources {
        check_resource(r, bucket)?;
    }
    let conditions = match s.get("Condition") {
        None => Vec::new(),
        Some(Value::Object(c)) => conditions(c)?,
        Some(_) => return Err(malformed("Condition must be an object")),
    };
    Ok(Statement {
        effect,
        principals,
        actions: actions.iter().map(|a| a.to_ascii_lowercase()).collect(),
        not_action,
        resources,
        not_resource,
        conditions,
    })
}

/// `Action`/`NotAction` or `Resource`/`NotResource`: exactly one of each
/// pair, and whether it is the negated one.
fn either(
    s: &Map<String, Value>,
    plain: &str,
    not: &str,
) -> Result<(Vec<String>, bool), PolicyError> {
    match (s.get(plain), s.get(not)) {
        (Some(v), None) => Ok((strings(v, plain)?, false)),
        (None, Some(v)) => Ok((strings(v, not)?, true)),
        (None, None) => Err(malformed(format!("Missing required field {plain}"))),
        (Some(_), Some(_)) => Err(malformed(format!(
            "A Statement names {plain} or {not}, not both"
        ))),
    }
}

/// The names in a `Principal`: `"*"`, or an object of `AWS`,
/// `CanonicalUser`, `Federated` or `Service` to a name or a list.
fn principal_names(v: &Value) -> Result<Vec<String>, PolicyError> {
    match v {
        Value::String(s) if s == "*" => Ok(vec!["*".into()]),
        Value::Object(m) if !m.is_empty() => {
            let mut names = Vec::new();
            for (kind, v) in m {
                if !matches!(
                    kind.as_str(),
                    "AWS" | "CanonicalUser" | "Federated" | "Service"
                ) {
                    return Err(malformed(format!("Invalid principal type {kind:?}")));
                }
                names.extend(strings(v, "Principal")?);
            }
            Ok(names)
        }
        _ => Err(malformed("Invalid principal in policy")),
    }
}

/// `*`, or an `s3:` action name, wildcards allowed.
fn check_action(a: &str) -> Result<(), PolicyError> {
    if a == "*" {
        return Ok(());
    }
    let name = a
        .get(..3)
        .filter(|p| p.eq_ignore_ascii_case("s3:"))
        .map(|_| &a[3..]);
    match name {
        Some(n)
            if !n.is_empty()
                && n.chars()
                    .all(|c| c.is_ascii_alphanumeric() || c == '*' || c == '?') =>
        {
            Ok(())
        }
        _ => Err(malformed(format!("Policy has invalid action {a:?}"))),
    }
}

/// `*`, or an S3 ARN whose bucket part can name `bucket`.
fn check_resource(r: &str, bucket: &str) -> Result<(), PolicyError> {
    if r == "*" {
        return Ok(());
    }
    let Some(path) = r.strip_prefix("arn:aws:s3:::") else {
        return Err(malformed(format!("Policy has invalid resource {r:?}")));
    };
    let bucket_part = path.split('/').next().unwrap_or_default();
    if glob::matches(bucket_part, bucket, false) {
        Ok(())
    } else {
        Err(malformed(format!(
            "Policy has invalid resource {r:?}: it does not name the bucket {bucket:?} or objects in it"
        )))
    }
}

fn conditions(block: &Map<String, Value>) -> Result<Vec<Condition>, PolicyError> {
    let mut out = Vec::new();
    for (name, keys) in block {
        let (set, rest) = if let Some(rest) = name.strip_prefix("ForAllValues:") {
            (SetOp::All, rest)
        } else {
            (
                SetOp::Any,
                name.strip_prefix("ForAnyValue:").unwrap_or(name),
            )
        };
        let (if_exists, base) = match rest.strip_suffix("IfExists") {
            Some(base) if base != "Null" => (true, base),
            _ => (false, rest),
        };
        let Some(op) = Op::parse(base) else {
            if base.starts_with("Date") || base.starts_with("Binary") {
                return Err(PolicyError::Unsupported(format!(
                    "the condition operator {name} is not evaluated by this server"
                )));
            }
            return Err(malformed(format!("Invalid Condition type : {name}")));
        };
        let Value::Object(keys) = keys else {
            return Err(malformed(format!(
                "Condition {name} must map keys to values"
            )));
        };
        for (key, values) in keys {
            let lower = condition_key(key);
            if !(lower.starts_with("s3:") || lower.starts_with("aws:")) || lower.len() < 5 {
                return Err(malformed(format!(
                    "Policy has an invalid condition key {key:?}"
                )));
            }
            let values = condition_values(values, name)?;
            for v in &values {
                check_value(op, v, name)?;
            }
            out.push(Condition {
                op,
                set,
                if_exists,
                key: lower,
                values,
            });
        }
    }
    Ok(out)
}

/// A condition key as compared: lower-cased (keys are case-insensitive),
/// except a tag key after `s3:ExistingObjectTag/` or
/// `s3:RequestObjectTag/` (tag keys are case-sensitive).
fn condition_key(key: &str) -> String {
    match key.split_once('/') {
        Some((head, tail)) => format!("{}/{tail}", head.to_ascii_lowercase()),
        None => key.to_ascii_lowercase(),
    }
}

/// A condition's values: strings, numbers or booleans, one or a list.
fn condition_values(v: &Value, name: &str) -> Result<Vec<String>, PolicyError> {
    let one = |v: &Value| match v {
        Value::String(s) => Ok(s.clone()),
        Value::Bool(b) => Ok(b.to_string()),
        Value::Number(n) => Ok(n.to_string()),
        _ => Err(malformed(format!("Condition {name} has an invalid value"))),
    };
    let list = match v {
        Value::Array(items) => items.iter().map(one).collect::<Result<Vec<_>, _>>()?,
        other => vec![one(other)?],
    };
    if list.is_empty() {
        return Err(malformed(format!("Condition {name} has no value")));
    }
    Ok(list)
}

/// A value the operator can compare: a number, `true`/`false`, an IP
/// address or CIDR range.
fn check_value(op: Op, v: &str, name: &str) -> Result<(), PolicyError> {
    let ok = match op {
        Op::NumericEquals
        | Op::NumericNotEquals
        | Op::NumericLessThan
        | Op::NumericLessThanEquals
        | Op::NumericGreaterThan
        | Op::NumericGreaterThanEquals => v.parse::<f64>().is_ok(),
        Op::Bool | Op::Null => v.eq_ignore_ascii_case("true") || v.eq_ignore_ascii_case("false"),
        Op::IpAddress | Op::NotIpAddress => cidr(v).is_some(),
        _ => true,
    };
    if ok {
        Ok(())
    } else {
        Err(malformed(format!(
            "Condition {name} has an invalid value {v:?}"
        )))
    }
}

/// An IP address or CIDR range: the network address and prefix length.
/// A range of IPv4-mapped IPv6 addresses (`::ffff:a.b.c.d/96+n`) is the
/// IPv4 range it maps (`a.b.c.d/n`), as a dual-stack listener sees an
/// IPv4 caller by its mapped address (see `eval::in_range`).
pub(crate) fn cidr(v: &str) -> Option<(IpAddr, u8)> {
    let (addr, len) = cidr_as_written(v)?;
    match addr {
        IpAddr::V6(a) if len >= 96 => match a.to_ipv4_mapped() {
            Some(v4) => Some((IpAddr::V4(v4), len - 96)),
            None => Some((addr, len)),
        },
        _ => Some((addr, len)),
    }
}

fn cidr_as_written(v: &str) -> Option<(IpAddr, u8)> {
    let (addr, len) = match v.split_once('/') {
        Some((a, l)) => (a, Some(l)),
        None => (v, None),
    };
    let addr: IpAddr = addr.parse().ok()?;
    let max = if addr.is_ipv4() { 32 } else { 128 };
    let len = match len {
        Some(l) => l.parse::<u8>().ok().filter(|l| *l <= max)?,
        None => max,
    };
    Some((addr, len))
}

#[cfg(test)]
mod tests {
    use super::*;

    fn parse(text: &str) -> Result<Policy, PolicyError> {
        Policy::parse(text, "bkt")
    }

    fn code(text: &str) -> String {
        match parse(text) {
            Ok(_) => "ok".into(),
            Err(PolicyError::Malformed(_)) => "malformed".into(),
            Err(PolicyError::Unsupported(_)) => "unsupported".into(),
        }
    }

    const OK: &str = r#"{"Version":"2012-10-17","Statement":[{"Effect":"Allow","Principal":{"AWS":"*"},"Action":"s3:GetObject","Resource":"arn:aws:s3:::bkt/*"}]}"#;

    #[test]
    fn a_plain_policy_reads() {
        let p = parse(OK).unwrap();
        assert_eq!(p.statements.len(), 1);
        let s = &p.statements[0];
        assert_eq!(s.effect, Effect::Allow);
        assert_eq!(s.principals, Principals::Everyone);
        assert_eq!(s.actions, vec!["s3:getobject"]);
        assert!(p.is_public());
    }

    #[test]
    fn what_aws_refuses_is_malformed() {
        assert_eq!(code("{not json"), "malformed");
        assert_eq!(code("[]"), "malformed");
        assert_eq!(code(r#"{"Version":"2012-10-17"}"#), "malformed");
        assert_eq!(code(r#"{"Statement":[]}"#), "malformed");
        let with = |field: &str| OK.replace(r#""Effect":"Allow""#, field);
        assert_eq!(code(&with(r#""Effect":"Permit""#)), "malformed");
        assert_eq!(
            code(&OK.replace("s3:GetObject", "iam:GetUser")),
            "malformed"
        );
        assert_eq!(code(&OK.replace("s3:GetObject", "s3:")), "malformed");
        assert_eq!(code(&OK.replace("bkt/*", "other/*")), "malformed");
        assert_eq!(
            code(&OK.replace("arn:aws:s3:::bkt/*", "bkt/*")),
            "malformed"
        );
        assert_eq!(
            code(&OK.replace(r#""Principal":{"AWS":"*"},"#, "")),
            "malformed"
        );
        assert_eq!(code(&OK.replace("Principal", "NotPrincipal")), "malformed");
        assert_eq!(code(&OK.replace("\"Action\"", "\"Actions\"")), "malformed");
        assert_eq!(code(&OK.replace("2012-10-17", "2020-01-01")), "malformed");
    }

    #[test]
    fn wildcard_resources_and_actions_are_taken() {
        assert_eq!(
            code(&OK.replace("arn:aws:s3:::bkt/*", "arn:aws:s3:::*")),
            "ok"
        );
        assert_eq!(
            code(&OK.replace("arn:aws:s3:::bkt/*", "arn:aws:s3:::b?t")),
            "ok"
        );
        assert_eq!(code(&OK.replace("s3:GetObject", "*")), "ok");
        assert_eq!(code(&OK.replace("s3:GetObject", "S3:Get*")), "ok");
        assert_eq!(code(&OK.replace(r#""Action""#, r#""NotAction""#)), "ok");
    }

    #[test]
    fn conditions_are_checked() {
        let with = |c: &str| OK.replace(r#""Resource""#, &format!(r#""Condition":{c},"Resource""#));
        assert_eq!(
            code(&with(r#"{"StringLike":{"s3:prefix":["a/*","b"]}}"#)),
            "ok"
        );
        assert_eq!(
            code(&with(r#"{"StringEqualsIfExists":{"aws:Referer":"x"}}"#)),
            "ok"
        );
        assert_eq!(
            code(&with(
                r#"{"ForAllValues:StringEquals":{"s3:RequestObjectTagKeys":"x"}}"#
            )),
            "ok"
        );
        assert_eq!(code(&with(r#"{"Null":{"s3:x-amz-acl":true}}"#)), "ok");
        assert_eq!(
            code(&with(r#"{"NumericLessThan":{"s3:max-keys":"ten"}}"#)),
            "malformed"
        );
        assert_eq!(
            code(&with(r#"{"IpAddress":{"aws:SourceIp":"10.0.0.0/33"}}"#)),
            "malformed"
        );
        assert_eq!(
            code(&with(r#"{"StringFuzzy":{"s3:prefix":"a"}}"#)),
            "malformed"
        );
        assert_eq!(
            code(&with(r#"{"StringEquals":{"prefix":"a"}}"#)),
            "malformed"
        );
        assert_eq!(
            code(&with(
                r#"{"DateLessThan":{"aws:CurrentTime":"2030-01-01T00:00:00Z"}}"#
            )),
            "unsupported"
        );
    }

    #[test]
    fn a_fixed_source_or_a_named_principal_is_not_public() {
        let ip = OK.replace(
            r#""Resource""#,
            r#""Condition":{"IpAddress":{"aws:SourceIp":"10.0.0.0/32"}},"Resource""#,
        );
        assert!(!parse(&ip).unwrap().is_public());
        let named = OK.replace(r#"{"AWS":"*"}"#, r#"{"AWS":"arn:aws:iam::s3tenant1:root"}"#);
        assert!(!parse(&named).unwrap().is_public());
        assert!(!parse(&OK.replace("Allow", "Deny")).unwrap().is_public());
        let other = OK.replace(
            r#""Resource""#,
            r#""Condition":{"StringLike":{"s3:prefix":"a*"}},"Resource""#,
        );
        assert!(parse(&other).unwrap().is_public());
    }

    /// Conditions a request without the key satisfies, or that any value
    /// satisfies, leave a grant to everyone public.
    #[test]
    fn conditions_that_anyone_meets_stay_public() {
        let with = |condition: &str| {
            let doc = OK.replace(
                r#""Resource""#,
                &format!(r#""Condition":{condition},"Resource""#),
            );
            parse(&doc).unwrap().is_public()
        };
        for public in [
            r#"{"StringEqualsIfExists":{"aws:PrincipalArn":"arn:aws:iam::1:root"}}"#,
            r#"{"ForAllValues:StringEquals":{"aws:PrincipalAccount":"111122223333"}}"#,
            r#"{"StringNotEquals":{"aws:PrincipalAccount":"111122223333"}}"#,
            r#"{"StringLike":{"aws:PrincipalArn":"arn:aws:iam::*"}}"#,
            r#"{"StringEquals":{"aws:SourceAccount":"${aws:PrincipalAccount}"}}"#,
            r#"{"IpAddress":{"aws:SourceIp":"0.0.0.0/0"}}"#,
            r#"{"IpAddress":{"aws:SourceIp":["10.0.0.0/8","::/0"]}}"#,
            r#"{"IpAddress":{"aws:SourceIp":["0.0.0.0/1","128.0.0.0/1"]}}"#,
            r#"{"IpAddress":{"aws:SourceIp":"2000::/3"}}"#,
            r#"{"IpAddress":{"aws:SourceIp":"::ffff:0:0/96"}}"#,
            r#"{"Null":{"aws:SourceArn":"false"}}"#,
        ] {
            assert!(with(public), "{public}");
        }
        for limited in [
            r#"{"StringEquals":{"aws:PrincipalAccount":"111122223333"}}"#,
            r#"{"ForAnyValue:StringEquals":{"aws:SourceVpc":"vpc-1"}}"#,
            r#"{"IpAddress":{"aws:SourceIp":["10.0.0.0/8","192.168.1.1"]}}"#,
        ] {
            assert!(!with(limited), "{limited}");
        }
    }
}
