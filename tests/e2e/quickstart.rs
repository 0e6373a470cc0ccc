//! `glassbox quickstart` end to end, as a new user runs it (from an empty directory, with the
//! example built into the binary): every stage prints its line, the run is trained and
//! recorded and evaluated on the built-in suites (eval jobs), the bot's comments land in the
//! local GitHub stand-in, and the audit of the running
//! server prints `verified:`. A second quickstart refuses to overwrite the lab without --force.

use std::process::Command;

const BIN: &str = env!("CARGO_BIN_EXE_glassbox");

#[test]
fn quickstart_plays_the_whole_path_and_refuses_to_overwrite() {
    let dir = tempfile::tempdir().unwrap();
    let out = Command::new(BIN)
        .args([
            "quickstart",
            "--bind",
            "127.0.0.1:0",
            "--exit",
            "--threads",
            "2",
        ])
        .env("GLASSBOX_PEAK_GFLOPS", "100")
        .env("XDG_STATE_HOME", dir.path().join("state"))
        .current_dir(dir.path())
        .output()
        .unwrap();
    let stdout = String::from_utf8_lossy(&out.stdout);
    let stderr = String::from_utf8_lossy(&out.stderr);
    assert!(out.status.success(), "{stdout}\n{stderr}");
    for stage in [
        "lab  created",
        "data  generated",
        "server  dashboard at",
        "issue  #1 opened",
        "bot  validated #1",
        "approve  grace: /approve",
        "run  run-000001 succeeded",
        "result  recorded and commented",
        "suites  markov-choice (200 multiple_choice items",
        "eval  eval:markov-choice/acc_norm at step 300: ",
        "eval  eval:markov-text/bpb at step 300: ",
        "evals  2 eval job(s) ended",
        "done  the whole path took",
    ] {
        assert!(stderr.contains(stage), "missing stage {stage:?}:\n{stderr}");
    }
    // The result line quotes the result comment, never an alert about the run.
    let result = stderr
        .lines()
        .find(|l| l.contains("result  recorded and commented"))
        .unwrap();
    assert!(
        !result.contains("Alert") && result.contains("run-000001"),
        "{result}"
    );
    assert!(
        stdout.lines().any(|l| l.starts_with("verified: size ")),
        "{stdout}"
    );
    assert!(dir.path().join("glassbox-lab/log/checkpoint").is_file());
    // The trained model picks the source's likelier continuation far above chance (0.25).
    let acc: f64 = stderr
        .lines()
        .find_map(|l| l.split("eval:markov-choice/acc_norm at step 300: ").nth(1))
        .and_then(|v| v.split_whitespace().next())
        .and_then(|v| v.parse().ok())
        .unwrap();
    assert!(acc > 0.5, "acc_norm {acc}:\n{stderr}");

    // The stand-in issue's links point at the stand-in, which exists, not at github.com.
    let log = Command::new(BIN)
        .args(["ledger", "log", "--json", "--lab"])
        .arg(dir.path().join("glassbox-lab"))
        .output()
        .unwrap();
    let log = String::from_utf8_lossy(&log.stdout);
    assert!(
        log.contains("/local-github/local/glassbox-quickstart/issues/1"),
        "{log}"
    );
    assert!(!log.contains("github.com"), "{log}");

    let again = Command::new(BIN)
        .args(["quickstart", "--bind", "127.0.0.1:0", "--exit"])
        .current_dir(dir.path())
        .output()
        .unwrap();
    assert_eq!(again.status.code(), Some(1));
    assert!(String::from_utf8_lossy(&again.stderr).contains("--force"));
}
