//! The kbatch binary: `up` runs the standalone control plane, `controllers` the controllers
//! against any API server, `schedule` checks a cron schedule.

mod controllers;
mod kubeconfig;
mod metrics_server;
mod schedule;
mod up;

use clap::{Parser, Subcommand};

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
    /// Run the controllers against any Kubernetes API server (from a kubeconfig).
    Controllers(controllers::ControllersArgs),
    /// Print the next run times of a cron schedule (checked as a CronJob's would be).
    Schedule(schedule::ScheduleArgs),
}

fn init_tracing() {
    let filter = tracing_subscriber::EnvFilter::try_from_env("KBATCH_LOG")
        .unwrap_or_else(|_| tracing_subscriber::EnvFilter::new("info"));
    tracing_subscriber::fmt()
        .with_env_filter(filter)
        .with_writer(std::io::stderr)
        .init();
}

fn main() -> std::process::ExitCode {
    let cli = Cli::parse();
    if let Command::Schedule(args) = &cli.command {
        return schedule::run(args);
    }
    init_tracing();
    let runtime = match tokio::runtime::Builder::new_multi_thread()
        .enable_all()
        .build()
    {
        Ok(r) => r,
        Err(e) => {
            eprintln!("error: starting the async runtime: {e}");
            return std::process::ExitCode::FAILURE;
        }
    };
    let result = runtime.block_on(async {
        match cli.command {
            Command::Up(args) => up::run(args).await,
            Command::Controllers(args) => controllers::run(args).await,
            Command::Schedule(_) => Ok(()),
        }
    });
    match result {
        Ok(()) => std::process::ExitCode::SUCCESS,
        Err(e) => {
            eprintln!("error: {e:#}");
            std::process::ExitCode::FAILURE
        }
    }
}
