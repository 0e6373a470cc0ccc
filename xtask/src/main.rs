//! `cargo xtask`: the developer tasks of glassbox (rust-analyzer's xtask pattern; the alias is
//! in `.cargo/config.toml`).
//!
//! `cargo xtask test [ARGS]` is the README's test command. It provides what the test suites
//! need while the tests compile (`cargo test --no-run` in the background: providing waits on
//! the network and the disk, compiling on the CPUs), then runs
//! `cargo test --workspace --no-fail-fast ARGS` with the environment pointing at it, says what
//! it provided, and ends with the tally of every test binary (`tally.rs`): the failed tests
//! and binaries by name, then `tests: N passed, N failed`.
//! It exits non-zero when any test failed.
//!
//! What it provides:
//!
//! - **PostgreSQL**: a cluster of its own (`initdb` and `pg_ctl` from the system's PostgreSQL
//!   server binaries) in `target/xtask/pg`, on a free port on 127.0.0.1, trust auth, database
//!   `test`; stopped at the end. `GLASSBOX_TEST_POSTGRES_URL` set by the caller is used
//!   instead. As root the cluster runs as the `postgres` user (PostgreSQL refuses root). The
//!   tests that restart the server call `GLASSBOX_TEST_POSTGRES_RESTART`, a script written
//!   beside the cluster.
//! - **Python wheels**: a virtualenv in `target/xtask/venv` with the pinned `moto[server]` (the
//!   S3 tests start `moto_server`), `nvidia-cuda-nvrtc` (the CUDA kernels compile test loads
//!   `libnvrtc.so.13`) and `tokenizers` (the tokenizer interop test runs its `python`); its
//!   `bin/` goes on `PATH`, the wheel's `lib/` on `LD_LIBRARY_PATH`.
//!   Installed once; re-installed when the pins change. The same virtualenv holds the Python
//!   package's builder and test tools (maturin, pytest, pandas, pyarrow): after `cargo test`,
//!   the package's wheel is built with maturin (dev profile, incremental in the workspace's
//!   target directory), installed there, and `python/tests/` run with pytest, counted into the
//!   same tally (whenever the run covers the whole workspace or `-p glassbox-python`).
//! - **Chromium and ChromeDriver** for the browser tests: found on the machine, installed with
//!   apt when running as root, otherwise it stops at once and prints the one command to run.
//!
//! `cargo xtask env` provides the same and prints `export` lines (`eval "$(cargo xtask env)"`,
//! then run single tests by hand), leaving PostgreSQL running; `cargo xtask stop` stops it.
//!
//! This is not a build system and not CI: `.ci/run` calls `cargo xtask test`, then rustfmt
//! and clippy. It uses the standard library only, so it builds in seconds on a fresh machine.

mod layers;
mod tally;
#[cfg(test)]
mod tidy;

use std::collections::hash_map::DefaultHasher;
use std::ffi::OsString;
use std::fmt;
use std::hash::{Hash, Hasher};
use std::net::TcpListener;
use std::os::unix::fs::{MetadataExt, PermissionsExt};
use std::path::{Path, PathBuf};
use std::process::{Command, ExitCode, Stdio};
use std::time::Instant;

/// The Python packages the tests need, pinned, in the tests' virtualenv (on `PATH`).
const PYTHON_PINS: [&str; 8] = [
    "moto[server]==5.2.1",
    "nvidia-cuda-nvrtc==13.0.88",
    // The tokenizer interop test: the same release as the `tokenizers` crate.
    "tokenizers==0.23.2",
    // The Python package (`python/`): its wheel's builder, its tests, and its optional tables.
    "maturin==1.16.0",
    "pytest==9.2.0",
    "pandas==3.1.1",
    "numpy==2.4.6",
    "pyarrow==26.0.1",
];

/// The export test's `transformers` and `torch`, pinned, in a virtualenv of their own: PyPI's
/// Linux torch wheel brings CUDA libraries of a newer release than the NVRTC pin above (the
/// CPU-only index, download.pytorch.org, is not a registry CI can reach), so the two sets
/// cannot share one environment. Its `python` is `GLASSBOX_HF_PYTHON`. It installs (about
/// 3 GB, once) while the tests compile.
const HF_PYTHON_PINS: [&str; 3] = [
    "torch==2.15.0",
    "transformers==5.24.0",
    "tokenizers==0.23.2",
];

/// The Debian packages that hold the browser and its driver.
const BROWSER_PACKAGES: [&str; 2] = ["chromium", "chromium-driver"];

/// The Debian package that holds `promtool` (the sample alert rules are checked with it).
const PROMETHEUS_PACKAGE: &str = "prometheus";

/// A task that could not be done, in words for the person who ran it.
#[derive(Debug)]
struct Failure(String);

impl fmt::Display for Failure {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.write_str(&self.0)
    }
}

type Result<T> = std::result::Result<T, Failure>;

fn fail<T>(message: impl Into<String>) -> Result<T> {
    Err(Failure(message.into()))
}

const USAGE: &str = "usage: cargo xtask <task>

tasks:
  test [--isolated] [ARGS]
                provide PostgreSQL, the Python wheels and Chromium, then run
                `cargo test --workspace --no-fail-fast ARGS` against them (the README's
                test command): every test binary runs, and the last line says how many
                tests passed and failed in all;
                --isolated (root, Linux): the tests run in a network namespace of their
                own, where only what this task provides is reachable (CI uses it)
  env           provide the same and print `export` lines; PostgreSQL keeps running
  stop          stop the PostgreSQL cluster `env` left running
  layers [CRATE...]
                print each crate's import graph between its top-level modules and
                the circles in it; fails when there is one
