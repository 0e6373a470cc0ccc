//! End-to-end: the ledger as a user and an auditor drive it through the real `glassbox`
//! binary — init, put/get, log/show/checkpoint/vkey/proofs, verify (directory, git mirror,
//! HTTP), tamper evidence (each altered item is named, exit 1), rewritten history, bad input.

use std::io::{BufRead, BufReader, Write};
use std::net::TcpListener;
use std::path::{Path, PathBuf};
use std::process::{Command, Output};

struct Env {
    dir: tempfile::TempDir,
}

impl Env {
    fn new() -> Self {
        Env {
            dir: tempfile::tempdir().unwrap(),
        }
    }

    fn lab(&self) -> PathBuf {
        self.dir.path().join("lab")
    }

    fn run(&self, args: &[&str]) -> Output {
        Command::new(env!("CARGO_BIN_EXE_glassbox"))
            .args(args)
            .env("GLASSBOX_LAB", self.lab())
            .env("GLASSBOX_STATE_DIR", self.dir.path().join("auditor-state"))
            .env_remove("GLASSBOX_INDEX_URL")
            .current_dir(self.dir.path())
            .output()
            .expect("the glassbox binary runs")
    }

    fn ok(&self, args: &[&str]) -> String {
        let o = self.run(args);
        assert_eq!(o.status.code(), Some(0), "{args:?}: {}{}", out(&o), err(&o));
        out(&o)
    }

    /// A lab with three artifacts put through the CLI; returns their hashes.
    fn with_artifacts(&self) -> Vec<String> {
        self.ok(&["init", "--origin", "test.example/cli"]);
        (0..3)
            .map(|i| {
                let f = self.dir.path().join(format!("file{i}.txt"));
                std::fs::write(&f, format!("artifact number {i}\n").repeat(100 * (i + 1))).unwrap();
                let o = self.ok(&["ledger", "put", f.to_str().unwrap()]);
                let mut lines = o.lines();
                let hash = lines.next().unwrap().to_string();
                assert_eq!(lines.next().unwrap(), format!("entry {i}"));
                hash
            })
            .collect()
    }
}

fn out(o: &Output) -> String {
    String::from_utf8_lossy(&o.stdout).into_owned()
}

fn err(o: &Output) -> String {
    String::from_utf8_lossy(&o.stderr).into_owned()
}

fn flip_byte(path: &Path, at: usize) {
    let mut b = std::fs::read(path).unwrap();
    let i = at.min(b.len() - 1);
    b[i] ^= 0x01;
    std::fs::write(path, b).unwrap();
}

fn expect_verify_failure(env: &Env, needle: &str) -> String {
    let o = env.run(&["verify"]);
    assert_eq!(
        o.status.code(),
        Some(1),
        "stdout: {} stderr: {}",
        out(&o),
        err(&o)
    );
    let e = err(&o);
    assert!(e.contains(needle), "expected {needle:?} in: {e}");
    assert!(!e.contains("panicked"), "{e}");
    e
}

