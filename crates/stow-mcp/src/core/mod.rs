//! The object tools' behaviour, independent of JSON-RPC: each call takes
//! typed arguments and answers an envelope (or a browser result). All
//! storage goes through [`stow_store::Store`]; this module only adapts.

use std::collections::BTreeMap;
use std::io::Read;
use std::sync::atomic::{AtomicBool, Ordering};
use std::sync::{Arc, Mutex, MutexGuard};

use base64::engine::general_purpose::{STANDARD, URL_SAFE_NO_PAD};
use base64::Engine;
use serde::Deserialize;
use serde_json::{json, Value};
use stow_store::{
    validate, ListQuery, ObjectProps, ObjectSummary, SaveGuard, SaveRequest, Store, StoreError,
};

use crate::config::Settings;
use crate::envelope::{Capabilities, Code, Envelope, Kind, ObjectView, Outcome};
use crate::tokens::{Clock, Lookup, MintError, Pool, OBSERVATION_TTL};

/// Largest encoded tool result (structured and text forms together).
pub const MAX_RESPONSE_BYTES: usize = 256 << 10;
/// Largest raw tool arguments.
pub const MAX_ARGUMENT_BYTES: usize = 256 << 10;
/// Tool calls admitted at once; more are answered `busy`.
pub const MAX_CONCURRENT_CALLS: usize = 8;
/// Longest tool name accepted.
pub const MAX_TOOL_NAME_BYTES: usize = 128;
/// Objects per browser page.
pub const BROWSER_PAGE: usize = 50;
/// Longest browser prefix or mentions query.
pub const MAX_PREFIX_BYTES: usize = 1024;
/// Longest browser cursor.
pub const MAX_CURSOR_BYTES: usize = 4096;
/// Longest object resource URI.
pub const MAX_URI_BYTES: usize = 2048;
/// MIME type of bodies without a content type.
const OCTET_STREAM: &str = "application/octet-stream";

/// What one tool call produced.
#[derive(Debug, Clone, PartialEq)]
pub enum CallOutput {
    /// An object envelope; `minted` names the token a read just created
    /// (discarded again if the result cannot be delivered).
    Envelope {
        env: Box<Envelope>,
        minted: Option<String>,
    },
    /// A browser result: structured content only, no text item.
    Structured(Value),
    /// A browser failure: a text-only error result with a generic message.
    Failed(String),
}

impl From<Envelope> for CallOutput {
    fn from(env: Envelope) -> Self {
        CallOutput::Envelope {
            env: Box::new(env),
            minted: None,
        }
    }
}

/// Arguments of `stow_object_read_for_save`.
#[derive(Debug, Deserialize)]
pub struct ReadArgs {
    pub key: String,
}

/// Arguments of `stow_object_save`.
#[derive(Debug, Deserialize)]
pub struct SaveArgs {
    pub key: String,
    pub data_base64: String,
    #[serde(default)]
    pub content_type: Option<String>,
    #[serde(default)]
    pub metadata: Option<BTreeMap<String, String>>,
    #[serde(default)]
    pub observation_token: Option<String>,
    #[serde(default)]
    pub replace: Option<bool>,
    pub request_key: String,
}

/// Arguments of `stow_object_resolve_save`.
#[derive(Debug, Deserialize)]
pub struct ResolveArgs {
    pub key: String,
    pub request_key: String,
}

/// Arguments of `stow_object_release_observation`.
#[derive(Debug, Deserialize)]
pub struct ReleaseArgs {
    pub observation_token: String,
}

/// Arguments of `stow_browser`.
#[derive(Debug, Deserialize)]
pub struct BrowseArgs {
    #[serde(default)]
    pub prefix: Option<String>,
    #[serde(default)]
    pub cursor: Option<String>,
}

/// Arguments of `stow_object_mentions`.
#[derive(Debug, Deserialize)]
pub struct MentionsArgs {
    pub query: String,
}

/// The contents of an object resource.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct ResourceBody {
    pub mime_type: String,
    /// `Ok(text)` for UTF-8 text types, `Err(base64)` for a blob.
    pub contents: Result<String, String>,
}

/// Why an object resource cannot be read (answered generically).
#[derive(Debug, Clone, Copy, PartialEq, Eq, thiserror::Error)]
pub enum ResourceError {
    /// Not a URI of the configured bucket's objects.
    #[error("not an object resource of the configured bucket")]
    BadUri,
    /// No such object, or larger than the body limit.
    #[error("object resource unavailable")]
    Unavailable,
}

/// The state of one object profile: the store, the bucket, the bounds and
/// the observation pool.
pub struct Core {
    store: Store,
    settings: Settings,
    pool: Mutex<Pool>,
    clock: Arc<dyn Clock>,
    closed: AtomicBool,
}

