//! The object tools' behaviour on a memory store with a manual clock.

use super::*;
use crate::config::ObjectConfig;
use std::time::{Duration, Instant};

struct ManualClock(Mutex<Instant>);

impl Clock for ManualClock {
    fn now(&self) -> Instant {
        *self.0.lock().unwrap()
    }
}

impl ManualClock {
    fn advance(&self, d: Duration) {
        *self.0.lock().unwrap() += d;
    }
}

fn core_with(cfg: ObjectConfig) -> (Core, Arc<ManualClock>) {
    let store = Store::memory(Default::default()).unwrap();
    store.create_bucket("files").unwrap();
    let clock = Arc::new(ManualClock(Mutex::new(Instant::now())));
    let settings = ObjectConfig {
        object_dir: "/tmp/unused".into(),
        bucket: "files".into(),
        ..cfg
    }
    .validate()
    .unwrap();
    (Core::new(store, settings, clock.clone()), clock)
}

fn core() -> Core {
    core_with(ObjectConfig::default()).0
}

fn read(core: &Core, key: &str) -> Envelope {
    match core.read_for_save(ReadArgs { key: key.into() }) {
        CallOutput::Envelope { env, .. } => *env,
        other => panic!("{other:?}"),
    }
}

fn save(core: &Core, key: &str, data: &[u8], token: Option<&str>, rk: &str) -> Envelope {
    core.save(SaveArgs {
        key: key.into(),
        data_base64: STANDARD.encode(data),
        content_type: Some("text/plain".into()),
        metadata: None,
        observation_token: token.map(String::from),
        replace: token.is_none().then_some(true),
        request_key: rk.into(),
    })
}

fn code(env: &Envelope) -> Option<&'static str> {
    env.error.as_ref().map(|e| e.code)
}

#[test]
fn absent_read_then_guarded_save_then_replay() {
    let c = core();
    let r = read(&c, "a.txt");
    assert!(r.available && r.absent && r.object.is_none());
    let tok = r.observation_token.unwrap();
    let s1 = save(&c, "a.txt", b"hello", Some(&tok), "req-1");
    assert_eq!(
        (s1.outcome, s1.replayed, code(&s1)),
        (Outcome::Committed, false, None)
    );
    let s2 = save(&c, "a.txt", b"hello", Some(&tok), "req-1");
    assert_eq!((s2.outcome, s2.replayed), (Outcome::Committed, true));
    assert_eq!(
        s1.object.unwrap().last_modified,
        s2.object.unwrap().last_modified
    );
    let changed = save(&c, "a.txt", b"other", Some(&tok), "req-1");
    assert_eq!(
        (changed.outcome, code(&changed)),
        (Outcome::Unknown, Some("request_conflict"))
    );
    let stale = save(&c, "a.txt", b"again", Some(&tok), "req-2");
    assert_eq!(
        (stale.outcome, code(&stale)),
        (Outcome::NotCommitted, Some("conflict"))
    );
    let back = read(&c, "a.txt");
    assert_eq!(
        back.object.unwrap().data_base64.unwrap(),
        STANDARD.encode(b"hello")
    );
}

#[test]
fn resolve_answers_from_the_receipt() {
    let c = core();
    let s = save(&c, "k", b"v1", None, "req-1");
    assert_eq!(s.outcome, Outcome::Committed);
    save(&c, "k", b"v2", None, "req-2");
    let r = c.resolve(ResolveArgs {
        key: "k".into(),
        request_key: "req-1".into(),
    });
    assert_eq!(
        (r.outcome, r.replayed, r.available),
        (Outcome::Committed, true, true)
    );
    assert_eq!(r.object.unwrap().size, 2);
    let none = c.resolve(ResolveArgs {
        key: "k".into(),
        request_key: "nope".into(),
    });
    assert_eq!(
        (none.outcome, code(&none)),
        (Outcome::Unknown, Some("not_found"))
    );
    let other = c.resolve(ResolveArgs {
        key: "x".into(),
        request_key: "req-1".into(),
    });
    assert_eq!(code(&other), Some("request_conflict"));
}

