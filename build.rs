//! Compiles the protos of `api/` that no crate ships: the xDS
//! `RateLimitConfig` resource. The compiler is the vendored `protoc` of
//! `protoc-bin-vendored`, so that nothing needs installing.

fn main() -> Result<(), Box<dyn std::error::Error>> {
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
