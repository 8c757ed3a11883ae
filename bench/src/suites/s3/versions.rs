//! The s3-versions suite (issue 29): what S3 versioning costs. One
//! `stow-s3 serve` (filesystem backend, durable) with two buckets,
//! `versioned` (PutBucketVersioning Enabled) and `plain` (never versioned),
//! and the same 4 KiB PUT and GET workloads on each, alternating per
//! repetition (versioned, plain, versioned, plain …): the versioned bucket
//! is "ours", the plain one the "peer". Then a version history of 100,000
//! entries (quick: 10,000) is written into the versioned bucket and pages
//! of 1,000 ListObjectVersions entries are timed against pages of 1,000
//! ListObjectsV2 keys of the same bucket.
//!
//! Targets of the issue: versioned PUT/GET cost at most 1.2× the
//! unversioned (throughput at least 1/1.2 of it), and a ListObjectVersions
//! page of 1,000 in 100,000 versions in at most 5 ms.

use std::sync::Mutex;
use std::time::{Duration, Instant};

use crate::data::{Pool, SEED};
use crate::harness::{
    alternate, context, num, Cache, Figure, Result, Run, Side, Spec, Stat, Unit, Work,
};
use crate::report::{Info, Report};
use crate::suites::SuiteArgs;

use super::client::{ok, Conn};
use super::servers::{status_kib, Server};
use super::{
    create_bucket, creds, drive, get_many, populate, put_many, small_bodies, start_ours, Finish,
    Frame, SMALL, TINY,
};

const VERSIONED: &str = "versioned";
const PLAIN: &str = "plain";
/// Side 0 (ours) and side 1 (the peer) of the PUT and GET figures.
const BUCKETS: [&str; 2] = [VERSIONED, PLAIN];
/// The issue's targets.
const TARGET_COST: f64 = 1.2;
const TARGET_PAGE_MS: f64 = 5.0;
/// Entries per key in the version history; the last one is a delete
/// marker on every key `i` with `i % MARKER_EVERY == MARKER_AT`.
const ROUNDS: u64 = 10;
const MARKER_EVERY: u64 = 5;
const MARKER_AT: u64 = 4;
const PAGE: usize = 1000;

struct Plan {
    mode: &'static str,
    reps: usize,
    put_ops: [u64; 2],
    get_ops: [u64; 2],
    get_objects: u64,
    cap: Duration,
    /// Keys of the version history (each gets [`ROUNDS`] entries).
    history_keys: u64,
    list_calls: u64,
    populate_cap: Duration,
}

impl Plan {
    fn new(quick: bool) -> Plan {
        if quick {
            Plan {
                mode: "quick",
                reps: 3,
                put_ops: [300, 1000],
                get_ops: [1000, 2000],
                get_objects: 300,
                cap: Duration::from_secs(3),
                history_keys: 1000,
                list_calls: 20,
                populate_cap: Duration::from_secs(300),
            }
        } else {
            Plan {
                mode: "full",
                reps: 5,
                put_ops: [1500, 4000],
                get_ops: [4000, 8000],
                get_objects: 1000,
                cap: Duration::from_secs(8),
                history_keys: 10_000,
                list_calls: 50,
                populate_cap: Duration::from_secs(900),
            }
        }
    }
}

/// Runs `f(bucket, rep)` for `reps` repetitions on the versioned and the
/// plain bucket in turn (A B A B …), printing each run.
fn pair(
    reps: usize,
    label: &str,
    names: [&str; 2],
    unit: Unit,
    mut f: impl FnMut(usize, usize) -> Result<Run>,
) -> Result<[Vec<Run>; 2]> {
    alternate(reps, |side, rep| {
        let run = f(side, rep)?;
        eprintln!(
            "    {label} rep {}/{reps} {:<18} {} {}, server cpu {} µs/op",
            rep + 1,
            names[side],
            num(unit.of(&run)),
            unit.label(),
            run.cpu_us_per_op().map_or_else(|| "?".into(), num)
        );
        Ok(run)
    })
}

