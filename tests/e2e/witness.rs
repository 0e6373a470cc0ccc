//! Witnesses and monitors, with real processes over real HTTP: `glassbox witness serve`
//! cosigns a lab's checkpoints as `glassbox ledger put` makes them (`[ledger] witnesses` in
//! `lab.toml`), `glassbox verify --witness` requires the cosignatures, a witness that is down
//! neither blocks nor fails an append (the checkpoint is published below quorum, and says so to
//! a verifier), the witness's HTTP answers keep the spec's statuses (409 with its size for a
//! forked checkpoint, 413 for an oversized body), `ledger proof precedes` shows the cosigned
//! checkpoint that held one entry before the next, and `glassbox verify --follow` exits naming
//! both checkpoints when the log it follows is rewritten.

use std::io::{Read, Write};
use std::net::{TcpListener, TcpStream};
use std::path::Path;
use std::process::{Child, Command, Output, Stdio};
use std::time::{Duration, Instant};

use crate::support::BIN;

/// A child process killed when dropped.
struct Proc(Child);

impl Drop for Proc {
    fn drop(&mut self) {
        let _ = self.0.kill();
        let _ = self.0.wait();
    }
}

fn free_port() -> u16 {
    TcpListener::bind("127.0.0.1:0")
        .unwrap()
        .local_addr()
        .unwrap()
        .port()
}

fn run(args: &[&str]) -> Output {
    Command::new(BIN).args(args).output().unwrap()
}

fn ok(args: &[&str]) -> String {
    let out = run(args);
    assert!(
        out.status.success(),
        "glassbox {args:?}: {}",
        String::from_utf8_lossy(&out.stderr)
    );
    String::from_utf8_lossy(&out.stdout).into_owned()
}

fn wait_for_port(port: u16) {
    let start = Instant::now();
    while TcpStream::connect(("127.0.0.1", port)).is_err() {
        assert!(
            start.elapsed() < Duration::from_secs(30),
            "nothing listens on {port}"
        );
        std::thread::sleep(Duration::from_millis(20));
    }
}

fn serve_witness(key: &Path, state: &Path, lab_vkey: &str, port: u16) -> Proc {
    let child = Command::new(BIN)
        .args(["witness", "serve", "--key"])
        .arg(key)
        .arg("--state")
        .arg(state)
        .args(["--log", lab_vkey, "--bind", &format!("127.0.0.1:{port}")])
        .stdout(Stdio::null())
        .stderr(Stdio::null())
        .spawn()
        .unwrap();
    wait_for_port(port);
    Proc(child)
}

/// A raw HTTP/1.1 POST; returns (status, content type, body).
fn post(port: u16, path: &str, body: &[u8]) -> (u16, String, String) {
    let mut s = TcpStream::connect(("127.0.0.1", port)).unwrap();
    s.set_read_timeout(Some(Duration::from_secs(10))).unwrap();
    let head = format!(
        "POST {path} HTTP/1.1\r\nHost: w\r\nContent-Length: {}\r\nConnection: close\r\n\r\n",
        body.len()
    );
    s.write_all(head.as_bytes()).unwrap();
    let _ = s.write_all(body);
    let mut reply = Vec::new();
    let _ = s.read_to_end(&mut reply);
    let text = String::from_utf8_lossy(&reply).into_owned();
    let (head, body) = text.split_once("\r\n\r\n").unwrap_or((&text, ""));
    let status = head
        .split(' ')
        .nth(1)
        .and_then(|c| c.parse().ok())
        .unwrap_or(0);
    let content_type = head
        .lines()
        .find_map(|l| {
            l.to_ascii_lowercase()
                .strip_prefix("content-type: ")
                .map(str::to_string)
        })
        .unwrap_or_default();
    (status, content_type, body.to_string())
}

fn put(lab: &Path, dir: &Path, name: &str) {
    let file = dir.join(name);
    std::fs::write(&file, name.as_bytes()).unwrap();
    ok(&[
        "ledger",
        "put",
        "--lab",
        lab.to_str().unwrap(),
        file.to_str().unwrap(),
    ]);
}

fn verify(lab: &Path, state: &Path, extra: &[&str]) -> Output {
    let mut args = vec![
        "verify",
        lab.to_str().unwrap(),
        "--state-dir",
        state.to_str().unwrap(),
    ];
    args.extend_from_slice(extra);
    run(&args)
}

