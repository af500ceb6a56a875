//! `loopwatch` command line: `serve`, `scan`, `explain`, `replay`, `check-config`,
//! `inject`, `webhook`.

use std::path::PathBuf;
use std::process::ExitCode;

use clap::{Parser, Subcommand, ValueEnum};

use loopwatch::cli::scan;
use loopwatch::config::{Config, LogFormat};
use loopwatch::engine::report::DetectionRecord;
use loopwatch::engine::Engine;

/// OpenTelemetry sidecar that detects AI-agent tool-call loops.
#[derive(Parser, Debug)]
#[command(name = "loopwatch", version, about, long_about = None)]
struct Cli {
    #[command(subcommand)]
    command: Command,
}

#[derive(Subcommand, Debug)]
enum Command {
    /// Run the sidecar: OTLP receivers → detection → annotation → forwarding, signals, admin API.
    Serve(ServeArgs),
    /// Scan recorded OTLP export requests (.pb / .json / .jsonl files, Collector `file`
    /// exporter output, optionally .gz / .zst; or folders of them) and print loops.
    Scan(ScanArgs),
    /// Explain, run by run, which rule fired on which call and why, or why not (counts
    /// below thresholds, progress, ignored tools): for tuning rules against a recorded trace.
    Explain(ExplainArgs),
    /// Send recorded OTLP export requests to a running loopwatch (or any OTLP/gRPC receiver).
    Replay(ReplayArgs),
    /// Validate a config file (defaults + file + LOOPWATCH_* env) and print the result.
    CheckConfig {
        /// The TOML config file.
        file: PathBuf,
    },
    /// Add loopwatch as a native sidecar to every pod spec of Kubernetes manifests (files or
    /// `-` for stdin; multi-document YAML) and print them: `kubectl get deploy -o yaml |
    /// loopwatch inject - | kubectl apply -f -`.
    Inject(InjectArgs),
    /// Serve the same injection as a Kubernetes mutating admission webhook (HTTPS,
    /// AdmissionReview v1, `POST /mutate`).
    Webhook(WebhookArgs),
}

/// What the injected sidecar is made of.
#[derive(clap::Args, Debug)]
struct SidecarArgs {
    /// loopwatch's container image.
    #[arg(long, default_value = concat!("loopwatch:", env!("CARGO_PKG_VERSION")))]
    image: String,
    /// Downstream OTLP endpoint for loopwatch to forward to (default: the endpoint the
    /// app containers had, else none).
    #[arg(long)]
    exporter_endpoint: Option<String>,
    /// Secret in the pod's namespace with keys `admin-token` and `fingerprint-key`.
    #[arg(long, default_value = "loopwatch")]
    secret: String,
    /// Redis URL for signals, e.g. redis://redis.agents:6379.
    #[arg(long)]
    redis_url: Option<String>,
}

impl SidecarArgs {
    fn options(self) -> loopwatch::cli::inject::InjectOptions {
        loopwatch::cli::inject::InjectOptions {
            image: self.image,
            exporter_endpoint: self.exporter_endpoint,
            secret: self.secret,
            redis_url: self.redis_url,
        }
    }
}

#[derive(clap::Args, Debug)]
struct InjectArgs {
    #[command(flatten)]
    sidecar: SidecarArgs,
    /// Manifest files; `-` (or none) reads stdin.
    paths: Vec<PathBuf>,
}

#[derive(clap::Args, Debug)]
struct WebhookArgs {
    #[command(flatten)]
    sidecar: SidecarArgs,
    /// HTTPS listen address.
    #[arg(long, default_value = "0.0.0.0:8443")]
    listen: std::net::SocketAddr,
    /// PEM certificate chain of the webhook's Service name.
    #[arg(long)]
    tls_cert: PathBuf,
    /// PEM private key of the certificate.
    #[arg(long)]
    tls_key: PathBuf,
}

