//! Build script: the commit this binary is built from, for `mbx_relay_build_info{commit}` and
//! `/status`. Read from git when the source is a git checkout (else `MBX_RELAY_COMMIT` from
//! the environment, else "unknown"): the build never fails for want of git.

use std::process::Command;

fn git(args: &[&str]) -> Option<String> {
    let out = Command::new("git").args(args).output().ok()?;
    if !out.status.success() {
        return None;
    }
    let s = String::from_utf8(out.stdout).ok()?.trim().to_owned();
    (!s.is_empty()).then_some(s)
}

fn main() {
    println!("cargo:rerun-if-changed=build.rs");
    println!("cargo:rerun-if-env-changed=MBX_RELAY_COMMIT");
    let from_env = std::env::var("MBX_RELAY_COMMIT")
        .ok()
        .filter(|c| !c.is_empty());
    let commit = from_env
        .or_else(|| git(&["rev-parse", "--short=12", "HEAD"]))
        .unwrap_or_else(|| "unknown".to_owned());
    // Rebuild when HEAD moves: HEAD itself, and the branch it points at (a worktree keeps the
    // two in different git directories; `--git-path` names the right one).
    for path in ["HEAD", "packed-refs"] {
        if let Some(p) = git(&["rev-parse", "--git-path", path]) {
            println!("cargo:rerun-if-changed={p}");
        }
    }
    if let Some(branch) = git(&["symbolic-ref", "-q", "HEAD"]) {
        if let Some(p) = git(&["rev-parse", "--git-path", &branch]) {
            println!("cargo:rerun-if-changed={p}");
        }
    }
    // Only a plain commit id reaches the binary.
    let commit: String = commit
        .chars()
        .filter(char::is_ascii_alphanumeric)
        .take(40)
        .collect();
    let commit = if commit.is_empty() {
        "unknown".to_owned()
    } else {
        commit
    };
    println!("cargo:rustc-env=MBX_RELAY_COMMIT={commit}");
}