";

fn main() -> ExitCode {
    let mut args = std::env::args_os().skip(1);
    let task = args.next().map(|a| a.to_string_lossy().into_owned());
    let rest: Vec<OsString> = args.collect();
    let result = match task.as_deref() {
        Some("test") => test(rest),
        // The second half of `test --isolated`, run by it inside the new network namespace.
        Some(INSIDE) => tests_inside(rest),
        Some("env") => env_task(),
        Some("stop") => {
            Paths::find().and_then(|p| Cluster::stop_dir(&p).map(|_| ExitCode::SUCCESS))
        }
        Some("layers") => layers_task(&rest),
        Some("help" | "-h" | "--help") => {
            print!("{USAGE}");
            Ok(ExitCode::SUCCESS)
        }
        Some(other) => {
            eprint!("xtask: unknown task `{other}`\n\n{USAGE}");
            Ok(ExitCode::from(2))
        }
        None => {
            eprint!("{USAGE}");
            Ok(ExitCode::from(2))
        }
    };
    result.unwrap_or_else(|e| {
        eprintln!("xtask: {e}");
        ExitCode::FAILURE
    })
}

fn layers_task(only: &[OsString]) -> Result<ExitCode> {
    let paths = Paths::find()?;
    let only: Vec<String> = only
        .iter()
        .map(|a| a.to_string_lossy().into_owned())
        .collect();
    match layers::print(&paths.root, &only) {
        Ok(true) => Ok(ExitCode::SUCCESS),
        Ok(false) => Ok(ExitCode::FAILURE),
        Err(e) => fail(format!("reading the sources: {e}")),
    }
}

/// Where the tasks keep what they provide.
#[derive(Debug, Clone)]
struct Paths {
    /// The workspace root.
    root: PathBuf,
    /// `target/xtask` (under `CARGO_TARGET_DIR` when set).
    xtask: PathBuf,
}

impl Paths {
    fn find() -> Result<Self> {
        let root = Path::new(env!("CARGO_MANIFEST_DIR"))
            .parent()
            .map(Path::to_path_buf)
            .ok_or_else(|| Failure("xtask has no parent directory".into()))?;
        let target = match std::env::var_os("CARGO_TARGET_DIR") {
            Some(t) if Path::new(&t).is_absolute() => PathBuf::from(t),
            Some(t) => root.join(t),
            None => root.join("target"),
        };
        let xtask = target.join("xtask");
        std::fs::create_dir_all(&xtask)
            .or_else(|e| fail(format!("cannot create {}: {e}", xtask.display())))?;
        Ok(Self { root, xtask })
    }
}

/// The environment the tests run in, and what was done to make it.
#[derive(Debug, Default, Clone)]
struct Provided {
    /// Variables to set.
    vars: Vec<(String, OsString)>,
    /// Directories to put in front of `PATH`.
    path: Vec<PathBuf>,
    /// Directories to put in front of `LD_LIBRARY_PATH`.
    library_path: Vec<PathBuf>,
    /// One line per thing provided, for the summary.
    report: Vec<String>,
}

impl Provided {
    fn set(&mut self, name: &str, value: impl Into<OsString>) {
        self.vars.push((name.to_string(), value.into()));
    }

    fn joined(front: &[PathBuf], var: &str) -> Option<OsString> {
        if front.is_empty() {
            return None;
        }
        let mut all: Vec<PathBuf> = front.to_vec();
        if let Some(old) = std::env::var_os(var) {
            all.extend(std::env::split_paths(&old));
        }
        std::env::join_paths(all).ok()
    }

    /// Every variable to set, `PATH` and `LD_LIBRARY_PATH` included.
    fn all_vars(&self) -> Vec<(String, OsString)> {
        let mut out = self.vars.clone();
        if let Some(p) = Self::joined(&self.path, "PATH") {
            out.push(("PATH".into(), p));
        }
        if let Some(p) = Self::joined(&self.library_path, "LD_LIBRARY_PATH") {
            out.push(("LD_LIBRARY_PATH".into(), p));
        }
        out
    }
}

/// Where the last run's tally is kept, under `target/xtask`.
const TALLY_FILE: &str = "tally.txt";

/// The task `test --isolated` runs itself as, inside the network namespace.
const INSIDE: &str = "__tests-in-namespace";

/// `cargo test [--workspace]` in the workspace root.
fn cargo_test(paths: &Paths, cargo_args: &[OsString]) -> Command {
    let names_a_package = cargo_args
        .iter()
        .any(|a| a == "-p" || a == "--package" || a.to_string_lossy().starts_with("--package="));
    let mut cargo = Command::new(std::env::var_os("CARGO").unwrap_or_else(|| "cargo".into()));
    cargo.arg("test").current_dir(&paths.root);
    if !names_a_package {
        cargo.arg("--workspace");
    }
    cargo
}