fn lock(pool: &Mutex<Pool>) -> MutexGuard<'_, Pool> {
    pool.lock().unwrap_or_else(|e| e.into_inner())
}

/// Length of the standard base64 encoding of `n` bytes.
fn encoded_len(n: u64) -> u64 {
    n.div_ceil(3) * 4
}

impl Core {
    /// A profile over an opened store whose bucket exists.
    pub fn new(store: Store, settings: Settings, clock: Arc<dyn Clock>) -> Core {
        let pool = Pool::new(settings.max_observations as usize, OBSERVATION_TTL);
        Core {
            store,
            settings,
            pool: Mutex::new(pool),
            clock,
            closed: AtomicBool::new(false),
        }
    }

    /// The validated settings.
    pub fn settings(&self) -> &Settings {
        &self.settings
    }

    /// Closes the profile: every observation is dropped and later calls
    /// answer `closed`.
    pub fn close(&self) {
        self.closed.store(true, Ordering::SeqCst);
        lock(&self.pool).clear();
    }

    /// Whether [`Core::close`] ran.
    pub fn is_closed(&self) -> bool {
        self.closed.load(Ordering::SeqCst)
    }

    /// Number of live (or not yet reaped) observations.
    pub fn observations(&self) -> usize {
        lock(&self.pool).len()
    }

    /// Forgets a token minted for a result that could not be delivered.
    pub fn discard(&self, token: &str) {
        lock(&self.pool).release(token, self.clock.now());
    }

    fn reap(&self) {
        lock(&self.pool).reap(self.clock.now());
    }

    /// `stow_object_read_for_save`.
    pub fn read_for_save(&self, a: ReadArgs) -> CallOutput {
        let k = Kind::Inspect;
        if self.is_closed() {
            return Envelope::refused(k, Code::Closed, "the server is closed").into();
        }
        if lock(&self.pool).is_full(self.clock.now()) {
            return Envelope::refused(
                k,
                Code::ObservationFull,
                "the observation pool is full; release tokens",
            )
            .into();
        }
        if let Err(e) = validate::object_key(&a.key) {
            return Envelope::refused(k, Code::Invalid, &e.to_string()).into();
        }
        let obs = match self.store.read_for_save(
            &self.settings.bucket,
            &a.key,
            self.settings.max_object_bytes,
        ) {
            Ok(obs) => obs,
            Err(e) => return Envelope::store_failure(k, &e).into(),
        };
        let absent = obs.object.is_none();
        let object = obs.object.as_ref().map(|meta| {
            let mut view = ObjectView::of(meta);
            if !obs.body.is_empty() {
                view.data_base64 = Some(STANDARD.encode(&obs.body));
            }
            view
        });
        let token = match lock(&self.pool).mint(&a.key, obs.condition, self.clock.now()) {
            Ok(t) => t,
            Err(MintError::Full) => {
                return Envelope::refused(
                    k,
                    Code::ObservationFull,
                    "the observation pool is full; release tokens",
                )
                .into()
            }
            Err(MintError::Exhausted) => {
                return Envelope::refused(
                    k,
                    Code::Unavailable,
                    "no observation token could be minted",
                )
                .into()
            }
        };
        let mut env = Envelope::new(Outcome::Ok);
        env.available = true;
        env.absent = absent;
        env.object = object;
        env.observation_token = Some(token.clone());
        CallOutput::Envelope {
            env: Box::new(env),
            minted: Some(token),
        }
    }

