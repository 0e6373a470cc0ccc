//! `glassbox witness init|vkey|serve|forks`: run a C2SP tlog-witness for other labs' logs.
//!
//! Glue only: the key format is `glassbox_ledger::cosignature`, the checks and the state are
//! `glassbox_ledger::witness`, the HTTP routes `glassbox_web::witness_api` on the bounded
//! listener every glassbox server uses. Exit 0 on success and after a clean shutdown; 1 when
//! a key or flag is bad; 3 when the state or the socket cannot be used.

use std::net::SocketAddr;
use std::path::{Path, PathBuf};
use std::process::ExitCode;
use std::sync::Arc;
use std::time::Duration;

use anyhow::Context;
use clap::{Args, Subcommand};
use glassbox_ledger::VerifierKey;
use glassbox_ledger::cosignature::CosigningKey;
use glassbox_ledger::witness::Witness;
use glassbox_web::ServerLimits;

use crate::exit;

#[derive(Debug, Subcommand)]
pub enum WitnessCommand {
    /// Create a witness's cosigning key (a new file, mode 0600) and print its verifier key.
    Init(InitArgs),
    /// Print the verifier key of a witness's cosigning key (what logs configure).
    Vkey(KeyArgs),
    /// Serve `POST /add-checkpoint` and `GET /<origin hash>/checkpoint` for the given logs.
    Serve(ServeArgs),
    /// List the forks this witness has recorded: checkpoints signed by a log that contradict
    /// one it had cosigned.
    Forks(ForksArgs),
}

#[derive(Debug, Args)]
pub struct InitArgs {
    /// The witness's name (a schema-less URL by convention: `witness.example/w1`).
    #[arg(long)]
    pub name: String,
    /// Where to write the private key.
    #[arg(long)]
    pub key: PathBuf,
}

#[derive(Debug, Args)]
pub struct KeyArgs {
    /// The witness's private key file.
    #[arg(long, env = "GLASSBOX_WITNESS_KEY")]
    pub key: PathBuf,
}

#[derive(Debug, Args)]
pub struct ServeArgs {
    /// The witness's private key file.
    #[arg(long, env = "GLASSBOX_WITNESS_KEY")]
    pub key: PathBuf,
    /// The witness's state: a SQLite file, created if absent.
    #[arg(long)]
    pub state: PathBuf,
    /// A log to follow: its verifier key (`origin+hexid+base64`), or a file holding one per
    /// line. Repeat for more logs.
    #[arg(long = "log", required = true)]
    pub logs: Vec<String>,
    /// Address to listen on.
    #[arg(long, default_value = "127.0.0.1:8081")]
    pub bind: SocketAddr,
    /// Seconds a request's head may take [default 10].
    #[arg(long)]
    pub header_timeout_seconds: Option<f64>,
    /// Seconds a request's body may take [default 30].
    #[arg(long)]
    pub body_timeout_seconds: Option<f64>,
    /// Connections served at once [default 1024].
    #[arg(long)]
    pub max_connections: Option<usize>,
}

#[derive(Debug, Args)]
pub struct ForksArgs {
    /// The witness's state file.
    #[arg(long)]
    pub state: PathBuf,
}

pub fn run(cmd: WitnessCommand) -> anyhow::Result<ExitCode> {
    match cmd {
        WitnessCommand::Init(a) => init(a),
        WitnessCommand::Vkey(a) => {
            println!("{}", read_key(&a.key)?.verifier_key());
            Ok(exit::code(exit::OK))
        }
        WitnessCommand::Serve(a) => serve(a),
        WitnessCommand::Forks(a) => forks(a),
    }
}

fn init(a: InitArgs) -> anyhow::Result<ExitCode> {
    let key = match CosigningKey::generate(&a.name) {
        Ok(k) => k,
        Err(e) => {
            eprintln!("error: --name: {e}");
            return Ok(exit::code(exit::CHECK_FAILED));
        }
    };
    let mut opts = std::fs::OpenOptions::new();
    opts.write(true).create_new(true);
    #[cfg(unix)]
    std::os::unix::fs::OpenOptionsExt::mode(&mut opts, 0o600);
    let mut f = opts
        .open(&a.key)
        .with_context(|| format!("cannot create {} (it must not exist yet)", a.key.display()))?;
    std::io::Write::write_all(&mut f, format!("{}\n", key.to_text()).as_bytes())
        .with_context(|| format!("cannot write {}", a.key.display()))?;
    f.sync_all()
        .with_context(|| format!("cannot fsync {}", a.key.display()))?;
    println!("{}", key.verifier_key());
    Ok(exit::code(exit::OK))
}

