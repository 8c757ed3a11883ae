//! The rmcp `ServerHandler` of the object profile: tool listing, admission
//! (busy, argument and name bounds), input validation, dispatch to
//! [`Core`] on the blocking pool, result encoding with the response bound,
//! and the browser resources.
//!
//! Admission runs here rather than in rmcp because it must see the raw
//! arguments before any schema validation (rmcp validates arguments only on
//! its HTTP transport, so validation is ours too, in [`crate::schema`]).

use std::io;
use std::sync::atomic::{AtomicUsize, Ordering};
use std::sync::Arc;

use rmcp::model::{
    CallToolRequestParams, CallToolResponse, CallToolResult, ContentBlock, Implementation,
    InitializeResult, ListResourceTemplatesResult, ListResourcesResult, ListToolsResult,
    PaginatedRequestParams, ProtocolVersion, ReadResourceRequestParams, ReadResourceResponse,
    ReadResourceResult, ServerCapabilities, ServerConfig, Tool,
};
use rmcp::service::RequestContext;
use rmcp::{ErrorData, RoleServer, ServerHandler};
use serde::de::DeserializeOwned;
use serde_json::{json, Map, Value};

use crate::core::{
    CallOutput, Core, ResourceError, MAX_ARGUMENT_BYTES, MAX_CONCURRENT_CALLS, MAX_RESPONSE_BYTES,
    MAX_TOOL_NAME_BYTES,
};
use crate::envelope::{Code, Envelope, Kind};
use crate::schema::{self, ToolDef};

/// URI of the browser UI resource.
pub const BROWSER_UI_URI: &str = "ui://stow/browser-v1";
/// MIME type of MCP Apps HTML.
const MCP_APP_MIME: &str = "text/html;profile=mcp-app";
/// The browser UI: self-contained HTML, no network access.
const BROWSER_HTML: &str = include_str!("browser.html");

/// Server instructions of the object profile.
pub const OBJECT_INSTRUCTIONS: &str = "\
stow object storage: one host-configured bucket; tool arguments name object keys only.
To change an object: (1) create a unique request_key and persist it together with the key, \
bytes and options you intend to save; (2) call stow_object_read_for_save to get an \
observation_token (also when the object is absent); (3) call stow_object_save with that \
token and the request_key. Use replace: true instead of a token only when you deliberately \
overwrite whatever is there. On a retry keep the token, request_key, bytes and options \
identical: a live retry replays the original result, a changed one is request_conflict.
Only outcome committed proves a save. After an uncertain reply or a server restart call \
stow_object_resolve_save with the original key and request_key instead of reading again \
and saving blindly; not_found proves nothing about the original save.
Observation tokens expire after 15 minutes, are limited in number and vanish on restart; \
release them with stow_object_release_observation when done. Save receipts keep metadata, \
not old bodies. This server does not coordinate host file edits, enforce ACLs or keep \
historical object bodies.";

/// Counts admitted tool calls; a slot is given back when dropped.
struct Slot(Arc<AtomicUsize>);

impl Slot {
    fn take(counter: &Arc<AtomicUsize>) -> Option<Slot> {
        counter
            .fetch_update(Ordering::SeqCst, Ordering::SeqCst, |n| {
                (n < MAX_CONCURRENT_CALLS).then_some(n + 1)
            })
            .ok()
            .map(|_| Slot(Arc::clone(counter)))
    }
}

impl Drop for Slot {
    fn drop(&mut self) {
        self.0.fetch_sub(1, Ordering::SeqCst);
    }
}

/// Counts bytes a value serialises to, without keeping them.
struct Counter(usize);

impl io::Write for Counter {
    fn write(&mut self, buf: &[u8]) -> io::Result<usize> {
        self.0 += buf.len();
        Ok(buf.len())
    }
    fn flush(&mut self) -> io::Result<()> {
        Ok(())
    }
}

pub(crate) fn encoded_len<T: serde::Serialize>(v: &T) -> Result<usize, serde_json::Error> {
    let mut c = Counter(0);
    serde_json::to_writer(&mut c, v)?;
    Ok(c.0)
}

