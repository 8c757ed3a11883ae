//! The rmcp `ServerHandler` of the workspace profile: the tool list (seed
//! 000, verbatim, narrowed by the configured roots, then the rewind tools), input validation,
//! dispatch on the blocking pool, the 256 KiB result bound, and the
//! checkpoint guide resource (whose text is also the instructions).

use std::sync::Arc;

use rmcp::model::{
    CallToolRequestParams, CallToolResponse, CallToolResult, ContentBlock, Implementation,
    InitializeResult, ListResourceTemplatesResult, ListResourcesResult, ListToolsResult,
    PaginatedRequestParams, ProtocolVersion, ReadResourceRequestParams, ReadResourceResponse,
    ServerCapabilities, ServerConfig,
};
use rmcp::service::RequestContext;
use rmcp::{ErrorData, RoleServer, ServerHandler};
use serde::de::DeserializeOwned;
use serde_json::{json, Map, Value};

use super::envelope::WsEnvelope;
use super::rewind::{ListArgs, RewindArgs, StatusArgs};
use super::tools::{
    AdoptArgs, CaptureArgs, DiffArgs, ExportArgs, InspectArgs, WorkspaceArgs, WorkspaceCore,
};
use crate::core::MAX_RESPONSE_BYTES;
use crate::schema::{self, ToolDef};
use crate::server::{encoded_len, DefinitionError};

/// URI of the checkpoint guide.
pub const GUIDE_URI: &str = "stow://guides/checkpoints/v1";
/// The guide's text (also the server's instructions).
const GUIDE: &str = include_str!("guide.txt");

/// The workspace profile as an MCP server. Cheap to clone.
#[derive(Clone)]
pub struct WorkspaceServer {
    core: Arc<WorkspaceCore>,
    tools: Arc<Vec<ToolDef>>,
    listed: Arc<ListToolsResult>,
    info: Arc<ServerConfig>,
}

/// Whether a tool reports an effect outcome rather than `ok`.
fn refusal_outcome(name: &str) -> &'static str {
    match name {
        "stow_checkpoint_create"
        | "stow_checkpoint_resolve"
        | "stow_handoff_export"
        | "stow_handoff_adopt"
        | "stow_workspace_rewind" => "not_committed",
        _ => "ok",
    }
}

impl WorkspaceServer {
    /// A server over a profile core; export and adopt are listed only with
    /// their roots.
    pub fn new(core: Arc<WorkspaceCore>) -> Result<WorkspaceServer, DefinitionError> {
        let s = core.settings();
        let (export, adopt) = (s.export_root.is_some(), s.adopt_root.is_some());
        let tools: Vec<ToolDef> = schema::workspace_tools()?
            .into_iter()
            .filter(|t| match t.name.as_str() {
                "stow_handoff_export" => export,
                "stow_handoff_adopt" => export && adopt,
                _ => true,
            })
            .collect();
        let listed: Vec<Value> = tools
            .iter()
            .map(|t| {
                let mut v = json!({
                    "name": t.name,
                    "description": t.description,
                    "inputSchema": *t.input_schema,
                    "outputSchema": *t.output_schema,
                });
                if let Some(a) = &t.annotations {
                    v["annotations"] = a.clone();
                }
                v
            })
            .collect();
        let listed: ListToolsResult =
            serde_json::from_value(json!({ "tools": listed, "resultType": "complete" }))?;
        let caps: ServerCapabilities =
            serde_json::from_value(json!({"tools": {}, "resources": {}}))?;
        let info = InitializeResult::new(caps)
            .with_protocol_version(ProtocolVersion::V_2025_11_25)
            .with_server_info(Implementation::new("stow-workspace", "1"))
            .with_instructions(GUIDE);
        Ok(WorkspaceServer {
            core,
            tools: Arc::new(tools),
            listed: Arc::new(listed),
            info: Arc::new(info),
        })
    }

    /// Runs one `tools/call`: validation, dispatch, encoding.
    pub async fn call(
        &self,
        name: &str,
        arguments: Option<Map<String, Value>>,
    ) -> Result<CallToolResult, ErrorData> {
        let Some(tool) = self.tools.iter().find(|t| t.name == name) else {
            return Err(ErrorData::invalid_params(
                format!("unknown tool: {name}"),
                None,
            ));
        };
        let args = arguments.unwrap_or_default();
        if let Err(message) = schema::validate_arguments(&tool.input_schema, &args) {
            return Ok(CallToolResult::error(vec![ContentBlock::text(message)]));
        }
        let core = Arc::clone(&self.core);
        let tool_name = name.to_string();
        let env = tokio::task::spawn_blocking(move || dispatch(&core, &tool_name, args))
            .await
            .unwrap_or_else(|e| {
                tracing::error!("tool call {name} failed: {e}");
                WsEnvelope::refused(
                    refusal_outcome(name),
                    "io_failure",
                    "call",
                    "the call failed".into(),
                )
            });
        Ok(finish(&env))
    }
}

fn parse<T: DeserializeOwned>(name: &str, args: Map<String, Value>) -> Result<T, Box<WsEnvelope>> {
    serde_json::from_value(Value::Object(args)).map_err(|e| {
        Box::new(WsEnvelope::refused(
            refusal_outcome(name),
            "invalid_request",
            "validate",
            format!("invalid arguments: {e}"),
        ))
    })
}

