//! Named remotes of a registry partition: `R/.stow/remotes.json`, written
//! temp+fsync+rename under the registry lock. Never holds a credential:
//! only the URL, endpoint, region and a profile name.

use std::collections::BTreeMap;
use std::fs;

use serde::{Deserialize, Serialize};

use super::{parse_s3_url, RemoteSpec};
use crate::error::{Result, WsError};
use crate::fsutil::atomic_write;
use crate::registry::Registry;

#[derive(Serialize, Deserialize, Default)]
#[serde(deny_unknown_fields)]
struct RemotesFile {
    version: u32,
    remotes: BTreeMap<String, RemoteSpec>,
}

/// One named remote.
#[derive(Debug, Clone, Serialize)]
pub struct RemoteEntry {
    pub name: String,
    #[serde(flatten)]
    pub spec: RemoteSpec,
}

/// The remotes of a partition.
#[derive(Debug, Clone, Serialize)]
pub struct RemoteList {
    pub registry_dir: String,
    #[serde(skip_serializing_if = "Option::is_none")]
    pub team: Option<String>,
    pub remotes: Vec<RemoteEntry>,
}

fn load(registry: &Registry) -> Result<RemotesFile> {
    let path = registry.state_dir().join("remotes.json");
    match fs::read(&path) {
        Ok(bytes) => {
            let f: RemotesFile = serde_json::from_slice(&bytes)
                .map_err(|e| WsError::Corrupt(format!("remotes {}: {e}", path.display())))?;
            if f.version != 1 {
                return Err(WsError::Corrupt(format!(
                    "remotes {} has unsupported version {}",
                    path.display(),
                    f.version
                )));
            }
            Ok(f)
        }
        Err(e) if e.kind() == std::io::ErrorKind::NotFound => Ok(RemotesFile {
            version: 1,
            remotes: BTreeMap::new(),
        }),
        Err(e) => Err(WsError::io_at("read remotes", &path, e)),
    }
}

fn store(registry: &Registry, f: &RemotesFile) -> Result<()> {
    let mut bytes = serde_json::to_vec_pretty(f)
        .map_err(|e| WsError::InvalidRequest(format!("encode remotes: {e}")))?;
    bytes.push(b'\n');
    atomic_write(&registry.state_dir().join("remotes.json"), &bytes, 0o600)
}

fn bad(msg: String) -> WsError {
    WsError::InvalidRequest(msg)
}

/// Checks a remote's name (like a git remote's: `[A-Za-z0-9][A-Za-z0-9._-]*`,
/// at most 64 bytes).
fn check_name(name: &str) -> Result<()> {
    let ok = !name.is_empty()
        && name.len() <= 64
        && name.as_bytes()[0].is_ascii_alphanumeric()
        && name
            .bytes()
            .all(|b| b.is_ascii_alphanumeric() || matches!(b, b'.' | b'_' | b'-'));
    if ok {
        Ok(())
    } else {
        Err(bad(format!(
            "{name:?} is not a remote name (a letter or digit, then letters, digits, '.', '_', '-'; at most 64)"
        )))
    }
}

/// Checks everything a spec names, so a stored remote is always usable
/// (and never carries a secret: an endpoint with user information is
/// refused).
pub fn check_spec(spec: &RemoteSpec) -> Result<()> {
    parse_s3_url(&spec.url).map_err(bad)?;
    if let Some(e) = &spec.endpoint_url {
        let rest = e
            .strip_prefix("https://")
            .or_else(|| e.strip_prefix("http://"))
            .ok_or_else(|| {
                bad(format!(
                    "endpoint {e:?} must start with http:// or https://"
                ))
            })?;
        let authority = rest.split('/').next().unwrap_or_default();
        if authority.contains('@') {
            // Never repeat what may be a password.
            return Err(bad(
                "the endpoint must not carry a user or password (credentials come from the AWS chain)".into(),
            ));
        }
        if authority.is_empty() || e.chars().any(char::is_whitespace) {
            return Err(bad(format!("endpoint {e:?} must name a host")));
        }
    }
    if let Some(r) = &spec.region {
        let ok = !r.is_empty()
            && r.len() <= 32
            && r.bytes()
                .all(|b| b.is_ascii_lowercase() || b.is_ascii_digit() || b == b'-');
        if !ok {
            return Err(bad(format!("{r:?} is not a region name")));
        }
    }
    if let Some(p) = &spec.profile {
        let ok = !p.is_empty()
            && p.len() <= 64
            && p.bytes()
                .all(|b| b.is_ascii_alphanumeric() || matches!(b, b'.' | b'_' | b'-'));
        if !ok {
            return Err(bad(format!("{p:?} is not a profile name")));
        }
    }
    Ok(())
}

