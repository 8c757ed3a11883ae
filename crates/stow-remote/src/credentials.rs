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

/// Serializes the tests that set the process environment the chain reads.
#[cfg(test)]
pub(crate) mod test_env {
    use std::sync::{Mutex, MutexGuard};

    /// Every variable the chain (and `S3Remote::open`) reads.
    pub const VARS: &[&str] = &[
        "AWS_ACCESS_KEY_ID",
        "AWS_SECRET_ACCESS_KEY",
        "AWS_SESSION_TOKEN",
        "AWS_PROFILE",
        "AWS_SHARED_CREDENTIALS_FILE",
        "AWS_CONFIG_FILE",
        "AWS_REGION",
        "AWS_DEFAULT_REGION",
        "AWS_ENDPOINT_URL",
        "AWS_ENDPOINT_URL_S3",
        "HOME",
    ];

    static LOCK: Mutex<()> = Mutex::new(());

    /// Holds the environment for one test: every variable of [`VARS`]
    /// cleared on entry, and restored to the process's values on drop.
    pub struct Env {
        saved: Vec<(&'static str, Option<std::ffi::OsString>)>,
        _guard: MutexGuard<'static, ()>,
    }

    impl Env {
        pub fn clean() -> Env {
            let guard = LOCK.lock().unwrap_or_else(|poisoned| poisoned.into_inner());
            let saved = VARS.iter().map(|v| (*v, std::env::var_os(v))).collect();
            for v in VARS {
                std::env::remove_var(v);
            }
            Env {
                saved,
                _guard: guard,
            }
        }

        pub fn set(&self, name: &str, value: impl AsRef<std::ffi::OsStr>) {
            std::env::set_var(name, value);
        }
    }

    impl Drop for Env {
        fn drop(&mut self) {
            for (name, value) in &self.saved {
                match value {
                    Some(v) => std::env::set_var(name, v),
                    None => std::env::remove_var(name),
                }
            }
        }
    }
}

#[cfg(test)]
mod tests {
    use super::test_env::Env;
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

    const CONFIG: &str = "[default]\nregion = us-west-2\n\n[profile dev]\nregion = eu-west-1\n\n[profile onlyconfig]\naws_access_key_id = CFG_AK\naws_secret_access_key = CFG_SK\n\n[profile nokeys]\nregion = ap-south-1\n";
    const CREDENTIALS: &str = "[default]\naws_access_key_id = DEF_AK\naws_secret_access_key = DEF_SK\n\n[dev]\naws_access_key_id = DEV_AK\naws_secret_access_key = DEV_SK\naws_session_token = DEV_TOKEN\n";

    /// A clean environment whose shared files are temp files (and whose
    /// HOME is an empty temp directory, so `~/.aws` is never the user's).
    fn with_files(env: &Env, dir: &std::path::Path) {
        let config = dir.join("config");
        let creds = dir.join("credentials");
        std::fs::write(&config, CONFIG).unwrap();
        std::fs::write(&creds, CREDENTIALS).unwrap();
        env.set("HOME", dir.join("home"));
        env.set("AWS_CONFIG_FILE", &config);
        env.set("AWS_SHARED_CREDENTIALS_FILE", &creds);
    }

    fn keys(r: &Resolved) -> (String, String, Option<String>) {
        let k = r.keys.clone().expect("keys");
        (k.access_key_id, k.secret_access_key, k.session_token)
    }

    #[test]
    fn nothing_set_finds_no_keys() {
        let env = Env::clean();
        let dir = tempfile::tempdir().unwrap();
        env.set("HOME", dir.path());
        let r = resolve(None).unwrap();
        assert!(r.keys.is_none());
        assert_eq!(r.profile_region, None);
    }

