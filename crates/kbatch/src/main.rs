//! The kbatch binary: `up` runs the standalone control plane, `controllers` the controllers
//! against any API server, `schedule` checks a cron schedule.

mod controllers;
mod instance;
mod kubeconfig;
mod metrics_server;
mod ratelimit;
mod rest_metrics;
mod run;
mod schedule;
mod tls;
mod up;
mod user_agent;

use clap::{Parser, Subcommand};

/// mimalloc (through kbatch-alloc) rather than glibc malloc: under load the server and
/// controllers allocate and free many small JSON values; glibc spent about a fifth of the CPU
/// in malloc/free.
#[global_allocator]
static GLOBAL: kbatch_alloc::Allocator = kbatch_alloc::Allocator;

#[derive(Parser)]
#[command(
    name = "kbatch",
    version,
    about = "The Kubernetes Job and CronJob controllers, standalone or on any cluster"
)]
struct Cli {
    #[command(subcommand)]
    command: Command,
}

#[derive(Subcommand)]
enum Command {
    /// Start the embedded API server, its durable store, the controllers and the executor.
    Up(up::UpArgs),
    /// Run Jobs from manifests once, locally, and exit with their outcome (0 complete,
    /// 1 failed, 2 invalid input).
    Run(run::RunArgs),
    /// Run the controllers against any Kubernetes API server (from a kubeconfig).
    Controllers(controllers::ControllersArgs),
    /// Print the next run times of a cron schedule (checked as a CronJob's would be).
    Schedule(schedule::ScheduleArgs),
}

fn init_tracing(default: &str) {
    // The store's engine logs its routine work at info; its warnings and errors are kept.
    let filter = tracing_subscriber::EnvFilter::try_from_env("KBATCH_LOG").unwrap_or_else(|_| {
        tracing_subscriber::EnvFilter::new(format!("{default},fjall=warn,lsm_tree=warn"))
    });
    tracing_subscriber::fmt()
        .with_env_filter(filter)
        .with_writer(std::io::stderr)
        .init();
}

/// Raises the soft limit on open files to the hard limit, as Go's runtime does for every
/// Kubernetes component: a server with a thousand concurrent clients (each a socket on both
/// ends) and a store of many segment files outgrows the usual soft limit of 1,024, and a store
/// that cannot open a file stops taking writes.
fn raise_open_file_limit() {
    use nix::sys::resource::{Resource, getrlimit, setrlimit};
    match getrlimit(Resource::RLIMIT_NOFILE) {
        Ok((soft, hard)) if soft < hard => {
            if let Err(e) = setrlimit(Resource::RLIMIT_NOFILE, hard, hard) {
                tracing::warn!(soft, hard, error = %e, "raising the open file limit");
            }
        }
        Ok(_) => {}
        Err(e) => tracing::warn!(error = %e, "reading the open file limit"),
    }
}

fn main() -> std::process::ExitCode {
    let cli = Cli::parse();
    if let Command::Schedule(args) = &cli.command {
        return schedule::run(args);
    }
    // `kbatch run` prints progress on stdout: only problems go to the log by default.
    init_tracing(if matches!(cli.command, Command::Run(_)) {
        "warn"
    } else {
        "info"
    });
    raise_open_file_limit();
    let runtime = if matches!(cli.command, Command::Up(_) | Command::Run(_)) {
        // The server's runtime, with the controllers' and the executor's beside it; with one
        // thread, the main thread is the server's.
        instance::runtime(instance::server_workers(instance::cores()), None)
    } else {
        tokio::runtime::Builder::new_multi_thread()
            .enable_all()
            .build()
    };
    let runtime = match runtime {
        Ok(r) => r,
        Err(e) => {
            eprintln!("error: starting the async runtime: {e}");
            return std::process::ExitCode::FAILURE;
        }
    };
    let result = runtime.block_on(async {
        match cli.command {
            Command::Run(args) => run::run(args).await.map(Some),
            Command::Up(args) => up::run(args).await.map(|()| None),
            Command::Controllers(args) => controllers::run(args).await.map(|()| None),
            Command::Schedule(_) => Ok(None),
        }
    });
    match result {
        Ok(Some(code)) => std::process::ExitCode::from(code),
        Ok(None) => std::process::ExitCode::SUCCESS,
        Err(e) => {
            eprintln!("error: {e:#}");
            std::process::ExitCode::FAILURE
        }
    }
}
