//! Compiles the protos of `api/` that no crate ships: the xDS
//! `RateLimitConfig` resource. The compiler is the vendored `protoc` of
//! `protoc-bin-vendored`, so that nothing needs installing. Also names the
//! source revision the binaries are built from, for `ratelimit --version`.

fn main() -> Result<(), Box<dyn std::error::Error>> {
    revision();
    let protoc = protoc_bin_vendored::protoc_bin_path()?;
    let include = protoc_bin_vendored::include_path()?;
    let mut config = prost_build::Config::new();
    config.protoc_executable(protoc);
    config.compile_protos(
        &["api/ratelimit/config/ratelimit/v3/rls_conf.proto"],
        &[std::path::PathBuf::from("api"), include],
    )?;
    println!("cargo:rerun-if-changed=api/ratelimit/config/ratelimit/v3/rls_conf.proto");
    Ok(())
}

/// `RATELIMIT_REVISION` for the crate: the variable of that name when the
/// build sets it (a container build, whose context has no `.git`), else
/// the checkout's commit, else `unknown`.
fn revision() {
    println!("cargo:rerun-if-env-changed=RATELIMIT_REVISION");
    let from_env = std::env::var("RATELIMIT_REVISION")
        .ok()
        .filter(|r| !r.is_empty());
    let revision = from_env
        .or_else(git_head)
        .unwrap_or_else(|| "unknown".into());
    println!("cargo:rustc-env=RATELIMIT_REVISION={revision}");
}

fn git_head() -> Option<String> {
    let git = std::path::Path::new(".git");
    if !git.exists() {
        return None;
    }
    println!("cargo:rerun-if-changed=.git/HEAD");
    if let Ok(head) = std::fs::read_to_string(git.join("HEAD")) {
        if let Some(r) = head.trim().strip_prefix("ref: ") {
            println!("cargo:rerun-if-changed=.git/{r}");
        }
    }
    let out = std::process::Command::new("git")
        .args(["rev-parse", "--short=12", "HEAD"])
        .output()
        .ok()?;
    let rev = String::from_utf8(out.stdout).ok()?.trim().to_string();
    (out.status.success() && !rev.is_empty()).then_some(rev)
}