/// One figure from the two sides' runs.
fn figure(
    id: &'static str,
    title: &str,
    (conns, cache, unit): (usize, Cache, Unit),
    names: [&str; 2],
    note: &str,
    [ours, peer]: [Vec<Run>; 2],
) -> Figure {
    let spec = Spec {
        id,
        title: title.into(),
        threads: conns,
        cache,
        unit,
        note: note.into(),
    };
    Figure::new(
        spec,
        Side::new(names[0], unit, ours),
        Side::new(names[1], unit, peer),
    )
}

/// Makes the two buckets and turns versioning on in one; checks that
/// GetBucketVersioning says Enabled there and nothing of the kind in the
/// other.
fn setup_buckets(srv: &Server) -> Result<()> {
    for b in BUCKETS {
        create_bucket(srv, b)?;
    }
    let mut conn = Conn::new(srv.addr, &creds())?;
    let body = br#"<VersioningConfiguration xmlns="http://s3.amazonaws.com/doc/2006-03-01/"><Status>Enabled</Status></VersioningConfiguration>"#;
    let path = format!("/{VERSIONED}");
    ok(
        "PutBucketVersioning Enabled",
        conn.request("PUT", &path, "versioning=", body, false)?,
    )?;
    for b in BUCKETS {
        let r = conn.request("GET", &format!("/{b}"), "versioning=", b"", false)?;
        let r = ok("GetBucketVersioning", r)?;
        let text = String::from_utf8_lossy(&r.body);
        let enabled = text.contains("<Status>Enabled</Status>");
        if enabled != (b == VERSIONED) {
            return Err(format!("GetBucketVersioning of {b} answered {text}").into());
        }
    }
    Ok(())
}

/// PUT 4 KiB on fresh keys and overwriting the same keys, GET 4 KiB of
/// keys written before, 1 and 16 connections each.
fn put_get_figures(plan: &Plan, srv: &Server, bodies: &[Vec<u8>]) -> Result<Vec<Figure>> {
    let names = ["versioned", "unversioned"];
    let mut figures = Vec::new();
    for (k, conns) in [1usize, 16].into_iter().enumerate() {
        eprintln!("  PUT 4 KiB fresh keys, {conns} conn ({} reps)", plan.reps);
        let runs = pair(plan.reps, "put", names, Unit::OpsPerSec, |side, rep| {
            let prefix = format!("p{conns}-{rep}-");
            let ops = (plan.put_ops[k], plan.cap);
            put_many(srv, BUCKETS[side], &prefix, conns, ops, SMALL, bodies)
        })?;
        figures.push(figure(
            if conns == 1 {
                "put_4k_c1"
            } else {
                "put_4k_c16"
            },
            "PUT 4 KiB, fresh keys",
            (conns, Cache::Write, Unit::OpsPerSec),
            names,
            "fresh keys each run: in the versioned bucket every PUT makes a key's first version",
            runs,
        ));
    }
    for (k, conns) in [1usize, 16].into_iter().enumerate() {
        // The keys exist before the first run; every run writes them again
        // (in the versioned bucket: one more version of each).
        let prefix = format!("o{conns}-");
        let n = plan.put_ops[k];
        for b in BUCKETS {
            populate(srv, b, &prefix, n, SMALL, plan.populate_cap, bodies)?;
        }
        eprintln!("  PUT 4 KiB overwriting, {conns} conn ({} reps)", plan.reps);
        let runs = pair(plan.reps, "overwrite", names, Unit::OpsPerSec, |side, _| {
            let ops = (n, plan.cap);
            put_many(srv, BUCKETS[side], &prefix, conns, ops, SMALL, bodies)
        })?;
        figures.push(figure(
            if conns == 1 {
                "overwrite_4k_c1"
            } else {
                "overwrite_4k_c16"
            },
            "PUT 4 KiB, overwriting",
            (conns, Cache::Write, Unit::OpsPerSec),
            names,
            "the same keys every run (written once before): each PUT in the versioned bucket \
             adds a version and keeps the old ones, in the plain one it replaces the object",
            runs,
        ));
    }
    // Two versions of every GET key: the versioned GET reads the newest.
    for b in BUCKETS {
        for _ in 0..2 {
            let n = plan.get_objects;
            populate(srv, b, "g", n, SMALL, plan.populate_cap, bodies)?;
        }
    }
    for (k, conns) in [1usize, 16].into_iter().enumerate() {
        eprintln!("  GET 4 KiB, {conns} conn ({} reps)", plan.reps);
        let runs = pair(plan.reps, "get", names, Unit::OpsPerSec, |side, rep| {
            let path = format!("/{}/g", BUCKETS[side]);
            let ops = (plan.get_ops[k], plan.cap);
            get_many(srv, &path, conns, ops, plan.get_objects, SMALL, rep)
        })?;
        figures.push(figure(
            if conns == 1 {
                "get_4k_c1"
            } else {
                "get_4k_c16"
            },
            "GET 4 KiB",
            (conns, Cache::Warm, Unit::OpsPerSec),
            names,
            "seeded random keys among objects written twice before the figure (in the \
             versioned bucket: two versions each, the GET reads the newest)",
            runs,
        ));
    }
    Ok(figures)
}