#[test]
fn a_witness_cosigns_the_labs_checkpoints_and_verify_requires_them() {
    let dir = tempfile::tempdir().unwrap();
    let d = dir.path();
    let (lab, key, wstate, vstate) = (d.join("lab"), d.join("w.key"), d.join("w.db"), d.join("v"));
    let wvkey = ok(&[
        "witness",
        "init",
        "--name",
        "witness.test/w1",
        "--key",
        key.to_str().unwrap(),
    ]);
    let wvkey = wvkey.trim().to_string();
    ok(&[
        "init",
        "--origin",
        "lab.test/one",
        "--lab",
        lab.to_str().unwrap(),
    ]);
    let lab_vkey = std::fs::read_to_string(lab.join("vkey")).unwrap();
    let port = free_port();
    let witness = serve_witness(&key, &wstate, lab_vkey.trim(), port);
    std::fs::write(
        lab.join("lab.toml"),
        format!(
            "[ledger]\nwitnesses = [{{ url = \"http://127.0.0.1:{port}/\", vkey = \"{wvkey}\" }}]\nwitness_quorum = 1\nwitness_timeout_millis = 2000\n"
        ),
    )
    .unwrap();
    put(&lab, d, "a.txt");
    put(&lab, d, "b.txt");
    let out = verify(&lab, &vstate, &["--witness", &wvkey, "--quorum", "1"]);
    let stdout = String::from_utf8_lossy(&out.stdout);
    assert!(
        out.status.success(),
        "{}",
        String::from_utf8_lossy(&out.stderr)
    );
    assert!(
        stdout.contains("1 of the 1 witnesses given cosigned (quorum 1)"),
        "{stdout}"
    );
    // Entry 0 was in a checkpoint, cosigned by the witness, before entry 1 was sequenced.
    let proof = ok(&[
        "ledger",
        "proof",
        "precedes",
        "0",
        "1",
        "--lab",
        lab.to_str().unwrap(),
    ]);
    assert!(
        proof.contains("the checkpoint of size 1 holds 0 and not 1"),
        "{proof}"
    );
    assert!(proof.contains("cosigned by witness.test/w1 at "), "{proof}");
    // A witness the lab never asked: no quorum.
    let stranger = d.join("stranger.key");
    let other = ok(&[
        "witness",
        "init",
        "--name",
        "witness.test/w2",
        "--key",
        stranger.to_str().unwrap(),
    ]);
    let out = verify(&lab, &vstate, &["--witness", other.trim()]);
    let stderr = String::from_utf8_lossy(&out.stderr);
    assert_eq!(out.status.code(), Some(1), "{stderr}");
    assert!(
        stderr.contains("lacks its witnesses' quorum") && stderr.contains("witness.test/w2"),
        "{stderr}"
    );

    // The witness's HTTP answers. A forked checkpoint of size 2 signed by the lab's key (a copy
    // of the lab that appended something else): 409 naming the witness's size.
    let fork = d.join("fork");
    copy_dir(&lab, &fork);
    std::fs::remove_file(fork.join("lab.toml")).unwrap();
    put(&fork, d, "c.txt");
    let forked = std::fs::read(fork.join("log/checkpoint")).unwrap();
    let mut body = b"old 0\n\n".to_vec();
    body.extend_from_slice(&forked);
    // Size 3 from the fork: the witness holds 2, so old 0 is a conflict.
    let (status, ctype, text) = post(port, "/add-checkpoint", &body);
    assert_eq!(
        (status, ctype.as_str(), text.as_str()),
        (409, "text/x.tlog.size", "2\n")
    );
    let (status, _, _) = post(port, "/add-checkpoint", &vec![b'x'; 200_000]);
    assert_eq!(status, 413);

    // The witness goes down: appends go on, and the checkpoint is published below quorum.
    drop(witness);
    let started = Instant::now();
    put(&lab, d, "d.txt");
    assert!(started.elapsed() < Duration::from_secs(20));
    let out = verify(&lab, &vstate, &["--witness", &wvkey]);
    assert_eq!(out.status.code(), Some(1));
    // Back up with its state: it is caught up with a proof from the size it held (2 -> 4),
    // and the next checkpoint carries its cosignature again.
    let _witness = serve_witness(&key, &wstate, lab_vkey.trim(), port);
    put(&lab, d, "e.txt");
    let out = verify(&lab, &vstate, &["--witness", &wvkey]);
    assert!(
        out.status.success(),
        "{}",
        String::from_utf8_lossy(&out.stderr)
    );
    // The fork above came as a larger tree than the witness held, with a wrong old size: a
    // conflict, not yet proof of a fork, so `witness forks` has nothing to list.
    let forks = run(&["witness", "forks", "--state", wstate.to_str().unwrap()]);
    assert!(forks.status.success());
    assert!(String::from_utf8_lossy(&forks.stderr).contains("0 fork(s) recorded"));
}

