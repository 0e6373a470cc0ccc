//! What the end-to-end tests share: the binary under test, a command builder that points it at
//! a test's lab (and queue database), a fresh PostgreSQL schema per test, and reading a lab's
//! log back; `moto` starts an S3-compatible server. Each `tests/*.rs` file is its own crate and
//! uses only part of this.
#![allow(dead_code)]

use std::path::Path;
use std::process::Command;

pub mod moto;

use glassbox_ledger::{DirSource, LabDir, LeafIndex, LogReader};
use glassbox_schemas::LedgerEntry;

/// The model every end-to-end spec trains: the smallest MoE that exercises routing (a few ms a
/// step on CPU). Specs put it between their `[experiment]` and `[[data.mixture]]` sections,
/// and may add `[model.moe]` keys right after it.
pub const MICRO_MODEL: &str = "[model]
d_model = 16
n_layers = 1
n_heads = 2
seq_len = 16
[model.moe]
n_experts = 4
top_k = 2
d_expert = 16
";

/// The binary under test.
pub const BIN: &str = env!("CARGO_BIN_EXE_glassbox");

/// `GLASSBOX_TEST_POSTGRES_URL`: the server `cargo xtask test` provides (never an assumed
/// default port, so no test leans on a server it did not ask for).
pub fn postgres_url() -> String {
    glassbox_test_support::postgres_url()
}

/// A fresh PostgreSQL schema for one test, as a URL that selects it. Fails (never skips)
/// without a server.
pub fn postgres_schema(name: &str) -> String {
    glassbox_test_support::postgres_schema_blocking("e2e", name).url
}

/// `glassbox ARGS --lab DIR/lab`, run in `dir`, with a given MFU peak (no measuring); with
/// `db`, also the queue database and the lab config `DIR/lab.toml`.
pub fn glassbox(dir: &Path, db: Option<&str>, args: &[&str]) -> Command {
    let mut c = Command::new(BIN);
    c.args(args)
        .arg("--lab")
        .arg(dir.join("lab"))
        .env("GLASSBOX_PEAK_GFLOPS", "100")
        .current_dir(dir);
    if let Some(db) = db {
        c.env("GLASSBOX_DATABASE_URL", db)
            .env("GLASSBOX_CONFIG", dir.join("lab.toml"));
    }
    c
}

/// Every entry of the lab's log, checked against its signed checkpoint.
pub fn entries(lab: &Path) -> Vec<LedgerEntry> {
    let l = LabDir::open(lab).unwrap();
    let source = DirSource {
        root: lab.to_path_buf(),
    };
    let r = LogReader::open(&source, &l.verifier_key().unwrap()).unwrap();
    (0..r.size().0)
        .map(|i| LedgerEntry::from_bytes(&r.entry(LeafIndex(i)).unwrap()).unwrap())
        .collect()
}

/// An entry's body as JSON, for assertions on its fields.
pub fn body(e: &LedgerEntry) -> serde_json::Value {
    serde_json::to_value(&e.body).unwrap()
}

/// The GitHub stand-in (the bot's REST routes, mounted at `LOCAL_GITHUB_PREFIX`) on a thread
/// and runtime of its own for the life of the test; `maintainers` have write access.
pub fn start_github(
    maintainers: &[&str],
) -> (
    glassbox_github_bot::local::LocalGitHub,
    std::net::SocketAddr,
) {
    use glassbox_github_bot::local::{LOCAL_GITHUB_PREFIX, LocalGitHub};
    let github = LocalGitHub::new(maintainers);
    let router = axum::Router::new().nest(LOCAL_GITHUB_PREFIX, github.router());
    let (tx, rx) = std::sync::mpsc::channel();
    std::thread::spawn(move || {
        let rt = tokio::runtime::Builder::new_current_thread()
            .enable_all()
            .build()
            .unwrap();
        rt.block_on(async move {
            let listener = tokio::net::TcpListener::bind("127.0.0.1:0").await.unwrap();
            tx.send(listener.local_addr().unwrap()).unwrap();
            axum::serve(listener, router).await.unwrap();
        });
    });
    (github, rx.recv().unwrap())
}
