//! The hostile-client suite, against the real binary: clients that stall or trickle against a
//! running `glassbox serve` (each answered or dropped within the configured timeout, and the
//! server still shuts down within 5 s with them connected); a hostile server that `glassbox
//! verify` audits (an endless checkpoint, a huge declared length, a key or origin swapped under
//! the same URL); and a closed stdout (`glassbox ... | head`) for the commands that print.
//!
//! The hostile webhooks (edited comments, foreign repositories, replays) and hostile specs
//! (memory, metric volume) are in the bot scenarios and the lab flow tests, where they reach
//! the code that decides.

use std::io::{Read, Write};
use std::net::{TcpListener, TcpStream};
use std::path::{Path, PathBuf};
use std::process::{Child, Command, Stdio};
use std::sync::atomic::{AtomicU64, Ordering};
use std::sync::{Arc, Mutex};
use std::time::{Duration, Instant};

use crate::support::BIN;

fn free_port() -> u16 {
    TcpListener::bind("127.0.0.1:0")
        .unwrap()
        .local_addr()
        .unwrap()
        .port()
}

/// A child process killed when dropped.
struct Proc(Child);

impl Drop for Proc {
    fn drop(&mut self) {
        let _ = self.0.kill();
        let _ = self.0.wait();
    }
}

fn init_lab(lab: &Path) {
    let out = Command::new(BIN)
        .args(["init", "--lab"])
        .arg(lab)
        .output()
        .unwrap();
    assert!(
        out.status.success(),
        "{}",
        String::from_utf8_lossy(&out.stderr)
    );
}

/// `glassbox serve` on a fresh lab with short timeouts and a cap of `cap` connections.
fn serve(dir: &Path, cap: usize) -> (Proc, String) {
    init_lab(&dir.join("lab"));
    let port = free_port();
    let config = dir.join("serve.toml");
    std::fs::write(
        &config,
        format!(
            r#"[web]
bind = "127.0.0.1:{port}"
header_read_timeout_seconds = 1
body_read_timeout_seconds = 1
max_connections = {cap}
shutdown_grace_seconds = 1

[github]
bot_login = "glassbox-bot"
repositories = ["glassbox-lab/glassbox"]
webhook_secrets = ["a-secret-for-this-test-only"]
maintainers = ["maintainer"]
flops_per_second = 1.0e10

[github.auth]
kind = "token"
token = "not-used"
"#
        ),
    )
    .unwrap();
    let child = Command::new(BIN)
        .args(["serve", "--no-worker", "--config"])
        .arg(&config)
        .arg("--lab")
        .arg(dir.join("lab"))
        .stdout(Stdio::null())
        .stderr(std::fs::File::create(dir.join("serve.log")).unwrap())
        .spawn()
        .unwrap();
    let mut proc = Proc(child);
    let base = format!("127.0.0.1:{port}");
    let deadline = Instant::now() + Duration::from_secs(60);
    loop {
        if let Ok(mut s) = TcpStream::connect(&base) {
            s.write_all(b"GET /healthz HTTP/1.1\r\nHost: t\r\nConnection: close\r\n\r\n")
                .unwrap();
            let mut text = String::new();
            let _ = s.read_to_string(&mut text);
            if text.starts_with("HTTP/1.1 200") {
                return (proc, base);
            }
        }
        let exited = proc.0.try_wait().unwrap();
        if exited.is_some() || Instant::now() > deadline {
            panic!(
                "the server did not come up ({exited:?}): {}",
                std::fs::read_to_string(dir.join("serve.log")).unwrap_or_default()
            );
        }
        std::thread::sleep(Duration::from_millis(100));
    }
}

/// Reads until the server answers or closes; returns what it sent and when it was done.
fn until_closed(s: &mut TcpStream, started: Instant) -> (String, Duration) {
    s.set_read_timeout(Some(Duration::from_secs(20))).unwrap();
    let mut got = Vec::new();
    let mut buf = [0u8; 4096];
    loop {
        match s.read(&mut buf) {
            Ok(0) | Err(_) => break,
            Ok(n) => got.extend_from_slice(&buf[..n]),
        }
    }
    (
        String::from_utf8_lossy(&got).into_owned(),
        started.elapsed(),
    )
}