#[derive(clap::Args, Debug)]
struct ServeArgs {
    /// TOML config file; without one, embedded defaults (detect-only).
    #[arg(long, short, env = "LOOPWATCH_CONFIG")]
    config: Option<PathBuf>,
    /// OTLP/gRPC listen address (receiver.grpc_listen).
    #[arg(long)]
    grpc_listen: Option<String>,
    /// OTLP/HTTP listen address (receiver.http_listen).
    #[arg(long)]
    http_listen: Option<String>,
    /// OTLP/HTTP traces path, e.g. /otlp/v1/traces (receiver.traces_url_path; default
    /// /v1/traces).
    #[arg(long)]
    traces_url_path: Option<String>,
    /// Admin HTTP listen address (admin.listen).
    #[arg(long)]
    admin_listen: Option<String>,
    /// Downstream OTLP/gRPC endpoint, e.g. http://otel-collector:4317 (exporter.endpoint).
    #[arg(long)]
    exporter_endpoint: Option<String>,
    /// Log filter (log.level), e.g. info, debug.
    #[arg(long)]
    log_level: Option<String>,
    /// Log format (log.format).
    #[arg(long, value_enum)]
    log_format: Option<LogFormat>,
}

#[derive(Clone, Copy, Debug, ValueEnum)]
enum OutputFormat {
    Table,
    Json,
}

#[derive(clap::Args, Debug)]
struct ScanArgs {
    /// Output format.
    #[arg(long, value_enum, default_value = "table")]
    format: OutputFormat,
    #[command(flatten)]
    input: RecordedInput,
}

/// What `scan` and `explain` read, and with which config.
#[derive(clap::Args, Debug)]
struct RecordedInput {
    /// Only this profile (default: all profiles).
    #[arg(long)]
    profile: Option<String>,
    /// Config file for profiles, `[[tools]]`, budgets and fingerprinting (default:
    /// embedded defaults).
    #[arg(long, short)]
    config: Option<PathBuf>,
    /// Request files (.pb / .binpb protobuf, .json / .jsonl / .ndjson OTLP/JSON; one request
    /// or several: JSON lines, length-prefixed protobuf; optionally .gz / .zst) or folders
    /// of them; all paths form one stream, files in name order within a folder.
    #[arg(required = true)]
    paths: Vec<PathBuf>,
}

#[derive(Clone, Copy, Debug, ValueEnum)]
enum ExplainFormat {
    Text,
    Json,
}

#[derive(clap::Args, Debug)]
struct ExplainArgs {
    /// Output format.
    #[arg(long, value_enum, default_value = "text")]
    format: ExplainFormat,
    #[command(flatten)]
    input: RecordedInput,
}

#[derive(clap::Args, Debug)]
struct ReplayArgs {
    /// OTLP/gRPC endpoint to send to.
    #[arg(long, default_value = "http://127.0.0.1:4317")]
    endpoint: String,
    /// Pause between requests, e.g. 50ms.
    #[arg(long, default_value = "0ms", value_parser = humantime::parse_duration)]
    delay: std::time::Duration,
    /// Request files or folders (as for scan).
    #[arg(required = true)]
    paths: Vec<PathBuf>,
}

fn main() -> ExitCode {
    let cli = Cli::parse();
    let result = match cli.command {
        Command::Serve(args) => serve(args),
        Command::Scan(args) => run_scan(args),
        Command::Explain(args) => run_explain(args),
        Command::Replay(args) => replay(args),
        Command::CheckConfig { file } => check_config(file),
        Command::Inject(args) => inject(args),
        Command::Webhook(args) => webhook(args),
    };
    match result {
        Ok(()) => ExitCode::SUCCESS,
        Err(e) => {
            eprintln!("loopwatch: error: {e:#}");
            ExitCode::FAILURE
        }
    }
}

/// Fails on a `--profile` that names no profile of `config`.
fn check_profile(config: &Config, profile: Option<&String>) -> anyhow::Result<()> {
    if let Some(profile) = profile {
        let known: Vec<String> = config.profiles()?.into_iter().map(|p| p.name).collect();
        if !known.contains(profile) {
            anyhow::bail!(
                "unknown profile {profile:?}; known profiles: {}",
                known.join(", ")
            );
        }
    }
    Ok(())
}

