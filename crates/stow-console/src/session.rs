//! Sign-in, sessions, the session cookie, CSRF tokens and the same-origin
//! checks. Pure logic over strings and header maps, so it is unit-tested
//! without a socket.
//!
//! A session is a random 256-bit id handed to the browser in an HttpOnly,
//! `SameSite=Strict` cookie scoped to [`COOKIE_PATH`]; the server keeps it
//! (by its SHA-256, so a lookup's timing says nothing about the id) with
//! an absolute expiry and a CSRF token of its own. Secrets and tokens are
//! compared in constant time.

use std::collections::HashMap;
use std::sync::Mutex;
use std::time::{Duration, Instant};

use http::HeaderMap;
use rand::TryRngCore as _;
use sha2::{Digest, Sha256};

use crate::error::ConsoleError;

/// The session cookie's name.
pub const COOKIE_NAME: &str = "stow_console";
/// The path the cookie is scoped to (the console's own).
pub const COOKIE_PATH: &str = "/_stow/console/";
/// The request header carrying the session's CSRF token.
pub const CSRF_HEADER: &str = "x-stow-csrf";
/// How long a session lives after sign-in.
pub const SESSION_TTL: Duration = Duration::from_secs(8 * 3600);
/// For tests only: a session lifetime in seconds that replaces
/// [`SESSION_TTL`] (the browser test of session expiry sets it short).
pub const SESSION_TTL_ENV: &str = "STOW_TEST_CONSOLE_SESSION_SECS";

/// How long a session lives: [`SESSION_TTL`], unless the test-only
/// [`SESSION_TTL_ENV`] names a whole number of seconds from 1 to the
/// default (anything else is ignored, with a warning).
pub fn session_ttl() -> Duration {
    match std::env::var(SESSION_TTL_ENV) {
        Ok(v) => ttl_from(&v).unwrap_or_else(|| {
            tracing::warn!(
                "{SESSION_TTL_ENV}={v:?} ignored: not 1..={}",
                SESSION_TTL.as_secs()
            );
            SESSION_TTL
        }),
        Err(_) => SESSION_TTL,
    }
}

fn ttl_from(v: &str) -> Option<Duration> {
    let secs = v.trim().parse::<u64>().ok()?;
    (1..=SESSION_TTL.as_secs())
        .contains(&secs)
        .then(|| Duration::from_secs(secs))
}

/// Failed sign-ins within [`SIGN_IN_WINDOW`] after which every sign-in
/// (right or wrong) is refused until the oldest of them leaves the window.
pub const MAX_FAILED_SIGN_INS: usize = 10;
/// The window failed sign-ins are counted over.
pub const SIGN_IN_WINDOW: Duration = Duration::from_secs(60);

/// Rate limit of sign-in attempts: the console has one key pair, so one
/// count for all clients. Once [`MAX_FAILED_SIGN_INS`] failures fall
/// within [`SIGN_IN_WINDOW`], attempts are refused without being checked,
/// so a guesser learns nothing more until the window moves on.
pub struct SignInLimiter {
    failures: Mutex<std::collections::VecDeque<Instant>>,
}

impl Default for SignInLimiter {
    fn default() -> Self {
        SignInLimiter {
            failures: Mutex::new(std::collections::VecDeque::new()),
        }
    }
}

impl SignInLimiter {
    /// `Err(wait)` when attempts are refused at `now`; `wait` is how long
    /// until one is allowed again.
    pub fn check(&self, now: Instant) -> Result<(), Duration> {
        let mut failures = self.lock();
        while failures
            .front()
            .is_some_and(|t| now.saturating_duration_since(*t) >= SIGN_IN_WINDOW)
        {
            failures.pop_front();
        }
        match failures.front() {
            Some(oldest) if failures.len() >= MAX_FAILED_SIGN_INS => {
                Err(SIGN_IN_WINDOW.saturating_sub(now.saturating_duration_since(*oldest)))
            }
            _ => Ok(()),
        }
    }

    /// Counts a failed sign-in at `now` (at most [`MAX_FAILED_SIGN_INS`]
    /// are kept).
    pub fn failed(&self, now: Instant) {
        let mut failures = self.lock();
        failures.push_back(now);
        while failures.len() > MAX_FAILED_SIGN_INS {
            failures.pop_front();
        }
    }

