//! End-to-end: the GitHub bot's side of the binary as an operator meets it. `glassbox serve`
//! refuses a `[github]` section without `repositories` or with an empty webhook secret, in
//! every form the secret can take (inline, environment variable, file), before it serves
//! anything; `glassbox bot deliveries` lists what the bot's store holds (`--failed`, `--json`)
//! and `glassbox bot redeliver ID` queues a failed delivery again.

use std::path::Path;
use std::process::{Command, Output};
use std::time::Duration;

use glassbox_github_bot::store::NewDelivery;
use glassbox_github_bot::{DeliveryId, Store};

fn glassbox(lab: &Path, args: &[&str], env: &[(&str, &str)]) -> Output {
    let mut c = Command::new(env!("CARGO_BIN_EXE_glassbox"));
    c.arg("--lab").arg(lab).args(args);
    for (k, v) in env {
        c.env(k, v);
    }
    c.output().expect("the glassbox binary runs")
}

fn stderr(o: &Output) -> String {
    String::from_utf8_lossy(&o.stderr).into_owned()
}

fn stdout(o: &Output) -> String {
    String::from_utf8_lossy(&o.stdout).into_owned()
}

/// A `[github]` section with `secrets` for its secret lines.
fn github_section(secrets: &str, repositories: bool) -> String {
    format!(
        "[web]\nbind = \"127.0.0.1:1\"\n\n[github]\nbot_login = \"glassbox-bot\"\n{}{secrets}\nflops_per_second = 1.0e12\n\n[github.auth]\nkind = \"token\"\ntoken = \"t\"\n",
        if repositories {
            "repositories = [\"octo/lab\"]\n"
        } else {
            ""
        }
    )
}

#[test]
fn serve_refuses_an_empty_webhook_secret_in_every_form_and_a_missing_repositories() {
    let dir = tempfile::tempdir().unwrap();
    let blank = dir.path().join("blank-secrets");
    std::fs::write(&blank, "\n   \n").unwrap();
    let cases = [
        (
            github_section("webhook_secrets = [\"\"]", true),
            "webhook_secrets",
            "secret 1 of 1 is empty",
        ),
        (
            github_section(
                "webhook_secrets_env = [\"GLASSBOX_TEST_EMPTY_SECRET\"]",
                true,
            ),
            "github.webhook_secrets_env",
            "GLASSBOX_TEST_EMPTY_SECRET is empty",
        ),
        (
            github_section(
                &format!("webhook_secrets_file = {:?}", blank.display().to_string()),
                true,
            ),
            "github.webhook_secrets_file",
            "holds no secret",
        ),
        (
            github_section("webhook_secrets = []", true),
            "webhook_secrets",
            "at least one secret",
        ),
        (
            github_section("webhook_secrets = [\"s\"]", false),
            "repositories",
            "missing field",
        ),
    ];
    for (i, (config, key, why)) in cases.iter().enumerate() {
        let path = dir.path().join(format!("lab-{i}.toml"));
        std::fs::write(&path, config).unwrap();
        let out = glassbox(
            &dir.path().join("lab"),
            &["serve", "--config", path.to_str().unwrap()],
            &[("GLASSBOX_TEST_EMPTY_SECRET", "")],
        );
        let err = stderr(&out);
        assert_eq!(out.status.code(), Some(1), "case {i}: {err}");
        assert!(err.contains(key) && err.contains(why), "case {i}: {err}");
    }
}

/// A bot store at `<lab>/bot.db` holding one failed, one ignored and one acted delivery.
fn store_with_deliveries(lab: &Path) {
    std::fs::create_dir_all(lab).unwrap();
    let url = format!("sqlite://{}", lab.join("bot.db").display());
    let rt = tokio::runtime::Builder::new_current_thread()
        .enable_all()
        .build()
        .unwrap();
    rt.block_on(async {
        let store = Store::open(&url).await.unwrap();
        let new = |id: &str, event: &str, payload: Option<&str>| NewDelivery {
            id: DeliveryId(id.into()),
            event: event.into(),
            payload: payload.map(|p| p.as_bytes().to_vec()),
        };
        store
            .insert_deliveries(&[
                new("d-failed", "issues", Some("{}")),
                new("d-star", "star", None),
                new("d-acted", "issues", Some("{}")),
            ])
            .await
            .unwrap();
        let failed = store.next_pending().await.unwrap().unwrap();
        store
            .mark_attempt_failed(failed.seq, "GitHub answered 422", None)
            .await
            .unwrap();
        let acted = store.next_pending().await.unwrap().unwrap();
        store.mark_acted(acted.seq).await.unwrap();
        assert_eq!(store.next_due_in().await.unwrap(), None::<Duration>);
    });
}

#[test]
fn bot_deliveries_lists_them_and_redeliver_queues_a_failed_one_again() {
    let dir = tempfile::tempdir().unwrap();
    let lab = dir.path().join("lab");

    // No store yet: an operational error that says what is missing.
    let out = glassbox(&lab, &["bot", "deliveries"], &[]);
    assert_eq!(out.status.code(), Some(3), "{}", stderr(&out));
    assert!(stderr(&out).contains("bot.db"), "{}", stderr(&out));

    store_with_deliveries(&lab);
    let out = glassbox(&lab, &["bot", "deliveries", "--json"], &[]);
    assert_eq!(out.status.code(), Some(0), "{}", stderr(&out));
    let all: serde_json::Value = serde_json::from_str(&stdout(&out)).unwrap();
    let states: Vec<(&str, &str)> = all
        .as_array()
        .unwrap()
        .iter()
        .map(|d| (d["id"].as_str().unwrap(), d["state"].as_str().unwrap()))
        .collect();
    assert_eq!(
        states,
        [
            ("d-acted", "acted"),
            ("d-star", "ignored"),
            ("d-failed", "failed")
        ],
        "newest first"
    );
    assert_eq!(all[1]["detail"], "event `star` is not handled");
    assert_eq!(all[2]["detail"], "GitHub answered 422");

    let out = glassbox(&lab, &["bot", "deliveries", "--failed"], &[]);
    let text = stdout(&out);
    assert!(
        text.contains("d-failed") && text.contains("(GitHub answered 422)"),
        "{text}"
    );
    assert!(
        !text.contains("d-acted") && !text.contains("d-star"),
        "{text}"
    );

    let out = glassbox(&lab, &["bot", "redeliver", "d-acted"], &[]);
    assert_eq!(out.status.code(), Some(1));
    assert!(
        stderr(&out).contains("d-acted is acted; only failed deliveries"),
        "{}",
        stderr(&out)
    );
    let out = glassbox(&lab, &["bot", "redeliver", "nope"], &[]);
    assert_eq!(out.status.code(), Some(1));
    let out = glassbox(&lab, &["bot", "redeliver", "d-failed"], &[]);
    assert_eq!(out.status.code(), Some(0), "{}", stderr(&out));
    let out = glassbox(&lab, &["bot", "deliveries", "--json"], &[]);
    let all: serde_json::Value = serde_json::from_str(&stdout(&out)).unwrap();
    assert_eq!(all[2]["state"], "pending");
    assert_eq!(all[2]["attempts"], 0);
}