/// Key `i` of the version history; `a` sorts before every other key in
/// the versioned bucket, so a listing from the start begins with it.
fn history_key(i: u64) -> String {
    format!("a{i:07}")
}

fn has_marker(i: u64) -> bool {
    i % MARKER_EVERY == MARKER_AT
}

/// Writes the version history on 16 connections: [`ROUNDS`] rounds over
/// every key, each a 64 B PUT, except that the last round DELETEs (a
/// delete marker) the keys [`has_marker`] picks. Returns the run of all
/// rounds together.
fn fill_history(plan: &Plan, srv: &Server, bodies: &[Vec<u8>]) -> Result<Run> {
    let keys = plan.history_keys;
    let mut total = Run {
        cpu_s: Some(0.0),
        ..Run::default()
    };
    for round in 0..ROUNDS {
        let start = Instant::now();
        let last = round + 1 == ROUNDS;
        let run = drive(srv, 16, |conn, t| {
            let mut w = Work::default();
            for i in (t as u64..keys).step_by(16) {
                if start.elapsed() > plan.populate_cap {
                    return Err(format!("the history took over {:?}", plan.populate_cap).into());
                }
                let path = format!("/{VERSIONED}/{}", history_key(i));
                if last && has_marker(i) {
                    ok("DELETE", conn.request("DELETE", &path, "", b"", false)?)?;
                } else {
                    let body = &bodies[((i + round) % bodies.len() as u64) as usize];
                    let r = conn.request("PUT", &path, "", &body[..TINY as usize], false)?;
                    ok("PUT object", r)?;
                    w.bytes += TINY;
                }
                w.ops += 1;
            }
            Ok(w)
        })?;
        total.elapsed_s += run.elapsed_s;
        total.ops += run.ops;
        total.bytes += run.bytes;
        total.cpu_s = total.cpu_s.zip(run.cpu_s).map(|(a, b)| a + b);
    }
    Ok(total)
}

/// The text between every `<tag>` and `</tag>` of `xml`, in order.
fn elements<'a>(xml: &'a str, tag: &str) -> Vec<&'a str> {
    let (open, close) = (format!("<{tag}>"), format!("</{tag}>"));
    let mut out = Vec::new();
    let mut rest = xml;
    while let Some(i) = rest.find(&open) {
        rest = &rest[i + open.len()..];
        let Some(j) = rest.find(&close) else { break };
        out.push(&rest[..j]);
        rest = &rest[j..];
    }
    out
}

/// One kind of listing page: its query and what its answer must hold.
struct Listing {
    what: &'static str,
    query: String,
    /// The element counted (`Version` + `DeleteMarker`, or `Key`).
    versions: bool,
    first_key: String,
    /// The first entry's version ID, when it is known.
    first_version: Option<String>,
}