fn test(mut cargo_args: Vec<OsString>) -> Result<ExitCode> {
    let paths = Paths::find()?;
    let started = Instant::now();
    let _ = std::fs::remove_file(paths.xtask.join(TALLY_FILE));
    let isolated = cargo_args.first().is_some_and(|a| a == "--isolated");
    if isolated {
        cargo_args.remove(0);
    }
    // Compile while providing: apt and pip wait on the network and the disk, the compiler on
    // the CPUs. The build needs nothing that is provided (no test runs in it), and the run
    // below finds it done.
    let mut build = cargo_test(&paths, &cargo_args)
        .arg("--no-run")
        .args(&cargo_args)
        .stdin(Stdio::null())
        .spawn()
        .or_else(|e| fail(format!("cannot start cargo: {e}")))?;
    let provided = (|| {
        let mut provided = Provided::default();
        // Browsers first: the one thing that may stop us and ask the user, so it stops at once.
        provide_browser(&mut provided)?;
        provide_promtool(&mut provided)?;
        provide_python(&paths, &mut provided)?;
        provide_hf_python(&paths, &mut provided)?;
        Ok(provided)
    })();
    let provided = match provided {
        Ok(p) => p,
        Err(e) => {
            let _ = build.kill();
            let _ = build.wait();
            return Err(e);
        }
    };
    println!(
        "xtask: provided in {:.0} s:",
        started.elapsed().as_secs_f64()
    );
    for line in &provided.report {
        println!("  - {line}");
    }
    let built = build
        .wait()
        .or_else(|e| fail(format!("cannot wait for cargo: {e}")))?;
    if !built.success() {
        // The compiler's errors are on the screen already.
        return Ok(exit_code(built));
    }
    println!("xtask: built in {:.0} s", started.elapsed().as_secs_f64());
    if runs_python_tests(&cargo_args) {
        build_python_wheel(&paths, &provided)?;
    }
    let status = if isolated {
        match namespace_support() {
            Ok(()) => {
                // Everything is built and provided: the tests need no network but loopback.
                let exe = std::env::current_exe()
                    .or_else(|e| fail(format!("cannot find this program: {e}")))?;
                let mut inside = Command::new("unshare");
                inside
                    .args(["--net", "--"])
                    .arg(exe)
                    .arg(INSIDE)
                    .args(&cargo_args)
                    .env("CARGO_NET_OFFLINE", "true");
                for (k, v) in provided.all_vars() {
                    inside.env(k, v);
                }
                exit_code(
                    inside
                        .status()
                        .or_else(|e| fail(format!("cannot run unshare: {e}")))?,
                )
            }
            Err(why) => {
                println!("xtask: --isolated: {why}; the tests share this machine's network");
                run_tests(&paths, provided.clone(), &cargo_args)?
            }
        }
    } else {
        run_tests(&paths, provided.clone(), &cargo_args)?
    };
    println!(
        "xtask: {:.0} s in all; the tests ran against:",
        started.elapsed().as_secs_f64()
    );
    for line in &provided.report {
        println!("  - {line}");
    }
    match std::fs::read_to_string(paths.xtask.join(TALLY_FILE)) {
        Ok(report) => println!("{}", report.lines().last().unwrap_or_default()),
        Err(_) => println!("xtask: the tests reported no tally (see above)"),
    }
    Ok(status)
}

/// Why `--isolated` cannot make a network namespace here, if it cannot.
fn namespace_support() -> std::result::Result<(), String> {
    if !is_root() {
        return Err("a network namespace needs root".into());
    }
    for tool in ["unshare", "ip"] {
        if find_program(&[tool], &["/usr/sbin", "/sbin"]).is_none() {
            return Err(format!("`{tool}` is not installed"));
        }
    }
    match Command::new("unshare")
        .args(["--net", "true"])
        .stderr(Stdio::null())
        .status()
    {
        Ok(s) if s.success() => Ok(()),
        _ => Err("`unshare --net` is not permitted here".into()),
    }
}

/// Inside the namespace of `test --isolated`: loopback up, then the tests as always. Proves
/// first that nothing answers on PostgreSQL's default port, so a test that leaned on the
/// machine's own server would fail here.
fn tests_inside(cargo_args: Vec<OsString>) -> Result<ExitCode> {
    let paths = Paths::find()?;
    run(
        "bringing up loopback",
        Command::new(find_program(&["ip"], &["/usr/sbin", "/sbin"]).unwrap_or("ip".into()))
            .args(["link", "set", "lo", "up"]),
    )?;
    if std::net::TcpStream::connect(("127.0.0.1", 5432)).is_ok() {
        return fail("isolation failed: something answers on 127.0.0.1:5432 inside the namespace");
    }
    let mut provided = Provided::default();
    provided
        .report
        .push("a network namespace of its own: loopback only, nothing on 127.0.0.1:5432".into());
    run_tests(&paths, provided, &cargo_args)
}

/// Provides PostgreSQL, runs `cargo test` with `provided` and the cluster, stops the cluster.
fn run_tests(paths: &Paths, mut provided: Provided, cargo_args: &[OsString]) -> Result<ExitCode> {
    let cluster = provide_postgres(paths, &mut provided)?;
    for line in &provided.report {
        println!("xtask: {line}");
    }
    let mut cargo = cargo_test(paths, cargo_args);
    // Every test binary runs, whatever an earlier one did: the tally at the end names all
    // that failed, and cargo's exit status still says whether any did.
    cargo.arg("--no-fail-fast").args(cargo_args);
    for (k, v) in provided.all_vars() {
        cargo.env(k, v);
    }
    let status = run_tallied(&mut cargo);
    let status = match status {
        Ok((status, mut tally)) if runs_python_tests(cargo_args) => {
            let python = python_tests(paths, &provided, &mut tally);
            python.map(|ok| (if ok { status } else { failed_status(status) }, tally))
        }
        other => other,
    };
    if let Some(c) = cluster {
        c.stop()?;
    }
    let (status, tally) = status?;
    let report = tally.report();
    print!("{report}");
    // `test` repeats the summary as its very last line, also when these tests ran in the
    // network namespace's process.
    let _ = std::fs::write(paths.xtask.join(TALLY_FILE), &report);
    Ok(exit_code(status))
}