#[test]
fn slow_clients_are_answered_or_dropped_in_time_and_shutdown_does_not_wait_for_them() {
    let dir = tempfile::tempdir().unwrap();
    let (mut server, addr) = serve(dir.path(), 4);
    // The timeouts are 1 s; 4 s allows for a loaded CI machine and still fails a server that
    // waits (the hyper default is 30 s, axum::serve's none).
    let bound = Duration::from_secs(4);

    // A client that connects and says nothing.
    let started = Instant::now();
    let mut idle = TcpStream::connect(&addr).unwrap();
    let (_, took) = until_closed(&mut idle, started);
    assert!(took < bound, "an idle connection was kept {took:?}");

    // A head trickled a byte at a time, never finished.
    let started = Instant::now();
    let mut slow = TcpStream::connect(&addr).unwrap();
    slow.write_all(b"GET /healthz HTTP/1.1\r\nHost: t\r\n")
        .unwrap();
    let trickle = {
        let mut s = slow.try_clone().unwrap();
        std::thread::spawn(move || {
            for _ in 0..40 {
                if s.write_all(b"X").is_err() {
                    break;
                }
                std::thread::sleep(Duration::from_millis(100));
            }
        })
    };
    let (_, took) = until_closed(&mut slow, started);
    assert!(took < bound, "a trickled head was read for {took:?}");
    trickle.join().unwrap();

    // A webhook body that stalls after 10 of its 1000 bytes, and one trickled: 408.
    for trickled in [false, true] {
        let started = Instant::now();
        let mut body = TcpStream::connect(&addr).unwrap();
        body.write_all(
            b"POST /github/webhook HTTP/1.1\r\nHost: t\r\nContent-Type: application/json\r\nContent-Length: 1000\r\n\r\n{\"action\":",
        )
        .unwrap();
        let feeder = trickled.then(|| {
            let mut s = body.try_clone().unwrap();
            std::thread::spawn(move || {
                for _ in 0..40 {
                    if s.write_all(b" ").is_err() {
                        break;
                    }
                    std::thread::sleep(Duration::from_millis(100));
                }
            })
        });
        let (text, took) = until_closed(&mut body, started);
        assert!(
            text.starts_with("HTTP/1.1 408"),
            "trickled={trickled}: {text:?}"
        );
        assert!(text.contains("did not arrive within 1 s"), "{text}");
        assert!(took < bound, "trickled={trickled}: answered after {took:?}");
        if let Some(f) = feeder {
            f.join().unwrap();
        }
    }

    // The cap: with 4 stalled clients holding every slot, a fifth waits until the header
    // timeout frees one, and is then served.
    let mut holders: Vec<TcpStream> = (0..4)
        .map(|_| {
            let mut s = TcpStream::connect(&addr).unwrap();
            s.write_all(b"GET /healthz HTTP/1.1\r\n").unwrap();
            s
        })
        .collect();
    std::thread::sleep(Duration::from_millis(200));
    let started = Instant::now();
    let mut fifth = TcpStream::connect(&addr).unwrap();
    fifth
        .write_all(b"GET /healthz HTTP/1.1\r\nHost: t\r\nConnection: close\r\n\r\n")
        .unwrap();
    let (text, took) = until_closed(&mut fifth, started);
    assert!(text.starts_with("HTTP/1.1 200"), "{text:?}");
    assert!(
        took >= Duration::from_millis(500),
        "the fifth connection was served at once ({took:?}): no cap"
    );
    for h in &mut holders {
        let _ = until_closed(h, Instant::now());
    }

    // Shutdown with stalled clients connected: a half-sent head, a stalled body, a live stream.
    let mut stalled_head = TcpStream::connect(&addr).unwrap();
    stalled_head.write_all(b"GET / HTTP/1.1\r\n").unwrap();
    let mut stalled_body = TcpStream::connect(&addr).unwrap();
    stalled_body
        .write_all(b"POST /github/webhook HTTP/1.1\r\nHost: t\r\nContent-Type: application/json\r\nContent-Length: 50\r\n\r\n{")
        .unwrap();
    let mut live = TcpStream::connect(&addr).unwrap();
    live.write_all(b"GET /api/v1/runs/run-000001/live HTTP/1.1\r\nHost: t\r\n\r\n")
        .unwrap();
    std::thread::sleep(Duration::from_millis(300));
    let pid = server.0.id();
    let started = Instant::now();
    let status = Command::new("kill")
        .args(["-TERM", &pid.to_string()])
        .status()
        .unwrap();
    assert!(status.success());
    let exit = loop {
        if let Some(s) = server.0.try_wait().unwrap() {
            break s;
        }
        assert!(
            started.elapsed() < Duration::from_secs(5),
            "serve did not stop within 5 s of SIGTERM with stalled clients connected"
        );
        std::thread::sleep(Duration::from_millis(50));
    };
    assert!(exit.success(), "serve exited with {exit}");
}