#[test]
fn receipts_survive_out_of_band_deletes() {
    let c = core();
    let first = save(&c, "k", b"v1", None, "req-1");
    c.store.delete_object("files", "k").unwrap();
    let r = c.resolve(ResolveArgs {
        key: "k".into(),
        request_key: "req-1".into(),
    });
    assert_eq!(r.outcome, Outcome::Committed);
    assert_eq!(
        r.object.unwrap().last_modified,
        first.object.unwrap().last_modified
    );
    assert!(read(&c, "k").absent, "receipts keep metadata, not bodies");
}

#[test]
fn save_input_refusals_are_unknown() {
    let c = core();
    let tok = read(&c, "k").observation_token.unwrap();
    let both = c.save(SaveArgs {
        key: "k".into(),
        data_base64: "".into(),
        content_type: None,
        metadata: None,
        observation_token: Some(tok.clone()),
        replace: Some(true),
        request_key: "r".into(),
    });
    assert_eq!(
        (both.outcome, code(&both)),
        (Outcome::Unknown, Some("invalid"))
    );
    let neither = save(&c, "k", b"", None, "r");
    assert_eq!(
        neither.outcome,
        Outcome::Committed,
        "replace with empty body is fine"
    );
    let empty_rk = save(&c, "k", b"x", Some(&tok), "");
    assert_eq!(code(&empty_rk), Some("invalid"));
    let mut bad = SaveArgs {
        key: "k".into(),
        data_base64: "not base64!".into(),
        content_type: None,
        metadata: None,
        observation_token: None,
        replace: Some(true),
        request_key: "r2".into(),
    };
    assert_eq!(code(&c.save(bad)), Some("invalid"));
    bad = SaveArgs {
        key: "k".into(),
        data_base64: "aGk".into(),
        content_type: None,
        metadata: None,
        observation_token: None,
        replace: Some(true),
        request_key: "r2".into(),
    };
    assert_eq!(code(&c.save(bad)), Some("invalid"), "padding is required");
    let fabricated = save(
        &c,
        "k",
        b"x",
        Some("00112233445566778899aabbccddeeff"),
        "r3",
    );
    assert_eq!(
        (fabricated.outcome, code(&fabricated)),
        (Outcome::Unknown, Some("invalid_observation"))
    );
    let other_key = save(&c, "other", b"x", Some(&tok), "r4");
    assert_eq!(code(&other_key), Some("invalid_observation"));
}

#[test]
fn bodies_are_bounded() {
    let c = core();
    let big = vec![7u8; 65537];
    let s = save(&c, "big", &big, None, "r1");
    assert_eq!(
        (s.outcome, code(&s)),
        (Outcome::Unknown, Some("payload_too_large"))
    );
    let ok = save(&c, "max", &big[..65536], None, "r2");
    assert_eq!(ok.outcome, Outcome::Committed);
    let r = read(&c, "max");
    assert!(r.error.is_none());
    c.store
        .put_object("files", "big", &mut big.as_slice(), Default::default())
        .unwrap();
    let before = c.observations();
    let r = read(&c, "big");
    assert_eq!(
        (r.outcome, code(&r)),
        (Outcome::Ok, Some("payload_too_large"))
    );
    assert!(r.observation_token.is_none());
    assert_eq!(c.observations(), before);
}

#[test]
fn narrowed_pool_and_expiry() {
    let (c, clock) = core_with(ObjectConfig {
        max_observations: 1,
        ..Default::default()
    });
    let tok = read(&c, "a").observation_token.unwrap();
    assert_eq!(code(&read(&c, "b")), Some("observation_full"));
    assert_eq!(
        code(&save(&c, "b", b"x", Some(&tok), "r1")),
        Some("invalid_observation")
    );
    assert!(
        c.release(ReleaseArgs {
            observation_token: tok.clone()
        })
        .released
    );
    assert!(
        c.release(ReleaseArgs {
            observation_token: tok.clone()
        })
        .released
    );
    assert_eq!(
        code(&save(&c, "a", b"x", Some(&tok), "r1")),
        Some("invalid_observation")
    );
    let tok = read(&c, "a").observation_token.unwrap();
    clock.advance(OBSERVATION_TTL);
    let expired = save(&c, "a", b"x", Some(&tok), "r2");
    assert_eq!(
        (expired.outcome, code(&expired)),
        (Outcome::Unknown, Some("expired_observation"))
    );
    assert!(read(&c, "a").error.is_none(), "the expired slot was freed");
}