/// Whether this run includes the Python package's tests: the whole workspace, or that package.
fn runs_python_tests(cargo_args: &[OsString]) -> bool {
    let mut named = Vec::new();
    let mut args = cargo_args.iter().map(|a| a.to_string_lossy());
    while let Some(a) = args.next() {
        if a == "-p" || a == "--package" {
            named.extend(args.next().map(|p| p.into_owned()));
        } else if let Some(p) = a.strip_prefix("--package=") {
            named.push(p.to_string());
        }
    }
    named.is_empty() || named.iter().any(|p| p == PYTHON_PACKAGE)
}

/// The Python package's crate.
const PYTHON_PACKAGE: &str = "glassbox-python";

/// Where the Python package's wheel is built, under `target/xtask`.
const WHEELS: &str = "wheels";

/// Builds the Python package's wheel with maturin: the dev profile in the workspace's target
/// directory, so a rebuild is incremental. Runs with the build, before the tests (and outside
/// `--isolated`'s namespace: maturin asks cargo for the metadata of every platform's crates).
fn build_python_wheel(paths: &Paths, provided: &Provided) -> Result<()> {
    let python = paths.xtask.join("venv/bin/python");
    let wheels = paths.xtask.join(WHEELS);
    let _ = std::fs::remove_dir_all(&wheels);
    let started = Instant::now();
    let mut build = Command::new(&python);
    build
        .args([
            "-m",
            "maturin",
            "build",
            "--profile",
            "dev",
            "--quiet",
            "--manifest-path",
        ])
        .arg(paths.root.join("python/Cargo.toml"))
        .arg("--interpreter")
        .arg(&python)
        .arg("--out")
        .arg(&wheels)
        .current_dir(&paths.root);
    for (k, v) in provided.all_vars() {
        build.env(k, v);
    }
    run("building the Python wheel (maturin)", &mut build)?;
    println!(
        "xtask: built the Python wheel in {:.0} s",
        started.elapsed().as_secs_f64()
    );
    Ok(())
}

/// The Python package's tests: installs the wheel [`build_python_wheel`] built into the tests'
/// virtualenv and runs pytest on `python/tests/` with the lab fixture `cargo test` built,
/// counting into `tally`. Returns whether every test passed.
fn python_tests(paths: &Paths, provided: &Provided, tally: &mut tally::Tally) -> Result<bool> {
    let python = paths.xtask.join("venv/bin/python");
    let wheels = paths.xtask.join(WHEELS);
    let wheel = std::fs::read_dir(&wheels)
        .ok()
        .and_then(|d| {
            d.flatten()
                .map(|e| e.path())
                .find(|p| p.extension().is_some_and(|e| e == "whl"))
        })
        .ok_or_else(|| Failure(format!("maturin left no wheel in {}", wheels.display())))?;
    run(
        "installing the Python wheel",
        Command::new(&python)
            .args(["-m", "pip", "install", "-q", "--disable-pip-version-check"])
            .args(["--no-deps", "--no-index", "--force-reinstall"])
            .arg(&wheel),
    )?;
    let target = paths.xtask.parent().unwrap_or(&paths.root);
    let mut pytest = Command::new(&python);
    pytest
        .args([
            "-m",
            "pytest",
            "-p",
            "no:cacheprovider",
            "--color=no",
            "-rfE",
        ])
        .arg(paths.root.join("python/tests"))
        .env(
            "GLASSBOX_LAB_FIXTURE",
            target.join("debug/examples/lab_fixture"),
        )
        .current_dir(&paths.root);
    for (k, v) in provided.all_vars() {
        pytest.env(k, v);
    }
    let (status, counted) = run_tallied_with(&mut pytest, tally::Tally::read_pytest_line)?;
    tally.passed += counted.passed;
    tally.failed += counted.failed;
    tally.ignored += counted.ignored;
    tally.binaries += counted.binaries;
    tally.failed_tests.extend(counted.failed_tests);
    if !status.success() {
        tally
            .failed_binaries
            .push(format!("-p {PYTHON_PACKAGE} (pytest python/tests)"));
    }
    Ok(status.success())
}

/// A failing exit status standing for a run whose own status was `status` but whose Python
/// tests failed.
fn failed_status(status: std::process::ExitStatus) -> std::process::ExitStatus {
    if status.success() {
        std::os::unix::process::ExitStatusExt::from_raw(1 << 8)
    } else {
        status
    }
}

/// Runs `cargo test` with its output passing through to ours, counting as it goes.
fn run_tallied(cargo: &mut Command) -> Result<(std::process::ExitStatus, tally::Tally)> {
    run_tallied_with(cargo, tally::Tally::read_line)
}