impl Listing {
    /// Checks one answer: [`PAGE`] entries, the expected first one, more
    /// to come.
    fn check(&self, body: &[u8]) -> Result<()> {
        let text = String::from_utf8_lossy(body);
        let n = if self.versions {
            text.matches("<Version>").count() + text.matches("<DeleteMarker>").count()
        } else {
            text.matches("<Key>").count()
        };
        let keys = elements(&text, "Key");
        let first = keys.first().copied().unwrap_or("");
        let version = elements(&text, "VersionId").first().copied();
        let version_ok = self.first_version.is_none() || self.first_version.as_deref() == version;
        if n != PAGE
            || first != self.first_key
            || !version_ok
            || !text.contains("<IsTruncated>true</IsTruncated>")
        {
            return Err(format!(
                "{}: {n} entries, first {first} {version:?} (expected {PAGE}, first {} {:?}, \
                 truncated)",
                self.what, self.first_key, self.first_version
            )
            .into());
        }
        Ok(())
    }
}

/// The four listings: ListObjectVersions from the start and from the
/// middle key's fifth-newest version; ListObjectsV2 from the start and
/// after the middle key.
fn listings(plan: &Plan, srv: &Server) -> Result<[Listing; 4]> {
    let mid = plan.history_keys / 2;
    let mid_key = history_key(mid);
    if has_marker(mid) || has_marker(mid + 1) {
        return Err("the middle key of the history must not be deleted".into());
    }
    let mut conn = Conn::new(srv.addr, &creds())?;
    let query = format!("prefix={mid_key}&versions=");
    let r = ok(
        "ListObjectVersions of one key",
        conn.request("GET", &format!("/{VERSIONED}"), &query, b"", false)?,
    )?;
    let text = String::from_utf8_lossy(&r.body).into_owned();
    let ids = elements(&text, "VersionId");
    if ids.len() != ROUNDS as usize {
        return Err(format!("{mid_key} has {} versions, not {ROUNDS}", ids.len()).into());
    }
    let marker = ids[4];
    Ok([
        Listing {
            what: "ListObjectVersions from the start",
            query: format!("max-keys={PAGE}&versions="),
            versions: true,
            first_key: history_key(0),
            first_version: None,
        },
        Listing {
            what: "ListObjectsV2 from the start",
            query: format!("list-type=2&max-keys={PAGE}"),
            versions: false,
            first_key: history_key(0),
            first_version: None,
        },
        Listing {
            what: "ListObjectVersions from a key and version marker",
            query: format!(
                "key-marker={mid_key}&max-keys={PAGE}&version-id-marker={marker}&versions="
            ),
            versions: true,
            first_key: mid_key.clone(),
            first_version: Some(ids[5].to_string()),
        },
        Listing {
            what: "ListObjectsV2 after the middle key",
            query: format!("list-type=2&max-keys={PAGE}&start-after={mid_key}"),
            versions: false,
            first_key: history_key(mid + 1),
            first_version: None,
        },
    ])
}

/// Per-page latencies of the listing figures, in ms, per listing.
type Pages = [Vec<f64>; 4];