#[test]
fn init_put_get_show_log_proofs_and_verify() {
    let env = Env::new();
    let hashes = env.with_artifacts();
    let lab = env.lab();
    // Key file is private; vkey has the standard form.
    #[cfg(unix)]
    {
        use std::os::unix::fs::PermissionsExt;
        let mode = std::fs::metadata(lab.join("keys/ledger.key"))
            .unwrap()
            .permissions()
            .mode();
        assert_eq!(mode & 0o777, 0o600);
    }
    let vkey = env.ok(&["ledger", "vkey"]);
    // name+keyid+key: the base64 key may itself contain '+', so split at the first two only.
    let parts: Vec<&str> = vkey.trim().splitn(3, '+').collect();
    assert_eq!(parts[0], "test.example/cli");
    assert_eq!(parts[1].len(), 8);
    assert!(
        parts[2].starts_with('A') && parts[2].len() == 44,
        "base64 of 0x01 || 32-byte key: 44 characters starting with A: {vkey}"
    );

    // get round-trips, to stdout and to a file.
    let got = env.ok(&["ledger", "get", &hashes[1]]);
    assert_eq!(got, "artifact number 1\n".repeat(200));
    let dest = env.dir.path().join("out.txt");
    env.ok(&["ledger", "get", &hashes[2], "-o", dest.to_str().unwrap()]);
    assert_eq!(
        std::fs::read_to_string(&dest).unwrap(),
        "artifact number 2\n".repeat(300)
    );

    let show = env.ok(&["ledger", "show", "1", "--json"]);
    let v: serde_json::Value = serde_json::from_str(&show).unwrap();
    assert_eq!(v["entry"]["kind"], "artifact");
    assert_eq!(v["entry"]["refs"]["artifact"], hashes[1].as_str());
    assert_eq!(v["entry"]["body"]["name"], "file1.txt");

    let log = env.ok(&["ledger", "log", "--kind", "artifact", "--json"]);
    let v: serde_json::Value = serde_json::from_str(&log).unwrap();
    assert_eq!(v.as_array().unwrap().len(), 3);
    assert_eq!(
        env.ok(&["ledger", "log", "--kind", "result", "--json"])
            .trim(),
        "[]"
    );

    // An index that cannot catch up (its database cannot be opened) does not stop `ledger
    // log`: it warns and reads the log itself, listing the same entries.
    let unusable = env.dir.path().join("no-such-dir").join("index.db");
    let o = env.run(&[
        "ledger",
        "log",
        "--kind",
        "artifact",
        "--json",
        "--index-url",
        unusable.to_str().unwrap(),
    ]);
    assert_eq!(o.status.code(), Some(0), "{}", err(&o));
    assert!(
        err(&o).contains("the index cannot catch up") && err(&o).contains("from the log itself"),
        "{}",
        err(&o)
    );
    assert_eq!(out(&o), log, "the log itself lists what the index does");

    let cp = env.ok(&["ledger", "checkpoint"]);
    assert!(cp.starts_with("test.example/cli\n3\n"), "{cp}");
    assert!(cp.contains("\n\n\u{2014} test.example/cli "), "{cp}");

    let p = env.ok(&["ledger", "proof", "inclusion", "1"]);
    assert!(p.starts_with("index 1\nsize 3\n"), "{p}");
    assert_eq!(p.lines().count(), 4 + 2, "{p}");
    let c = env.ok(&["ledger", "proof", "consistency", "1", "3", "--json"]);
    let v: serde_json::Value = serde_json::from_str(&c).unwrap();
    assert_eq!(v["proof"].as_array().unwrap().len(), 2);
    let bad = env.run(&["ledger", "proof", "inclusion", "5"]);
    assert_eq!(bad.status.code(), Some(1), "{}", err(&bad));

    let v = env.ok(&["verify"]);
    assert!(v.starts_with("verified: size 3, root "), "{v}");
    assert!(
        v.contains("3 entries, 3 blobs") && v.contains("index matches") && v.contains(" s\n"),
        "{v}"
    );
    // Second run: consistent with the remembered checkpoint.
    let v = env.ok(&["verify"]);
    assert!(v.contains("consistent with size 3"), "{v}");

    env.ok(&["ledger", "reindex"]);
    env.ok(&["verify", "--no-blobs"]);
}

/// `ledger put --move`: the file becomes the blob (renamed, its name gone), the artifact entry
/// names it like a copied one, `get` returns the bytes and the lab verifies. A missing file is
/// a clear error that appends nothing.
#[test]
fn put_move_takes_the_file_into_the_store() {
    let env = Env::new();
    env.ok(&["init", "--origin", "test.example/move"]);
    let f = env.dir.path().join("corpus.bin");
    let bytes: Vec<u8> = (0..5_000_000u32).map(|i| (i * 7 % 256) as u8).collect();
    std::fs::write(&f, &bytes).unwrap();
    let o = env.ok(&["ledger", "put", "--move", f.to_str().unwrap(), "--json"]);
    let v: serde_json::Value = serde_json::from_str(&o).unwrap();
    assert_eq!(v["bytes"], 5_000_000);
    assert_eq!(v["existed"], false);
    assert_eq!(v["entry"], 0);
    assert!(!f.exists(), "the file was moved, not copied");
    let hash = v["hash"].as_str().unwrap();
    assert_eq!(hash, format!("blake3:{}", blake3::hash(&bytes).to_hex()));
    let dest = env.dir.path().join("back.bin");
    env.ok(&["ledger", "get", hash, "-o", dest.to_str().unwrap()]);
    assert_eq!(std::fs::read(&dest).unwrap(), bytes);
    let show = env.ok(&["ledger", "show", "0", "--json"]);
    let v: serde_json::Value = serde_json::from_str(&show).unwrap();
    assert_eq!(v["entry"]["body"]["name"], "corpus.bin");
    assert_eq!(v["entry"]["refs"]["artifact"], hash);

    let o = env.run(&["ledger", "put", "--move", f.to_str().unwrap()]);
    assert!(!o.status.success());
    assert!(
        err(&o).contains("cannot open")
            && err(&o).contains("corpus.bin")
            && !err(&o).contains("panicked"),
        "{}",
        err(&o)
    );
    let v = env.ok(&["verify"]);
    assert!(v.contains("1 entries, 1 blobs"), "{v}");
}