/// A workspace tool call with its typed arguments: what [`parse_call`]
/// makes of a validated call, before anything is run.
pub(crate) enum Call {
    InspectWorkspace(WorkspaceArgs),
    Capture(CaptureArgs, bool),
    InspectCheckpoint(InspectArgs),
    Diff(DiffArgs),
    Export(ExportArgs),
    Adopt(AdoptArgs),
    Status(StatusArgs),
    List(ListArgs),
    Rewind(RewindArgs),
}

/// The typed call for tool `name` (arguments already checked against its
/// input schema); a refusal envelope when they do not fit the type.
pub(crate) fn parse_call(name: &str, args: Map<String, Value>) -> Result<Call, Box<WsEnvelope>> {
    Ok(match name {
        "stow_workspace_inspect" => Call::InspectWorkspace(parse(name, args)?),
        "stow_checkpoint_create" => Call::Capture(parse(name, args)?, false),
        "stow_checkpoint_resolve" => Call::Capture(parse(name, args)?, true),
        "stow_checkpoint_inspect" => Call::InspectCheckpoint(parse(name, args)?),
        "stow_checkpoint_diff" => Call::Diff(parse(name, args)?),
        "stow_handoff_export" => Call::Export(parse(name, args)?),
        "stow_handoff_adopt" => Call::Adopt(parse(name, args)?),
        "stow_workspace_status" => Call::Status(parse(name, args)?),
        "stow_checkpoint_list" => Call::List(parse(name, args)?),
        "stow_workspace_rewind" => Call::Rewind(parse(name, args)?),
        _ => {
            return Err(Box::new(WsEnvelope::refused(
                "ok",
                "invalid_request",
                "validate",
                "unknown tool".into(),
            )))
        }
    })
}

/// Runs one validated call (on the blocking pool: the engine blocks).
fn dispatch(core: &WorkspaceCore, name: &str, args: Map<String, Value>) -> WsEnvelope {
    match parse_call(name, args) {
        Ok(Call::InspectWorkspace(a)) => core.inspect_workspace(a),
        Ok(Call::Capture(a, resolve)) => core.capture(a, resolve),
        Ok(Call::InspectCheckpoint(a)) => core.inspect_checkpoint(a),
        Ok(Call::Diff(a)) => core.diff(a),
        Ok(Call::Export(a)) => core.export(a),
        Ok(Call::Adopt(a)) => core.adopt(a),
        Ok(Call::Status(a)) => core.status(a),
        Ok(Call::List(a)) => core.list(a),
        Ok(Call::Rewind(a)) => core.rewind(a),
        Err(refusal) => *refusal,
    }
}

fn encode(env: &WsEnvelope) -> Result<CallToolResult, serde_json::Error> {
    let value = serde_json::to_value(env)?;
    let text = serde_json::to_string(&value)?;
    let mut r = CallToolResult::success(vec![ContentBlock::text(text)]);
    r.structured_content = Some(value);
    r.is_error = Some(env.error.is_some());
    Ok(r)
}

/// Encodes an envelope; one over the response bound becomes its minimal
/// form, which keeps the outcome (a committed effect stays committed).
fn finish(env: &WsEnvelope) -> CallToolResult {
    match encode(env) {
        Ok(r) if encoded_len(&r).is_ok_and(|n| n <= MAX_RESPONSE_BYTES) => r,
        _ => encode(&env.minimal()).unwrap_or_else(|_| {
            CallToolResult::error(vec![ContentBlock::text("workspace response_too_large")])
        }),
    }
}

impl ServerHandler for WorkspaceServer {
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
        _context: RequestContext<RoleServer>,
    ) -> Result<CallToolResponse, ErrorData> {
        self.call(&request.name, request.arguments)
            .await
            .map(CallToolResponse::from)
    }

    async fn list_resources(
        &self,
        _request: Option<PaginatedRequestParams>,
        _context: RequestContext<RoleServer>,
    ) -> Result<ListResourcesResult, ErrorData> {
        serde_json::from_value(json!({
            "resources": [{"uri": GUIDE_URI, "name": "Checkpoint workflow", "mimeType": "text/plain"}],
            "resultType": "complete"
        }))
        .map_err(|e| ErrorData::internal_error(e.to_string(), None))
    }

    async fn list_resource_templates(
        &self,
        _request: Option<PaginatedRequestParams>,
        _context: RequestContext<RoleServer>,
    ) -> Result<ListResourceTemplatesResult, ErrorData> {
        serde_json::from_value(json!({ "resourceTemplates": [], "resultType": "complete" }))
            .map_err(|e| ErrorData::internal_error(e.to_string(), None))
    }

    async fn read_resource(
        &self,
        request: ReadResourceRequestParams,
        _context: RequestContext<RoleServer>,
    ) -> Result<ReadResourceResponse, ErrorData> {
        if request.uri != GUIDE_URI {
            return Err(ErrorData::resource_not_found(
                format!("no resource {}", request.uri),
                None,
            ));
        }
        let r: rmcp::model::ReadResourceResult = serde_json::from_value(json!({
            "resultType": "complete",
            "contents": [{"uri": GUIDE_URI, "mimeType": "text/plain", "text": GUIDE}]
        }))
        .map_err(|e| ErrorData::internal_error(e.to_string(), None))?;
        Ok(ReadResourceResponse::from(r))
    }
}