    /// Forgets the failures (a successful sign-in).
    pub fn succeeded(&self) {
        self.lock().clear();
    }

    fn lock(&self) -> std::sync::MutexGuard<'_, std::collections::VecDeque<Instant>> {
        // Every change is one push or pop: a poisoned lock is consistent.
        self.failures.lock().unwrap_or_else(|p| p.into_inner())
    }
}

/// Sessions kept at once; signing in beyond drops the oldest.
const MAX_SESSIONS: usize = 256;

/// What a valid session knows.
#[derive(Clone, Debug)]
pub struct Session {
    /// The token a state-changing request must send in [`CSRF_HEADER`].
    pub csrf: String,
    /// When the session ends.
    pub expires: Instant,
}

/// The server's one key pair, kept as digests for constant-time checks.
pub struct KeyPair {
    access_key: String,
    access_digest: [u8; 32],
    secret_digest: [u8; 32],
}

impl KeyPair {
    /// The pair clients sign S3 requests with.
    pub fn new(access_key: &str, secret_key: &str) -> Self {
        KeyPair {
            access_key: access_key.to_string(),
            access_digest: sha256(access_key.as_bytes()),
            secret_digest: sha256(secret_key.as_bytes()),
        }
    }

    /// The access key (shown to a signed-in page).
    pub fn access_key(&self) -> &str {
        &self.access_key
    }

    /// Whether `access_key` and `secret_key` are this pair. Both are always
    /// compared, in time independent of where they differ or their lengths.
    pub fn matches(&self, access_key: &str, secret_key: &str) -> bool {
        let access = digests_equal(&sha256(access_key.as_bytes()), &self.access_digest);
        let secret = digests_equal(&sha256(secret_key.as_bytes()), &self.secret_digest);
        access & secret
    }
}

/// The server-side session table.
pub struct Sessions {
    ttl: Duration,
    table: Mutex<HashMap<[u8; 32], Session>>,
}

impl Sessions {
    /// An empty table whose sessions live `ttl`.
    pub fn new(ttl: Duration) -> Self {
        Sessions {
            ttl,
            table: Mutex::new(HashMap::new()),
        }
    }

    /// How long a new session lives.
    pub fn ttl(&self) -> Duration {
        self.ttl
    }

    /// Starts a session at `now`: returns its id (for the cookie) and the
    /// session. Expired sessions are dropped; past [`MAX_SESSIONS`] the one
    /// closest to expiry goes.
    pub fn create(&self, now: Instant) -> Result<(String, Session), ConsoleError> {
        let id = random_token()?;
        let session = Session {
            csrf: random_token()?,
            expires: now + self.ttl,
        };
        let mut table = self.lock();
        table.retain(|_, s| s.expires > now);
        while table.len() >= MAX_SESSIONS {
            let oldest = table.iter().min_by_key(|(_, s)| s.expires).map(|(k, _)| *k);
            match oldest {
                Some(k) => table.remove(&k),
                None => break,
            };
        }
        table.insert(sha256(id.as_bytes()), session.clone());
        Ok((id, session))
    }

    /// The live session named by `id` at `now`; an expired one is removed.
    pub fn lookup(&self, id: &str, now: Instant) -> Option<Session> {
        if !is_token(id) {
            return None;
        }
        let key = sha256(id.as_bytes());
        let mut table = self.lock();
        match table.get(&key) {
            Some(s) if s.expires > now => Some(s.clone()),
            Some(_) => {
                table.remove(&key);
                None
            }
            None => None,
        }
    }

    /// Ends the session named by `id` (logout).
    pub fn remove(&self, id: &str) {
        self.lock().remove(&sha256(id.as_bytes()));
    }

    fn lock(&self) -> std::sync::MutexGuard<'_, HashMap<[u8; 32], Session>> {
        // A panic while holding the lock leaves a consistent map (every
        // change is one insert or remove), so a poisoned lock is still usable.
        self.table.lock().unwrap_or_else(|p| p.into_inner())
    }
}

/// The `Set-Cookie` value that starts a session.
pub fn session_cookie(id: &str, ttl: Duration) -> String {
    format!(
        "{COOKIE_NAME}={id}; Path={COOKIE_PATH}; HttpOnly; SameSite=Strict; Max-Age={}",
        ttl.as_secs()
    )
}