/// A hostile HTTP server: answers every request with `head` and then `body` repeated until
/// the client hangs up; counts the bytes it managed to send.
fn hostile_server(head: &'static str, body: &'static [u8]) -> (String, Arc<AtomicU64>) {
    let listener = TcpListener::bind("127.0.0.1:0").unwrap();
    let url = format!("http://{}", listener.local_addr().unwrap());
    let sent = Arc::new(AtomicU64::new(0));
    let counter = sent.clone();
    std::thread::spawn(move || {
        for stream in listener.incoming() {
            let Ok(mut s) = stream else { continue };
            let counter = counter.clone();
            std::thread::spawn(move || {
                let mut req = [0u8; 4096];
                let _ = s.read(&mut req);
                if s.write_all(head.as_bytes()).is_err() {
                    return;
                }
                if body.is_empty() {
                    return;
                }
                loop {
                    match s.write(body) {
                        Ok(n) => {
                            counter.fetch_add(n as u64, Ordering::Relaxed);
                        }
                        Err(_) => return,
                    }
                }
            });
        }
    });
    (url, sent)
}

fn verify(url: &str, state: &Path, extra: &[&str]) -> std::process::Output {
    let mut child = Command::new(BIN)
        .arg("verify")
        .arg(url)
        .arg("--state-dir")
        .arg(state)
        .args(extra)
        .stdout(Stdio::piped())
        .stderr(Stdio::piped())
        .spawn()
        .unwrap();
    let started = Instant::now();
    loop {
        if child.try_wait().unwrap().is_some() {
            return child.wait_with_output().unwrap();
        }
        if started.elapsed() > Duration::from_secs(60) {
            let _ = child.kill();
            panic!("verify {url} did not end within 60 s");
        }
        std::thread::sleep(Duration::from_millis(20));
    }
}

#[test]
fn verify_of_an_endless_checkpoint_fails_clearly_having_read_a_bounded_amount() {
    static CHUNK: [u8; 65536] = [b'A'; 65536];
    let state = tempfile::tempdir().unwrap();
    let (url, sent) = hostile_server(
        "HTTP/1.1 200 OK\r\nContent-Type: text/plain\r\n\r\n",
        &CHUNK,
    );
    let out = verify(&url, state.path(), &[]);
    let stderr = String::from_utf8_lossy(&out.stderr);
    assert_eq!(out.status.code(), Some(1), "{stderr}");
    assert!(
        stderr.contains("log/checkpoint") && stderr.contains("larger than 65536 bytes"),
        "{stderr}"
    );
    assert!(!stderr.contains("panicked"), "{stderr}");
    // verify stops one byte past the limit; what the kernel's socket buffers took on top of
    // that is all the server could push (a few MiB at most), not an endless stream.
    std::thread::sleep(Duration::from_millis(200));
    let pushed = sent.load(Ordering::Relaxed);
    assert!(pushed < 32 << 20, "the server pushed {pushed} bytes");

    // A declared length over the limit is refused before the body is read.
    let (url, _) = hostile_server(
        "HTTP/1.1 200 OK\r\nContent-Length: 100000000000\r\n\r\n",
        b"",
    );
    let out = verify(&url, state.path(), &[]);
    let stderr = String::from_utf8_lossy(&out.stderr);
    assert_eq!(out.status.code(), Some(1), "{stderr}");
    assert!(stderr.contains("larger than 65536 bytes"), "{stderr}");
}