fn read_key(path: &Path) -> anyhow::Result<CosigningKey> {
    let text = std::fs::read_to_string(path)
        .with_context(|| format!("cannot read the witness key {}", path.display()))?;
    Ok(CosigningKey::parse(&text)?)
}

/// `--log` values: keys, or files of keys (one per line).
fn read_logs(values: &[String]) -> anyhow::Result<Vec<VerifierKey>> {
    let mut out = Vec::new();
    for v in values {
        let p = Path::new(v);
        if !v.contains('+') && p.is_file() {
            let text =
                std::fs::read_to_string(p).with_context(|| format!("cannot read --log {v}"))?;
            for line in text.lines().map(str::trim).filter(|l| !l.is_empty()) {
                out.push(
                    line.parse()
                        .with_context(|| format!("--log {v}: line {line:?}"))?,
                );
            }
        } else {
            out.push(v.parse().with_context(|| format!("--log {v:?}"))?);
        }
    }
    Ok(out)
}

fn seconds(flag: &str, v: Option<f64>, into: &mut Duration) -> anyhow::Result<()> {
    if let Some(s) = v {
        anyhow::ensure!(
            s.is_finite() && s > 0.0 && s <= 3600.0,
            "--{flag} {s}: must be a number of seconds in (0, 3600]"
        );
        *into = Duration::from_secs_f64(s);
    }
    Ok(())
}

fn serve(a: ServeArgs) -> anyhow::Result<ExitCode> {
    let key = read_key(&a.key)?;
    let logs = read_logs(&a.logs)?;
    let mut limits = ServerLimits::default();
    seconds(
        "header-timeout-seconds",
        a.header_timeout_seconds,
        &mut limits.header_read_timeout,
    )?;
    seconds(
        "body-timeout-seconds",
        a.body_timeout_seconds,
        &mut limits.body_read_timeout,
    )?;
    if let Some(n) = a.max_connections {
        anyhow::ensure!(n >= 1, "--max-connections 0: must be at least 1");
        limits.max_connections = n;
    }
    crate::cli::serve::init_logs();
    let rt = tokio::runtime::Builder::new_multi_thread()
        .worker_threads(2)
        .enable_all()
        .build()
        .context("cannot start the async runtime")?;
    rt.block_on(async {
        let vkey = key.verifier_key();
        let origins: Vec<String> = logs.iter().map(|k| k.name.clone()).collect();
        let witness = Arc::new(Witness::open(&a.state, key, logs).await?);
        let listener = tokio::net::TcpListener::bind(a.bind)
            .await
            .with_context(|| format!("cannot listen on {}", a.bind))?;
        let addr = listener.local_addr().context("the bound address")?;
        eprintln!(
            "witness {vkey} at http://{addr}/ for {} log(s): {} (Ctrl-C to stop)",
            origins.len(),
            origins.join(", ")
        );
        glassbox_web::listener::serve_router(
            listener,
            glassbox_web::witness_api::witness_router(witness.clone()),
            limits,
            crate::cli::worker::shutdown_signal(),
        )
        .await?;
        witness.close().await;
        anyhow::Ok(())
    })?;
    Ok(exit::code(exit::OK))
}

fn forks(a: ForksArgs) -> anyhow::Result<ExitCode> {
    anyhow::ensure!(
        a.state.is_file(),
        "no witness state at {}",
        a.state.display()
    );
    let forks = tokio::runtime::Builder::new_current_thread()
        .enable_all()
        .build()
        .context("cannot start the async runtime")?
        .block_on(glassbox_ledger::witness::recorded_forks(&a.state))?;
    for f in &forks {
        println!("{f}");
    }
    eprintln!("{} fork(s) recorded", forks.len());
    Ok(exit::code(exit::OK))
}