/// Times pages of the four listings, ListObjectVersions (ours) against
/// ListObjectsV2 (peer) alternating per repetition; every answer is
/// checked. Returns the two figures and every page's latency, and adds
/// the response sizes to `info`.
fn list_figures(plan: &Plan, srv: &Server, info: &mut Vec<Info>) -> Result<(Vec<Figure>, Pages)> {
    let all = listings(plan, srv)?;
    let pages: Mutex<Pages> = Mutex::default();
    let names = ["ListObjectVersions", "ListObjectsV2"];
    let total = plan.history_keys * ROUNDS;
    let mut figures = Vec::new();
    for (id, title, pair_at) in [
        ("list_versions_start", "LIST 1,000 from the start", 0),
        ("list_versions_marker", "LIST 1,000 from a marker", 2),
    ] {
        eprintln!("  {title} of {total} versions ({} reps)", plan.reps);
        let runs = pair(plan.reps, "list", names, Unit::MsPerOp, |side, _| {
            let l = &all[pair_at + side];
            let path = format!("/{VERSIONED}");
            drive(srv, 1, |conn, _| {
                let mut w = Work::default();
                let mut mine = Vec::new();
                while w.ops < plan.list_calls {
                    let t = Instant::now();
                    let r = ok(l.what, conn.request("GET", &path, &l.query, b"", false)?)?;
                    mine.push(t.elapsed().as_secs_f64() * 1e3);
                    l.check(&r.body)?;
                    w.ops += 1;
                    w.bytes += r.len;
                }
                if let Ok(mut p) = pages.lock() {
                    p[pair_at + side].extend(mine);
                }
                Ok(w)
            })
        })?;
        for side in 0..2 {
            let (ops, bytes) = runs[side]
                .iter()
                .fold((0, 0), |(o, b), r| (o + r.ops, b + r.bytes));
            info.push(Info {
                name: format!("{}: response size", all[pair_at + side].what),
                value: bytes as f64 / ops.max(1) as f64 / 1024.0,
                unit: "KiB per page".into(),
            });
        }
        figures.push(figure(
            id,
            &format!("{title} in {total} versions"),
            (1, Cache::Warm, Unit::MsPerOp),
            names,
            &format!(
                "{} against {}; every answer is checked for 1,000 entries and its first key",
                all[pair_at].query,
                all[pair_at + 1].query
            ),
            runs,
        ));
    }
    let pages = pages
        .into_inner()
        .map_err(|_| "a listing thread panicked")?;
    Ok((figures, pages))
}

/// Notes on the issue's targets.
fn target_notes(figures: &[Figure], pages: &Pages, history: &str) -> Vec<String> {
    let mut notes = Vec::new();
    let met = |ok: bool| if ok { "met" } else { "MISSED" };
    for f in figures.iter().filter(|f| f.unit == Unit::OpsPerSec) {
        // Cost is time per operation: the plain bucket's throughput over
        // the versioned one's.
        let cost = 1.0 / f.advantage;
        let cpu = |s: &Side| s.cpu_us_per_op.as_ref().map_or(f64::NAN, |c| c.median);
        notes.push(format!(
            "{} ({} conn): versioned costs {cost:.2}× the unversioned in time per operation \
             (target <= {TARGET_COST}×: {}); server CPU {}/{} µs/op = {:.2}×",
            f.title,
            f.threads,
            met(cost <= TARGET_COST),
            num(cpu(&f.ours)),
            num(cpu(&f.peer)),
            cpu(&f.ours) / cpu(&f.peer)
        ));
    }
    for (i, what) in [
        (0, "ListObjectVersions page of 1,000 from the start"),
        (
            2,
            "ListObjectVersions page of 1,000 from a key and version-id marker",
        ),
        (
            1,
            "ListObjectsV2 page of 1,000 from the start (same bucket)",
        ),
        (
            3,
            "ListObjectsV2 page of 1,000 after the middle key (same bucket)",
        ),
    ] {
        let s = Stat::of(pages[i].clone());
        let target = if i % 2 == 0 {
            format!(
                " (target <= {TARGET_PAGE_MS} ms: {})",
                met(s.median <= TARGET_PAGE_MS)
            )
        } else {
            String::new()
        };
        notes.push(format!(
            "{what}: {} ms per page, median of {} [min–max {}–{}]{target}",
            num(s.median),
            s.samples.len(),
            num(s.min),
            num(s.max)
        ));
    }
    notes.push(format!(
        "version history: {history}; the listings time the client's round trip (request, \
         signing, response read) per page on one keep-alive connection"
    ));
    notes
}

type Measured = (Vec<Figure>, Vec<Info>, Vec<String>);

