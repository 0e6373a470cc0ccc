//! moto's S3-compatible server on loopback, for the tests that need an object store: one
//! `moto_server` process per test on a free port (killed on drop), a bucket made with a plain
//! HTTP `PUT` (moto does not check signatures), and the bucket's keys listed back raw. Shared
//! by the ledger's S3 tests and the end-to-end tests (`#[path]`-included). A missing
//! `moto_server` fails with the install command; it never skips.
#![allow(dead_code)]

use std::net::{TcpListener, TcpStream};
use std::process::{Child, Command, Stdio};
use std::time::{Duration, Instant};

/// A moto server process, killed on drop.
pub struct Moto {
    child: Child,
    /// `http://127.0.0.1:<port>`.
    pub endpoint: String,
}

impl Drop for Moto {
    fn drop(&mut self) {
        let _ = self.child.kill();
        let _ = self.child.wait();
    }
}

impl Moto {
    /// The `AWS_*` variables that point a glassbox process at this server.
    pub fn env(&self) -> Vec<(&'static str, String)> {
        vec![
            ("AWS_ENDPOINT_URL", self.endpoint.clone()),
            ("AWS_REGION", "us-east-1".into()),
            ("AWS_ACCESS_KEY_ID", "testing".into()),
            ("AWS_SECRET_ACCESS_KEY", "testing".into()),
        ]
    }
}

/// Starts a server and waits until it listens.
pub fn start_moto() -> Moto {
    // Port 0 makes the kernel pick a free port; moto then binds it (a tiny race with other
    // processes, acceptable on a test machine).
    let port = TcpListener::bind("127.0.0.1:0")
        .and_then(|l| l.local_addr())
        .expect("pick a free port")
        .port();
    let child = Command::new("moto_server")
        .args(["-H", "127.0.0.1", "-p", &port.to_string()])
        .stdout(Stdio::null())
        .stderr(Stdio::null())
        .spawn()
        .unwrap_or_else(|e| {
            panic!(
                "cannot start moto_server ({e}): the S3 tests need moto's S3 server on PATH; \
                 install it with `pip install 'moto[server]'`"
            )
        });
    let moto = Moto {
        child,
        endpoint: format!("http://127.0.0.1:{port}"),
    };
    // moto takes a second or two to import; poll the port (the only readiness signal it gives)
    // for up to 60 s on a loaded machine.
    let deadline = Instant::now() + Duration::from_secs(60);
    loop {
        if TcpStream::connect(("127.0.0.1", port)).is_ok() {
            break;
        }
        assert!(
            Instant::now() < deadline,
            "moto_server did not listen on port {port} within 60 s"
        );
        std::thread::sleep(Duration::from_millis(100));
    }
    moto
}

/// Creates `bucket`.
pub fn create_bucket(moto: &Moto, bucket: &str) {
    ureq::put(&format!("{}/{bucket}", moto.endpoint))
        .send_empty()
        .expect("create bucket");
}

/// Every key in the bucket, from moto's ListObjectsV2 XML, page by page.
pub fn raw_keys(moto: &Moto, bucket: &str) -> Vec<String> {
    let mut keys = Vec::new();
    let mut token: Option<String> = None;
    loop {
        let mut req = ureq::get(&format!("{}/{bucket}", moto.endpoint)).query("list-type", "2");
        if let Some(t) = &token {
            req = req.query("continuation-token", t);
        }
        let body = req
            .call()
            .expect("list bucket")
            .into_body()
            .read_to_string()
            .expect("list body");
        keys.extend(
            body.split("<Key>")
                .skip(1)
                .filter_map(|s| s.split("</Key>").next())
                .map(str::to_string),
        );
        token = body
            .split("<NextContinuationToken>")
            .nth(1)
            .and_then(|s| s.split("</NextContinuationToken>").next())
            .map(str::to_string);
        if token.is_none() {
            return keys;
        }
    }
}

/// Lets anyone read `prefix/*` of `bucket` over plain HTTP, as a lab publishing its log from a
/// bucket does: a bucket policy allowing `s3:GetObject` to every principal (moto enforces
/// bucket policies for unsigned requests, as S3 does).
pub fn allow_public_read(moto: &Moto, bucket: &str, prefix: &str) {
    let policy = format!(
        r#"{{"Version":"2012-10-17","Statement":[{{"Sid":"PublicLog","Effect":"Allow","Principal":"*","Action":"s3:GetObject","Resource":"arn:aws:s3:::{bucket}/{prefix}/*"}}]}}"#
    );
    ureq::put(&format!("{}/{bucket}?policy", moto.endpoint))
        .header("content-type", "application/json")
        .send(policy.as_bytes())
        .expect("put bucket policy");
}