/// A static file server over one of several directories, switchable while it runs.
pub(crate) fn file_server() -> (String, Arc<Mutex<PathBuf>>) {
    let listener = TcpListener::bind("127.0.0.1:0").unwrap();
    let url = format!("http://{}/", listener.local_addr().unwrap());
    let root = Arc::new(Mutex::new(PathBuf::new()));
    let served = root.clone();
    std::thread::spawn(move || {
        for stream in listener.incoming() {
            let Ok(mut s) = stream else { continue };
            let root = served.lock().unwrap().clone();
            std::thread::spawn(move || {
                let mut req = Vec::new();
                let mut buf = [0u8; 1024];
                while !req.windows(4).any(|w| w == b"\r\n\r\n") {
                    match s.read(&mut buf) {
                        Ok(0) | Err(_) => return,
                        Ok(n) => req.extend_from_slice(&buf[..n]),
                    }
                }
                let line = String::from_utf8_lossy(&req)
                    .lines()
                    .next()
                    .unwrap_or_default()
                    .to_string();
                let path = line
                    .split(' ')
                    .nth(1)
                    .unwrap_or("/")
                    .trim_start_matches('/')
                    .to_string();
                let reply = match std::fs::read(root.join(&path)) {
                    Ok(bytes) if !path.contains("..") => {
                        let mut r = format!(
                            "HTTP/1.1 200 OK\r\nContent-Length: {}\r\nConnection: close\r\n\r\n",
                            bytes.len()
                        )
                        .into_bytes();
                        r.extend_from_slice(&bytes);
                        r
                    }
                    _ => {
                        b"HTTP/1.1 404 Not Found\r\nContent-Length: 0\r\nConnection: close\r\n\r\n"
                            .to_vec()
                    }
                };
                let _ = s.write_all(&reply);
            });
        }
    });
    (url, root)
}

fn init_with_origin(lab: &Path, origin: &str) {
    let out = Command::new(BIN)
        .args(["init", "--origin", origin, "--lab"])
        .arg(lab)
        .output()
        .unwrap();
    assert!(
        out.status.success(),
        "{}",
        String::from_utf8_lossy(&out.stderr)
    );
}