/// Every workload of the plan on one server.
fn measure(plan: &Plan, srv: &Server) -> Result<Measured> {
    let bodies = small_bodies(&Pool::new(SEED, 4 << 20))?;
    setup_buckets(srv)?;
    let mut figures = put_get_figures(plan, srv, &bodies)?;

    let keys = plan.history_keys;
    let markers = (0..keys).filter(|&i| has_marker(i)).count() as u64;
    let total = keys * ROUNDS;
    let history = format!(
        "{keys} keys × {ROUNDS} entries = {total} in the versioned bucket (64 B PUTs; the \
         newest entry of every {MARKER_EVERY}th key, {markers} in all, is a delete marker), \
         written round by round on 16 connections"
    );
    eprintln!("  filling the history: {history}");
    let fill = fill_history(plan, srv, &bodies)?;
    eprintln!(
        "    {:.0} ops/s, server cpu {:.0} µs/op",
        Unit::OpsPerSec.of(&fill),
        fill.cpu_us_per_op().unwrap_or(f64::NAN)
    );
    let mut info = vec![
        Info {
            name: format!("writing the version history ({total} PUT/DELETE, 16 conn)"),
            value: Unit::OpsPerSec.of(&fill),
            unit: "ops/s".into(),
        },
        Info {
            name: "server CPU per history write".into(),
            value: fill.cpu_us_per_op().unwrap_or(f64::NAN),
            unit: "µs".into(),
        },
    ];
    let (lists, pages) = list_figures(plan, srv, &mut info)?;
    figures.extend(lists);
    if let Some(kib) = status_kib(srv.pid(), "VmHWM:") {
        info.push(Info {
            name: "stow-s3 peak RSS over the run (VmHWM)".into(),
            value: kib as f64 / 1024.0,
            unit: "MiB".into(),
        });
    }
    let notes = target_notes(&figures, &pages, &history);
    Ok((figures, info, notes))
}

fn method(plan: &Plan) -> Vec<String> {
    vec![
        "one stow-s3 serve on 127.0.0.1 (filesystem backend: every PUT is fsynced before it \
         is answered) with two buckets: `versioned` (PutBucketVersioning Enabled, checked \
         with GetBucketVersioning) and `plain` (never versioned)"
            .into(),
        format!(
            "each repetition runs the workload on the versioned bucket, then on the plain one \
             (A B A B …), {} reps, every run bounded in operations and time ({:?}); ours = \
             versioned, peer = unversioned; listings: ours = ListObjectVersions, peer = \
             ListObjectsV2 of the same versioned bucket, {} pages per run",
            plan.reps, plan.cap, plan.list_calls
        ),
        "load: the s3 suite's compiled client, HTTP/1.1 keep-alive, one TCP connection per \
         worker thread (TCP_NODELAY), SigV4 header auth with UNSIGNED-PAYLOAD"
            .into(),
        "cpu µs/op is the SERVER's user+system CPU (/proc/PID/stat, clock ticks of 10 ms) \
         over the run divided by operations (for the listings: per page, a run of pages \
         spans only tens of ticks)"
            .into(),
    ]
}

/// Runs the s3-versions suite.
pub fn run(args: &SuiteArgs) -> Result<Report> {
    let plan = Plan::new(args.quick);
    let bin = crate::suites::mcp::server_binary()?;
    let frame = Frame::open(args, "stow-bench-s3v-")?;
    let (started_unix, t0, loadavg_start) = (frame.started_unix, frame.t0, frame.loadavg_start);
    let machine = frame.machine.clone();
    eprintln!(
        "stow-bench s3-versions ({}): {}\n  ours {}",
        plan.mode,
        machine.summary(),
        bin.display()
    );
    let dir = frame.tmp.path().join("stow");
    std::fs::create_dir_all(&dir).map_err(context(format!("create {}", dir.display())))?;
    let (srv, _) = start_ours(&bin, &dir)?;
    let result = measure(&plan, &srv);
    srv.stop();
    let (figures, mut info, notes) = result?;
    let Finish {
        peak_rss_kib,
        loadavg_end,
    } = frame.finish(&mut info)?;
    Ok(Report {
        suite: "s3-versions".into(),
        mode: plan.mode.into(),
        started_unix,
        duration_s: t0.elapsed().as_secs_f64(),
        machine,
        loadavg_start,
        loadavg_end,
        method: method(&plan),
        figures,
        info,
        peak_rss_kib,
        notes,
    })
}
