//! The `kiln` binary: see `kiln --help`.

use clap::{Parser, Subcommand};
use kiln::cli;

/// `kiln --version`: the package version and the commit the binary is built from.
const VERSION: &str = concat!(env!("CARGO_PKG_VERSION"), " (", env!("KILN_BUILD_COMMIT"), ")");

#[derive(Parser)]
#[command(name = "kiln", version = VERSION, about = "An LLM inference engine that plans everything before the GPU runs.", long_about = None)]
struct Cli {
    #[command(subcommand)]
    command: Command,
}

#[derive(Subcommand)]
enum Command {
    /// Generate text (default model: the bundled stories260K; runs on CPU with no GPU).
    Run(cli::run::RunCmd),
    /// Plan a model ahead of time: write NAME.plan and its canonical dump NAME.plan.txt.
    ///
    /// 16-bit GEMV weights are also planned tile-packed (a second copy, read faster in decode) where
    /// all of them can be; KILN_GEMV_TILES=0 in the environment plans one row-major copy.
    Plan(cli::plan_cmd::PlanCmd),
    /// Print a plan file's summary and launch records.
    Inspect(cli::plan_cmd::InspectCmd),
    /// Compare two plan files: regions, arenas, then a unified diff of the dumps.
    Diff(cli::diff::DiffCmd),
    /// Compile the GPU kernels into the kernel cache ahead of time (needs NVRTC, no GPU).
    Kernels(cli::kernels::KernelsCmd),
    /// Write a Hugging Face directory of a known model shape with seeded random weights.
    Synth(kiln::synth::SynthArgs),
    /// The GPU exactness gates: graph vs eager, GPU vs CPU, GPU vs PyTorch, counters.
    Gate(kiln::gate::GateArgs),
    /// Measure decode (or --prefill) speed against the GPU's roofline and PyTorch (GPU machine).
    Bench(kiln::bench::BenchArgs),
}

fn main() {
    let cli = Cli::parse();
    // Diagnostics on stderr: warnings by default; `KILN_LOG=info` adds what load does (kernel
    // compiles, the GEMM algorithm chosen per shape), `KILN_LOG=debug` more.
    let filter = tracing_subscriber::EnvFilter::try_from_env("KILN_LOG").unwrap_or_else(|_| tracing_subscriber::EnvFilter::new("warn"));
    tracing_subscriber::fmt().with_env_filter(filter).with_writer(std::io::stderr).with_target(false).init();
    let result = match &cli.command {
        Command::Run(c) => cli::run::run_main(c),
        Command::Plan(c) => cli::plan_cmd::plan_main(c),
        Command::Inspect(c) => cli::plan_cmd::inspect_main(c),
        Command::Diff(c) => cli::diff::diff_main(c),
        Command::Kernels(c) => cli::kernels::kernels_main(c),
        Command::Synth(c) => kiln::synth::main(c),
        Command::Gate(c) => kiln::gate::main(c),
        Command::Bench(c) => kiln::bench::main(c),
    };
    if let Err(e) = result {
        eprintln!("error: {e:#}");
        std::process::exit(1);
    }
}
