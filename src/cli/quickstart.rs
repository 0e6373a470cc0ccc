//! `glassbox quickstart`: the whole open-lab path on a fresh lab, on this machine, with no
//! network — then the dashboard stays up.
//!
//! Stages, one line each: create `./glassbox-lab`; generate the built-in Markov corpus (a
//! `dataset` entry); start the lab server (dashboard, webhook, bot, in-process worker) with a
//! local stand-in for GitHub mounted at `/local-github` (the bot talks to it through its real
//! octocrab client; the dashboard labels it as local); deliver a signed `issues.opened` webhook
//! whose body is the experiment form filled with the built-in `examples/tiny.toml`; wait for the
//! bot's validation comment; deliver a maintainer's `/approve`; train with a progress bar; wait
//! for the result comment; wait for the run's evaluations on the built-in suites (stored at the
//! start, `[evals]` set for this lab), each an eval job of its own; audit the running server
//! over HTTP (`verified: ...`).
//!
//! Glue over `cli::serve` and the library crates; the example spec is compiled into the binary
//! so this works from any directory.

use std::net::SocketAddr;
use std::process::ExitCode;
use std::sync::Arc;
use std::time::{Duration, Instant};

use anyhow::Context;
use clap::Args;
use glassbox_github_bot::config::{
    BotConfig, BudgetConfig, DEFAULT_IGNORED_RETENTION_HOURS, GitHubAuth, RetryConfig,
};
use glassbox_github_bot::form::render_issue_form;
use glassbox_github_bot::local::{LOCAL_BOT_LOGIN, LOCAL_GITHUB_PREFIX, LocalGitHub, LocalIssues};
use glassbox_github_bot::{Login, RepoName, Secret, WEBHOOK_PATH};
use glassbox_lab::{LiveSink, dataset};
use glassbox_ledger::LabDir;
use glassbox_schemas::ExperimentId;
use glassbox_schemas::eval::EvalKind;

use crate::GlobalOpts;
use crate::cli::args::{self, LabArgs};
use crate::cli::serve::{self, ServeParts};
use crate::exit;

/// The example experiment, built into the binary.
const TINY: &str = include_str!("../../examples/tiny.toml");
/// The built-in evaluation suites, drawn from the example's Markov source
/// (`glassbox data eval-suite generate --from examples/tiny.toml`), by name and kind.
const SUITES: [(&str, EvalKind, &str); 2] = [
    (
        "markov-choice",
        EvalKind::MultipleChoice,
        include_str!("../../examples/evals/markov-choice.jsonl"),
    ),
    (
        "markov-text",
        EvalKind::Perplexity,
        include_str!("../../examples/evals/markov-text.jsonl"),
    ),
];
/// The quickstart's pretend repository, proposer and maintainer.
const REPO: &str = "local/glassbox-quickstart";
const PROPOSER: &str = "ada";
const MAINTAINER: &str = "grace";

#[derive(Debug, Args)]
pub struct QuickstartArgs {
    /// Address the dashboard listens on.
    #[arg(long, default_value = serve::DEFAULT_BIND)]
    pub bind: SocketAddr,
    /// Replace an existing lab directory.
    #[arg(long)]
    pub force: bool,
    /// CPU threads for training. Default: all cores.
    #[arg(long)]
    pub threads: Option<usize>,
    /// Stop after the audit instead of keeping the dashboard up (for scripts and tests).
    #[arg(long)]
    pub exit: bool,
}

/// The first line of a comment that a person would read (not the bot's hidden marker).
fn first_line(body: &str) -> &str {
    body.lines()
        .map(str::trim)
        .find(|l| !l.is_empty() && !l.starts_with("<!--"))
        .unwrap_or_default()
}

/// A fresh webhook secret: 256 random bits from the operating system, as hex.
fn webhook_secret() -> anyhow::Result<Secret> {
    let mut bytes = [0u8; 32];
    getrandom::fill(&mut bytes)
        .map_err(|e| anyhow::anyhow!("no randomness from the operating system: {e}"))?;
    Ok(Secret::new(hex_lower(&bytes)))
}

fn hex_lower(bytes: &[u8]) -> String {
    bytes.iter().map(|b| format!("{b:02x}")).collect()
}

fn stage(name: &str, text: impl std::fmt::Display) {
    eprintln!("{name:>9}  {text}");
}