/// Runs `cmd` with its output passing through to ours, each line read by `read`.
fn run_tallied_with(
    cargo: &mut Command,
    read: fn(&mut tally::Tally, &str),
) -> Result<(std::process::ExitStatus, tally::Tally)> {
    use std::sync::{Arc, Mutex};
    let mut child = cargo
        .stdout(Stdio::piped())
        .stderr(Stdio::piped())
        .spawn()
        .or_else(|e| fail(format!("cannot run {:?}: {e}", cargo.get_program())))?;
    let tally = Arc::new(Mutex::new(tally::Tally::default()));
    let (out, err) = (child.stdout.take(), child.stderr.take());
    let readers = [
        out.map(|o| {
            let t = Arc::clone(&tally);
            std::thread::spawn(move || tally::pass_through_with(o, std::io::stdout(), &t, read))
        }),
        err.map(|e| {
            let t = Arc::clone(&tally);
            std::thread::spawn(move || tally::pass_through_with(e, std::io::stderr(), &t, read))
        }),
    ];
    let status = child
        .wait()
        .or_else(|e| fail(format!("cannot wait for cargo: {e}")));
    for r in readers.into_iter().flatten() {
        let _ = r.join();
    }
    let tally = tally.lock().map(|t| t.clone()).unwrap_or_default();
    Ok((status?, tally))
}

fn exit_code(status: std::process::ExitStatus) -> ExitCode {
    match status.code() {
        Some(0) => ExitCode::SUCCESS,
        Some(code) => ExitCode::from(code.clamp(1, 255) as u8),
        None => ExitCode::FAILURE,
    }
}

fn env_task() -> Result<ExitCode> {
    let paths = Paths::find()?;
    let mut provided = Provided::default();
    provide_browser(&mut provided)?;
    provide_promtool(&mut provided)?;
    provide_python(&paths, &mut provided)?;
    provide_hf_python(&paths, &mut provided)?;
    let cluster = provide_postgres(&paths, &mut provided)?;
    for line in &provided.report {
        eprintln!("xtask: {line}");
    }
    if cluster.is_some() {
        eprintln!("xtask: PostgreSQL keeps running; `cargo xtask stop` stops it");
    }
    for (k, v) in provided.all_vars() {
        println!("export {k}={}", shell_quote(&v.to_string_lossy()));
    }
    Ok(ExitCode::SUCCESS)
}

fn shell_quote(s: &str) -> String {
    format!("'{}'", s.replace('\'', r"'\''"))
}

/// Whether this process runs as root (the owner of `/proc/self` is the process's user).
fn is_root() -> bool {
    std::fs::metadata("/proc/self").is_ok_and(|m| m.uid() == 0)
}

/// The first of `names` found on `PATH`, then in `extra` directories.
fn find_program(names: &[&str], extra: &[&str]) -> Option<PathBuf> {
    let path = std::env::var_os("PATH").unwrap_or_default();
    let dirs = std::env::split_paths(&path).chain(extra.iter().map(PathBuf::from));
    for dir in dirs {
        for name in names {
            let p = dir.join(name);
            if p.metadata()
                .is_ok_and(|m| m.is_file() && m.permissions().mode() & 0o111 != 0)
            {
                return Some(p);
            }
        }
    }
    None
}

/// Runs a command to completion, failing with its output when it fails.
fn run(what: &str, cmd: &mut Command) -> Result<String> {
    let out = cmd
        .stdin(Stdio::null())
        .output()
        .or_else(|e| fail(format!("{what}: cannot start {:?}: {e}", cmd.get_program())))?;
    if !out.status.success() {
        let mut text = String::from_utf8_lossy(&out.stderr).into_owned();
        text.push_str(&String::from_utf8_lossy(&out.stdout));
        let tail: Vec<&str> = text.lines().rev().take(20).collect();
        let tail: Vec<&str> = tail.into_iter().rev().collect();
        return fail(format!(
            "{what} failed ({}):\n{}",
            out.status,
            tail.join("\n")
        ));
    }
    Ok(String::from_utf8_lossy(&out.stdout).trim().to_string())
}

// ---- Chromium -------------------------------------------------------------------------

fn find_browser() -> (Option<PathBuf>, Option<PathBuf>) {
    let chromium = find_program(&["chromium", "chromium-browser", "google-chrome"], &[]);
    let driver = find_program(&["chromedriver"], &["/usr/lib/chromium"]);
    (chromium, driver)
}

fn provide_browser(provided: &mut Provided) -> Result<()> {
    if let Some(driver) = std::env::var_os("GLASSBOX_CHROMEDRIVER") {
        provided.report.push(format!(
            "ChromeDriver: {} (GLASSBOX_CHROMEDRIVER, yours)",
            PathBuf::from(driver).display()
        ));
        return Ok(());
    }
    let (mut chromium, mut driver) = find_browser();
    let mut installed = false;
    if chromium.is_none() || driver.is_none() {
        let install = format!("apt-get install -y {}", BROWSER_PACKAGES.join(" "));
        if !is_root() || find_program(&["apt-get"], &[]).is_none() {
            return fail(format!(
                "the browser tests need Chromium and ChromeDriver, and this machine lacks {}. \
                 Install them, then run the tests again:\n\n    sudo {install}\n",
                match (&chromium, &driver) {
                    (None, None) => "both",
                    (None, Some(_)) => "Chromium",
                    _ => "ChromeDriver",
                }
            ));
        }
        eprintln!("xtask: installing {} with apt", BROWSER_PACKAGES.join(" "));
        run(
            "apt-get update",
            Command::new("apt-get").args(["update", "-qq"]),
        )?;
        run(
            "apt-get install",
            Command::new("apt-get")
                .args(["install", "-y", "-qq"])
                .args(BROWSER_PACKAGES)
                .env("DEBIAN_FRONTEND", "noninteractive"),
        )?;
        (chromium, driver) = find_browser();
        installed = true;
    }
    let (Some(chromium), Some(driver)) = (chromium, driver) else {
        return fail("Chromium or ChromeDriver is still missing after installing them with apt");
    };
    provided.set("GLASSBOX_CHROMEDRIVER", driver.as_os_str());
    provided.report.push(format!(
        "Chromium {} and ChromeDriver {}{}",
        chromium.display(),
        driver.display(),
        if installed {
            " (installed now with apt)"
        } else {
            " (found)"
        }
    ));
    Ok(())
}

