//! The harness's promises, through a real mount: what was made durable
//! survives a cut, what was not vanishes. Skipped (with the reason
//! printed) where FUSE cannot be mounted: no /dev/fuse, or not root.

use std::fs::{self, File, OpenOptions};
use std::io::{BufRead, BufReader, Write};
use std::path::{Path, PathBuf};
use std::process::{Child, Command, Stdio};

struct Mounted {
    child: Child,
    backing: PathBuf,
    mnt: PathBuf,
    ctl: PathBuf,
}

fn can_mount() -> Option<&'static str> {
    if !Path::new("/dev/fuse").exists() {
        return Some("/dev/fuse is missing");
    }
    // SAFETY: geteuid has no preconditions.
    if unsafe { libc::geteuid() } != 0 {
        return Some("mounting without fusermount3 needs root");
    }
    None
}

macro_rules! need_fuse {
    () => {
        if let Some(why) = can_mount() {
            eprintln!("skipped: {why}");
            return;
        }
    };
}

fn mount(root: &Path) -> Mounted {
    let backing = root.join("backing");
    let mnt = root.join("mnt");
    fs::create_dir_all(&backing).unwrap();
    fs::create_dir_all(&mnt).unwrap();
    let ctl = root.join("ctl.sock");
    let mut child = Command::new(env!("CARGO_BIN_EXE_powerloss"))
        .arg("mount")
        .arg(&backing)
        .arg(&mnt)
        .arg("--control")
        .arg(&ctl)
        .stdout(Stdio::piped())
        .spawn()
        .unwrap();
    let mut line = String::new();
    BufReader::new(child.stdout.take().unwrap())
        .read_line(&mut line)
        .unwrap();
    assert!(line.starts_with("POWERLOSS_READY"), "{line:?}");
    Mounted {
        child,
        backing,
        mnt,
        ctl,
    }
}

impl Mounted {
    fn p(&self, rel: &str) -> PathBuf {
        self.mnt.join(rel)
    }

    fn ctl(&self, args: &[&str]) -> String {
        let out = Command::new(env!("CARGO_BIN_EXE_powerloss"))
            .args(args)
            .arg("--control")
            .arg(&self.ctl)
            .output()
            .unwrap();
        assert!(out.status.success(), "{out:?}");
        String::from_utf8(out.stdout).unwrap()
    }

    /// Cuts the power, waits for the daemon, and returns the backing dir.
    fn cut(mut self, seed: Option<u64>) -> PathBuf {
        let seed = seed.map(|s| s.to_string());
        let mut args = vec!["cut"];
        if let Some(s) = &seed {
            args.extend(["--seed", s.as_str()]);
        }
        let answer = self.ctl(&args);
        assert!(answer.contains("\"ok\":true"), "{answer}");
        assert!(self.child.wait().unwrap().success());
        self.backing.clone()
    }
}

fn write_file(p: &Path, bytes: &[u8], sync: bool) {
    let mut f = File::create(p).unwrap();
    f.write_all(bytes).unwrap();
    if sync {
        f.sync_all().unwrap();
    }
}

fn sync_dir(p: &Path) {
    File::open(p).unwrap().sync_all().unwrap();
}

#[test]
fn an_unsynced_write_vanishes_and_an_fsynced_one_survives() {
    need_fuse!();
    let tmp = tempfile::tempdir().unwrap();
    let m = mount(tmp.path());
    write_file(&m.p("kept"), b"durable bytes", true);
    write_file(&m.p("lost"), b"never synced", false);
    sync_dir(&m.mnt);
    // Appended after the fsync: not durable.
    let mut f = OpenOptions::new().append(true).open(m.p("kept")).unwrap();
    f.write_all(b" and more").unwrap();
    drop(f);
    assert_eq!(fs::read(m.p("kept")).unwrap(), b"durable bytes and more");
    let b = m.cut(None);
    assert_eq!(fs::read(b.join("kept")).unwrap(), b"durable bytes");
    // The name was made durable by the directory fsync, the bytes were not.
    assert_eq!(fs::read(b.join("lost")).unwrap(), b"");
}

#[test]
fn fdatasync_makes_bytes_durable_too() {
    need_fuse!();
    let tmp = tempfile::tempdir().unwrap();
    let m = mount(tmp.path());
    let mut f = File::create(m.p("f")).unwrap();
    f.write_all(b"one").unwrap();
    f.sync_data().unwrap();
    sync_dir(&m.mnt);
    f.write_all(b"two").unwrap();
    drop(f);
    let b = m.cut(None);
    assert_eq!(fs::read(b.join("f")).unwrap(), b"one");
}

#[test]
fn a_create_without_a_directory_fsync_vanishes() {
    need_fuse!();
    let tmp = tempfile::tempdir().unwrap();
    let m = mount(tmp.path());
    fs::create_dir(m.p("d")).unwrap();
    sync_dir(&m.mnt);
    write_file(&m.p("d/orphan"), b"synced file, unsynced name", true);
    let b = m.cut(None);
    assert!(b.join("d").is_dir());
    assert!(!b.join("d/orphan").exists());
}