/// Posts a signed webhook delivery to the running server, as GitHub would.
async fn deliver(
    addr: SocketAddr,
    secret: &Secret,
    event: &str,
    delivery: &str,
    payload: &serde_json::Value,
) -> anyhow::Result<u16> {
    let body = serde_json::to_vec(payload)?;
    let sig = glassbox_github_bot::signature::sign(secret.expose().as_bytes(), &body);
    let url = format!("http://{addr}{WEBHOOK_PATH}");
    let (event, delivery) = (event.to_string(), delivery.to_string());
    tokio::task::spawn_blocking(move || {
        let agent: ureq::Agent = ureq::Agent::config_builder()
            .http_status_as_error(false)
            .build()
            .into();
        let resp = agent
            .post(&url)
            .header("content-type", "application/json")
            .header("x-github-event", &event)
            .header("x-github-delivery", &delivery)
            .header("x-hub-signature-256", &sig)
            .send(&body[..])
            .with_context(|| format!("cannot deliver the webhook to {url}"))?;
        Ok(resp.status().as_u16())
    })
    .await?
}

/// Waits (polling every 100 ms) until `check` yields, or fails after `limit`.
async fn wait_for<T>(
    what: &str,
    limit: Duration,
    mut check: impl AsyncFnMut() -> anyhow::Result<Option<T>>,
) -> anyhow::Result<T> {
    let deadline = Instant::now() + limit;
    loop {
        if let Some(v) = check().await? {
            return Ok(v);
        }
        if Instant::now() > deadline {
            anyhow::bail!("timed out after {} s waiting for {what}", limit.as_secs());
        }
        tokio::time::sleep(Duration::from_millis(100)).await;
    }
}