#[test]
fn tampering_with_each_item_is_named() {
    // (what to alter, how, what the failure must name)
    type Alter = fn(&Path, &[String]);
    let cases: Vec<(&str, Alter, &str)> = vec![
        (
            "blob",
            |lab, h| {
                let hex = h[1].strip_prefix("blake3:").unwrap();
                flip_byte(&lab.join("blobs").join(&hex[..2]).join(&hex[2..]), 10);
            },
            "blob blake3:",
        ),
        (
            "entry bundle",
            |lab, _| {
                // Change one character inside entry 2's file name: still canonical JSON.
                let p = lab.join("log/tile/entries/000.p/3");
                let mut b = std::fs::read(&p).unwrap();
                let at = b.windows(9).position(|w| w == b"file2.txt").unwrap();
                b[at + 4] = b'9';
                std::fs::write(&p, b).unwrap();
            },
            "entry 2 (in ",
        ),
        (
            "bundle length",
            |lab, _| flip_byte(&lab.join("log/tile/entries/000.p/3"), 0),
            "entry bundle ",
        ),
        (
            "hash tile",
            |lab, _| flip_byte(&lab.join("log/tile/0/000.p/3"), 40),
            "hash tile ",
        ),
        (
            "truncated tile",
            |lab, _| {
                let p = lab.join("log/tile/0/000.p/3");
                let b = std::fs::read(&p).unwrap();
                std::fs::write(&p, &b[..70]).unwrap();
            },
            "70 bytes, expected 96",
        ),
        (
            "checkpoint root",
            |lab, _| {
                let p = lab.join("log/checkpoint");
                let s = std::fs::read_to_string(&p).unwrap();
                let mut lines: Vec<String> = s.split('\n').map(str::to_string).collect();
                let root = &mut lines[2];
                let c = if root.starts_with('A') { "B" } else { "A" };
                root.replace_range(0..1, c);
                std::fs::write(&p, lines.join("\n")).unwrap();
            },
            "checkpoint ",
        ),
        (
            "signature",
            |lab, _| {
                let p = lab.join("log/checkpoint");
                let s = std::fs::read_to_string(&p).unwrap();
                let cut = s.trim_end().len() - 5;
                let c = if &s[cut..cut + 1] == "A" { "B" } else { "A" };
                let t = format!("{}{}{}", &s[..cut], c, &s[cut + 1..]);
                std::fs::write(&p, t).unwrap();
            },
            "signature",
        ),
    ];
    for (what, alter, needle) in cases {
        let env = Env::new();
        let hashes = env.with_artifacts();
        env.ok(&["verify"]);
        alter(&env.lab(), &hashes);
        let e = expect_verify_failure(&env, needle);
        eprintln!("{what}: {e}");
    }
}

#[test]
fn rewritten_history_of_the_same_size_fails_consistency() {
    let env = Env::new();
    env.with_artifacts();
    env.ok(&["verify"]); // remembers size 3 and its root
    let saved = env.dir.path().join("cp-3");
    std::fs::write(&saved, env.ok(&["ledger", "checkpoint"])).unwrap();
    // Rebuild the log under the same key with three different entries: same size, validly
    // signed, different history.
    let lab = glassbox_ledger::LabDir::open(&env.lab()).unwrap();
    std::fs::remove_dir_all(lab.log_dir()).unwrap();
    std::fs::remove_file(lab.index_path()).unwrap();
    glassbox_ledger::LogWriter::create(&lab.log_dir(), &lab.signing_key().unwrap()).unwrap();
    {
        let w = lab.writer(glassbox_ledger::LockMode::FailFast).unwrap();
        for i in 0..3 {
            let e = glassbox_schemas::LedgerEntry::new(
                None,
                Default::default(),
                glassbox_schemas::record::ArtifactBody {
                    name: format!("forged-{i}"),
                    bytes: 0,
                    run: None,
                },
            );
            w.append_entry(&e).unwrap();
        }
    }
    let o = env.run(&["verify"]);
    assert_eq!(o.status.code(), Some(1), "{}{}", out(&o), err(&o));
    assert!(
        err(&o).contains("consistency with the earlier checkpoint (size 3"),
        "{}",
        err(&o)
    );
    // The same with an explicit --prev and no remembered state.
    std::fs::remove_dir_all(env.dir.path().join("auditor-state")).unwrap();
    let o = env.run(&["verify", "--prev", saved.to_str().unwrap()]);
    assert_eq!(o.status.code(), Some(1), "{}{}", out(&o), err(&o));
    assert!(err(&o).contains("history was rewritten"), "{}", err(&o));
}

