//! The watch service's life: one per workspace, a stale socket replaced, a
//! capture that finds no service running in process, the same answers
//! either way.

use std::fs;
use std::os::unix::net::UnixListener;

use stow_checkpoint::watch_service::{self, CaptureRequest, WatchReply, WatchService};
use stow_checkpoint::CaptureSpec;
use stow_workspace::{prepare, Registry, WorkspaceResult};

fn setup() -> (tempfile::TempDir, Registry, WorkspaceResult) {
    let tmp = tempfile::tempdir().unwrap();
    let dir = tmp.path();
    fs::create_dir_all(dir.join("in/a")).unwrap();
    fs::write(dir.join("in/a/seed.txt"), "seed").unwrap();
    let m = dir.join("task.json");
    fs::write(
        &m,
        r#"{"version":1,"root":"ws","registry_dir":"reg","inputs":[{"source":"in","destination":"."}]}"#,
    )
    .unwrap();
    let ws = prepare(&m).unwrap();
    let reg = Registry::resolve(Some(&dir.join("reg")), None).unwrap();
    (tmp, reg, ws)
}

fn plain(ws: &str) -> CaptureRequest {
    CaptureRequest {
        workspace_id: ws.into(),
        ..Default::default()
    }
}

fn captured_files(reply: WatchReply) -> u64 {
    match reply {
        WatchReply::Captured { result } => result.files,
        other => panic!("not captured: {other:?}"),
    }
}

#[test]
fn one_service_per_workspace_and_its_socket_goes_with_it() {
    let (_tmp, reg, ws) = setup();
    let service = WatchService::start(&reg, &ws.workspace_id).unwrap();
    let socket = service.socket_path();
    let err = WatchService::start(&reg, &ws.workspace_id).err().unwrap();
    assert_eq!(err.code(), "in_use");
    assert!(err.to_string().contains("already watched"), "{err}");
    assert_eq!(
        captured_files(watch_service::capture(&reg, &plain(&ws.workspace_id), None)),
        1
    );
    assert!(service.is_watching());
    drop(service);
    assert!(!socket.exists(), "the socket outlived its service");
    // Without a service the capture runs here, with the same answer shape.
    fs::write(ws.root.join("a/more.txt"), "more").unwrap();
    assert_eq!(
        captured_files(watch_service::capture(&reg, &plain(&ws.workspace_id), None)),
        2
    );
    // And a new service can start.
    WatchService::start(&reg, &ws.workspace_id).unwrap();
}

#[test]
fn a_socket_left_by_a_dead_service_is_ignored_then_replaced() {
    let (_tmp, reg, ws) = setup();
    let dir = reg.state_dir().join("watch");
    fs::create_dir_all(&dir).unwrap();
    let socket = dir.join(format!("{}.sock", ws.workspace_id));
    // A bound and dropped listener leaves its socket file, as kill -9 does.
    drop(UnixListener::bind(&socket).unwrap());
    assert!(socket.exists());
    assert_eq!(
        captured_files(watch_service::capture(&reg, &plain(&ws.workspace_id), None)),
        1
    );
    let service = WatchService::start(&reg, &ws.workspace_id).unwrap();
    assert_eq!(
        captured_files(watch_service::capture(&reg, &plain(&ws.workspace_id), None)),
        1
    );
    assert!(
        service.is_watching(),
        "the capture did not reach the new service"
    );
}

#[test]
fn refusals_and_keyed_replays_answer_as_in_process() {
    let (_tmp, reg, ws) = setup();
    let service = WatchService::start(&reg, &ws.workspace_id).unwrap();
    let bad_parent = CaptureRequest {
        spec: CaptureSpec {
            parent: Some("cp_000000000000000000000000".into()),
            ..Default::default()
        },
        ..plain(&ws.workspace_id)
    };
    match watch_service::capture(&reg, &bad_parent, None) {
        WatchReply::Refused { code, .. } => assert_eq!(code, "invalid_parent"),
        other => panic!("{other:?}"),
    }
    let keyed = CaptureRequest {
        request_key: Some("key-1".into()),
        timeout_nanos: 30_000_000_000,
        ..plain(&ws.workspace_id)
    };
    let first = watch_service::capture(&reg, &keyed, None);
    let WatchReply::Keyed {
        envelope,
        message: None,
    } = &first
    else {
        panic!("{first:?}")
    };
    assert!(envelope.error.is_none(), "{envelope:?}");
    assert!(!envelope.result.replayed);
    assert!(
        service.is_watching(),
        "the keyed capture did not use the service"
    );
    // The replay is answered the same whether or not a service runs.
    let WatchReply::Keyed {
        envelope: again, ..
    } = keyed.run(&reg, None, None)
    else {
        panic!()
    };
    assert!(again.result.replayed);
    assert!(envelope.result.checkpoint.is_some());
    assert_eq!(again.result.checkpoint, envelope.result.checkpoint);
    // A workspace no service watches is looked up here, and refused.
    match watch_service::capture(&reg, &plain("ws_0000000000000000"), None) {
        WatchReply::Refused { code, .. } => assert_eq!(code, "not_found"),
        other => panic!("{other:?}"),
    }
}