fn copy_dir(from: &Path, to: &Path) {
    std::fs::create_dir_all(to).unwrap();
    for e in std::fs::read_dir(from).unwrap().flatten() {
        let p = e.path();
        if p.is_dir() {
            copy_dir(&p, &to.join(e.file_name()));
        } else {
            std::fs::copy(&p, to.join(e.file_name())).unwrap();
        }
    }
}

/// Reads lines from a child's stdout until one contains `needle`.
fn wait_line(lines: &std::sync::mpsc::Receiver<String>, needle: &str) {
    let deadline = Instant::now() + Duration::from_secs(60);
    loop {
        let left = deadline.saturating_duration_since(Instant::now());
        match lines.recv_timeout(left) {
            Ok(l) if l.contains(needle) => return,
            Ok(_) => {}
            Err(_) => panic!("no line with {needle:?} within 60 s"),
        }
    }
}

fn http_get(port: u16, path: &str) -> String {
    let mut s = TcpStream::connect(("127.0.0.1", port)).unwrap();
    s.set_read_timeout(Some(Duration::from_secs(10))).unwrap();
    s.write_all(format!("GET {path} HTTP/1.1\r\nHost: m\r\nConnection: close\r\n\r\n").as_bytes())
        .unwrap();
    let mut out = String::new();
    let _ = s.read_to_string(&mut out);
    out
}

#[test]
fn verify_follow_exits_naming_both_checkpoints_when_the_log_is_rewritten() {
    let dir = tempfile::tempdir().unwrap();
    let d = dir.path();
    let (a, b, state) = (d.join("a"), d.join("b"), d.join("state"));
    ok(&[
        "init",
        "--origin",
        "lab.test/f",
        "--lab",
        a.to_str().unwrap(),
    ]);
    put(&a, d, "one.txt");
    // The rewrite: a copy with the same key that goes another way from size 1.
    copy_dir(&a, &b);
    put(&a, d, "two.txt");
    put(&b, d, "other.txt");
    put(&b, d, "more.txt");
    put(&b, d, "again.txt");
    let (url, root) = crate::hostile::file_server();
    *root.lock().unwrap() = a.clone();
    let metrics_port = free_port();
    let mut child = Command::new(BIN)
        .args(["verify", &url, "--follow", "--every", "100ms", "--no-blobs"])
        .arg("--state-dir")
        .arg(&state)
        .args(["--metrics-bind", &format!("127.0.0.1:{metrics_port}")])
        .stdout(Stdio::piped())
        .stderr(Stdio::piped())
        .spawn()
        .unwrap();
    let stdout = child.stdout.take().unwrap();
    let (tx, lines) = std::sync::mpsc::channel();
    std::thread::spawn(move || {
        use std::io::BufRead;
        for l in std::io::BufReader::new(stdout)
            .lines()
            .map_while(Result::ok)
        {
            let _ = tx.send(l);
        }
    });
    let mut child = Proc(child);
    wait_line(&lines, "following: size 2 verified");
    let metrics = http_get(metrics_port, "/metrics");
    assert!(
        metrics.contains("glassbox_monitor_checkpoint_size{target=\"url:http://"),
        "{metrics}"
    );
    assert!(metrics.contains("\"} 2\n"), "{metrics}");
    // The log grows: the monitor follows.
    put(&a, d, "three.txt");
    wait_line(&lines, "following: size 3 verified");
    let earlier_root = checkpoint_root(&a);
    // The server now serves the rewritten log (size 4, same key, another history).
    *root.lock().unwrap() = b.clone();
    let later_root = checkpoint_root(&b);
    let start = Instant::now();
    let status = loop {
        if let Some(s) = child.0.try_wait().unwrap() {
            break s;
        }
        assert!(
            start.elapsed() < Duration::from_secs(60),
            "verify --follow did not stop on the fork"
        );
        std::thread::sleep(Duration::from_millis(20));
    };
    let mut stderr = String::new();
    child
        .0
        .stderr
        .take()
        .unwrap()
        .read_to_string(&mut stderr)
        .unwrap();
    assert_eq!(status.code(), Some(1), "{stderr}");
    assert!(stderr.contains("fork:"), "{stderr}");
    assert!(
        stderr.contains(&earlier_root) && stderr.contains(&later_root),
        "{stderr}"
    );
    assert!(
        stderr.contains("lab.test/f\n    3\n") && stderr.contains("lab.test/f\n    4\n"),
        "{stderr}"
    );
}

fn checkpoint_root(lab: &Path) -> String {
    let note = std::fs::read_to_string(lab.join("log/checkpoint")).unwrap();
    note.lines().nth(2).unwrap().to_string()
}