#[test]
fn bad_input_is_a_clear_error_and_writes_nothing() {
    let env = Env::new();
    // Missing lab: exit 3, says how to create one, creates nothing.
    let o = env.run(&["ledger", "checkpoint"]);
    assert_eq!(o.status.code(), Some(3), "{}", err(&o));
    assert!(err(&o).contains("glassbox init"), "{}", err(&o));
    assert!(!env.lab().exists());
    let o = env.run(&["verify"]);
    assert_eq!(o.status.code(), Some(3), "{}", err(&o));

    env.with_artifacts();
    let before = std::fs::read(env.lab().join("log/checkpoint")).unwrap();
    let dest = env.dir.path().join("should-not-exist");
    for bad in [
        "abc",
        "blake3:1234",
        "blake3:ZZ1349b9f5f9a1a6a0404dea36dcc9499bcb25c9adc112b7cc9a93cae41f3262",
    ] {
        let o = env.run(&["ledger", "get", bad, "-o", dest.to_str().unwrap()]);
        assert_eq!(o.status.code(), Some(1), "{bad}: {}", err(&o));
        assert!(err(&o).contains("is not a hash"), "{}", err(&o));
        assert!(!err(&o).contains("panicked"));
    }
    let absent = "blake3:af1349b9f5f9a1a6a0404dea36dcc9499bcb25c9adc112b7cc9a93cae41f3262";
    let o = env.run(&["ledger", "get", absent, "-o", dest.to_str().unwrap()]);
    assert_eq!(o.status.code(), Some(1), "{}", err(&o));
    assert!(err(&o).contains("no blob"), "{}", err(&o));
    assert!(!dest.exists());
    let o = env.run(&["ledger", "show", "99"]);
    assert_eq!(o.status.code(), Some(1), "{}", err(&o));
    assert!(err(&o).contains("outside the log of size 3"), "{}", err(&o));
    let o = env.run(&["init"]);
    assert_eq!(o.status.code(), Some(3));
    assert!(
        err(&o).contains("already holds a glassbox lab"),
        "{}",
        err(&o)
    );
    assert_eq!(
        std::fs::read(env.lab().join("log/checkpoint")).unwrap(),
        before
    );
}

#[test]
fn published_git_mirror_and_http_copy_verify() {
    let env = Env::new();
    env.with_artifacts();
    let mirror = env.dir.path().join("mirror");
    let o = env.ok(&["publish", "--git", mirror.to_str().unwrap()]);
    assert!(o.contains("published size 3"), "{o}");
    let v = env.ok(&["verify", mirror.to_str().unwrap()]);
    assert!(v.starts_with("verified: size 3"), "{v}");

    // The same layout over HTTP, from a minimal static server on loopback.
    let listener = TcpListener::bind("127.0.0.1:0").unwrap();
    let addr = listener.local_addr().unwrap();
    let root = env.lab();
    std::thread::spawn(move || {
        for stream in listener.incoming().take(200) {
            let Ok(mut s) = stream else { continue };
            let mut line = String::new();
            if BufReader::new(&s).read_line(&mut line).is_err() {
                continue;
            }
            let path = line
                .split_whitespace()
                .nth(1)
                .unwrap_or("/")
                .trim_start_matches('/')
                .to_string();
            let resp = match std::fs::read(root.join(&path)) {
                Ok(body) if !path.contains("..") && !path.starts_with("keys") => {
                    let mut r = format!(
                        "HTTP/1.1 200 OK\r\nContent-Length: {}\r\nConnection: close\r\n\r\n",
                        body.len()
                    )
                    .into_bytes();
                    r.extend(body);
                    r
                }
                _ => b"HTTP/1.1 404 Not Found\r\nContent-Length: 0\r\nConnection: close\r\n\r\n"
                    .to_vec(),
            };
            let _ = s.write_all(&resp);
        }
    });
    let v = env.ok(&["verify", &format!("http://{addr}")]);
    assert!(
        v.starts_with("verified: size 3") && v.contains("3 blobs") && v.contains("no index"),
        "{v}"
    );
}