    /// `stow_object_save`.
    pub fn save(&self, a: SaveArgs) -> Envelope {
        let k = Kind::Effect;
        if self.is_closed() {
            return Envelope::refused(k, Code::Closed, "the server is closed");
        }
        if self.settings.read_only {
            return Envelope::refused(k, Code::Denied, "the profile is read-only");
        }
        if a.request_key.is_empty() {
            return Envelope::refused(k, Code::Invalid, "request_key is required");
        }
        if let Err(e) = validate::object_key(&a.key) {
            return Envelope::refused(k, Code::Invalid, &e.to_string());
        }
        let token = a.observation_token.filter(|t| !t.is_empty());
        let replace = a.replace == Some(true);
        if token.is_some() == replace {
            return Envelope::refused(
                k,
                Code::Invalid,
                "exactly one of observation_token or replace: true is required",
            );
        }
        let limit = self.settings.max_object_bytes;
        if a.data_base64.len() as u64 > encoded_len(limit) {
            return Envelope::refused(
                k,
                Code::PayloadTooLarge,
                &format!("the body exceeds {limit} bytes"),
            );
        }
        let body = match STANDARD.decode(a.data_base64.as_bytes()) {
            Ok(b) => b,
            Err(_) => {
                return Envelope::refused(
                    k,
                    Code::Invalid,
                    "data_base64 is not padded standard base64",
                )
            }
        };
        if body.len() as u64 > limit {
            return Envelope::refused(
                k,
                Code::PayloadTooLarge,
                &format!("the body exceeds {limit} bytes"),
            );
        }
        let guard = match token {
            None => SaveGuard::Replace,
            Some(t) => match lock(&self.pool).lookup(&t, &a.key, self.clock.now()) {
                Lookup::Live(c) => SaveGuard::Observed(c),
                Lookup::Expired => {
                    return Envelope::refused(
                        k,
                        Code::ExpiredObservation,
                        "the observation expired; read again",
                    )
                }
                Lookup::Invalid => {
                    return Envelope::refused(
                        k,
                        Code::InvalidObservation,
                        "the observation token is unknown, released, or for another key",
                    )
                }
            },
        };
        let req = SaveRequest {
            bucket: self.settings.bucket.clone(),
            key: a.key,
            props: ObjectProps {
                content_type: a.content_type.filter(|c| !c.is_empty()),
                metadata: a.metadata.unwrap_or_default(),
                ..Default::default()
            },
            checksum_algorithm: None,
            guard,
            request_key: Some(a.request_key),
        };
        match self.store.save(req, &mut body.as_slice()) {
            Ok(saved) => {
                let mut env = Envelope::new(Outcome::Committed);
                env.available = true;
                env.replayed = saved.replayed;
                env.object = Some(ObjectView::of(&saved.object));
                env
            }
            Err(e) => Envelope::store_failure(k, &e),
        }
    }

    /// `stow_object_resolve_save`: answers from the receipt alone.
    pub fn resolve(&self, a: ResolveArgs) -> Envelope {
        let k = Kind::Effect;
        if self.is_closed() {
            return Envelope::refused(k, Code::Closed, "the server is closed");
        }
        self.reap();
        if a.request_key.is_empty() {
            return Envelope::refused(k, Code::Invalid, "request_key is required");
        }
        if let Err(e) = validate::object_key(&a.key) {
            return Envelope::refused(k, Code::Invalid, &e.to_string());
        }
        match self
            .store
            .resolve_save(&self.settings.bucket, &a.key, &a.request_key)
        {
            Ok(meta) => {
                let mut env = Envelope::new(Outcome::Committed);
                env.available = true;
                env.replayed = true;
                env.object = Some(ObjectView::of(&meta));
                env
            }
            Err(StoreError::ReceiptNotFound) => Envelope::refused_with(
                Outcome::Unknown,
                Code::NotFound,
                "no receipt is retained for this request key; absence proves nothing",
            ),
            Err(e) => Envelope::store_failure(k, &e),
        }
    }

    /// `stow_object_release_observation`: idempotent.
    pub fn release(&self, a: ReleaseArgs) -> Envelope {
        let k = Kind::Inspect;
        if self.is_closed() {
            return Envelope::refused(k, Code::Closed, "the server is closed");
        }
        if a.observation_token.is_empty() {
            return Envelope::refused(k, Code::Invalid, "observation_token is required");
        }
        lock(&self.pool).release(&a.observation_token, self.clock.now());
        let mut env = Envelope::new(Outcome::Ok);
        env.available = true;
        env.released = true;
        env
    }

    /// `stow_object_capabilities`.
    pub fn capabilities(&self) -> Envelope {
        let k = Kind::Inspect;
        if self.is_closed() {
            return Envelope::refused(k, Code::Closed, "the server is closed");
        }
        self.reap();
        let mut env = Envelope::new(Outcome::Ok);
        env.available = true;
        env.capabilities = Some(Capabilities {
            backend: "filesystem",
            persistent: self.store.is_persistent(),
            guarded_saves: true,
            durable_save_requests: true,
            read_only: self.settings.read_only,
            max_object_bytes: self.settings.max_object_bytes,
            max_observations: self.settings.max_observations,
            observation_ttl_seconds: OBSERVATION_TTL.as_secs(),
            max_response_bytes: MAX_RESPONSE_BYTES as u64,
            max_tool_arguments_bytes: MAX_ARGUMENT_BYTES as u64,
            max_concurrent_calls: MAX_CONCURRENT_CALLS as u64,
        });
        env
    }

    /// The URI of an object resource: the key as unpadded base64url.
    pub fn object_uri(&self, key: &str) -> String {
        format!(
            "stow://objects/{}/{}",
            self.settings.bucket,
            URL_SAFE_NO_PAD.encode(key.as_bytes())
        )
    }

    fn links(
        &self,
        prefix: &str,
        cursor: Option<String>,
    ) -> Result<(Vec<Value>, Option<String>), StoreError> {
        let page = self.store.list_objects(
            &self.settings.bucket,
            &ListQuery {
                prefix: prefix.to_string(),
                delimiter: None,
                start_after: cursor,
                max_keys: BROWSER_PAGE,
            },
        )?;
        let items = page.objects.iter().map(|o| self.link(o)).collect();
        let next = if page.is_truncated {
            page.next_marker
        } else {
            None
        };
        Ok((items, next))
    }

