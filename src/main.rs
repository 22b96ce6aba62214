//! `ratelimit`: the service, configured by environment variables alone, as
//! the original; `ratelimit --version` prints the version and revision,
//! `ratelimit --help` how to run it.

use ratelimit::app::{self, ShutdownTimings, Signal};
use ratelimit::settings::{Env, Settings};
use std::process::ExitCode;

/// mimalloc: the request path allocates many small, short-lived buffers
/// (HTTP/2 frames, Redis frames), where it measurably beats glibc malloc.
#[global_allocator]
static GLOBAL: mimalloc::MiMalloc = mimalloc::MiMalloc;

/// Gives the calling thread's freed memory back to the OS: mimalloc
/// processes the frees other threads made into this thread's heap, frees
/// its empty pages and purges them (`mi_collect`).
fn release_memory() {
    // SAFETY: `mi_collect` takes no pointer and may be called from any
    // thread at any time; it only acts on the calling thread's heap.
    unsafe { libmimalloc_sys::mi_collect(true) }
}

fn main() -> ExitCode {
    // The original takes no arguments and ignores any; `--version` only
    // prints what this build is, and `--help` how to run it (rather than
    // starting a service that waits for a Redis it was never told of).
    match std::env::args().nth(1).as_deref() {
        Some("--version" | "-version") => {
            println!("ratelimit {}", ratelimit::VERSION);
            return ExitCode::SUCCESS;
        }
        Some(a) if ratelimit::settings::help::asks_for_help(a) => {
            print!("{}", ratelimit::settings::help::text());
            return ExitCode::SUCCESS;
        }
        _ => {}
    }
    ratelimit::service::grpc::release::register(release_memory);
    let settings = match Settings::from_source(&Env) {
        Ok(s) => s,
        Err(e) => {
            eprintln!("invalid settings:\n{e}");
            return ExitCode::from(1);
        }
    };
    let runtime = match tokio::runtime::Builder::new_multi_thread()
        .enable_all()
        .build()
    {
        Ok(r) => r,
        Err(e) => {
            eprintln!("cannot start the async runtime: {e}");
            return ExitCode::from(1);
        }
    };
    // Built on the runtime: the gRPC exporter's channel lives there.
    let spans = if let Some(tracing) = ratelimit::app::tracing_options(&settings) {
        match runtime.block_on(async { ratelimit::platform::telemetry::provider(&tracing) }) {
            Ok(p) => Some(p),
            Err(e) => {
                eprintln!("ratelimit: {e}");
                return ExitCode::from(1);
            }
        }
    } else {
        None
    };
    ratelimit::platform::logging::init(ratelimit::app::log_options(&settings), spans.as_ref());
    let inactive = settings.accepted_but_inactive(&Env);
    if !inactive.is_empty() {
        tracing::warn!(
            "these settings are accepted but not acted on by this version: {}",
            inactive.join(", ")
        );
    }
    let result = runtime.block_on(async move {
        let metrics = ratelimit::metrics::install(app::metrics_options(&settings)?)
            .map_err(|e| app::AppError::Unsupported(e.to_string()))?;
        let timings = ShutdownTimings {
            drain: settings.shutdown.drain,
            deadline: settings.shutdown.timeout,
        };
        let result = app::run(settings, timings, metrics.clone(), None, signal()).await;
        metrics.flush_and_stop().await;
        result
    });
    if let Some(p) = spans {
        // The last spans, without holding the exit on a dead collector.
        let _ = p.shutdown_with_timeout(std::time::Duration::from_secs(2));
    }
    match result {
        Ok(()) => ExitCode::SUCCESS,
        Err(e) => {
            tracing::error!("{e}");
            eprintln!("ratelimit: {e}");
            ExitCode::from(1)
        }
    }
}

/// SIGTERM drains; SIGINT and SIGHUP stop (SIGHUP does not reload, as in the
/// original).
async fn signal() -> Signal {
    use tokio::signal::unix::{signal, SignalKind};
    let (Ok(mut term), Ok(mut int), Ok(mut hup)) = (
        signal(SignalKind::terminate()),
        signal(SignalKind::interrupt()),
        signal(SignalKind::hangup()),
    ) else {
        // Without signal handlers, only Ctrl-C can stop us.
        let _ = tokio::signal::ctrl_c().await;
        return Signal::Interrupt;
    };
    tokio::select! {
        _ = term.recv() => Signal::Terminate,
        _ = int.recv() => Signal::Interrupt,
        _ = hup.recv() => Signal::Interrupt,
    }
}