fn run_explain(args: ExplainArgs) -> anyhow::Result<()> {
    let input = args.input;
    let mut config = Config::load(input.config.as_deref(), &[])?;
    check_profile(&config, input.profile.as_ref())?;
    // Every event of a recorded run is explained: nothing is forgotten or evicted.
    config.registry.max_events_per_run = usize::MAX;
    config.registry.max_runs = usize::MAX;
    let mut engine = Engine::from_config(&config)?;
    // The compared forms of each call (normalised results, commands, effects) are shown.
    engine.keep_forms();
    let files = scan::request_files(&input.paths)?;
    let runs = loopwatch::cli::explain::explain(&engine, &files, input.profile.as_deref())?;
    let text = match args.format {
        ExplainFormat::Json => serde_json::to_string_pretty(&runs)? + "\n",
        ExplainFormat::Text => loopwatch::cli::explain::render_text(&runs),
    };
    write_stdout(&text)?;
    let fired: usize = runs
        .iter()
        .map(|r| {
            let steps: usize = r
                .profiles
                .iter()
                .flat_map(|p| &p.steps)
                .filter(|s| s.fired.is_some())
                .count();
            steps + r.budgets.len()
        })
        .sum();
    let calls: usize = runs.iter().map(|r| r.tool_calls).sum();
    eprintln!(
        "explain: {} run(s), {calls} tool call(s), {fired} rule firing(s) across profiles, from {} file(s)",
        runs.len(),
        files.len()
    );
    Ok(())
}

fn run_scan(args: ScanArgs) -> anyhow::Result<()> {
    let input = args.input;
    let config = Config::load(input.config.as_deref(), &[])?;
    check_profile(&config, input.profile.as_ref())?;
    let engine = Engine::from_config(&config)?;
    let files = scan::request_files(&input.paths)?;
    let outcome = scan::scan(&engine, &files)?;
    let detections: Vec<DetectionRecord> = outcome
        .detections
        .iter()
        .filter(|d| input.profile.as_ref().is_none_or(|p| &d.profile.name == p))
        .map(DetectionRecord::from)
        .collect();
    let text = match args.format {
        OutputFormat::Json => serde_json::to_string_pretty(&detections)? + "\n",
        OutputFormat::Table => scan::render_table(&detections),
    };
    write_stdout(&text)?;
    // The summary last (on stderr: stdout stays the table or JSON alone).
    let kills = detections.iter().filter(|d| d.severity == "kill").count();
    eprintln!(
        "scanned {} request(s), {} span(s), {} agent run(s) with tool calls or model responses: {} detection(s), {kills} at kill severity",
        outcome.requests,
        outcome.spans,
        outcome.runs,
        detections.len()
    );
    Ok(())
}

/// Writes to stdout; a reader that went away (`loopwatch scan … | head`) ends the output
/// quietly instead of panicking as `print!` does.
fn write_stdout(text: &str) -> anyhow::Result<()> {
    use std::io::Write;
    let mut out = std::io::stdout().lock();
    match out.write_all(text.as_bytes()).and_then(|()| out.flush()) {
        Err(e) if e.kind() == std::io::ErrorKind::BrokenPipe => Ok(()),
        result => Ok(result?),
    }
}

fn check_config(file: PathBuf) -> anyhow::Result<()> {
    let (config, problems) = Config::load_with_problems(Some(&file), &[])?;
    for warning in loopwatch::config::env_names::unread_env_key_warnings() {
        eprintln!("warning: {warning}");
    }
    if !problems.is_empty() {
        for problem in &problems {
            eprintln!("error: {problem}");
        }
        anyhow::bail!("{}: {} error(s)", file.display(), problems.len());
    }
    let profiles = config.profiles()?;
    let mut out = format!("{}: ok\n", file.display());
    let summary = format!(
        "check-config: {} is valid: {} profile(s) ({}), {} tool rule(s), {}",
        file.display(),
        profiles.len(),
        profiles
            .iter()
            .map(|p| p.name.as_str())
            .collect::<Vec<_>>()
            .join(", "),
        config.tools.len(),
        match config
            .exporter
            .endpoint
            .as_deref()
            .filter(|e| !e.is_empty())
        {
            Some(endpoint) => format!("forwarding to {endpoint}"),
            None => "detect-only (no exporter.endpoint)".to_string(),
        }
    );
    for p in profiles {
        // every key of the profile, from its one definition
        let settings = toml::Value::try_from(&p)?;
        let keys = settings
            .as_table()
            .map(|t| {
                t.iter()
                    .map(|(k, v)| format!("{k}={v}"))
                    .collect::<Vec<_>>()
                    .join(" ")
            })
            .unwrap_or_default();
        out.push_str(&format!("profile {}: {keys}\n", p.name));
    }
    out.push_str(&summary);
    out.push('\n');
    write_stdout(&out)
}