#[test]
fn read_only_denies_saves_but_reads_and_resolves() {
    let (c, _) = core_with(ObjectConfig {
        read_only: true,
        ..Default::default()
    });
    assert!(read(&c, "a").error.is_none());
    let s = save(&c, "a", b"x", None, "r");
    assert_eq!((s.outcome, code(&s)), (Outcome::Unknown, Some("denied")));
    let r = c.resolve(ResolveArgs {
        key: "a".into(),
        request_key: "r".into(),
    });
    assert_eq!(code(&r), Some("not_found"));
    assert!(c.capabilities().capabilities.unwrap().read_only);
}

#[test]
fn tokens_stale_after_any_write() {
    let c = core();
    save(&c, "k", b"A", None, "r1");
    let tok = read(&c, "k").observation_token.unwrap();
    save(&c, "k", b"A", None, "r2");
    let s = save(&c, "k", b"B", Some(&tok), "r3");
    assert_eq!(
        (s.outcome, code(&s)),
        (Outcome::NotCommitted, Some("conflict"))
    );
}

#[test]
fn close_clears_and_refuses() {
    let c = core();
    read(&c, "k");
    c.close();
    assert_eq!(c.observations(), 0);
    let r = c.resolve(ResolveArgs {
        key: "k".into(),
        request_key: "r".into(),
    });
    assert_eq!((r.outcome, code(&r)), (Outcome::Unknown, Some("closed")));
}

#[test]
fn capabilities_report_bounds() {
    let caps = core().capabilities().capabilities.unwrap();
    assert!(caps.durable_save_requests && caps.guarded_saves);
    assert_eq!(caps.max_object_bytes, 65536);
    assert_eq!(caps.observation_ttl_seconds, 900);
    assert_eq!(caps.max_concurrent_calls, 8);
}

#[test]
fn browser_pages_and_resources() {
    let c = core();
    for i in 0..51 {
        save(&c, &format!("notes/{i:02}"), b"x", None, &format!("r{i}"));
    }
    let CallOutput::Structured(page) = c.browse(BrowseArgs {
        prefix: Some("notes/".into()),
        cursor: None,
    }) else {
        panic!()
    };
    assert_eq!(page["items"].as_array().unwrap().len(), 50);
    assert_eq!(page["truncated"], true);
    let cursor = page["next_cursor"].as_str().unwrap().to_string();
    let CallOutput::Structured(page2) = c.browse(BrowseArgs {
        prefix: Some("notes/".into()),
        cursor: Some(cursor),
    }) else {
        panic!()
    };
    assert_eq!(page2["items"][0]["name"], "notes/50");
    assert_eq!(page2["truncated"], false);
    assert!(page2.get("next_cursor").is_none());
    assert_eq!(c.observations(), 0);

    let key = "notes/☃?fragment#";
    save(&c, key, b"hello", None, "snow");
    let uri = c.object_uri(key);
    let body = c.read_object_resource(&uri).unwrap();
    assert_eq!(body.contents, Ok("hello".to_string()));
    assert_eq!(
        c.read_object_resource(&format!("{uri}?x")),
        Err(ResourceError::BadUri)
    );
    assert_eq!(
        c.read_object_resource("file:///etc/passwd"),
        Err(ResourceError::BadUri)
    );
    assert_eq!(
        c.read_object_resource(&c.object_uri("missing")),
        Err(ResourceError::Unavailable)
    );
    c.save(SaveArgs {
        key: "bin".into(),
        data_base64: STANDARD.encode([0xff, 0x00]),
        content_type: Some("text/plain".into()),
        metadata: None,
        observation_token: None,
        replace: Some(true),
        request_key: "bin".into(),
    });
    assert_eq!(
        c.read_object_resource(&c.object_uri("bin"))
            .unwrap()
            .contents,
        Err("/wA=".into())
    );
    save(&c, "empty", b"", None, "empty");
    assert_eq!(
        c.read_object_resource(&c.object_uri("empty"))
            .unwrap()
            .contents,
        Err(String::new())
    );
    let CallOutput::Structured(none) = c.mentions(MentionsArgs {
        query: "zzz".into(),
    }) else {
        panic!()
    };
    assert_eq!(none, json!({"items": []}));
}