#[test]
fn a_key_or_origin_swapped_under_the_same_url_fails_unless_the_auditor_says_so() {
    let dir = tempfile::tempdir().unwrap();
    let state = dir.path().join("state");
    let (a, b, c) = (
        dir.path().join("a"),
        dir.path().join("b"),
        dir.path().join("c"),
    );
    init_with_origin(&a, "lab.example/one");
    // Same origin, another key: what a server that swapped its signing key serves.
    init_with_origin(&b, "lab.example/one");
    // Another origin and key: what a server that swapped the whole log serves.
    init_with_origin(&c, "lab.example/two");
    let (url, root) = file_server();

    *root.lock().unwrap() = a.clone();
    let out = verify(&url, &state, &[]);
    assert!(
        out.status.success(),
        "{}",
        String::from_utf8_lossy(&out.stderr)
    );
    assert!(String::from_utf8_lossy(&out.stdout).contains("trusted on first use"));

    *root.lock().unwrap() = b.clone();
    let out = verify(&url, &state, &[]);
    let stderr = String::from_utf8_lossy(&out.stderr);
    assert_eq!(out.status.code(), Some(1), "{stderr}");
    assert!(stderr.contains("now presents verifier key"), "{stderr}");
    assert!(
        stderr.contains("--vkey") && stderr.contains("--forget"),
        "{stderr}"
    );

    *root.lock().unwrap() = c.clone();
    let out = verify(&url, &state, &[]);
    let stderr = String::from_utf8_lossy(&out.stderr);
    assert_eq!(out.status.code(), Some(1), "{stderr}");
    assert!(
        stderr.contains("now serves a log named \"lab.example/two\""),
        "{stderr}"
    );

    // The auditor who checked the new key out of band says so...
    let vkey = std::fs::read_to_string(c.join("vkey")).unwrap();
    let out = verify(&url, &state, &["--vkey", vkey.trim()]);
    let stdout = String::from_utf8_lossy(&out.stdout);
    assert!(
        out.status.success(),
        "{}",
        String::from_utf8_lossy(&out.stderr)
    );
    assert!(stdout.contains("replaces the remembered"), "{stdout}");
    // ...and from then on the new key is the remembered one.
    let out = verify(&url, &state, &[]);
    assert!(
        out.status.success(),
        "{}",
        String::from_utf8_lossy(&out.stderr)
    );

    // --forget starts over: back to the first lab, trusted on first use again.
    *root.lock().unwrap() = a.clone();
    assert_eq!(verify(&url, &state, &[]).status.code(), Some(1));
    let out = verify(&url, &state, &["--forget"]);
    assert!(
        out.status.success(),
        "{}",
        String::from_utf8_lossy(&out.stderr)
    );
    assert!(String::from_utf8_lossy(&out.stdout).contains("trusted on first use"));
}

#[test]
fn a_closed_stdout_ends_every_printing_command_quietly() {
    let dir = tempfile::tempdir().unwrap();
    let lab = dir.path().join("lab");
    init_lab(&lab);
    let spec = Path::new(env!("CARGO_MANIFEST_DIR")).join("examples/tiny.toml");
    let spec = spec.to_str().unwrap();
    let state = dir.path().join("state");
    let state = state.to_str().unwrap();
    // An entry to show.
    let out = Command::new(BIN)
        .args([
            "data", "generate", "--domain", "markov", "--seed", "1", "--bytes", "1000", "--lab",
        ])
        .arg(&lab)
        .output()
        .unwrap();
    assert!(
        out.status.success(),
        "{}",
        String::from_utf8_lossy(&out.stderr)
    );
    // A blob to get, a text file to import, a short spec to train.
    let file = dir.path().join("notes.txt");
    std::fs::write(&file, "To be, or not to be.\n\nThat is the question.\n").unwrap();
    let file = file.to_str().unwrap();
    let put = Command::new(BIN)
        .args(["ledger", "put", file, "--lab"])
        .arg(&lab)
        .output()
        .unwrap();
    assert!(
        put.status.success(),
        "{}",
        String::from_utf8_lossy(&put.stderr)
    );
    let hash = format!(
        "blake3:{}",
        blake3::hash(std::fs::read(file).unwrap().as_slice()).to_hex()
    );
    let short = dir.path().join("short.toml");
    std::fs::write(
        &short,
        std::fs::read_to_string(spec)
            .unwrap()
            .replace("steps = 300", "steps = 4")
            .replace("warmup_steps = 30", "warmup_steps = 1")
            .replace("eval_interval = 100", "eval_interval = 2"),
    )
    .unwrap();
    let short = short.to_str().unwrap();
    let out_dir = dir.path().join("run-out");
    let out_dir = out_dir.to_str().unwrap();
    let commands: &[&[&str]] = &[
        &["--help"],
        &["--version"],
        &["ledger", "put", file],
        &["ledger", "get", &hash],
        &[
            "data",
            "import",
            "--domain",
            "play",
            "--format",
            "text",
            "--separator",
            "\n\n",
            file,
        ],
        &[
            "run",
            short,
            "--no-ledger",
            "--backend",
            "cpu",
            "--out",
            out_dir,
        ],
        &[
            "run",
            short,
            "--no-ledger",
            "--backend",
            "cpu",
            "--json",
            "--out",
            out_dir,
        ],
        &["spec", "schema"],
        &["spec", "check", spec],
        &["spec", "check", "--json", spec],
        &["ledger", "log"],
        &["ledger", "log", "--json"],
        &["ledger", "show", "0"],
        &["ledger", "checkpoint"],
        &["ledger", "vkey"],
        &["jobs"],
        &["jobs", "--json"],
        &["verify", "--state-dir", state],
        &[
            "data", "generate", "--domain", "markov", "--seed", "1", "--bytes", "1000",
        ],
    ];
    for args in commands {
        // The reading end is closed before the command starts, so its first write fails.
        let (reader, writer) = std::io::pipe().unwrap();
        drop(reader);
        let out = Command::new(BIN)
            .args(*args)
            .arg("--lab")
            .arg(&lab)
            .stdout(writer)
            .stderr(Stdio::piped())
            .output()
            .unwrap();
        let stderr = String::from_utf8_lossy(&out.stderr);
        use std::os::unix::process::ExitStatusExt;
        let quiet = out.status.code() == Some(0)
            || out.status.code() == Some(141)
            || out.status.signal() == Some(13);
        assert!(quiet, "glassbox {args:?} exited {:?}: {stderr}", out.status);
        assert!(
            !stderr.contains("panicked") && !stderr.contains("backtrace"),
            "glassbox {args:?}: {stderr}"
        );
    }
}