// ---- promtool ---------------------------------------------------------------------------

/// `promtool`, for the test that checks `docs/prometheus-alerts.yml` (`GLASSBOX_PROMTOOL`):
/// found on `PATH`, or installed with apt (Debian's `prometheus` package) when running as root.
fn provide_promtool(provided: &mut Provided) -> Result<()> {
    if let Some(p) = std::env::var_os("GLASSBOX_PROMTOOL") {
        provided.report.push(format!(
            "promtool: {} (GLASSBOX_PROMTOOL, yours)",
            PathBuf::from(p).display()
        ));
        return Ok(());
    }
    let mut installed = false;
    let mut found = find_program(&["promtool"], &[]);
    if found.is_none() {
        let install = format!("apt-get install -y {PROMETHEUS_PACKAGE}");
        if !is_root() || find_program(&["apt-get"], &[]).is_none() {
            return fail(format!(
                "the alert-rules test needs promtool, and this machine lacks it. Install it, \
                 then run the tests again:\n\n    sudo {install}\n"
            ));
        }
        eprintln!("xtask: installing {PROMETHEUS_PACKAGE} with apt (for promtool)");
        run(
            "apt-get update",
            Command::new("apt-get").args(["update", "-qq"]),
        )?;
        run(
            "apt-get install",
            Command::new("apt-get")
                .args([
                    "install",
                    "-y",
                    "-qq",
                    "--no-install-recommends",
                    PROMETHEUS_PACKAGE,
                ])
                .env("DEBIAN_FRONTEND", "noninteractive"),
        )?;
        found = find_program(&["promtool"], &[]);
        installed = true;
    }
    let Some(promtool) = found else {
        return fail("promtool is still missing after installing prometheus with apt");
    };
    provided.set("GLASSBOX_PROMTOOL", promtool.as_os_str());
    provided.report.push(format!(
        "promtool {}{}",
        promtool.display(),
        if installed {
            " (installed now with apt)"
        } else {
            " (found)"
        }
    ));
    Ok(())
}

// ---- Python wheels --------------------------------------------------------------------

/// A virtualenv at `target/xtask/<name>` holding `pins`, installed unless its stamp says they
/// are already there. Returns its `python` and whether it installed now.
fn virtualenv(paths: &Paths, name: &str, pins: &[&str]) -> Result<(PathBuf, bool)> {
    let venv = paths.xtask.join(name);
    let python = venv.join("bin/python");
    let stamp = venv.join("glassbox-pins.txt");
    let want = pins.join("\n");
    if std::fs::read_to_string(&stamp).ok().as_deref() == Some(want.as_str()) {
        return Ok((python, false));
    }
    if !python.exists() {
        let base = std::env::var_os("GLASSBOX_PYTHON").unwrap_or_else(|| "python3".into());
        run(
            "creating the Python virtualenv",
            Command::new(&base).arg("-m").arg("venv").arg(&venv),
        )
        .map_err(|e| {
            Failure(format!(
                "{e}\n(the tests need Python 3 with its venv module; on Debian: apt-get install python3-venv)"
            ))
        })?;
    }
    println!(
        "xtask: installing {} into {}",
        pins.join(" "),
        venv.display()
    );
    run(
        "pip install",
        Command::new(&python)
            .args(["-m", "pip", "install", "-q", "--disable-pip-version-check"])
            .args(pins),
    )?;
    std::fs::write(&stamp, &want)
        .or_else(|e| fail(format!("cannot write {}: {e}", stamp.display())))?;
    Ok((python, true))
}

fn provide_python(paths: &Paths, provided: &mut Provided) -> Result<()> {
    let (python, installed) = virtualenv(paths, "venv", &PYTHON_PINS)?;
    let venv = paths.xtask.join("venv");
    let lib = run(
        "finding NVRTC in the virtualenv",
        Command::new(&python).args([
            "-c",
            "import nvidia.cu13, os; print(os.path.join(list(nvidia.cu13.__path__)[0], 'lib'))",
        ]),
    )?;
    let lib = PathBuf::from(lib);
    if !lib.join("libnvrtc.so.13").exists() {
        return fail(format!(
            "{} has no libnvrtc.so.13; delete {} and run again",
            lib.display(),
            venv.display()
        ));
    }
    provided.path.push(venv.join("bin"));
    provided.library_path.push(lib.clone());
    provided.report.push(format!(
        "Python wheels {} in {}{} (moto_server on PATH, NVRTC {} on LD_LIBRARY_PATH)",
        PYTHON_PINS.join(", "),
        venv.display(),
        if installed { ", installed now" } else { "" },
        lib.display()
    ));
    Ok(())
}

