//! Build script of the `glassbox` binary: records the git revision it was built from, so that
//! `glassbox --version` and every `run_started` ledger entry can name the exact code: the full
//! commit (40 hex digits), with `-dirty` when tracked files differed from it.
//! (`run_started` also records the BLAKE3 of the executable itself, at run time.)

use std::process::Command;

/// Runs git without taking optional locks: `git status` would otherwise refresh and rewrite
/// `.git/index`, which this script watches, so every build would leave the next one stale and
/// the binary crate would recompile with nothing changed.
fn git(args: &[&str]) -> Option<String> {
    Command::new("git")
        .arg("--no-optional-locks")
        .args(args)
        .output()
        .ok()
        .filter(|o| o.status.success())
        .map(|o| String::from_utf8_lossy(&o.stdout).trim().to_string())
}

fn main() {
    let rev = git(&["rev-parse", "HEAD"]).unwrap_or_else(|| "unknown".to_string());
    let dirty = git(&["status", "--porcelain", "--untracked-files=no"])
        .map(|s| !s.is_empty())
        .unwrap_or(false);
    let revision = if dirty { format!("{rev}-dirty") } else { rev };
    println!("cargo:rustc-env=GLASSBOX_GIT_REVISION={revision}");
    // Re-run when HEAD moves or the branch it names moves (a commit, a checkout, a reset). The
    // index is not watched: `git status`, run by people and editors all day, rewrites it
    // without changing the state recorded here. Every edit of a tracked file is seen below;
    // what only the index says (a staged removal, `git rm --cached`) is picked up at the next
    // edit or commit. In a worktree `.git` is a file, so ask git where these live rather than
    // assuming `.git/HEAD`.
    // Only paths that exist: cargo counts a watched path that is missing as changed, so a
    // clone without `packed-refs` (most fresh ones) would rebuild the binary crate on every
    // build. When refs are packed later, the loose branch ref watched below disappears, which
    // counts as a change.
    for path in ["HEAD", "packed-refs"] {
        if let Some(p) = git(&["rev-parse", "--git-path", path])
            && std::path::Path::new(&p).exists()
        {
            println!("cargo:rerun-if-changed={p}");
        }
    }
    if let Some(branch) = git(&["symbolic-ref", "-q", "HEAD"])
        && let Some(p) = git(&["rev-parse", "--git-path", &branch])
    {
        println!("cargo:rerun-if-changed={p}");
    }
    // The dirty flag must follow edits that are not staged too: watch every tracked top-level
    // file and directory (cargo watches a directory's contents recursively).
    if let Some(files) = git(&["ls-files"]) {
        let mut top: Vec<&str> = files
            .lines()
            .map(|f| f.split('/').next().unwrap_or(f))
            .collect();
        top.dedup();
        for entry in top {
            println!("cargo:rerun-if-changed={entry}");
        }
    }
    println!("cargo:rerun-if-env-changed=GLASSBOX_GIT_REVISION");
}