fn serve(args: ServeArgs) -> anyhow::Result<()> {
    let mut overrides: Vec<(&str, String)> = Vec::new();
    let pairs = [
        ("receiver.grpc_listen", args.grpc_listen),
        ("receiver.http_listen", args.http_listen),
        ("receiver.traces_url_path", args.traces_url_path),
        ("admin.listen", args.admin_listen),
        ("exporter.endpoint", args.exporter_endpoint),
        ("log.level", args.log_level),
        (
            "log.format",
            args.log_format.map(|f| match f {
                LogFormat::Text => "text".to_string(),
                LogFormat::Json => "json".to_string(),
            }),
        ),
    ];
    for (key, value) in pairs {
        if let Some(v) = value {
            overrides.push((key, v));
        }
    }
    let config = Config::load(args.config.as_deref(), &overrides)?;
    let reload = args
        .config
        .clone()
        .map(|file| loopwatch::server::reload::ReloadSource {
            file,
            overrides: overrides
                .iter()
                .map(|(k, v)| (k.to_string(), v.clone()))
                .collect(),
        });
    loopwatch::server::init_logging(&config.log);
    for warning in loopwatch::config::env_names::unread_env_key_warnings() {
        tracing::warn!("{warning}");
    }
    let mut runtime = tokio::runtime::Builder::new_multi_thread();
    if let Some(n) = config.server.worker_threads() {
        runtime.worker_threads(n);
    }
    let runtime = runtime.enable_all().build()?;
    runtime.block_on(async {
        // Registered before the server starts (and says it is listening).
        let shutdown = loopwatch::server::shutdown_signal();
        loopwatch::server::run(config, reload, shutdown).await
    })
}

fn replay(args: ReplayArgs) -> anyhow::Result<()> {
    let files = scan::request_files(&args.paths)?;
    let runtime = tokio::runtime::Runtime::new()?;
    let sent = runtime.block_on(loopwatch::cli::replay::replay(
        &args.endpoint,
        &files,
        args.delay,
    ))?;
    println!(
        "sent {sent} request(s) from {} file(s) to {}",
        files.len(),
        args.endpoint
    );
    Ok(())
}

fn inject(args: InjectArgs) -> anyhow::Result<()> {
    use std::io::Read;
    let mut text = String::new();
    let paths = if args.paths.is_empty() {
        vec![PathBuf::from("-")]
    } else {
        args.paths
    };
    for path in &paths {
        if !text.is_empty() && !text.ends_with('\n') {
            text.push('\n');
        }
        if !text.is_empty() {
            text.push_str("---\n");
        }
        if path.as_os_str() == "-" {
            std::io::stdin().read_to_string(&mut text)?;
        } else {
            text.push_str(
                &std::fs::read_to_string(path)
                    .map_err(|e| anyhow::anyhow!("{}: {e}", path.display()))?,
            );
        }
    }
    let (out, summary) = loopwatch::cli::inject::inject_yaml(&text, &args.sidecar.options())?;
    write_stdout(&out)?;
    eprintln!(
        "loopwatch inject: {} pod spec(s) injected, {} already had loopwatch or opted out, {} other object(s) unchanged",
        summary.injected, summary.skipped, summary.other
    );
    Ok(())
}

fn webhook(args: WebhookArgs) -> anyhow::Result<()> {
    let tls = loopwatch::net::tls::ServerTlsConfig {
        cert_file: Some(args.tls_cert),
        key_file: Some(args.tls_key),
        ..Default::default()
    };
    let runtime = tokio::runtime::Runtime::new()?;
    runtime.block_on(async {
        // SIGTERM (a pod stopping) or SIGINT.
        let shutdown = loopwatch::server::shutdown_signal();
        loopwatch::cli::inject::webhook::serve(args.listen, &tls, args.sidecar.options(), shutdown)
            .await
    })
}
