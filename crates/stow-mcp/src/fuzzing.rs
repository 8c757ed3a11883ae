//! Entry points for the fuzzer (`fuzz/`, issue 28) and the regression run
//! of its corpus (`tests/fuzz_corpus.rs`): hostile bytes in, never a
//! panic, hang or unbounded allocation. Not an API.

/// One line of the stdio transport: parsed as a JSON-RPC message, and its
/// request ID sought in its first bytes (what an over-long line is
/// answered with).
pub fn transport_line(bytes: &[u8]) {
    let _ = crate::transport::parse(bytes);
    let _ = crate::transport::request_id_prefix(bytes);
}

/// One `tools/call`'s arguments: the first byte picks a tool of either
/// profile (object tools first, then the workspace tools), the rest is
/// the arguments' JSON. Checked against the tool's input schema; an
/// object tool's valid call then runs against a fresh in-memory store
/// (the whole argument path: keys, bodies, tokens, limits), a workspace
/// tool's is parsed into its typed arguments (running one needs a
/// registry on disk).
pub fn tool_arguments(bytes: &[u8]) {
    use serde_json::Value;
    let Some((&pick, json)) = bytes.split_first() else {
        return;
    };
    let Ok(Value::Object(args)) = serde_json::from_slice::<Value>(json) else {
        return;
    };
    let (Ok(object), Ok(workspace)) = (
        crate::schema::object_tools(),
        crate::schema::workspace_tools(),
    ) else {
        return;
    };
    let n = usize::from(pick) % (object.len() + workspace.len());
    if let Some(tool) = object.get(n) {
        if crate::schema::validate_arguments(&tool.input_schema, &args).is_ok() {
            if let Some(core) = object_core() {
                let _ = crate::server::dispatch(&core, &tool.name, args);
            }
        }
    } else if let Some(tool) = workspace.get(n - object.len()) {
        if crate::schema::validate_arguments(&tool.input_schema, &args).is_ok() {
            let _ = crate::workspace::server::parse_call(&tool.name, args);
        }
    }
}

/// The object profile over a fresh in-memory store with its bucket (the
/// browser tools on), so every input starts from the same state.
fn object_core() -> Option<crate::core::Core> {
    let store = stow_store::Store::memory(Default::default()).ok()?;
    store.create_bucket("files").ok()?;
    let settings = crate::config::ObjectConfig {
        object_dir: "/nonexistent/stow-fuzz".into(),
        bucket: "files".into(),
        browser: true,
        ..Default::default()
    }
    .validate()
    .ok()?;
    Some(crate::core::Core::new(
        store,
        settings,
        std::sync::Arc::new(crate::tokens::SystemClock),
    ))
}
