//! The standard AWS credential and region chain, as far as a remote needs
//! it: an explicit profile, then the environment's keys, then `AWS_PROFILE`
//! (or `default`) in the shared config and credentials files. What is
//! found is used for signing only, never stored or printed.

use std::collections::HashMap;
use std::path::PathBuf;

/// Keys to sign with.
#[derive(Clone)]
pub(crate) struct Keys {
    pub access_key_id: String,
    pub secret_access_key: String,
    pub session_token: Option<String>,
}

impl std::fmt::Debug for Keys {
    // Never print a secret, even in a debug log.
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.write_str("Keys(..)")
    }
}

/// Where the credentials came from, and the region the profile names.
#[derive(Debug, Default)]
pub(crate) struct Resolved {
    pub keys: Option<Keys>,
    /// What supplied them (`environment`, `profile NAME`), for messages.
    pub source: String,
    pub profile_region: Option<String>,
}

type Sections = HashMap<String, HashMap<String, String>>;

/// Parses the INI shape of the AWS shared files: `[section]`, `key = value`,
/// `#`/`;` comments. Unknown lines are ignored, as the AWS tools do.
fn parse_ini(text: &str) -> Sections {
    let mut out: Sections = HashMap::new();
    let mut current: Option<String> = None;
    for line in text.lines() {
        let line = line.trim();
        if line.is_empty() || line.starts_with('#') || line.starts_with(';') {
            continue;
        }
        if let Some(name) = line.strip_prefix('[').and_then(|l| l.strip_suffix(']')) {
            let name = name.trim().to_string();
            out.entry(name.clone()).or_default();
            current = Some(name);
            continue;
        }
        if let (Some(section), Some((k, v))) = (&current, line.split_once('=')) {
            if let Some(map) = out.get_mut(section) {
                map.insert(k.trim().to_ascii_lowercase(), v.trim().to_string());
            }
        }
    }
    out
}

fn home() -> Option<PathBuf> {
    std::env::var_os("HOME").map(PathBuf::from)
}

fn shared_file(env: &str, default: &str) -> Option<PathBuf> {
    match std::env::var_os(env) {
        Some(p) if !p.is_empty() => Some(PathBuf::from(p)),
        _ => home().map(|h| h.join(".aws").join(default)),
    }
}

fn read_sections(path: Option<PathBuf>) -> Sections {
    path.and_then(|p| std::fs::read_to_string(p).ok())
        .map(|t| parse_ini(&t))
        .unwrap_or_default()
}

/// A profile's settings: the credentials file's `[name]` over the config
/// file's `[profile name]` (or `[default]`).
fn profile_settings(name: &str) -> Option<HashMap<String, String>> {
    let creds = read_sections(shared_file("AWS_SHARED_CREDENTIALS_FILE", "credentials"));
    let config = read_sections(shared_file("AWS_CONFIG_FILE", "config"));
    let config_name = if name == "default" {
        "default".to_string()
    } else {
        format!("profile {name}")
    };
    let mut merged: Option<HashMap<String, String>> = None;
    for section in [config.get(&config_name), creds.get(name)]
        .into_iter()
        .flatten()
    {
        merged
            .get_or_insert_with(HashMap::new)
            .extend(section.clone());
    }
    merged
}

fn keys_of(settings: &HashMap<String, String>) -> Option<Keys> {
    Some(Keys {
        access_key_id: settings.get("aws_access_key_id")?.clone(),
        secret_access_key: settings.get("aws_secret_access_key")?.clone(),
        session_token: settings.get("aws_session_token").cloned(),
    })
}

fn env(name: &str) -> Option<String> {
    std::env::var(name).ok().filter(|v| !v.is_empty())
}

/// Resolves credentials: an explicit `profile` (the remote's, which must
/// exist and hold keys), else `AWS_ACCESS_KEY_ID`/`AWS_SECRET_ACCESS_KEY`
/// (+ `AWS_SESSION_TOKEN`), else `AWS_PROFILE` or `default` from the
/// shared files. `Err` names a profile that is missing or has no keys.
pub(crate) fn resolve(profile: Option<&str>) -> Result<Resolved, String> {
    if let Some(name) = profile {
        let settings = profile_settings(name).ok_or_else(|| {
            format!("profile {name} is not in the shared AWS config or credentials files")
        })?;
        let keys = keys_of(&settings).ok_or_else(|| {
            format!("profile {name} has no aws_access_key_id/aws_secret_access_key")
        })?;
        return Ok(Resolved {
            keys: Some(keys),
            source: format!("profile {name}"),
            profile_region: settings.get("region").cloned(),
        });
    }
    let from_env = match (env("AWS_ACCESS_KEY_ID"), env("AWS_SECRET_ACCESS_KEY")) {
        (Some(id), Some(secret)) => Some(Keys {
            access_key_id: id,
            secret_access_key: secret,
            session_token: env("AWS_SESSION_TOKEN"),
        }),
        _ => None,
    };
    let name = env("AWS_PROFILE").unwrap_or_else(|| "default".to_string());
    let settings = profile_settings(&name);
    let profile_region = settings.as_ref().and_then(|s| s.get("region").cloned());
    if let Some(keys) = from_env {
        return Ok(Resolved {
            keys: Some(keys),
            source: "environment".into(),
            profile_region,
        });
    }
    match settings.as_ref().and_then(keys_of) {
        Some(keys) => Ok(Resolved {
            keys: Some(keys),
            source: format!("profile {name}"),
            profile_region,
        }),
        None if env("AWS_PROFILE").is_some() => Err(format!(
            "AWS_PROFILE={name} names no profile with keys in the shared AWS files"
        )),
        None => Ok(Resolved {
            keys: None,
            source: String::new(),
            profile_region,
        }),
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn ini_sections_keys_and_comments() {
        let s = parse_ini(
            "# c\n[default]\naws_access_key_id = AK\n; x\nAWS_SECRET_ACCESS_KEY=SK\n\n[profile dev]\nregion = eu-west-1\nnot a line\n",
        );
        assert_eq!(s["default"]["aws_access_key_id"], "AK");
        assert_eq!(s["default"]["aws_secret_access_key"], "SK");
        assert_eq!(s["profile dev"]["region"], "eu-west-1");
        assert_eq!(s.len(), 2);
    }

    #[test]
    fn keys_never_print() {
        let k = Keys {
            access_key_id: "AKIDVISIBLE".into(),
            secret_access_key: "very-secret".into(),
            session_token: None,
        };
        let shown = format!("{k:?} {:?}", Some(k.clone()));
        assert!(!shown.contains("very-secret") && !shown.contains("AKIDVISIBLE"));
    }
}