/// The long-running commands: `serve` and `worker` keep SIGPIPE ignored (a
/// peer that hangs up must never kill a server), so with stdout closed from the start they
/// must keep running — no panic on a print — and still stop cleanly on SIGTERM.
#[test]
fn long_running_commands_ride_out_a_closed_stdout() {
    let dir = tempfile::tempdir().unwrap();
    let lab = dir.path().join("lab");
    init_lab(&lab);
    let bind = format!("127.0.0.1:{}", free_port());
    let commands: [&[&str]; 2] = [&["serve", "--no-worker", "--bind", &bind], &["worker"]];
    for args in commands {
        let (reader, writer) = std::io::pipe().unwrap();
        drop(reader);
        let stderr_file = dir.path().join("stderr");
        let mut child = Command::new(BIN)
            .args(args)
            .arg("--lab")
            .arg(&lab)
            .stdout(writer)
            .stderr(std::fs::File::create(&stderr_file).unwrap())
            .spawn()
            .unwrap();
        // Up and printing (to stderr) within a few seconds, and still up a moment later.
        let up = Instant::now();
        while std::fs::read_to_string(&stderr_file).unwrap().is_empty() {
            assert!(
                up.elapsed() < Duration::from_secs(20),
                "glassbox {args:?} printed nothing"
            );
            std::thread::sleep(Duration::from_millis(50));
        }
        std::thread::sleep(Duration::from_millis(500));
        assert!(
            child.try_wait().unwrap().is_none(),
            "glassbox {args:?} ended with stdout closed: {}",
            std::fs::read_to_string(&stderr_file).unwrap()
        );
        let status = Command::new("kill")
            .args(["-TERM", &child.id().to_string()])
            .status()
            .unwrap();
        assert!(status.success());
        let stopping = Instant::now();
        let exit = loop {
            if let Some(s) = child.try_wait().unwrap() {
                break s;
            }
            assert!(
                stopping.elapsed() < Duration::from_secs(5),
                "glassbox {args:?} did not stop within 5 s of SIGTERM"
            );
            std::thread::sleep(Duration::from_millis(50));
        };
        let stderr = std::fs::read_to_string(&stderr_file).unwrap();
        assert!(exit.success(), "glassbox {args:?} exited {exit}: {stderr}");
        assert!(
            !stderr.contains("panicked") && !stderr.contains("backtrace"),
            "glassbox {args:?}: {stderr}"
        );
    }
}