/// The `Set-Cookie` value that ends a session in the browser.
pub fn clearing_cookie() -> String {
    format!("{COOKIE_NAME}=; Path={COOKIE_PATH}; HttpOnly; SameSite=Strict; Max-Age=0")
}

/// Every session id in the request's `Cookie` headers, in the order sent.
/// All of them, not the first: cookies are not kept apart by port, so a
/// page served from another port of the same host (an HTML object on the
/// S3 port) can set a `stow_console` cookie of its own with a narrower
/// path, which the browser then sends before the real one.
pub fn cookie_sessions(headers: &HeaderMap) -> impl Iterator<Item = &str> {
    headers
        .get_all(http::header::COOKIE)
        .iter()
        .filter_map(|v| v.to_str().ok())
        .flat_map(|v| v.split(';'))
        .filter_map(|pair| pair.trim().split_once('='))
        .filter(|(name, _)| *name == COOKIE_NAME)
        .map(|(_, value)| value)
}

/// Refuses a request a browser sent on behalf of another site or origin:
/// `Sec-Fetch-Site` other than `same-origin` (or `none`, a typed URL), or
/// an `Origin` that is not `http://<Host>`. Requests without either header
/// come from non-browser clients, which carry no ambient cookie to abuse.
pub fn check_same_origin(headers: &HeaderMap) -> Result<(), ConsoleError> {
    if let Some(site) = header(headers, "sec-fetch-site") {
        if site != "same-origin" && site != "none" {
            return Err(ConsoleError::CrossOrigin(
                "Sec-Fetch-Site is not same-origin",
            ));
        }
    }
    if let Some(origin) = header(headers, "origin") {
        let host = header(headers, "host").unwrap_or("");
        if origin != format!("http://{host}") {
            return Err(ConsoleError::CrossOrigin("Origin is not this console"));
        }
    }
    Ok(())
}

/// Refuses a state-changing request whose [`CSRF_HEADER`] is not the
/// session's token.
pub fn check_csrf(headers: &HeaderMap, session: &Session) -> Result<(), ConsoleError> {
    match header(headers, CSRF_HEADER) {
        Some(sent) if digests_equal(&sha256(sent.as_bytes()), &sha256(session.csrf.as_bytes())) => {
            Ok(())
        }
        _ => Err(ConsoleError::Csrf),
    }
}

/// Refuses a Host that is not an IP literal or `localhost` (with an
/// optional port): a DNS-rebound name reaching a loopback console.
pub fn check_host(headers: &HeaderMap) -> Result<(), ConsoleError> {
    let host = header(headers, "host").ok_or(ConsoleError::Host)?;
    let name = if let Some(rest) = host.strip_prefix('[') {
        match rest.split_once(']') {
            Some((v6, port)) if v6.parse::<std::net::Ipv6Addr>().is_ok() => {
                return port_ok(port).then_some(()).ok_or(ConsoleError::Host);
            }
            _ => return Err(ConsoleError::Host),
        }
    } else {
        match host.split_once(':') {
            Some((name, port)) if port_ok(&format!(":{port}")) => name,
            Some(_) => return Err(ConsoleError::Host),
            None => host,
        }
    };
    if name.eq_ignore_ascii_case("localhost") || name.parse::<std::net::Ipv4Addr>().is_ok() {
        Ok(())
    } else {
        Err(ConsoleError::Host)
    }
}

fn port_ok(rest: &str) -> bool {
    rest.is_empty()
        || rest
            .strip_prefix(':')
            .is_some_and(|p| !p.is_empty() && p.len() <= 5 && p.bytes().all(|b| b.is_ascii_digit()))
}

fn header<'a>(headers: &'a HeaderMap, name: &str) -> Option<&'a str> {
    headers.get(name).and_then(|v| v.to_str().ok())
}

/// 32 random bytes from the operating system, as 64 hex characters.
fn random_token() -> Result<String, ConsoleError> {
    let mut bytes = [0u8; 32];
    rand::rngs::OsRng
        .try_fill_bytes(&mut bytes)
        .map_err(|e| ConsoleError::Internal(format!("no randomness for a session: {e}")))?;
    Ok(bytes.iter().map(|b| format!("{b:02x}")).collect())
}