#[test]
fn a_rename_without_a_directory_fsync_vanishes() {
    need_fuse!();
    let tmp = tempfile::tempdir().unwrap();
    let m = mount(tmp.path());
    write_file(&m.p("a"), b"A", true);
    write_file(&m.p("target"), b"old target", true);
    sync_dir(&m.mnt);
    fs::rename(m.p("a"), m.p("target")).unwrap();
    assert_eq!(fs::read(m.p("target")).unwrap(), b"A");
    let b = m.cut(None);
    assert_eq!(fs::read(b.join("a")).unwrap(), b"A");
    assert_eq!(fs::read(b.join("target")).unwrap(), b"old target");
}

#[test]
fn a_rename_with_a_directory_fsync_survives() {
    need_fuse!();
    let tmp = tempfile::tempdir().unwrap();
    let m = mount(tmp.path());
    fs::create_dir(m.p("tmp")).unwrap();
    fs::create_dir(m.p("final")).unwrap();
    sync_dir(&m.mnt);
    write_file(&m.p("tmp/x"), b"payload", true);
    sync_dir(&m.p("tmp"));
    fs::rename(m.p("tmp/x"), m.p("final/x")).unwrap();
    // Either side's fsync makes the whole rename durable (it is atomic).
    sync_dir(&m.p("final"));
    let b = m.cut(None);
    assert_eq!(fs::read(b.join("final/x")).unwrap(), b"payload");
    assert!(!b.join("tmp/x").exists());
}

#[test]
fn an_unlink_without_a_directory_fsync_comes_back() {
    need_fuse!();
    let tmp = tempfile::tempdir().unwrap();
    let m = mount(tmp.path());
    write_file(&m.p("gone"), b"G", true);
    write_file(&m.p("back"), b"B", true);
    sync_dir(&m.mnt);
    fs::remove_file(m.p("gone")).unwrap();
    sync_dir(&m.mnt);
    fs::create_dir(m.p("empty")).unwrap();
    sync_dir(&m.mnt);
    fs::remove_file(m.p("back")).unwrap();
    fs::remove_dir(m.p("empty")).unwrap();
    let b = m.cut(None);
    assert!(!b.join("gone").exists());
    assert_eq!(fs::read(b.join("back")).unwrap(), b"B");
    assert!(b.join("empty").is_dir());
}

#[test]
fn sync_makes_everything_durable_and_files_untouched_stay() {
    need_fuse!();
    let tmp = tempfile::tempdir().unwrap();
    fs::create_dir_all(tmp.path().join("backing/old")).unwrap();
    fs::write(tmp.path().join("backing/old/kept"), b"from before").unwrap();
    let m = mount(tmp.path());
    assert_eq!(fs::read(m.p("old/kept")).unwrap(), b"from before");
    write_file(&m.p("old/new"), b"N", false);
    fs::rename(m.p("old"), m.p("renamed")).unwrap();
    let status = m.ctl(&["status"]);
    assert!(status.contains("\"pending_meta\":2"), "{status}");
    m.ctl(&["sync"]);
    let b = m.cut(None);
    assert_eq!(fs::read(b.join("renamed/kept")).unwrap(), b"from before");
    assert_eq!(fs::read(b.join("renamed/new")).unwrap(), b"N");
    assert!(!b.join("old").exists());
}

#[test]
fn a_subset_cut_keeps_some_unsynced_changes_never_torn_renames() {
    need_fuse!();
    let mut outcomes = std::collections::BTreeSet::new();
    for seed in 0..8 {
        let tmp = tempfile::tempdir().unwrap();
        let m = mount(tmp.path());
        write_file(&m.p("a"), b"A", true);
        sync_dir(&m.mnt);
        fs::rename(m.p("a"), m.p("b")).unwrap();
        let b = m.cut(Some(seed));
        let (a, bb) = (b.join("a").exists(), b.join("b").exists());
        // Atomic: exactly one of the two names.
        assert!(a ^ bb, "seed {seed}: a={a} b={bb}");
        outcomes.insert(bb);
    }
    assert_eq!(outcomes.len(), 2, "8 seeds never varied the outcome");
}

#[test]
fn an_existing_file_opens_with_o_nofollow() {
    need_fuse!();
    use std::os::unix::fs::OpenOptionsExt;
    let tmp = tempfile::tempdir().unwrap();
    let m = mount(tmp.path());
    write_file(&m.p("db"), b"x", true);
    // SQLite opens its database this way; the harness reopens through
    // /proc/self/fd, which O_NOFOLLOW would refuse.
    let f = OpenOptions::new()
        .read(true)
        .write(true)
        .create(true)
        .custom_flags(libc::O_NOFOLLOW)
        .open(m.p("db"));
    assert!(f.is_ok(), "{f:?}");
    drop(f);
    m.cut(None);
}