/// The export test's own virtualenv ([`HF_PYTHON_PINS`]), named by `GLASSBOX_HF_PYTHON`.
fn provide_hf_python(paths: &Paths, provided: &mut Provided) -> Result<()> {
    let (python, installed) = virtualenv(paths, "venv-hf", &HF_PYTHON_PINS)?;
    provided.set("GLASSBOX_HF_PYTHON", python.clone());
    provided.report.push(format!(
        "Python wheels {} in {}{} (GLASSBOX_HF_PYTHON)",
        HF_PYTHON_PINS.join(", "),
        python.display(),
        if installed { ", installed now" } else { "" }
    ));
    Ok(())
}

// ---- PostgreSQL -----------------------------------------------------------------------

/// A PostgreSQL cluster of the xtask's own.
#[derive(Debug)]
struct Cluster {
    bindir: PathBuf,
    dir: PathBuf,
    port: u16,
    /// Run the server's tools as the `postgres` user (we are root).
    as_postgres: bool,
}

/// The server binaries' directory: `GLASSBOX_PG_BINDIR`, the newest Debian
/// `/usr/lib/postgresql/<v>/bin`, or the directory of `initdb` on `PATH`.
fn postgres_bindir() -> Result<PathBuf> {
    if let Some(d) = std::env::var_os("GLASSBOX_PG_BINDIR") {
        return Ok(PathBuf::from(d));
    }
    let mut debian: Vec<(u32, PathBuf)> = std::fs::read_dir("/usr/lib/postgresql")
        .into_iter()
        .flatten()
        .filter_map(|e| e.ok())
        .filter_map(|e| {
            let v = e.file_name().to_string_lossy().parse::<u32>().ok()?;
            let bin = e.path().join("bin");
            bin.join("initdb").exists().then_some((v, bin))
        })
        .collect();
    debian.sort();
    if let Some((_, bin)) = debian.pop() {
        return Ok(bin);
    }
    if let Some(initdb) = find_program(&["initdb"], &[]) {
        if let Some(d) = initdb.parent() {
            return Ok(d.to_path_buf());
        }
    }
    fail(
        "the tests need PostgreSQL's server binaries (initdb, pg_ctl) to start a cluster of \
         their own, and none were found. Install them (Debian: apt-get install postgresql), \
         set GLASSBOX_PG_BINDIR to their directory, or point GLASSBOX_TEST_POSTGRES_URL at a \
         server you run",
    )
}

fn free_port() -> Result<u16> {
    let l = TcpListener::bind("127.0.0.1:0")
        .or_else(|e| fail(format!("cannot find a free port on 127.0.0.1: {e}")))?;
    l.local_addr()
        .map(|a| a.port())
        .or_else(|e| fail(format!("cannot read the free port: {e}")))
}

impl Cluster {
    /// Where the cluster lives: `target/xtask/pg`, or, when we are root and the `postgres`
    /// user cannot reach that directory, a directory of the system's temp dir named after it.
    fn home(paths: &Paths, as_postgres: bool) -> Result<PathBuf> {
        let local = paths.xtask.join("pg");
        if !as_postgres {
            return Ok(local);
        }
        std::fs::create_dir_all(&local)
            .or_else(|e| fail(format!("cannot create {}: {e}", local.display())))?;
        let _ = Command::new("chown").arg("postgres:").arg(&local).status();
        let reachable = Command::new("runuser")
            .args(["-u", "postgres", "--", "test", "-w"])
            .arg(&local)
            .status()
            .is_ok_and(|s| s.success());
        if reachable {
            return Ok(local);
        }
        let mut h = DefaultHasher::new();
        paths.root.hash(&mut h);
        let tmp = std::env::temp_dir().join(format!("glassbox-xtask-pg-{:016x}", h.finish()));
        std::fs::create_dir_all(&tmp)
            .or_else(|e| fail(format!("cannot create {}: {e}", tmp.display())))?;
        let _ = Command::new("chown").arg("postgres:").arg(&tmp).status();
        Ok(tmp)
    }

    fn tool(&self, name: &str) -> Command {
        let path = self.bindir.join(name);
        if self.as_postgres {
            let mut c = Command::new("runuser");
            c.args(["-u", "postgres", "--"]).arg(path);
            c
        } else {
            Command::new(path)
        }
    }

    fn data(&self) -> PathBuf {
        self.dir.join("data")
    }

    /// The options the server starts with (`pg_ctl -o`).
    fn server_options(&self) -> String {
        format!(
            "-p {} -k '{}' -c listen_addresses=127.0.0.1 -c max_connections=300",
            self.port,
            self.dir.display()
        )
    }

    fn pg_ctl(&self, action: &str) -> Command {
        let mut c = self.tool("pg_ctl");
        c.arg("-D")
            .arg(self.data())
            .arg("-l")
            .arg(self.dir.join("server.log"))
            .args(["-w", "-t", "60", "-o", &self.server_options(), action]);
        c
    }

    fn url(&self) -> String {
        format!("postgres://postgres@127.0.0.1:{}/test", self.port)
    }