fn is_token(s: &str) -> bool {
    s.len() == 64 && s.bytes().all(|b| matches!(b, b'0'..=b'9' | b'a'..=b'f'))
}

fn sha256(bytes: &[u8]) -> [u8; 32] {
    Sha256::digest(bytes).into()
}

/// Equality of two digests in time independent of where they differ.
fn digests_equal(a: &[u8; 32], b: &[u8; 32]) -> bool {
    let diff = a.iter().zip(b).fold(0u8, |acc, (x, y)| acc | (x ^ y));
    std::hint::black_box(diff) == 0
}

#[cfg(test)]
mod tests {
    use super::*;
    use http::HeaderValue;

    fn headers(pairs: &[(&'static str, &str)]) -> HeaderMap {
        let mut h = HeaderMap::new();
        for (k, v) in pairs {
            h.append(*k, HeaderValue::from_str(v).unwrap());
        }
        h
    }

    #[test]
    fn key_pair_matches_only_itself() {
        let pair = KeyPair::new("AK", "secret");
        assert!(pair.matches("AK", "secret"));
        assert!(!pair.matches("AK", "secreT"));
        assert!(!pair.matches("AK", "secret "));
        assert!(!pair.matches("AK", ""));
        assert!(!pair.matches("ak", "secret"));
        assert!(!pair.matches("", ""));
        assert_eq!(pair.access_key(), "AK");
    }

    #[test]
    fn sessions_are_random_and_expire() {
        let sessions = Sessions::new(Duration::from_secs(60));
        let t0 = Instant::now();
        let (a, sa) = sessions.create(t0).unwrap();
        let (b, sb) = sessions.create(t0).unwrap();
        assert_ne!(a, b);
        assert_ne!(sa.csrf, sb.csrf);
        assert!(is_token(&a) && is_token(&sa.csrf), "256 bits as hex");
        assert_eq!(sessions.lookup(&a, t0).unwrap().csrf, sa.csrf);
        assert!(sessions.lookup(&a, t0 + Duration::from_secs(59)).is_some());
        assert!(sessions.lookup(&a, t0 + Duration::from_secs(60)).is_none());
        // Once seen expired it is gone, even for an earlier clock.
        assert!(sessions.lookup(&a, t0).is_none());
        assert!(sessions.lookup(&b, t0).is_some());
    }

    #[test]
    fn failed_sign_ins_are_limited() {
        let limiter = SignInLimiter::default();
        let t0 = Instant::now();
        for i in 0..MAX_FAILED_SIGN_INS {
            assert!(limiter.check(t0).is_ok(), "attempt {i}");
            limiter.failed(t0 + Duration::from_secs(i as u64));
        }
        let at = t0 + Duration::from_secs(20);
        assert_eq!(limiter.check(at), Err(Duration::from_secs(40)));
        // The oldest failure leaves the window: one more attempt.
        assert!(limiter.check(t0 + SIGN_IN_WINDOW).is_ok());
        limiter.failed(t0 + SIGN_IN_WINDOW);
        assert!(limiter.check(t0 + SIGN_IN_WINDOW).is_err());
        // A success forgets them.
        limiter.succeeded();
        assert!(limiter.check(t0 + SIGN_IN_WINDOW).is_ok());
    }

    #[test]
    fn the_test_lifetime_is_bounded() {
        assert_eq!(ttl_from("3"), Some(Duration::from_secs(3)));
        assert_eq!(ttl_from(" 60 "), Some(Duration::from_secs(60)));
        for bad in ["0", "-1", "x", "", "28801", "1.5"] {
            assert_eq!(ttl_from(bad), None, "{bad:?}");
        }
    }

    #[test]
    fn forged_and_removed_sessions_are_unknown() {
        let sessions = Sessions::new(SESSION_TTL);
        let now = Instant::now();
        let (id, _) = sessions.create(now).unwrap();
        assert!(sessions.lookup(&"0".repeat(64), now).is_none());
        assert!(sessions.lookup("not-a-token", now).is_none());
        assert!(sessions.lookup(&id.to_uppercase(), now).is_none());
        sessions.remove(&id);
        assert!(sessions.lookup(&id, now).is_none());
    }

    #[test]
    fn the_table_is_bounded() {
        let sessions = Sessions::new(SESSION_TTL);
        let t0 = Instant::now();
        let (first, _) = sessions.create(t0).unwrap();
        for i in 1..=MAX_SESSIONS {
            sessions
                .create(t0 + Duration::from_millis(i as u64))
                .unwrap();
        }
        assert!(sessions.lock().len() <= MAX_SESSIONS);
        assert!(sessions.lookup(&first, t0).is_none(), "the oldest went");
    }

    #[test]
    fn cookie_flags_and_parsing() {
        let c = session_cookie("abc", Duration::from_secs(10));
        for flag in [
            "HttpOnly",
            "SameSite=Strict",
            "Path=/_stow/console/",
            "Max-Age=10",
        ] {
            assert!(c.contains(flag), "{c}");
        }
        assert!(clearing_cookie().contains("Max-Age=0"));
        let all = |h: &HeaderMap| cookie_sessions(h).map(String::from).collect::<Vec<_>>();
        let h = headers(&[("cookie", "a=1; stow_console=xyz; b=2")]);
        assert_eq!(all(&h), ["xyz"]);
        let h = headers(&[("cookie", "a=1"), ("cookie", "stow_console=q")]);
        assert_eq!(all(&h), ["q"]);
        let h = headers(&[("cookie", "stow_console=planted; stow_console=real")]);
        assert_eq!(all(&h), ["planted", "real"]);
        assert!(all(&headers(&[("cookie", "xstow_console=1")])).is_empty());
    }

    #[test]
    fn csrf_token_must_match() {
        let sessions = Sessions::new(SESSION_TTL);
        let (_, s) = sessions.create(Instant::now()).unwrap();
        assert!(check_csrf(&headers(&[(CSRF_HEADER, &s.csrf)]), &s).is_ok());
        assert!(matches!(
            check_csrf(&HeaderMap::new(), &s),
            Err(ConsoleError::Csrf)
        ));
        let wrong = format!("{}0", &s.csrf[..63]);
        let wrong = if wrong == s.csrf {
            format!("{}1", &s.csrf[..63])
        } else {
            wrong
        };
        assert!(check_csrf(&headers(&[(CSRF_HEADER, &wrong)]), &s).is_err());
        assert!(check_csrf(&headers(&[(CSRF_HEADER, "")]), &s).is_err());
    }

    #[test]
    fn cross_origin_requests_are_refused() {
        let host = ("host", "127.0.0.1:8080");
        assert!(
            check_same_origin(&headers(&[host])).is_ok(),
            "non-browser client"
        );
        assert!(check_same_origin(&headers(&[host, ("origin", "http://127.0.0.1:8080")])).is_ok());
        assert!(check_same_origin(&headers(&[host, ("sec-fetch-site", "same-origin")])).is_ok());
        // The S3 port is same-site but another origin.
        for bad in [
            vec![host, ("origin", "http://127.0.0.1:9000")],
            vec![host, ("origin", "null")],
            vec![host, ("origin", "https://127.0.0.1:8080")],
            vec![host, ("sec-fetch-site", "same-site")],
            vec![host, ("sec-fetch-site", "cross-site")],
            vec![
                host,
                ("sec-fetch-site", "same-origin"),
                ("origin", "http://evil.example"),
            ],
        ] {
            assert!(
                matches!(
                    check_same_origin(&headers(&bad)),
                    Err(ConsoleError::CrossOrigin(_))
                ),
                "{bad:?}"
            );
        }
    }

    #[test]
    fn only_ip_and_localhost_hosts() {
        for ok in [
            "127.0.0.1:1",
            "127.0.0.1",
            "localhost:8080",
            "LOCALHOST",
            "[::1]:80",
            "10.0.0.2:9",
        ] {
            assert!(check_host(&headers(&[("host", ok)])).is_ok(), "{ok}");
        }
        for bad in [
            "evil.example:8080",
            "127.0.0.1.evil:80",
            "[::1",
            "[zz]:1",
            "localhost:",
            "localhost:x",
            "",
        ] {
            assert!(check_host(&headers(&[("host", bad)])).is_err(), "{bad}");
        }
        assert!(check_host(&HeaderMap::new()).is_err());
    }
}