    #[test]
    fn environment_keys_beat_the_default_profile_but_not_its_region() {
        let env = Env::clean();
        let dir = tempfile::tempdir().unwrap();
        with_files(&env, dir.path());
        env.set("AWS_ACCESS_KEY_ID", "ENV_AK");
        env.set("AWS_SECRET_ACCESS_KEY", "ENV_SK");
        env.set("AWS_SESSION_TOKEN", "ENV_TOKEN");
        let r = resolve(None).unwrap();
        assert_eq!(r.source, "environment");
        assert_eq!(
            keys(&r),
            ("ENV_AK".into(), "ENV_SK".into(), Some("ENV_TOKEN".into()))
        );
        assert_eq!(r.profile_region.as_deref(), Some("us-west-2"));
    }

    #[test]
    fn half_of_the_environment_keys_is_ignored() {
        let env = Env::clean();
        let dir = tempfile::tempdir().unwrap();
        with_files(&env, dir.path());
        env.set("AWS_ACCESS_KEY_ID", "ENV_AK");
        env.set("AWS_SECRET_ACCESS_KEY", "");
        let r = resolve(None).unwrap();
        assert_eq!(r.source, "profile default");
        assert_eq!(keys(&r), ("DEF_AK".into(), "DEF_SK".into(), None));
    }

    #[test]
    fn aws_profile_picks_a_profile_of_both_files() {
        let env = Env::clean();
        let dir = tempfile::tempdir().unwrap();
        with_files(&env, dir.path());
        env.set("AWS_PROFILE", "dev");
        let r = resolve(None).unwrap();
        assert_eq!(r.source, "profile dev");
        assert_eq!(
            keys(&r),
            ("DEV_AK".into(), "DEV_SK".into(), Some("DEV_TOKEN".into()))
        );
        // The region comes from the config file's `[profile dev]`.
        assert_eq!(r.profile_region.as_deref(), Some("eu-west-1"));

        // Keys may live in the config file alone.
        env.set("AWS_PROFILE", "onlyconfig");
        assert_eq!(
            keys(&resolve(None).unwrap()),
            ("CFG_AK".into(), "CFG_SK".into(), None)
        );
    }

    #[test]
    fn aws_profile_without_keys_is_refused() {
        let env = Env::clean();
        let dir = tempfile::tempdir().unwrap();
        with_files(&env, dir.path());
        for name in ["nokeys", "absent"] {
            env.set("AWS_PROFILE", name);
            let err = resolve(None).unwrap_err();
            assert!(err.starts_with(&format!("AWS_PROFILE={name} ")), "{err}");
        }
    }

    #[test]
    fn an_explicit_profile_beats_the_environment() {
        let env = Env::clean();
        let dir = tempfile::tempdir().unwrap();
        with_files(&env, dir.path());
        env.set("AWS_ACCESS_KEY_ID", "ENV_AK");
        env.set("AWS_SECRET_ACCESS_KEY", "ENV_SK");
        env.set("AWS_PROFILE", "onlyconfig");
        let r = resolve(Some("dev")).unwrap();
        assert_eq!(r.source, "profile dev");
        assert_eq!(keys(&r).0, "DEV_AK");
        assert_eq!(r.profile_region.as_deref(), Some("eu-west-1"));

        let missing = resolve(Some("absent")).unwrap_err();
        assert!(missing.contains("profile absent is not in"), "{missing}");
        let keyless = resolve(Some("nokeys")).unwrap_err();
        assert!(keyless.contains("has no aws_access_key_id"), "{keyless}");
    }

    #[test]
    fn the_default_files_live_under_home() {
        let env = Env::clean();
        let dir = tempfile::tempdir().unwrap();
        let aws = dir.path().join(".aws");
        std::fs::create_dir(&aws).unwrap();
        std::fs::write(aws.join("credentials"), CREDENTIALS).unwrap();
        std::fs::write(aws.join("config"), CONFIG).unwrap();
        env.set("HOME", dir.path());
        let r = resolve(None).unwrap();
        assert_eq!(keys(&r).0, "DEF_AK");
        assert_eq!(r.profile_region.as_deref(), Some("us-west-2"));
        // An empty file variable falls back to the default place too.
        env.set("AWS_SHARED_CREDENTIALS_FILE", "");
        assert_eq!(keys(&resolve(None).unwrap()).0, "DEF_AK");
    }
}