/// Adds remote `name` (refused when the name is taken).
pub fn add_remote(registry: &Registry, name: &str, spec: RemoteSpec) -> Result<RemoteEntry> {
    check_name(name)?;
    check_spec(&spec)?;
    let _lock = registry.lock()?;
    let mut f = load(registry)?;
    if f.remotes.contains_key(name) {
        return Err(WsError::AlreadyExists(format!("remote {name}")));
    }
    f.remotes.insert(name.to_string(), spec.clone());
    store(registry, &f)?;
    Ok(RemoteEntry {
        name: name.to_string(),
        spec,
    })
}

/// Removes remote `name` (nothing on the remote is touched).
pub fn remove_remote(registry: &Registry, name: &str) -> Result<RemoteEntry> {
    check_name(name)?;
    let _lock = registry.lock()?;
    let mut f = load(registry)?;
    let spec = f
        .remotes
        .remove(name)
        .ok_or_else(|| WsError::NotFound(format!("remote {name}")))?;
    store(registry, &f)?;
    Ok(RemoteEntry {
        name: name.to_string(),
        spec,
    })
}

/// The remote called `name`.
pub fn get_remote(registry: &Registry, name: &str) -> Result<RemoteSpec> {
    check_name(name)?;
    load(registry)?
        .remotes
        .remove(name)
        .ok_or_else(|| WsError::NotFound(format!("remote {name}")))
}

/// Every remote of the partition, by name.
pub fn list_remotes(registry: &Registry) -> Result<RemoteList> {
    Ok(RemoteList {
        registry_dir: registry.dir().display().to_string(),
        team: registry.team().map(str::to_string),
        remotes: load(registry)?
            .remotes
            .into_iter()
            .map(|(name, spec)| RemoteEntry { name, spec })
            .collect(),
    })
}

#[cfg(test)]
mod tests {
    use super::*;

    fn spec(url: &str) -> RemoteSpec {
        RemoteSpec {
            url: url.into(),
            endpoint_url: Some("http://127.0.0.1:9000".into()),
            region: Some("us-east-1".into()),
            profile: None,
        }
    }

    #[test]
    fn add_list_remove_round_trip_and_refusals_change_nothing() {
        let dir = tempfile::tempdir().unwrap();
        let reg = Registry::at(dir.path(), None).unwrap();
        add_remote(&reg, "origin", spec("s3://cps/team")).unwrap();
        let err = add_remote(&reg, "origin", spec("s3://other")).unwrap_err();
        assert_eq!(err.code(), "already_exists");
        for bad in ["", "-x", "a/b", "a b"] {
            assert_eq!(
                add_remote(&reg, bad, spec("s3://cps")).unwrap_err().code(),
                "invalid_request"
            );
        }
        let mut with_user = spec("s3://cps");
        with_user.endpoint_url = Some("http://AKIA:secret@host:9000".into());
        let err = add_remote(&reg, "u", with_user).unwrap_err();
        assert_eq!(err.code(), "invalid_request");
        assert!(!err.to_string().contains("secret"), "{err}");
        let listed = list_remotes(&reg).unwrap();
        assert_eq!(listed.remotes.len(), 1);
        assert_eq!(get_remote(&reg, "origin").unwrap().url, "s3://cps/team");
        remove_remote(&reg, "origin").unwrap();
        assert_eq!(get_remote(&reg, "origin").unwrap_err().code(), "not_found");
        assert_eq!(
            remove_remote(&reg, "origin").unwrap_err().code(),
            "not_found"
        );
    }
}