    /// Stops a cluster a killed run left behind in `dir`, if any.
    fn stop_leftover(bindir: &Path, dir: &Path, as_postgres: bool) {
        let data = dir.join("data");
        if data.join("postmaster.pid").exists() {
            let c = Cluster {
                bindir: bindir.to_path_buf(),
                dir: dir.to_path_buf(),
                port: 0,
                as_postgres,
            };
            let _ = c
                .tool("pg_ctl")
                .arg("-D")
                .arg(&data)
                .args(["-m", "fast", "-w", "stop"])
                .stdout(Stdio::null())
                .stderr(Stdio::null())
                .status();
        }
    }

    /// `cargo xtask stop`.
    fn stop_dir(paths: &Paths) -> Result<()> {
        let bindir = postgres_bindir()?;
        let as_postgres = is_root();
        let dir = Self::home(paths, as_postgres)?;
        Self::stop_leftover(&bindir, &dir, as_postgres);
        println!(
            "xtask: no PostgreSQL of ours is running in {}",
            dir.display()
        );
        Ok(())
    }

    fn start(paths: &Paths) -> Result<Self> {
        let bindir = postgres_bindir()?;
        let as_postgres = is_root();
        let dir = Self::home(paths, as_postgres)?;
        Self::stop_leftover(&bindir, &dir, as_postgres);
        let cluster = Cluster {
            bindir,
            dir,
            port: free_port()?,
            as_postgres,
        };
        if cluster.server_options().matches('\'').count() != 2 {
            return fail(format!(
                "the cluster's directory {} has a quote in its name",
                cluster.dir.display()
            ));
        }
        let data = cluster.data();
        if !data.join("PG_VERSION").exists() {
            let _ = std::fs::remove_dir_all(&data);
            println!("xtask: initdb {}", data.display());
            run(
                "initdb",
                cluster.tool("initdb").arg("-D").arg(&data).args([
                    "-U",
                    "postgres",
                    "--auth=trust",
                    "-E",
                    "UTF8",
                    "--locale=C",
                ]),
            )?;
        }
        run("pg_ctl start", &mut cluster.pg_ctl("start")).map_err(|e| {
            Failure(format!(
                "{e}\n(the server's log: {})",
                cluster.dir.join("server.log").display()
            ))
        })?;
        let created = cluster
            .tool("createdb")
            .args([
                "-h",
                "127.0.0.1",
                "-p",
                &cluster.port.to_string(),
                "-U",
                "postgres",
                "test",
            ])
            .stdin(Stdio::null())
            .output()
            .or_else(|e| fail(format!("cannot run createdb: {e}")))?;
        if !created.status.success()
            && !String::from_utf8_lossy(&created.stderr).contains("already exists")
        {
            let _ = cluster.stop();
            return fail(format!(
                "createdb test failed: {}",
                String::from_utf8_lossy(&created.stderr).trim()
            ));
        }
        cluster.write_restart_script()?;
        Ok(cluster)
    }

    /// `restart` beside the cluster: what the tests run to restart the server under a worker.
    fn write_restart_script(&self) -> Result<PathBuf> {
        let script = self.dir.join("restart");
        let mut cmd = String::from(
            "#!/bin/sh\n# Written by `cargo xtask`: restarts the tests' PostgreSQL.\nexec",
        );
        if self.as_postgres {
            cmd.push_str(" runuser -u postgres --");
        }
        for part in [
            self.bindir.join("pg_ctl").display().to_string(),
            "-D".into(),
            self.data().display().to_string(),
            "-l".into(),
            self.dir.join("server.log").display().to_string(),
            "-w".into(),
            "-t".into(),
            "60".into(),
            "-m".into(),
            "fast".into(),
            "-o".into(),
            self.server_options(),
            "restart".into(),
        ] {
            cmd.push(' ');
            cmd.push_str(&shell_quote(&part));
        }
        cmd.push('\n');
        std::fs::write(&script, cmd)
            .and_then(|_| std::fs::set_permissions(&script, std::fs::Permissions::from_mode(0o755)))
            .or_else(|e| fail(format!("cannot write {}: {e}", script.display())))?;
        Ok(script)
    }

    fn stop(&self) -> Result<()> {
        run(
            "pg_ctl stop",
            self.tool("pg_ctl")
                .arg("-D")
                .arg(self.data())
                .args(["-m", "fast", "-w", "stop"]),
        )?;
        println!("xtask: stopped PostgreSQL on port {}", self.port);
        Ok(())
    }
}

fn provide_postgres(paths: &Paths, provided: &mut Provided) -> Result<Option<Cluster>> {
    if let Some(url) = std::env::var_os("GLASSBOX_TEST_POSTGRES_URL") {
        provided.report.push(format!(
            "PostgreSQL at {} (GLASSBOX_TEST_POSTGRES_URL, yours; tests that restart the server \
             need GLASSBOX_TEST_POSTGRES_RESTART too)",
            url.to_string_lossy()
        ));
        return Ok(None);
    }
    let cluster = Cluster::start(paths)?;
    provided.set("GLASSBOX_TEST_POSTGRES_URL", cluster.url());
    provided.set(
        "GLASSBOX_TEST_POSTGRES_RESTART",
        cluster.dir.join("restart").as_os_str(),
    );
    provided.path.push(cluster.bindir.clone());
    provided.report.push(format!(
        "PostgreSQL ({}) of our own at {} in {}{}",
        cluster.bindir.display(),
        cluster.url(),
        cluster.dir.display(),
        if cluster.as_postgres {
            ", run as the postgres user"
        } else {
            ""
        }
    ));
    Ok(Some(cluster))
}