pub fn run(args: QuickstartArgs, global: &GlobalOpts) -> anyhow::Result<ExitCode> {
    let started = Instant::now();
    let dir = &global.lab;
    if dir.exists()
        && std::fs::read_dir(dir)
            .map(|mut d| d.next().is_some())
            .unwrap_or(true)
    {
        if !args.force {
            eprintln!(
                "error: {} already exists; quickstart makes a fresh lab. Use --force to replace it, or --lab DIR for another place",
                dir.display()
            );
            return Ok(exit::code(exit::CHECK_FAILED));
        }
        if LabDir::open(dir).is_err() {
            eprintln!(
                "error: {} exists and is not a glassbox lab; refusing to delete it even with --force",
                dir.display()
            );
            return Ok(exit::code(exit::CHECK_FAILED));
        }
        std::fs::remove_dir_all(dir).with_context(|| format!("cannot remove {}", dir.display()))?;
    }
    let origin = format!(
        "glassbox-quickstart/{}",
        crate::cli::ledger::default_origin()?.trim_start_matches("glassbox-lab/")
    );
    let (lab, _) = LabDir::init(dir, &origin)?;
    stage(
        "lab",
        format!("created {} (log origin {origin})", lab.root().display()),
    );
    let spec = glassbox_schemas::parse_toml(TINY)
        .map_err(|e| anyhow::anyhow!("the built-in example spec is invalid: {e}"))?;

    args::runtime()?.block_on(async move {
        let lab_args = LabArgs::defaults();
        let mut ctx = args::open(global, &lab_args, false).await?;
        // The built-in corpus: the example's Markov source, recorded as a dataset.
        let generator = spec.data.mixture[0]
            .generator
            .clone()
            .context("the example spec has a generator domain")?;
        let rec = ctx.recorder.clone();
        let ds = tokio::task::spawn_blocking(move || {
            dataset::generate(&rec, "markov", &generator, 1 << 20)
        })
        .await??;
        stage(
            "data",
            format!(
                "generated the built-in Markov corpus {} ({} bytes, entropy {:.4} bits/byte), dataset entry {}",
                ds.hash,
                ds.bytes,
                ds.body.entropy_bits_per_byte.unwrap_or(f64::NAN),
                ds.entry
            ),
        );

        // The built-in suites, stored as any suite is, and evaluated on every snapshot.
        let rec = ctx.recorder.clone();
        let suites = tokio::task::spawn_blocking(move || {
            SUITES
                .iter()
                .map(|(name, kind, text)| {
                    glassbox_lab::eval::suite::import_text(
                        &rec,
                        text,
                        &glassbox_lab::eval::suite::SuiteImport {
                            file: Default::default(),
                            name: name.parse().map_err(glassbox_lab::LabError::Refused)?,
                            kind: *kind,
                            licence: Some("CC0-1.0".into()),
                            source: Some(format!(
                                "glassbox data eval-suite generate --from examples/tiny.toml --kind {kind} --seed 1"
                            )),
                        },
                    )
                })
                .collect::<Result<Vec<_>, _>>()
        })
        .await??;
        stage(
            "suites",
            suites
                .iter()
                .map(|s| format!("{} ({} {} items, entry {})", s.body.name, s.body.items, s.body.kind, s.entry))
                .collect::<Vec<_>>()
                .join(", "),
        );
        ctx.config.evals.suites = suites.iter().map(|s| s.body.name.clone()).collect();

        let listener = tokio::net::TcpListener::bind(args.bind)
            .await
            .with_context(|| format!("cannot listen on {} (try --bind 127.0.0.1:0)", args.bind))?;
        let addr = listener.local_addr()?;
        let base = format!("http://{addr}");
        let secret = webhook_secret()?;
        let github = LocalGitHub::new(&[MAINTAINER]);
        let bot = BotConfig {
            bot_login: Login::new(LOCAL_BOT_LOGIN),
            repositories: vec![RepoName::parse(REPO).context("the quickstart's repository")?],
            webhook_secrets: vec![secret.clone()],
            max_body_bytes: glassbox_github_bot::config::DEFAULT_MAX_BODY_BYTES,
            maintainers: vec![Login::new(MAINTAINER)],
            collaborators_are_maintainers: false,
            allow_self_approval: false,
            flops_per_second: 5.0e10,
            dashboard_url: base.clone(),
            api_base_url: format!("{base}{LOCAL_GITHUB_PREFIX}"),
            auth: GitHubAuth::Token {
                token: "local-stand-in".into(),
            },
            budget: BudgetConfig::default(),
            retry: RetryConfig {
                max_attempts: 3,
                base_backoff_ms: 100,
                max_wait_seconds: 5,
            },
            ignored_retention_hours: DEFAULT_IGNORED_RETENTION_HOURS,
        };
        ctx.flow = glassbox_lab::Flow::new(ctx.queue.clone(), ctx.recorder.clone(), ctx.config.clone())
            .with_public_url(&base);
        let queue = ctx.queue.clone();
        let recorder = ctx.recorder.clone();
        let progress: Arc<dyn LiveSink> = Arc::new(crate::cli::run::ProgressSink::new());
        let running = serve::start(
            ServeParts {
                ctx,
                github: Some(bot),
                extra: Some(axum::Router::new().nest(LOCAL_GITHUB_PREFIX, github.router())),
                worker: true,
                threads: args.threads,
                live_sinks: vec![progress],
                limits: Default::default(),
            },
            listener,
        )
        .await?;
        stage(
            "server",
            format!("dashboard at {base}/ (GitHub is a local stand-in at {base}{LOCAL_GITHUB_PREFIX}; nothing leaves this machine)"),
        );

        // 1. An outsider opens an experiment issue through the form.
        let issues = LocalIssues::new(REPO, &format!("{base}{LOCAL_GITHUB_PREFIX}"));
        let title = format!("[experiment] {}", spec.experiment.name);
        let body = render_issue_form(
            &spec.experiment.hypothesis,
            Some("eval/markov/loss = 1.35 +- 0.10"),
            TINY,
            true,
        );
        github.note_issue(REPO, 1, PROPOSER, &title, &body);
        let status = deliver(addr, &secret, "issues", "quickstart-1", &issues.opened(1, PROPOSER, &title, &body)).await?;
        stage("issue", format!("#1 opened by {PROPOSER}: signed webhook delivered ({status})"));
        let gh = github.clone();
        let first = wait_for("the bot's validation comment", Duration::from_secs(30), async || {
            Ok(gh.comments().into_iter().find(|c| c.issue == 1))
        })
        .await?;
        stage(
            "bot",
            format!(
                "validated #1 and commented: {}",
                first_line(&first.body)
            ),
        );

        // 2. A maintainer approves it.
        let status = deliver(
            addr,
            &secret,
            "issue_comment",
            "quickstart-2",
            &issues.comment(1, PROPOSER, &title, &body, MAINTAINER, "/approve", 2),
        )
        .await?;
        let experiment = ExperimentId::issue(REPO, 1);
        let q = queue.clone();
        let e2 = experiment.clone();
        let job = wait_for("the approved job", Duration::from_secs(30), async || {
            Ok(q.latest_job_of(&e2).await?)
        })
        .await?;
        stage("approve", format!("{MAINTAINER}: /approve ({status}) → approval entry {}, job {} queued", job.approval_entry.unwrap_or_default(), job.id));

        // 3. The in-process worker trains it (progress bar), records the result.
        let q = queue.clone();
        let id = job.id;
        let done = wait_for("the run to finish", Duration::from_secs(900), async || {
            let j = q.get(id).await?;
            Ok(j.state.is_terminal().then_some(j))
        })
        .await?;
        stage(
            "run",
            format!(
                "{} {}{}",
                done.run(),
                done.state,
                done.reason.as_deref().map(|r| format!(": {r}")).unwrap_or_default()
            ),
        );
        let gh = github.clone();
        // The result comment by its marker: an alert about the same run also names the run
        // and the ledger.
        let marker = glassbox_github_bot::render::comment_marker(&format!("result:{}", done.run()));
        let result = wait_for("the bot's result comment", Duration::from_secs(60), async || {
            Ok(gh
                .comments()
                .into_iter()
                .filter(|c| c.issue == 1)
                .find(|c| c.body.starts_with(&marker)))
        })
        .await?;
        stage(
            "result",
            format!(
                "recorded and commented on #1: {}",
                first_line(&result.body)
            ),
        );

        // 4. The worker evaluates the run's snapshots, each an eval job below training.
        let q = queue.clone();
        let run = done.run();
        let evals = wait_for("the run's evaluations", Duration::from_secs(300), async || {
            let jobs = q.list(None, 200).await?;
            let of_run = |j: &&glassbox_lab::Job| {
                j.kind == glassbox_lab::JobKind::Eval
                    && j.evaluates.as_ref().is_some_and(|t| t.run == run)
            };
            let open = jobs.iter().filter(of_run).any(|j| !j.state.is_terminal());
            let ended = jobs.iter().filter(of_run).count();
            Ok((!open && ended > 0).then_some(ended))
        })
        .await?;
        let rec = recorder.clone();
        let run = done.run();
        let bodies =
            tokio::task::spawn_blocking(move || glassbox_lab::eval::of_run(&rec, &run)).await??;
        for b in &bodies {
            stage("eval", glassbox_lab::eval::headline(b));
        }
        stage(
            "evals",
            format!(
                "{evals} eval job(s) ended; the run page shows them under Evaluations: {base}/runs/{}",
                done.run()
            ),
        );

        // 5. Anyone audits the running lab over HTTP.
        let url = format!("{base}/");
        let g = global.clone();
        let verified = tokio::task::spawn_blocking(move || {
            crate::cli::verify::run(
                crate::cli::verify::VerifyArgs {
                    target: Some(url),
                    vkey: None,
                    prev: None,
                    no_blobs: false,
                    blobs: None,
                    index_url: None,
                    state_dir: None,
                    // A fresh lab at this URL: whatever an earlier quickstart left remembered
                    // for it was another lab, with another key.
                    forget: true,
                    max_blob_bytes: None,
                    witnesses: Vec::new(),
                    quorum: None,
                    follow: false,
                    every: "60s".into(),
                    metrics_bind: None,
                },
                &g,
            )
        })
        .await??;
        if verified != exit::code(exit::OK) {
            anyhow::bail!("the audit of {base}/ failed (see above)");
        }
        stage(
            "done",
            format!(
                "the whole path took {:.0} s. Dashboard: {base}/  ·  audit it yourself: glassbox verify {base}/",
                started.elapsed().as_secs_f64()
            ),
        );
        if !args.exit {
            eprintln!("           serving until Ctrl-C");
            crate::cli::worker::shutdown_signal().await;
        }
        running.shutdown().await?;
        Ok(exit::code(exit::OK))
    })
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn the_webhook_secret_is_256_random_bits() {
        let (a, b) = (webhook_secret().unwrap(), webhook_secret().unwrap());
        assert_eq!(a.expose().len(), 64, "32 bytes as hex");
        assert!(a.expose().bytes().all(|c| c.is_ascii_hexdigit()));
        assert_ne!(a, b, "fresh per run");
    }
}