/// Whether a tool reports an effect outcome (`unknown` on refusal) rather
/// than `ok`. Unknown names are treated as effects: nothing is known.
fn kind_of(name: &str) -> Kind {
    match name {
        "stow_object_read_for_save"
        | "stow_object_release_observation"
        | "stow_object_capabilities"
        | "stow_browser"
        | "stow_object_mentions" => Kind::Inspect,
        _ => Kind::Effect,
    }
}

/// The object profile as an MCP server. Cheap to clone.
#[derive(Clone)]
pub struct ObjectServer {
    core: Arc<Core>,
    tools: Arc<Vec<ToolDef>>,
    listed: Arc<ListToolsResult>,
    info: Arc<ServerConfig>,
    admitted: Arc<AtomicUsize>,
}

/// The server could not describe its own tools (never expected: the
/// definitions are compiled in).
#[derive(Debug, thiserror::Error)]
#[error("invalid built-in tool definitions: {0}")]
pub struct DefinitionError(#[from] serde_json::Error);

fn tool_of(def: &ToolDef) -> Result<Tool, serde_json::Error> {
    let mut t = json!({
        "name": def.name,
        "description": def.description,
        "inputSchema": *def.input_schema,
        "outputSchema": *def.output_schema,
    });
    let extra = match def.name.as_str() {
        "stow_browser" => Some(json!({
            "title": "Stow bucket browser",
            "annotations": {"readOnlyHint": true, "openWorldHint": false},
            "_meta": {
                "ui": {"resourceUri": BROWSER_UI_URI},
                "openai/ui": {"entrypoints": [{"type": "global"}, {"type": "thread"}]}
            }
        })),
        "stow_object_mentions" => Some(json!({
            "title": "Stow object mentions",
            "annotations": {"readOnlyHint": true, "openWorldHint": false},
            "_meta": {
                "ui": {"visibility": ["app"]},
                "openai/extensions": {"mentions/search": {}}
            }
        })),
        _ => None,
    };
    if let (Some(Value::Object(extra)), Some(obj)) = (extra, t.as_object_mut()) {
        obj.extend(extra);
    }
    serde_json::from_value(t)
}

impl ObjectServer {
    /// A server over a profile core.
    pub fn new(core: Arc<Core>) -> Result<ObjectServer, DefinitionError> {
        let browser = core.settings().browser;
        let tools: Vec<ToolDef> = schema::object_tools()?
            .into_iter()
            .filter(|t| browser || !schema::is_browser_tool(&t.name))
            .collect();
        let listed: Vec<Tool> = tools.iter().map(tool_of).collect::<Result<_, _>>()?;
        let listed: ListToolsResult =
            serde_json::from_value(json!({ "tools": listed, "resultType": "complete" }))?;
        let caps: ServerCapabilities = if browser {
            serde_json::from_value(json!({"tools": {}, "resources": {}}))?
        } else {
            serde_json::from_value(json!({"tools": {}}))?
        };
        let info = InitializeResult::new(caps)
            .with_protocol_version(ProtocolVersion::V_2025_11_25)
            .with_server_info(Implementation::new("stow-objects", "1"))
            .with_instructions(OBJECT_INSTRUCTIONS);
        Ok(ObjectServer {
            core,
            tools: Arc::new(tools),
            listed: Arc::new(listed),
            info: Arc::new(info),
            admitted: Arc::new(AtomicUsize::new(0)),
        })
    }

    /// The profile core (for shutdown).
    pub fn core(&self) -> &Arc<Core> {
        &self.core
    }

    /// Waits (at most `limit`) until no admitted tool call is running, so
    /// that work already started finishes before the store is released.
    pub async fn drain(&self, limit: std::time::Duration) {
        let deadline = tokio::time::Instant::now() + limit;
        while self.admitted.load(Ordering::SeqCst) > 0 && tokio::time::Instant::now() < deadline {
            tokio::time::sleep(std::time::Duration::from_millis(2)).await;
        }
    }

    /// Runs one `tools/call` through admission, validation and dispatch.
    pub async fn call(
        &self,
        name: &str,
        arguments: Option<Map<String, Value>>,
        cancelled: impl Fn() -> bool,
    ) -> Result<CallToolResult, ErrorData> {
        let kind = kind_of(name);
        let Some(_slot) = Slot::take(&self.admitted) else {
            return Ok(self.finish(
                kind,
                Envelope::refused(
                    kind,
                    Code::Busy,
                    "8 tool calls are already running; retry after one finishes",
                )
                .into(),
            ));
        };
        if name.len() > MAX_TOOL_NAME_BYTES {
            return Ok(self.finish(
                kind,
                Envelope::refused(
                    kind,
                    Code::PayloadTooLarge,
                    "the tool name exceeds 128 bytes",
                )
                .into(),
            ));
        }
        let args = arguments.unwrap_or_default();
        if encoded_len(&args).map_or(true, |n| n > MAX_ARGUMENT_BYTES) {
            return Ok(self.finish(
                kind,
                Envelope::refused(
                    kind,
                    Code::PayloadTooLarge,
                    "the tool arguments exceed 262144 bytes",
                )
                .into(),
            ));
        }
        let Some(tool) = self.tools.iter().find(|t| t.name == name) else {
            return Err(ErrorData::invalid_params(
                format!("unknown tool: {name}"),
                None,
            ));
        };
        if let Err(message) = schema::validate_arguments(&tool.input_schema, &args) {
            return Ok(self.finish(kind, CallOutput::Failed(message)));
        }
        if cancelled() {
            return Ok(self.finish(
                kind,
                Envelope::refused(kind, Code::Canceled, "the call was cancelled").into(),
            ));
        }
        let core = Arc::clone(&self.core);
        let tool_name = name.to_string();
        let out = tokio::task::spawn_blocking(move || dispatch(&core, &tool_name, args))
            .await
            .unwrap_or_else(|e| {
                tracing::error!("tool call {name} failed: {e}");
                Envelope::refused(kind, Code::Unavailable, "the call failed").into()
            });
        let out = match out {
            // A call cancelled while it ran keeps its outcome (a committed
            // save stays committed) but reports the cancellation.
            CallOutput::Envelope { mut env, minted } if cancelled() && env.error.is_none() => {
                if let Some(t) = &minted {
                    self.core.discard(t);
                }
                env.observation_token = None;
                env.error = Envelope::refused(kind, Code::Canceled, "the call was cancelled").error;
                CallOutput::Envelope { env, minted: None }
            }
            other => other,
        };
        Ok(self.finish(kind, out))
    }

    /// Encodes a call's output, replacing a result over the response bound
    /// (or one that cannot be encoded) with the minimal envelope.
    fn finish(&self, kind: Kind, out: CallOutput) -> CallToolResult {
        let (outcome, replayed, minted, encoded) = match out {
            CallOutput::Envelope { env, minted } => {
                (env.outcome, env.replayed, minted, envelope_result(&env))
            }
            CallOutput::Structured(v) => {
                let mut r = CallToolResult::success(Vec::new());
                r.structured_content = Some(v);
                (kind.refusal(), false, None, Ok(r))
            }
            CallOutput::Failed(message) => (
                kind.refusal(),
                false,
                None,
                Ok(CallToolResult::error(vec![ContentBlock::text(message)])),
            ),
        };
        let code = match &encoded {
            Ok(r) => match encoded_len(r) {
                Ok(n) if n <= MAX_RESPONSE_BYTES => None,
                Ok(_) => Some(Code::ResponseTooLarge),
                Err(_) => Some(Code::ResponseEncoding),
            },
            Err(_) => Some(Code::ResponseEncoding),
        };
        match (code, encoded) {
            (None, Ok(r)) => r,
            (code, _) => {
                if let Some(t) = &minted {
                    self.core.discard(t);
                }
                let env =
                    Envelope::minimal(outcome, replayed, code.unwrap_or(Code::ResponseEncoding));
                envelope_result(&env).unwrap_or_else(|_| {
                    CallToolResult::error(vec![ContentBlock::text(
                        "object request response_encoding",
                    )])
                })
            }
        }
    }

    async fn read_resource_inner(&self, uri: String) -> Result<ReadResourceResult, ErrorData> {
        if !self.core.settings().browser {
            return Err(ErrorData::resource_not_found(
                "no resources are served",
                None,
            ));
        }
        if uri == BROWSER_UI_URI {
            return serde_json::from_value(json!({
                "resultType": "complete",
                "contents": [{
                    "uri": BROWSER_UI_URI,
                    "mimeType": MCP_APP_MIME,
                    "text": BROWSER_HTML,
                    "_meta": {"ui": {"csp": {"connectDomains": [], "resourceDomains": []}}}
                }]
            }))
            .map_err(|e| ErrorData::internal_error(e.to_string(), None));
        }
        let core = Arc::clone(&self.core);
        let uri2 = uri.clone();
        let body = tokio::task::spawn_blocking(move || core.read_object_resource(&uri2))
            .await
            .map_err(|_| ErrorData::internal_error("resource read failed", None))?;
        match body {
            Ok(b) => {
                let item = match b.contents {
                    Ok(text) => json!({"uri": uri, "mimeType": b.mime_type, "text": text}),
                    Err(blob) => json!({"uri": uri, "mimeType": b.mime_type, "blob": blob}),
                };
                serde_json::from_value(json!({ "contents": [item], "resultType": "complete" }))
                    .map_err(|e| ErrorData::internal_error(e.to_string(), None))
            }
            Err(e @ ResourceError::BadUri) => Err(ErrorData::invalid_params(e.to_string(), None)),
            Err(e @ ResourceError::Unavailable) => {
                Err(ErrorData::resource_not_found(e.to_string(), None))
            }
        }
    }
}

fn envelope_result(env: &Envelope) -> Result<CallToolResult, serde_json::Error> {
    let value = serde_json::to_value(env)?;
    let text = serde_json::to_string(&value)?;
    let mut r = CallToolResult::success(vec![ContentBlock::text(text)]);
    r.structured_content = Some(value);
    r.is_error = Some(env.error.is_some());
    Ok(r)
}

fn parse<T: DeserializeOwned>(kind: Kind, args: Map<String, Value>) -> Result<T, CallOutput> {
    serde_json::from_value(Value::Object(args)).map_err(|e| {
        Envelope::refused(kind, Code::Invalid, &format!("invalid arguments: {e}")).into()
    })
}

/// Runs one validated tool call (on the blocking pool: the store blocks).
pub(crate) fn dispatch(core: &Core, name: &str, args: Map<String, Value>) -> CallOutput {
    let kind = kind_of(name);
    let run = || -> Result<CallOutput, CallOutput> {
        Ok(match name {
            "stow_object_read_for_save" => core.read_for_save(parse(kind, args)?),
            "stow_object_save" => core.save(parse(kind, args)?).into(),
            "stow_object_resolve_save" => core.resolve(parse(kind, args)?).into(),
            "stow_object_release_observation" => core.release(parse(kind, args)?).into(),
            "stow_object_capabilities" => core.capabilities().into(),
            "stow_browser" => core.browse(parse(kind, args)?),
            "stow_object_mentions" => core.mentions(parse(kind, args)?),
            _ => Envelope::refused(kind, Code::Invalid, "unknown tool").into(),
        })
    };
    run().unwrap_or_else(|refusal| refusal)
}

impl ServerHandler for ObjectServer {
    fn get_info(&self) -> ServerConfig {
        (*self.info).clone()
    }

    async fn list_tools(
        &self,
        _request: Option<PaginatedRequestParams>,
        _context: RequestContext<RoleServer>,
    ) -> Result<ListToolsResult, ErrorData> {
        Ok((*self.listed).clone())
    }

    async fn call_tool(
        &self,
        request: CallToolRequestParams,
        context: RequestContext<RoleServer>,
    ) -> Result<CallToolResponse, ErrorData> {
        let ct = context.ct.clone();
        self.call(&request.name, request.arguments, || ct.is_cancelled())
            .await
            .map(CallToolResponse::from)
    }

    async fn list_resources(
        &self,
        _request: Option<PaginatedRequestParams>,
        _context: RequestContext<RoleServer>,
    ) -> Result<ListResourcesResult, ErrorData> {
        let resources = if self.core.settings().browser {
            json!([{"uri": BROWSER_UI_URI, "name": "Stow bucket browser", "mimeType": MCP_APP_MIME}])
        } else {
            json!([])
        };
        serde_json::from_value(json!({ "resources": resources, "resultType": "complete" }))
            .map_err(|e| ErrorData::internal_error(e.to_string(), None))
    }

    async fn list_resource_templates(
        &self,
        _request: Option<PaginatedRequestParams>,
        _context: RequestContext<RoleServer>,
    ) -> Result<ListResourceTemplatesResult, ErrorData> {
        let templates = if self.core.settings().browser {
            json!([{
                "uriTemplate": "stow://objects/{bucket}/{key}",
                "name": "Configured bucket object",
                "description": "Current bytes of an object in the configured bucket; key is the unpadded base64url identifier the browser tools return."
            }])
        } else {
            json!([])
        };
        serde_json::from_value(json!({ "resourceTemplates": templates, "resultType": "complete" }))
            .map_err(|e| ErrorData::internal_error(e.to_string(), None))
    }

    async fn read_resource(
        &self,
        request: ReadResourceRequestParams,
        _context: RequestContext<RoleServer>,
    ) -> Result<ReadResourceResponse, ErrorData> {
        self.read_resource_inner(request.uri)
            .await
            .map(ReadResourceResponse::from)
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::config::ObjectConfig;
    use crate::tokens::SystemClock;
    use stow_store::Store;

    fn server(browser: bool, max_observations: i64) -> ObjectServer {
        let store = Store::memory(Default::default()).unwrap();
        store.create_bucket("files").unwrap();
        let settings = ObjectConfig {
            object_dir: "/unused".into(),
            bucket: "files".into(),
            browser,
            max_observations,
            ..Default::default()
        }
        .validate()
        .unwrap();
        ObjectServer::new(Arc::new(Core::new(store, settings, Arc::new(SystemClock)))).unwrap()
    }

    fn args(v: Value) -> Option<Map<String, Value>> {
        v.as_object().cloned()
    }

    fn env_of(r: &CallToolResult) -> Value {
        let v = r.structured_content.clone().unwrap();
        let ContentBlock::Text(t) = &r.content[0] else {
            panic!()
        };
        assert_eq!(serde_json::from_str::<Value>(&t.text).unwrap(), v);
        assert_eq!(r.is_error, Some(v.get("error").is_some()));
        v
    }

    #[tokio::test(flavor = "current_thread")]
    async fn admission_refuses_beyond_eight_calls() {
        let s = server(false, 0);
        let slots: Vec<Slot> = (0..MAX_CONCURRENT_CALLS)
            .map(|_| Slot::take(&s.admitted).unwrap())
            .collect();
        let r = s
            .call("stow_object_save", args(json!({})), || false)
            .await
            .unwrap();
        let v = env_of(&r);
        assert_eq!(
            (v["outcome"].as_str(), v["error"]["code"].as_str()),
            (Some("unknown"), Some("busy"))
        );
        let r = s
            .call("stow_object_capabilities", args(json!({})), || false)
            .await
            .unwrap();
        assert_eq!(env_of(&r)["outcome"], "ok");
        drop(slots);
        let r = s
            .call("stow_object_capabilities", args(json!({})), || false)
            .await
            .unwrap();
        assert!(env_of(&r).get("error").is_none());
        assert_eq!(s.admitted.load(Ordering::SeqCst), 0);
    }

    #[tokio::test(flavor = "current_thread")]
    async fn names_arguments_and_unknown_tools() {
        let s = server(false, 0);
        let long = "n".repeat(129);
        let v = env_of(&s.call(&long, None, || false).await.unwrap());
        assert_eq!(v["error"]["code"], "payload_too_large");
        let big = json!({"key": "k".repeat(MAX_ARGUMENT_BYTES)});
        let v = env_of(
            &s.call("stow_object_read_for_save", args(big), || false)
                .await
                .unwrap(),
        );
        assert_eq!(
            (v["outcome"].as_str(), v["error"]["code"].as_str()),
            (Some("ok"), Some("payload_too_large"))
        );
        assert!(
            s.call("stow_browser", args(json!({})), || false)
                .await
                .is_err(),
            "browser tools are off"
        );
        let r = s
            .call("stow_object_save", args(json!({"key": 1})), || false)
            .await
            .unwrap();
        assert!(r.structured_content.is_none() && r.is_error == Some(true));
    }

    #[tokio::test(flavor = "current_thread")]
    async fn cancelled_calls_keep_their_outcome() {
        let s = server(false, 0);
        let save = json!({"key": "k", "data_base64": "aGk=", "request_key": "r", "replace": true});
        let flag = std::sync::atomic::AtomicUsize::new(0);
        // Not cancelled when checked before dispatch, cancelled after.
        let r = s
            .call("stow_object_save", args(save), || {
                flag.fetch_add(1, Ordering::SeqCst) > 0
            })
            .await
            .unwrap();
        let v = env_of(&r);
        assert_eq!(
            (v["outcome"].as_str(), v["error"]["code"].as_str()),
            (Some("committed"), Some("canceled"))
        );
        let read = json!({"key": "k"});
        let flag = std::sync::atomic::AtomicUsize::new(0);
        let r = s
            .call("stow_object_read_for_save", args(read.clone()), || {
                flag.fetch_add(1, Ordering::SeqCst) > 0
            })
            .await
            .unwrap();
        let v = env_of(&r);
        assert_eq!(v["error"]["code"], "canceled");
        assert!(v.get("observation_token").is_none());
        assert_eq!(s.core.observations(), 0, "the minted token was discarded");
        let r = s
            .call("stow_object_read_for_save", args(read), || true)
            .await
            .unwrap();
        assert_eq!(env_of(&r)["error"]["code"], "canceled");
    }

    #[test]
    fn oversized_results_become_the_minimal_envelope() {
        let s = server(false, 0);
        let mut env = Envelope::new(crate::envelope::Outcome::Committed);
        env.replayed = true;
        env.available = true;
        env.object = Some(crate::envelope::ObjectView {
            key: "k".into(),
            size: 1,
            etag: "\"e\"".into(),
            content_type: None,
            metadata: std::collections::BTreeMap::from([("m".into(), "v".repeat(200_000))]),
            last_modified: "2020-01-01T00:00:00Z".into(),
            data_base64: None,
        });
        let r = s.finish(
            Kind::Effect,
            CallOutput::Envelope {
                env: Box::new(env),
                minted: None,
            },
        );
        let v = env_of(&r);
        assert_eq!(
            v,
            json!({"version": 1, "outcome": "committed", "available": false, "absent": false,
                   "replayed": true, "error": {"code": "response_too_large",
                   "message": "object request response_too_large: the encoded result exceeds the response limit"}})
        );
        // A read that falls back discards the token it minted.
        let out = s
            .core
            .read_for_save(crate::core::ReadArgs { key: "k".into() });
        let CallOutput::Envelope { mut env, minted } = out else {
            panic!()
        };
        assert_eq!(s.core.observations(), 1);
        env.observation_token = Some("t".repeat(300_000));
        let v = env_of(&s.finish(Kind::Inspect, CallOutput::Envelope { env, minted }));
        assert_eq!(
            (v["outcome"].as_str(), v["error"]["code"].as_str()),
            (Some("ok"), Some("response_too_large"))
        );
        assert_eq!(s.core.observations(), 0);
        // Browser-shaped results fall back too.
        let huge = CallOutput::Structured(json!({"items": "x".repeat(MAX_RESPONSE_BYTES)}));
        assert_eq!(
            env_of(&s.finish(Kind::Inspect, huge))["error"]["code"],
            "response_too_large"
        );
    }

    #[test]
    fn tool_list_and_info() {
        let plain = server(false, 0);
        assert_eq!(plain.listed.tools.len(), 5);
        assert!(plain.info.capabilities.resources.is_none());
        let browser = server(true, 0);
        assert_eq!(browser.listed.tools.len(), 7);
        assert!(browser.info.capabilities.resources.is_some());
        assert_eq!(browser.info.server_info.name, "stow-objects");
        let b = browser
            .listed
            .tools
            .iter()
            .find(|t| t.name == "stow_browser")
            .unwrap();
        assert_eq!(b.title.as_deref(), Some("Stow bucket browser"));
    }
}