    fn link(&self, o: &ObjectSummary) -> Value {
        // Listings carry no content type; a per-object head supplies it
        // (an object deleted in between is shown as octet-stream).
        let mime = self
            .store
            .head_object(&self.settings.bucket, &o.key)
            .ok()
            .and_then(|m| m.props.content_type)
            .filter(|c| !c.is_empty())
            .unwrap_or_else(|| OCTET_STREAM.to_string());
        json!({
            "type": "resource_link",
            "uri": self.object_uri(&o.key),
            "name": o.key,
            "mimeType": mime,
            "size": o.size,
        })
    }

    /// `stow_browser`: one page of at most 50 objects by prefix.
    pub fn browse(&self, a: BrowseArgs) -> CallOutput {
        if self.is_closed() {
            return CallOutput::Failed("the server is closed".into());
        }
        let prefix = a.prefix.unwrap_or_default();
        let cursor = a.cursor.filter(|c| !c.is_empty());
        if prefix.len() > MAX_PREFIX_BYTES
            || cursor.as_ref().is_some_and(|c| c.len() > MAX_CURSOR_BYTES)
        {
            return CallOutput::Failed("browser input exceeds bounds".into());
        }
        match self.links(&prefix, cursor) {
            Ok((items, next)) => {
                let mut out = json!({
                    "bucket": self.settings.bucket,
                    "items": items,
                    "truncated": next.is_some(),
                    "max_bytes": self.settings.max_object_bytes,
                });
                if let (Some(next), Some(map)) = (next, out.as_object_mut()) {
                    map.insert("next_cursor".into(), Value::String(next));
                }
                CallOutput::Structured(out)
            }
            Err(e) => {
                tracing::warn!("browser listing failed: {e}");
                CallOutput::Failed("bucket listing unavailable".into())
            }
        }
    }

    /// `stow_object_mentions`: the first 50 references by key prefix.
    pub fn mentions(&self, a: MentionsArgs) -> CallOutput {
        if self.is_closed() {
            return CallOutput::Failed("the server is closed".into());
        }
        if a.query.len() > MAX_PREFIX_BYTES {
            return CallOutput::Failed("mentions query exceeds bounds".into());
        }
        match self.links(&a.query, None) {
            Ok((items, _)) => CallOutput::Structured(json!({ "items": items })),
            Err(e) => {
                tracing::warn!("mentions listing failed: {e}");
                CallOutput::Failed("bucket listing unavailable".into())
            }
        }
    }

    /// Reads `stow://objects/<bucket>/<base64url key>`: the current bytes.
    pub fn read_object_resource(&self, uri: &str) -> Result<ResourceBody, ResourceError> {
        if uri.len() > MAX_URI_BYTES {
            return Err(ResourceError::BadUri);
        }
        let prefix = format!("stow://objects/{}/", self.settings.bucket);
        let encoded = uri.strip_prefix(&prefix).ok_or(ResourceError::BadUri)?;
        let key = URL_SAFE_NO_PAD
            .decode(encoded.as_bytes())
            .ok()
            .and_then(|b| String::from_utf8(b).ok())
            .ok_or(ResourceError::BadUri)?;
        if validate::object_key(&key).is_err() || URL_SAFE_NO_PAD.encode(key.as_bytes()) != encoded
        {
            return Err(ResourceError::BadUri);
        }
        let read = self
            .store
            .get_object(&self.settings.bucket, &key, None)
            .map_err(|_| ResourceError::Unavailable)?;
        if read.meta.size > self.settings.max_object_bytes {
            return Err(ResourceError::Unavailable);
        }
        let mime = read
            .meta
            .props
            .content_type
            .clone()
            .filter(|c| !c.is_empty())
            .unwrap_or_else(|| OCTET_STREAM.to_string());
        let mut bytes = Vec::with_capacity(read.meta.size as usize);
        let mut body = read.body;
        body.read_to_end(&mut bytes)
            .map_err(|_| ResourceError::Unavailable)?;
        let essence = mime
            .split(';')
            .next()
            .unwrap_or("")
            .trim()
            .to_ascii_lowercase();
        let texty = essence.starts_with("text/") || essence == "application/json";
        let contents = match String::from_utf8(bytes) {
            Ok(text) if texty && !text.is_empty() => Ok(text),
            Ok(text) => Err(STANDARD.encode(text.as_bytes())),
            Err(e) => Err(STANDARD.encode(e.as_bytes())),
        };
        Ok(ResourceBody {
            mime_type: mime,
            contents,
        })
    }
}

#[cfg(test)]
mod tests;
