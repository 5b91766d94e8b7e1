//! `agenthooks-dispatcher`: serve decisions (standalone on a hooks file, or synced from
//! the operator), `check` one event against a hooks file, drive a budget with
//! `budget-load` (e2e tests), or run command hooks for a dispatcher as its
//! `command-runner` (CONTRACT §10.1), or stand in as an agent runtime's hook command
//! (`hook`, [`agenthooks_dispatcher::shim`]).
//!
//! Exit codes of `check`: 0 allow, 2 block, 3 ask, 1 error (bad hooks, bad event). Of
//! `test` (policy test suites, docs/policy-tests.md): 0 every case passed, 1 a case
//! failed or errored, 2 bad input (a test file, its hooks or its events; nothing ran).
//! Of `budget-load`: 0 once it ran (refusals and settle errors are in its JSON line), 1
//! when it could not run (bad flags).

use std::net::SocketAddr;
use std::path::PathBuf;
use std::process::ExitCode;

use agenthooks_crds::sealed::SealKey;
use agenthooks_crds::{DEFAULT_MASTER_NAMESPACE, Edition};
use std::sync::Arc;
use std::time::Duration;

use agenthooks_dispatcher::audit::sink::AuditSink;
use agenthooks_dispatcher::budget::local::LocalLedger;
use agenthooks_dispatcher::budget::remote::{RemoteBudgets, RemoteConfig};
use agenthooks_dispatcher::budget::{Budgets, load};
use agenthooks_dispatcher::chain::{Verdict, decide_in_place};
use agenthooks_dispatcher::event::Event;
use agenthooks_dispatcher::handlers::http::HttpCaller;
use agenthooks_dispatcher::handlers::prompt::PromptEvaluator;
use agenthooks_dispatcher::handlers::prompt::config::ProvidersConfig;
use agenthooks_dispatcher::identity::Authenticator;
use agenthooks_dispatcher::metrics::Metrics;
use agenthooks_dispatcher::operator_token::OperatorToken;
use agenthooks_dispatcher::operator_urls::OperatorUrls;
use agenthooks_dispatcher::report::sender::{self, ReporterConfig};
use agenthooks_dispatcher::runner::Engine;
use agenthooks_dispatcher::sandbox::CommandRunner;
use agenthooks_dispatcher::sandbox::local::LocalConfig;
use agenthooks_dispatcher::sandbox::server::{self, ServerConfig};
use agenthooks_dispatcher::sandbox::uids::UidPool;
use agenthooks_dispatcher::server::admin::AdminToken;
use agenthooks_dispatcher::server::{AppState, router};
use agenthooks_dispatcher::{audit, manifests, sync, telemetry};
use anyhow::{Context, bail};
use clap::{Args, Parser, Subcommand};
use tokio_util::sync::CancellationToken;

#[derive(Parser)]
#[command(
    name = "agenthooks-dispatcher",
    version,
    about = "Lifecycle hooks for LLM agents: the decision service"
)]
#[command(args_conflicts_with_subcommands = true)]
struct Cli {
    #[command(subcommand)]
    command: Option<Command>,
    #[command(flatten)]
    serve: ServeArgs,
}

#[derive(Subcommand)]
enum Command {
    /// Prints the decision for one event as JSON (with --dialect: a runtime's payload, and
    /// the answer that runtime would get); exit 0 allow, 2 block, 3 ask, 1 error.
    Check(CheckArgs),
    /// Runs policy test suites (AgentHookTest files; docs/policy-tests.md): each case's
    /// event through the dispatch chain on the file's hooks, with http and prompt handlers
    /// answered by the file's stubs, against its expected decision. Prints a table; exit
    /// 0 when every case passes, 1 when one fails or errors, 2 on bad input (nothing runs).
    Test(TestArgs),
    /// Runs N reserve -> hold -> settle cycles against the operator's budget endpoints
    /// (the same code handlers use) and prints one JSON line: {"granted", "refused",
    /// "refusedReasons", "settledTokens", "errors"}. For load and e2e tests.
    BudgetLoad(BudgetLoadArgs),
    /// Runs command hooks for a dispatcher over a Unix socket (CONTRACT §10.1): one run
    /// per connection, each under a supervisor that ends its whole process tree, in a
    /// private directory, with its limits checked here. Meant for a second container of
    /// the dispatcher Pod, with no secrets and another uid.
    #[command(name = "command-runner")]
    Runner(CommandRunnerArgs),
    /// The hook command of an agent runtime: reads the runtime's hook payload on stdin,
    /// asks the dispatcher's native route (POST <url>/v1/hooks/<dialect>) and prints its
    /// answer (exit 0). Any failure — unreachable, past --timeout-seconds, a non-2xx
    /// answer — prints the reason to stderr and exits 2, which every runtime reads as a
    /// refusal.
    Hook(HookArgs),
    /// Times the decision for one event on your hooks, without running their handlers:
    /// which hooks the event selects, then mean, p50 and p99 per decision and heap
    /// allocations per decision (resolution, matchers, toolKinds, ifExpr; the `opa bench`
    /// idea), and how long the hooks took to load.
    Bench(BenchArgs),
    /// Prints the OpenAPI 3.1 document of the HTTP API (what `GET /openapi.json`
    /// serves); `--write` writes it to docs/openapi.json under the current directory (the
    /// workspace root) instead.
    Openapi(OpenapiArgs),
}

#[derive(Args)]
struct TestArgs {
    /// Test files, or directories searched recursively for them (names ending in
    /// _test.yaml, -test.yaml, _test.yml or -test.yml).
    #[arg(required = true, value_name = "PATH")]
    paths: Vec<PathBuf>,
    /// Also write the results as JUnit XML to FILE (one testsuite per test file).
    #[arg(long, value_name = "FILE")]
    junit: Option<PathBuf>,
    /// Let http and prompt hooks with no stub run for real (the network; prompt hooks
    /// need --providers-file). Without it such a hook, once a case reaches it, makes the
    /// case an error that names it.
    #[arg(long)]
    allow_network: bool,
    #[command(flatten)]
    common: Common,
}

/// Exit code of `test` for bad input: a test file, its hooks or its events.
const EXIT_TEST_BAD_INPUT: u8 = 2;

/// `agenthooks-dispatcher test`: loads and checks every file first (any error: exit 2,
/// nothing runs), then runs their cases in order and reports.
async fn policy_test(args: TestArgs) -> ExitCode {
    use agenthooks_dispatcher::suite::{self, report};
    let files = match suite::test_files(&args.paths) {
        Ok(f) => f,
        Err(e) => {
            eprintln!("error: {e}");
            return ExitCode::from(EXIT_TEST_BAD_INPUT);
        }
    };
    let mut suites = Vec::with_capacity(files.len());
    let mut bad = false;
    for f in &files {
        match suite::load(f, &args.common.master_namespace, args.common.edition) {
            Ok(s) => {
                if let Some(w) = s.loaded.unlabelled_warning() {
                    eprintln!("warning: {}: {w}", f.display());
                }
                suites.push(s);
            }
            Err(e) => {
                eprintln!("error: {e}");
                bad = true;
            }
        }
    }
    if bad {
        return ExitCode::from(EXIT_TEST_BAD_INPUT);
    }
    let mut results = Vec::with_capacity(suites.len());
    for mut s in suites {
        let engine = match test_engine(&args.common, &mut s) {
            Ok(e) => e,
            Err(e) => {
                eprintln!("error: {}: {e:#}", s.path.display());
                return ExitCode::from(EXIT_TEST_BAD_INPUT);
            }
        };
        let mut cases = Vec::with_capacity(s.cases.len());
        for case in &s.cases {
            cases.push(suite::run_case(&engine, &s, case, args.allow_network).await);
        }
        results.push(report::FileResults {
            path: s.path.display().to_string(),
            name: s.name.clone(),
            cases,
        });
    }
    print!("{}", report::table(&results));
    if let Some(path) = &args.junit
        && let Err(e) = std::fs::write(path, report::junit(&results))
    {
        eprintln!("error: --junit {}: {e}", path.display());
        return ExitCode::FAILURE;
    }
    let counts = report::Counts::of(results.iter().flat_map(|f| &f.cases));
    if counts.all_passed() {
        ExitCode::SUCCESS
    } else {
        ExitCode::FAILURE
    }
}

/// The engine of one test file, as `check` builds it: its seal key, the flags' edition,
/// http allow-list and providers file, and the file's budgets (fresh: used 0).
fn test_engine(
    common: &Common,
    suite: &mut agenthooks_dispatcher::suite::Suite,
) -> anyhow::Result<Engine> {
    let mut engine = Engine::new(
        HttpCaller::new(common.http_allow_cidr.clone()),
        common.edition,
        suite.seal_key.clone(),
    );
    engine.prompt = prompt_evaluator(common)?;
    engine.budgets = Budgets::local(
        LocalLedger::new(std::mem::take(&mut suite.loaded.budgets))?,
        None,
    );
    Ok(engine)
}

#[derive(Args)]
struct BenchArgs {
    /// AgentHook manifests (file, multi-document file, or directory).
    #[arg(long)]
    hooks: PathBuf,
    /// The event, as the JSON body of POST /v1/dispatch.
    #[arg(long)]
    event: PathBuf,
    /// Seconds to keep deciding.
    #[arg(long, default_value_t = 2.0)]
    seconds: f64,
    /// Fewest decisions, however long they take.
    #[arg(long, default_value_t = 1000)]
    min_decisions: u64,
    #[command(flatten)]
    common: Common,
}

/// Heap allocations, counted while `agenthooks-dispatcher bench` measures.
static ALLOCATIONS: agenthooks_dispatcher::plan::bench::AllocCounter =
    agenthooks_dispatcher::plan::bench::AllocCounter::new();

struct CountingAlloc;

// SAFETY: every call is forwarded unchanged to the system allocator.
unsafe impl std::alloc::GlobalAlloc for CountingAlloc {
    unsafe fn alloc(&self, layout: std::alloc::Layout) -> *mut u8 {
        ALLOCATIONS.record();
        unsafe { std::alloc::System.alloc(layout) }
    }
    unsafe fn dealloc(&self, ptr: *mut u8, layout: std::alloc::Layout) {
        unsafe { std::alloc::System.dealloc(ptr, layout) }
    }
    unsafe fn alloc_zeroed(&self, layout: std::alloc::Layout) -> *mut u8 {
        ALLOCATIONS.record();
        unsafe { std::alloc::System.alloc_zeroed(layout) }
    }
    unsafe fn realloc(&self, ptr: *mut u8, layout: std::alloc::Layout, new: usize) -> *mut u8 {
        ALLOCATIONS.record();
        unsafe { std::alloc::System.realloc(ptr, layout, new) }
    }
}

#[global_allocator]
static GLOBAL: CountingAlloc = CountingAlloc;

fn bench(args: BenchArgs) -> anyhow::Result<()> {
    let started = std::time::Instant::now();
    let (loaded, _key) = load_offline(&args.hooks, &args.common)?;
    let load = started.elapsed();
    let set = loaded.hooks;
    let body = read_event(&args.event)?;
    let event =
        Event::parse(&body).map_err(|e| anyhow::anyhow!("{}: {e}", args.event.display()))?;
    // Parsing, as POST /v1/dispatch does it, is timed apart (a mean over 1,000).
    let parse_started = std::time::Instant::now();
    for _ in 0..1_000 {
        let _ = std::hint::black_box(Event::parse(std::hint::black_box(&body)));
    }
    let parse = parse_started.elapsed() / 1_000;
    if !args.seconds.is_finite() || args.seconds < 0.0 {
        bail!("--seconds: {} is not a duration in seconds", args.seconds);
    }
    println!(
        "hooks: {} loaded in {:.1} ms ({} unavailable), resident memory {}; event {} of tenant {:?}, tool {:?}, {} bytes parsed in {:.2} µs (mean)",
        set.len(),
        load.as_secs_f64() * 1e3,
        set.unavailable().len(),
        resident_memory().unwrap_or_else(|| "unknown".into()),
        event.event,
        event.tenant_id,
        event.tool().unwrap_or(""),
        body.len(),
        parse.as_secs_f64() * 1e6,
    );
    let report = agenthooks_dispatcher::plan::bench::run(
        &set,
        &event,
        std::time::Duration::from_secs_f64(args.seconds),
        args.min_decisions.max(1),
        Some(&ALLOCATIONS),
    );
    println!("{report}");
    Ok(())
}

/// This process's resident memory (`VmRSS` of /proc/self/status), e.g. `48.2 MiB`.
fn resident_memory() -> Option<String> {
    let status = std::fs::read_to_string("/proc/self/status").ok()?;
    let kib: f64 = status
        .lines()
        .find_map(|l| l.strip_prefix("VmRSS:"))?
        .trim()
        .trim_end_matches("kB")
        .trim()
        .parse()
        .ok()?;
    Some(format!("{:.1} MiB", kib / 1024.0))
}

#[derive(Args)]
struct OpenapiArgs {
    /// Write docs/openapi.json instead of printing.
    #[arg(long)]
    write: bool,
}

#[derive(Args)]
struct HookArgs {
    /// The runtime's dialect: claude-code, codex, gemini-cli, cursor, copilot.
    #[arg(long, value_parser = parse_dialect)]
    dialect: agenthooks_dispatcher::dialect::Dialect,
    /// The dispatcher's base URL, e.g. http://127.0.0.1:8080.
    #[arg(long)]
    url: String,
    /// File holding the caller's token (default: the AGENTHOOKS_TOKEN environment
    /// variable; neither: no credential).
    #[arg(long, value_name = "PATH")]
    token_file: Option<PathBuf>,
    /// The runtime's event name, for payloads that carry none (Copilot's camelCase hooks:
    /// preToolUse, userPromptSubmitted, …).
    #[arg(long)]
    event: Option<String>,
    /// Our name for the agent (what `scope: agent` hooks select); its sub-agents keep it.
    #[arg(long)]
    agent_id: Option<String>,
    /// The tenant, for a caller that may act for several.
    #[arg(long)]
    tenant_id: Option<String>,
    /// Deadline of the whole call, in seconds; keep the runtime's own hook timeout above it.
    #[arg(long, default_value_t = agenthooks_dispatcher::shim::DEFAULT_TIMEOUT_SECONDS, value_parser = clap::value_parser!(u64).range(1..=600))]
    timeout_seconds: u64,
    /// CA bundle an https dispatcher's certificate must chain to.
    #[arg(long, value_name = "PATH")]
    ca_file: Option<PathBuf>,
}

fn parse_dialect(s: &str) -> Result<agenthooks_dispatcher::dialect::Dialect, String> {
    use agenthooks_dispatcher::dialect::Dialect;
    Dialect::parse(s).ok_or_else(|| {
        let known: Vec<&str> = Dialect::ALL.iter().map(|d| d.as_str()).collect();
        format!("one of {}", known.join(", "))
    })
}

#[derive(Args)]
struct CommandRunnerArgs {
    /// The Unix socket to listen on (created mode 0660; a stale socket is replaced).
    #[arg(long, value_name = "PATH")]
    socket: PathBuf,
    /// Parent of the runs' private directories (default: $TMPDIR or /tmp).
    #[arg(long, value_name = "PATH")]
    tmp_dir: Option<PathBuf>,
    /// Runs in flight at most; past it a run is refused at once (runner_unavailable).
    #[arg(long, default_value_t = 64, value_parser = clap::value_parser!(u64).range(1..=4096))]
    max_runs: u64,
    /// When the runner is root: runs switch to uids (and gids) UID, UID+1, …,
    /// UID+max-runs-1 before `sh` starts, one per run in flight, so no two runs share a
    /// uid; each is swept (every process of it killed) before it is used again. Required
    /// when running as root, so no hook ever runs as root.
    #[arg(long, value_name = "UID")]
    run_as_uid: Option<u32>,
}

#[derive(Args)]
struct BudgetLoadArgs {
    /// The operator's sync URL; repeat it or separate URLs by commas (tried in order).
    #[arg(long, required = true, value_delimiter = ',')]
    operator_url: Vec<String>,
    /// Id reported to the operator (default: the identity in the token's claims, which
    /// the operator requires).
    #[arg(long)]
    dispatcher_id: Option<String>,
    /// Tenant whose budget is charged.
    #[arg(long)]
    tenant: String,
    /// Cycles in all.
    #[arg(long)]
    calls: usize,
    /// Cycles in flight at most.
    #[arg(long, default_value_t = 1)]
    concurrency: usize,
    /// Tokens reserved per cycle (> 0).
    #[arg(long)]
    reserve: i64,
    /// Tokens settled per granted cycle (>= 0).
    #[arg(long)]
    settle: i64,
    /// Milliseconds between a grant and its settle.
    #[arg(long, default_value_t = 0)]
    hold_ms: u64,
    /// This client's ServiceAccount token for the audience agenthooks.io/sync (sent on
    /// every call; the operator verifies it with a TokenReview and RBAC).
    #[arg(long, value_name = "PATH", env = "AGENTHOOKS_OPERATOR_TOKEN_FILE")]
    operator_token_file: PathBuf,
    #[command(flatten)]
    operator_tls: OperatorTlsArgs,
}

/// How the operator is reached (CONTRACT §9.4): `https://` URLs need a CA bundle;
/// `http://` only to loopback unless the lab escape is given.
#[derive(Args, Clone)]
struct OperatorTlsArgs {
    /// PEM bundle of the CA that must sign the operator's certificate (e.g. the sync
    /// Secret's ca.crt). Needed by https:// operator URLs; trusted alone for them (not
    /// the system roots), and the URL's host must be in the certificate.
    #[arg(long, value_name = "PATH", env = "AGENTHOOKS_OPERATOR_CA_FILE")]
    operator_ca_file: Option<PathBuf>,
    /// Lab only: allow http:// operator URLs to hosts that are not loopback. Snapshots
    /// (sealed headers included) and reports then cross the network in the clear and the
    /// operator is not verified. Without it such a URL fails start-up.
    #[arg(long)]
    insecure_operator_http: bool,
}

impl OperatorTlsArgs {
    /// `urls` with the transport rule applied and the CA bundle loaded.
    fn secure(&self, urls: OperatorUrls) -> anyhow::Result<OperatorUrls> {
        Ok(urls.secure(
            self.operator_ca_file.as_deref(),
            self.insecure_operator_http,
        )?)
    }
}

#[derive(Args, Clone)]
struct Common {
    /// lite runs command hooks; standard never does.
    #[arg(long, default_value = "lite", env = "AGENTHOOKS_EDITION")]
    edition: Edition,
    /// Namespace whose hooks may be global and may rewrite input.
    #[arg(long, default_value = DEFAULT_MASTER_NAMESPACE)]
    master_namespace: String,
    /// CIDR that http hooks may reach despite the SSRF guard (repeatable).
    #[arg(long = "http-allow-cidr", value_name = "CIDR")]
    http_allow_cidr: Vec<ipnet::IpNet>,
    /// Prompt hooks: the providers file (YAML: providers [{name, kind: openai|anthropic,
    /// baseUrl, apiKeyFile}], models {alias: {provider, model}}, defaultModel). Without
    /// it every prompt hook blocks.
    #[arg(long, value_name = "PATH", env = "AGENTHOOKS_PROVIDERS_FILE")]
    providers_file: Option<PathBuf>,
}

/// The prompt handler of `--providers-file`, or an unconfigured one.
fn prompt_evaluator(common: &Common) -> anyhow::Result<PromptEvaluator> {
    match &common.providers_file {
        None => Ok(PromptEvaluator::unconfigured()),
        Some(p) => {
            let config = ProvidersConfig::load(p)?;
            tracing::info!(
                file = %p.display(),
                providers = config.providers.len(),
                models = config.models.len(),
                default_model = config.default_model.as_deref().unwrap_or(""),
                "prompt providers loaded"
            );
            Ok(PromptEvaluator::new(config))
        }
    }
}

#[derive(Args)]
struct ServeArgs {
    /// Standalone mode: AgentHook manifests (file, multi-document file, or directory).
    #[arg(long, conflicts_with = "operator_url")]
    hooks: Option<PathBuf>,
    /// Synced mode: the operator's sync URL, e.g. http://127.0.0.1:9090. Repeat it or
    /// separate URLs by commas (one per operator replica, or one Service): every call
    /// tries them in order, sticking with the one that last answered.
    #[arg(long, value_delimiter = ',', env = "AGENTHOOKS_OPERATOR_URL")]
    operator_url: Vec<String>,
    /// Synced mode: milliseconds between execution-count reports to the operator
    /// (breaker trips are sent at once).
    #[arg(long, default_value_t = 1000, value_parser = clap::value_parser!(u64).range(50..=600_000))]
    report_interval_ms: u64,
    /// Address to listen on.
    #[arg(long, default_value = "127.0.0.1:8080")]
    listen: SocketAddr,
    /// PEM certificate chain of the dispatch port. With --tls-key-file the port serves
    /// HTTPS; the files are re-read every 10 s and a new valid pair is served from the
    /// next connection on (a bad one is logged and the previous pair kept).
    #[arg(long, value_name = "PATH", env = "AGENTHOOKS_TLS_CERT_FILE")]
    tls_cert_file: Option<PathBuf>,
    /// PEM private key of --tls-cert-file.
    #[arg(long, value_name = "PATH", env = "AGENTHOOKS_TLS_KEY_FILE")]
    tls_key_file: Option<PathBuf>,
    #[command(flatten)]
    operator_tls: OperatorTlsArgs,
    /// Requests the port serves at once (CONTRACT §10.2); past it a request is answered
    /// 503 at once, not queued (callers treat 503 as block), and counted in
    /// `agenthooks_requests_shed_total`. `/healthz` and `/metrics` are not limited.
    #[arg(long, env = "AGENTHOOKS_MAX_CONCURRENT_REQUESTS",
          default_value_t = agenthooks_dispatcher::server::DEFAULT_MAX_CONCURRENT_REQUESTS,
          value_parser = clap::builder::RangedU64ValueParser::<usize>::new().range(1..=1_000_000))]
    max_concurrent_requests: usize,
    /// Stop control's bound (issue 16): how many times a session's `stop` (and, apart,
    /// `subagent_stop`) may be refused by `blocking: true` hooks since its last prompt;
    /// past it stopping is allowed. 0 lets every stop through.
    #[arg(long, env = "AGENTHOOKS_STOP_BLOCK_LIMIT",
          default_value_t = agenthooks_dispatcher::stops::DEFAULT_STOP_BLOCK_LIMIT)]
    stop_block_limit: u32,
    /// Key shared with the operator for sealed header values (32 bytes or 64 hex).
    #[arg(long)]
    seal_key_file: Option<PathBuf>,
    /// Synced mode: this dispatcher's projected ServiceAccount token for the audience
    /// agenthooks.io/sync, sent on every call to the operator (which verifies it with a
    /// TokenReview and RBAC create on agenthooks/sync). Read again at most every 30 s, as
    /// the kubelet rotates it. Required in synced mode.
    #[arg(long, value_name = "PATH", env = "AGENTHOOKS_OPERATOR_TOKEN_FILE")]
    operator_token_file: Option<PathBuf>,
    /// Id reported to the operator (default: the identity in the operator token's claims,
    /// NAMESPACE/POD or NAMESPACE/SERVICEACCOUNT; the operator refuses any other).
    #[arg(long)]
    dispatcher_id: Option<String>,
    /// Standalone mode only: file holding the admin bearer token (at least 16 printable
    /// characters), needed by `POST /v1/test` (dry runs) and `GET /v1/executions[/{id}]`
    /// (audit history and decrypted error detail), which are refused (403) without it.
    /// Refused with --kubernetes-callers, where Kubernetes RBAC authorizes them.
    #[arg(long, value_name = "PATH", env = "AGENTHOOKS_ADMIN_TOKEN_FILE")]
    admin_token_file: Option<PathBuf>,
    /// Where command hooks run: `unix:PATH`, the socket of a `command-runner` (in a
    /// cluster: the runner container of this Pod). Without it they run here, under the
    /// same per-run supervisor (standalone).
    #[arg(long, value_name = "unix:PATH", env = "AGENTHOOKS_COMMAND_RUNNER")]
    command_runner: Option<CommandRunner>,
    /// Seconds between SIGTERM and closing the port, while `/readyz` answers 503
    /// (`draining`) and decisions are still served: time for the Service's endpoints to
    /// drop this process before it stops accepting (in a cluster, a few seconds; the
    /// Pod's terminationGracePeriodSeconds must cover it). A second SIGTERM or SIGINT cuts
    /// it short.
    #[arg(long, default_value_t = 0, value_parser = clap::value_parser!(u64).range(0..=300))]
    shutdown_delay_seconds: u64,
    #[command(flatten)]
    common: Common,
    #[command(flatten)]
    audit: AuditArgs,
    #[command(flatten)]
    callers: CallerArgs,
    #[command(flatten)]
    kube_callers: KubeCallerArgs,
}

/// Who may call `/v1/dispatch` (CONTRACT §9.1): exactly one of the three.
#[derive(Args)]
#[group(required = true, multiple = false)]
struct CallerArgs {
    /// Standalone: the callers, by the sha256 of their bearer token, and the tenants each
    /// may act for (YAML: callers [{name, tokenSha256, tenants}]; docs/callers.md).
    #[arg(long, value_name = "PATH", env = "AGENTHOOKS_CALLERS_FILE")]
    callers_file: Option<PathBuf>,
    /// In a cluster: callers send a projected ServiceAccount token (audience
    /// --caller-audience), verified by TokenReview; a caller acts for its namespace's
    /// tenant, or for another tenant whose namespace RBAC lets it `create`
    /// `agenthooks/dispatch` in (SubjectAccessReview). Audit history and dry runs are
    /// authorized the same way, by RBAC on `agenthooks/executions` (get, list) and
    /// `agenthooks/test` (create) in the namespace they touch, never by
    /// --admin-token-file. Uses the in-cluster config or KUBECONFIG.
    #[arg(long)]
    kubernetes_callers: bool,
    /// No authentication at all: anyone may call, for any tenant. For local experiments
    /// only; said at start and in /readyz.
    #[arg(long)]
    allow_anonymous: bool,
}

/// Tuning of `--kubernetes-callers`.
#[derive(Args)]
struct KubeCallerArgs {
    /// The audience callers' projected tokens must be for.
    #[arg(long, default_value = agenthooks_dispatcher::identity::kubernetes::DEFAULT_AUDIENCE)]
    caller_audience: String,
    /// Seconds a verified token is trusted before it is reviewed again (never past its
    /// own expiry).
    #[arg(long, default_value_t = 120, value_parser = clap::value_parser!(u64).range(0..=3600))]
    caller_token_cache_seconds: u64,
    /// Seconds an RBAC "allowed" is kept: revoking a RoleBinding takes effect within it.
    #[arg(long, default_value_t = 60, value_parser = clap::value_parser!(u64).range(0..=3600))]
    caller_access_cache_seconds: u64,
    /// Seconds a refused token or an RBAC "denied" is kept.
    #[arg(long, default_value_t = 10, value_parser = clap::value_parser!(u64).range(0..=3600))]
    caller_denied_cache_seconds: u64,
}

/// The audit trail: one `hook_executions` row per hook run (CONTRACT §7; issue 5).
#[derive(Args)]
struct AuditArgs {
    /// Audit database: `sqlite://PATH` (the default is a file in the working directory),
    /// `postgres://USER:PASSWORD@HOST:PORT/DB`, or `off` (no rows at all).
    #[arg(long, value_name = "URL", env = "AGENTHOOKS_AUDIT_DB", hide_env_values = true,
          default_value = audit::flags::DEFAULT_AUDIT_DB)]
    audit_db: String,
    /// AES-256-GCM key for `error_detail` (32 raw bytes or 64 hex characters), as
    /// `[ID=]PATH` (ID defaults to the file's name). Repeatable: the first seals new
    /// rows, the others only open old ones (rotation). Without any, no error detail is
    /// stored.
    #[arg(
        long = "audit-key-file",
        value_name = "[ID=]PATH",
        env = "AGENTHOOKS_AUDIT_KEY_FILES",
        value_delimiter = ','
    )]
    audit_key_file: Vec<String>,
    /// Where rows wait on disk while the database is unreachable (default: next to a
    /// SQLite file, `NAME.spool/`; else `agenthooks-audit.spool/` in the working directory).
    #[arg(long, value_name = "PATH", env = "AGENTHOOKS_AUDIT_SPOOL_DIR")]
    audit_spool_dir: Option<PathBuf>,
    /// Bound of the spool: bytes, or with a suffix Ki, Mi, Gi (at least 64Ki). Past it,
    /// rows are dropped, counted and logged, and /readyz says degraded.
    #[arg(long, value_name = "BYTES", default_value = "256Mi",
          value_parser = audit::flags::parse_byte_size)]
    audit_spool_max_bytes: u64,
}

/// Most time the shutdown gives the audit writer to flush its queue (to the database,
/// or to the spool when it does not answer).
const AUDIT_FLUSH_DEADLINE: Duration = Duration::from_secs(10);

/// The audit sink of the flags: connects (or, for PostgreSQL that does not answer,
/// spools and keeps trying) and starts the writer; disabled for `--audit-db off`.
async fn start_audit(args: &AuditArgs, metrics: &Metrics) -> anyhow::Result<AuditSink> {
    if args
        .audit_db
        .trim()
        .eq_ignore_ascii_case(audit::flags::AUDIT_OFF)
    {
        if !args.audit_key_file.is_empty() {
            tracing::warn!("--audit-key-file is ignored: the audit trail is off");
        }
        tracing::warn!("audit trail off (--audit-db off): hook runs leave no hook_executions rows");
        return Ok(AuditSink::disabled());
    }
    let keys = audit::flags::load_keys(&args.audit_key_file)?;
    match &keys {
        Some(k) => tracing::info!(
            current_key = k.current().id(),
            keys = args.audit_key_file.len(),
            "audit: error_detail sealed with AES-256-GCM"
        ),
        None => tracing::info!(
            "audit: no --audit-key-file, so no error_detail is stored (the error column keeps the redacted summary)"
        ),
    }
    let spool_dir = args
        .audit_spool_dir
        .clone()
        .unwrap_or_else(|| audit::flags::default_spool_dir(&args.audit_db));
    let config = audit::writer::AuditConfig {
        url: args.audit_db.trim().to_owned(),
        keys,
        spool_dir,
        spool_max_bytes: args.audit_spool_max_bytes,
        writer: audit::writer::WriterConfig::default(),
    };
    Ok(audit::writer::start(config, metrics).await?)
}

#[derive(Args)]
struct CheckArgs {
    /// AgentHook manifests (file, multi-document file, or directory).
    #[arg(long)]
    hooks: PathBuf,
    /// The event, as the JSON body of POST /v1/dispatch (or, with --dialect, the runtime's
    /// own hook payload).
    #[arg(long)]
    event: PathBuf,
    /// Read --event as this runtime's hook payload (claude-code, codex, gemini-cli, cursor,
    /// copilot) and print the answer the runtime would get, as POST /v1/hooks/<dialect>.
    #[arg(long, value_parser = parse_dialect)]
    dialect: Option<agenthooks_dispatcher::dialect::Dialect>,
    /// With --dialect: the runtime's event name, for payloads that carry none (Copilot's
    /// camelCase hooks).
    #[arg(long, requires = "dialect")]
    native_event: Option<String>,
    /// With --dialect: the tenant of the call (a runtime's payload names none).
    #[arg(long, requires = "dialect")]
    tenant_id: Option<String>,
    #[command(flatten)]
    common: Common,
}

fn main() -> ExitCode {
    let cli = match Cli::try_parse() {
        Ok(cli) => cli,
        // A shim with bad flags refuses: exit 2, never clap's usual 2-or-0 by accident.
        Err(e) if is_hook_invocation() && e.use_stderr() => {
            eprintln!("agenthooks: refused: {e}");
            return ExitCode::from(agenthooks_dispatcher::shim::EXIT_REFUSED);
        }
        Err(e) => e.exit(),
    };
    let command = match cli.command {
        Some(Command::Hook(args)) => return hook(args),
        Some(Command::Openapi(args)) => return openapi(args),
        Some(Command::Bench(args)) => {
            return match bench(args) {
                Ok(()) => ExitCode::SUCCESS,
                Err(e) => {
                    eprintln!("error: {e:#}");
                    ExitCode::FAILURE
                }
            };
        }
        other => other,
    };
    // A test run's stdout is its table: only warnings go to stderr unless RUST_LOG says.
    let default_filter = match &command {
        Some(Command::Test(_)) => "warn",
        _ => "info",
    };
    tracing_subscriber::fmt()
        .with_env_filter(
            tracing_subscriber::EnvFilter::try_from_default_env()
                .unwrap_or_else(|_| default_filter.into()),
        )
        .with_writer(std::io::stderr)
        .init();
    let runtime = tokio::runtime::Builder::new_multi_thread()
        .enable_all()
        .build()
        .expect("a tokio runtime");
    match command {
        Some(Command::Hook(_) | Command::Openapi(_) | Command::Bench(_)) => {
            unreachable!("answered above")
        }
        Some(Command::BudgetLoad(args)) => match runtime.block_on(budget_load(args)) {
            Ok(()) => ExitCode::SUCCESS,
            Err(e) => {
                eprintln!("error: {e:#}");
                ExitCode::from(1)
            }
        },
        Some(Command::Runner(args)) => match runtime.block_on(command_runner(args)) {
            Ok(()) => ExitCode::SUCCESS,
            Err(e) => {
                eprintln!("error: {e:#}");
                ExitCode::from(1)
            }
        },
        Some(Command::Test(args)) => runtime.block_on(policy_test(args)),
        Some(Command::Check(args)) => match runtime.block_on(check(args)) {
            Ok(Verdict::Allow) => ExitCode::from(0),
            Ok(Verdict::Block) => ExitCode::from(2),
            Ok(Verdict::Ask) => ExitCode::from(3),
            Err(e) => {
                eprintln!("error: {e:#}");
                ExitCode::from(1)
            }
        },
        None => match runtime.block_on(serve(cli.serve)) {
            Ok(()) => ExitCode::SUCCESS,
            Err(e) => {
                eprintln!("error: {e:#}");
                ExitCode::from(1)
            }
        },
    }
}

/// `agenthooks-dispatcher openapi [--write]`.
fn openapi(args: OpenapiArgs) -> ExitCode {
    use agenthooks_dispatcher::server::openapi;
    let text = openapi::text();
    if !args.write {
        print!("{text}");
        return ExitCode::SUCCESS;
    }
    match std::fs::write(openapi::COMMITTED_PATH, text) {
        Ok(()) => {
            eprintln!("wrote {}", openapi::COMMITTED_PATH);
            ExitCode::SUCCESS
        }
        Err(e) => {
            eprintln!(
                "error: write {} (run from the workspace root): {e}",
                openapi::COMMITTED_PATH
            );
            ExitCode::from(1)
        }
    }
}

/// Whether the binary was started as `agenthooks-dispatcher hook …`.
fn is_hook_invocation() -> bool {
    std::env::args().nth(1).as_deref() == Some("hook")
}

/// The shim ([`agenthooks_dispatcher::shim`]): no logging (stdout is the runtime's, stderr
/// carries only a refusal's reason), a current-thread runtime (it starts in a few
/// milliseconds), exit 2 on any failure.
fn hook(args: HookArgs) -> ExitCode {
    use agenthooks_dispatcher::shim::{self, EXIT_REFUSED, ShimConfig, TOKEN_ENV};
    use std::io::{Read, Write};
    let refuse = |e: &dyn std::fmt::Display| {
        eprintln!("agenthooks: refused: {e}");
        ExitCode::from(EXIT_REFUSED)
    };
    let token = match &args.token_file {
        Some(path) => match shim::read_token(path) {
            Ok(t) => Some(t),
            Err(e) => return refuse(&e),
        },
        None => std::env::var(TOKEN_ENV)
            .ok()
            .filter(|t| !t.trim().is_empty()),
    };
    // The deadline covers the whole call, reading stdin included: a runtime that kills a
    // slow hook lets the call through (Codex, Gemini), so the shim must refuse first.
    let timeout = Duration::from_secs(args.timeout_seconds);
    let started = std::time::Instant::now();
    let (sent, received) = std::sync::mpsc::channel();
    std::thread::spawn(move || {
        let mut payload = Vec::new();
        let cap = agenthooks_dispatcher::event::MAX_BODY_BYTES as u64 + 1;
        let read = std::io::stdin()
            .take(cap)
            .read_to_end(&mut payload)
            .map(|_| payload);
        let _ = sent.send(read);
    });
    let payload = match received.recv_timeout(timeout) {
        Ok(Ok(payload)) => payload,
        Ok(Err(e)) => return refuse(&format!("stdin: {e}")),
        Err(_) => {
            return refuse(&format!(
                "stdin: the payload did not end within --timeout-seconds {}",
                args.timeout_seconds
            ));
        }
    };
    let config = ShimConfig {
        dialect: args.dialect,
        url: args.url,
        token,
        event: args.event,
        agent_id: args.agent_id,
        tenant_id: args.tenant_id,
        timeout,
        ca_file: args.ca_file,
    };
    let runtime = match tokio::runtime::Builder::new_current_thread()
        .enable_all()
        .build()
    {
        Ok(r) => r,
        Err(e) => return refuse(&e),
    };
    match runtime.block_on(shim::call(&config, payload, started.elapsed())) {
        Ok(answer) => {
            let mut out = std::io::stdout().lock();
            match out.write_all(&answer).and_then(|()| out.flush()) {
                Ok(()) => ExitCode::SUCCESS,
                Err(e) => refuse(&format!("stdout: {e}")),
            }
        }
        Err(e) => refuse(&e),
    }
}

async fn command_runner(args: CommandRunnerArgs) -> anyhow::Result<()> {
    // SAFETY: geteuid has no preconditions.
    let root = unsafe { libc::geteuid() } == 0;
    let max_runs = usize::try_from(args.max_runs).unwrap_or(64);
    let tmp_root = args.tmp_dir.unwrap_or_else(std::env::temp_dir);
    let uids = match (root, args.run_as_uid) {
        (true, None) => {
            bail!("command-runner runs as root: give --run-as-uid UID so no hook runs as root")
        }
        (true, Some(0)) => bail!("--run-as-uid 0: hooks must not run as root"),
        (true, Some(base)) => Some(UidPool::new(base, max_runs, &tmp_root)?),
        (false, Some(_)) => bail!("--run-as-uid needs the runner to run as root"),
        (false, None) => None,
    };
    let config = ServerConfig {
        socket: args.socket,
        max_runs,
        local: LocalConfig {
            tmp_root,
            run_as: None,
        },
        uids,
    };
    let cancel = CancellationToken::new();
    let stop = cancel.clone();
    tokio::spawn(async move {
        shutdown_signal().await;
        stop.cancel();
    });
    server::serve(config, cancel).await?;
    Ok(())
}

async fn budget_load(args: BudgetLoadArgs) -> anyhow::Result<()> {
    if args.reserve <= 0 || args.settle < 0 {
        bail!("--reserve must be above 0 and --settle 0 or more");
    }
    // The transport rule first: a URL that breaks it fails whatever the token.
    let urls = args
        .operator_tls
        .secure(OperatorUrls::parse(&args.operator_url)?)?;
    let token = Arc::new(OperatorToken::load(&args.operator_token_file)?);
    let id = match args.dispatcher_id {
        Some(id) => id,
        None => token.identity()?,
    };
    let urls = Arc::new(urls.with_token(token));
    let budgets = Budgets::remote(RemoteBudgets::new(urls, id, RemoteConfig::default()), None);
    let plan = load::LoadPlan {
        tenant: args.tenant,
        calls: args.calls,
        concurrency: args.concurrency,
        reserve: args.reserve,
        settle: args.settle,
        hold: Duration::from_millis(args.hold_ms),
    };
    let summary = load::run(&budgets, &plan).await;
    println!("{}", serde_json::to_string(&summary)?);
    Ok(())
}

/// The hooks files of `check` and `bench`, as standalone mode loads them, with a fresh
/// seal key (nothing is sent anywhere).
fn load_offline(
    hooks: &std::path::Path,
    common: &Common,
) -> anyhow::Result<(manifests::Loaded, SealKey)> {
    let key = SealKey::generate();
    let loaded = manifests::load_all(hooks, &common.master_namespace, common.edition, &key)?;
    Ok((loaded, key))
}

/// The event file of `check` and `bench`; errors name the file.
fn read_event(path: &std::path::Path) -> anyhow::Result<Vec<u8>> {
    std::fs::read(path).with_context(|| format!("{}", path.display()))
}

/// Reads a seal key file (64 hex characters or 32 raw bytes); errors name the file.
fn load_seal_key(path: &std::path::Path) -> anyhow::Result<SealKey> {
    let raw = std::fs::read(path).with_context(|| format!("{}", path.display()))?;
    SealKey::from_bytes(&raw).with_context(|| format!("{}", path.display()))
}

async fn check(args: CheckArgs) -> anyhow::Result<Verdict> {
    let (loaded, key) = load_offline(&args.hooks, &args.common)?;
    if let Some(w) = loaded.unlabelled_warning() {
        tracing::warn!("{w}");
    }
    let set = loaded.hooks;
    let body = read_event(&args.event)?;
    let native = match args.dialect {
        Some(dialect) => {
            let options = agenthooks_dispatcher::dialect::CallOptions {
                event: args.native_event.clone(),
                agent_id: None,
                tenant_id: args.tenant_id.clone(),
                ask: None,
            };
            let call = agenthooks_dispatcher::dialect::parse(dialect, &body, &options)
                .map_err(|e| anyhow::anyhow!("{}: {e}", args.event.display()))?;
            Some(call)
        }
        None => None,
    };
    let event = match &native {
        Some(call) => match &call.event {
            Some(e) => e.clone(),
            None => {
                // No counterpart among our events: nothing runs, no opinion.
                let allow = agenthooks_dispatcher::chain::Decision::allow("");
                let answer = agenthooks_dispatcher::dialect::answer(call, &allow);
                println!("{}", serde_json::to_string_pretty(&answer)?);
                return Ok(Verdict::Allow);
            }
        },
        None => {
            Event::parse(&body).map_err(|e| anyhow::anyhow!("{}: {e}", args.event.display()))?
        }
    };
    let mut engine = Engine::new(
        HttpCaller::new(args.common.http_allow_cidr.clone()),
        args.common.edition,
        key,
    );
    engine.prompt = prompt_evaluator(&args.common)?;
    // The budgets of the hooks files, as in standalone mode (fresh: used 0).
    engine.budgets = Budgets::local(LocalLedger::new(loaded.budgets)?, None);
    // Every hook in place, so each one's outcome is shown; a hook the event does not wait
    // for (a non-blocking event's, without `blocking: true`) never changes the answer.
    // As `/v1/dispatch` answers: `ask` only to an event that accepts it.
    let accepts_ask = native.is_some() || event.accepts_ask();
    let decision = decide_in_place(&engine, &set, event)
        .await
        .for_caller(accepts_ask);
    match &native {
        Some(call) => {
            let answer = agenthooks_dispatcher::dialect::answer(call, &decision);
            println!("{}", serde_json::to_string_pretty(&answer)?);
        }
        None => println!("{}", serde_json::to_string_pretty(&decision)?),
    }
    Ok(decision.decision)
}

async fn serve(args: ServeArgs) -> anyhow::Result<()> {
    // The admin token is for standalone mode only (CONTRACT §9.5): in a cluster, RBAC on
    // the caller's identity authorizes history and dry runs.
    if args.callers.kubernetes_callers
        && let Some(p) = &args.admin_token_file
    {
        bail!(
            "--admin-token-file {} (env AGENTHOOKS_ADMIN_TOKEN_FILE) cannot be used with --kubernetes-callers: the admin token is for standalone mode only (--callers-file, --allow-anonymous); with --kubernetes-callers, audit history and dry runs are authorized by Kubernetes RBAC on the caller's token (agenthooks/executions, agenthooks/test; docs/callers.md)",
            p.display()
        );
    }
    // Callers first: a bad callers file stops the start before anything else runs.
    let callers = authenticator(&args).await?;
    let key = match &args.seal_key_file {
        Some(p) => load_seal_key(p)?,
        None => SealKey::generate(),
    };
    let mut engine = Engine::new(
        HttpCaller::new(args.common.http_allow_cidr.clone()),
        args.common.edition,
        key.clone(),
    );
    engine.prompt = prompt_evaluator(&args.common)?;
    if let Some(runner) = &args.command_runner {
        engine.command_runner = runner.clone();
        if let CommandRunner::Remote(p) = runner {
            tracing::info!(socket = %p.display(), "command hooks run in the command runner");
        }
    }
    // A span per hook run, exported over OTLP/HTTP, only when OTEL_EXPORTER_OTLP_[TRACES_]ENDPOINT
    // is set (CONTRACT §8.1); otherwise no exporter and no spans.
    let tracer_provider = telemetry::export::install_from_env().context("OpenTelemetry")?;
    if let Some(p) = &tracer_provider {
        use opentelemetry::trace::TracerProvider as _;
        engine.telemetry = telemetry::Telemetry::new(p.tracer(telemetry::SCOPE_NAME));
        tracing::info!("tracing: a span per hook run, exported over OTLP/HTTP");
    }
    engine.audit = start_audit(&args.audit, &engine.metrics).await?;
    let audit = engine.audit.clone();
    let background = Arc::clone(&engine.background);
    let cancel = CancellationToken::new();
    // Stopped after the server drained, so the last runs are in the final report.
    let stop_reporter = CancellationToken::new();
    let mut reporter = None;
    let state = match (&args.hooks, args.operator_url.is_empty()) {
        (Some(path), true) => {
            let loaded = manifests::load_all(
                path,
                &args.common.master_namespace,
                args.common.edition,
                &key,
            )?;
            if let Some(w) = loaded.unlabelled_warning() {
                tracing::warn!("{w}");
            }
            let budgets = loaded.budgets.len();
            engine.budgets = Budgets::local(
                LocalLedger::new(loaded.budgets)?,
                Some(engine.metrics.clone()),
            );
            // agenthooks_budget_remaining_tokens{tenant}: the operator's series, ours here.
            engine.metrics.registry.register(Box::new(
                telemetry::budget_remaining::BudgetRemaining::new(engine.budgets.clone()),
            ))?;
            tracing::info!(hooks = loaded.hooks.len(), budgets, path = %path.display(), edition = %args.common.edition, "standalone: hooks loaded; nothing is reported to an operator");
            let state = AppState::with_request_limit(engine, args.max_concurrent_requests);
            state.stops.set_limit(args.stop_block_limit);
            state.set_hooks(loaded.hooks);
            state
        }
        (None, false) => {
            let urls = args.operator_tls.secure(
                OperatorUrls::parse(&args.operator_url)
                    .context("synced mode needs at least one operator URL")?,
            )?;
            let Some(path) = &args.operator_token_file else {
                bail!(
                    "synced mode needs --operator-token-file (env AGENTHOOKS_OPERATOR_TOKEN_FILE): this dispatcher's projected ServiceAccount token for the audience agenthooks.io/sync, which the operator verifies on every call (docs/sync.md)"
                );
            };
            let token = Arc::new(OperatorToken::load(path)?);
            if args.seal_key_file.is_none() {
                tracing::warn!("no --seal-key-file: sealed header values cannot be opened");
            }
            let id = match &args.dispatcher_id {
                Some(id) => id.clone(),
                None => token.identity()?,
            };
            let urls = Arc::new(urls.with_token(token));
            engine.approvals = Some(Arc::new(
                agenthooks_dispatcher::approvals::ApprovalClient::new(
                    Arc::clone(&urls),
                    id.clone(),
                ),
            ));
            engine.budgets = Budgets::remote(
                RemoteBudgets::new(Arc::clone(&urls), id.clone(), RemoteConfig::default()),
                Some(engine.metrics.clone()),
            );
            let state = AppState::with_request_limit(engine, args.max_concurrent_requests);
            state.stops.set_limit(args.stop_block_limit);
            let operators: Vec<&str> = urls.urls().iter().map(|u| u.as_str()).collect();
            tracing::info!(operators = ?operators, dispatcher = %id, report_interval_ms = args.report_interval_ms, "synced mode: following the operator; not ready until the first snapshot");
            let mut config = ReporterConfig::new(id.clone());
            config.interval = Duration::from_millis(args.report_interval_ms);
            // Activated before the first snapshot, so no hook run goes uncounted.
            state.engine.outbox.activate();
            reporter = Some(tokio::spawn(sender::run(
                Arc::clone(&state.engine.outbox),
                Arc::clone(&urls),
                state.engine.metrics.clone(),
                config,
                stop_reporter.clone(),
            )));
            tokio::spawn(sync::follow(state.clone(), urls, id, cancel.clone()));
            state
        }
        _ => bail!(
            "give --hooks PATH (standalone) or --operator-url URL[,URL...] (synced), not both"
        ),
    };
    state.set_authenticator(callers);
    if args.callers.kubernetes_callers {
        // The console asks the API server as the signed-in person: its address and CA.
        state.set_console_kube(
            kube::Config::infer()
                .await
                .context("--kubernetes-callers: no in-cluster config or KUBECONFIG")?,
        );
    }
    match &args.admin_token_file {
        Some(p) => {
            state.set_admin_token(AdminToken::from_file(p)?);
            tracing::info!(file = %p.display(), "admin token loaded: POST /v1/test and audit history reads need it");
        }
        None if args.callers.kubernetes_callers => tracing::info!(
            "POST /v1/test and audit history reads: Kubernetes RBAC on the caller (agenthooks/test, agenthooks/executions)"
        ),
        None => tracing::info!(
            "no --admin-token-file: POST /v1/test and audit history reads are refused"
        ),
    }
    let cert = agenthooks_tls::PemFiles::from_flags(
        args.tls_cert_file.clone(),
        args.tls_key_file.clone(),
        "--tls-cert-file",
        "--tls-key-file",
    )?
    .map(agenthooks_tls::ServerCert::load)
    .transpose()?;
    let listener = agenthooks_tls::Incoming::new(
        tokio::net::TcpListener::bind(args.listen)
            .await
            .with_context(|| format!("listen on {}", args.listen))?,
        cert.as_ref(),
    )?;
    if let Some(cert) = &cert {
        cert.spawn_reloader("dispatch", agenthooks_tls::RELOAD_INTERVAL, cancel.clone());
        state.set_serves_tls();
    }
    tracing::info!(addr = %listener.local_addr()?, tls = listener.is_tls(), "dispatcher listening");
    let shutdown = cancel.clone();
    let draining = Arc::clone(&state);
    let delay = Duration::from_secs(args.shutdown_delay_seconds);
    tokio::spawn(async move {
        shutdown_signal().await;
        if !delay.is_zero() {
            // Unready first, still serving: the endpoints drop us before the port closes.
            draining.start_draining();
            tracing::info!(
                delay_s = delay.as_secs(),
                "shutting down: not ready; still serving until the shutdown delay is over"
            );
            tokio::select! {
                _ = tokio::time::sleep(delay) => {}
                _ = shutdown_signal() => tracing::info!("second signal: the shutdown delay is cut short"),
            }
        }
        shutdown.cancel();
    });
    agenthooks_dispatcher::server::serve(listener, router(Arc::clone(&state)), cancel).await?;
    // Blocking chains of clients that went away run on after their connection (CONTRACT
    // §10.3): let them finish, so their rows are in the queue flushed below.
    if !state.wait_idle(Duration::from_secs(15)).await {
        tracing::warn!("decisions still running 15 s after the server drained; exiting");
    }
    if let Some(reporter) = reporter {
        stop_reporter.cancel();
        let _ = reporter.await;
    }
    if audit.is_enabled() {
        // Background (non-blocking) runs still going record their rows first.
        let slots = agenthooks_dispatcher::runner::BACKGROUND_SLOTS as u32;
        let _ = tokio::time::timeout(Duration::from_secs(5), background.acquire_many(slots)).await;
        let report = audit.shutdown(AUDIT_FLUSH_DEADLINE).await;
        if report.timed_out {
            tracing::error!(target: "security.hook.audit_write_failed", deadline_s = AUDIT_FLUSH_DEADLINE.as_secs(), "audit queue not flushed within the deadline: rows still queued are lost");
        } else {
            tracing::info!(
                written = report.written,
                spooled = report.spooled,
                dropped = report.dropped,
                "audit queue flushed"
            );
        }
    }
    if let Some(p) = tracer_provider {
        // The last spans, once the server drained; off the runtime's workers, whose
        // runtime carries the export.
        if let Ok(Err(e)) = tokio::task::spawn_blocking(move || p.shutdown()).await {
            tracing::warn!(error = %e, "tracing: the last spans were not exported");
        }
    }
    Ok(())
}

/// The authenticator of the flags (exactly one of them is given: clap checks).
async fn authenticator(args: &ServeArgs) -> anyhow::Result<Authenticator> {
    use agenthooks_dispatcher::identity::{CallersFile, KubeCallers, kubernetes::CacheConfig};
    let c = &args.callers;
    if let Some(path) = &c.callers_file {
        let file = CallersFile::load(path)?;
        tracing::info!(file = %path.display(), callers = file.len(), "callers: bearer tokens of --callers-file");
        return Ok(Authenticator::Callers(file));
    }
    if c.kubernetes_callers {
        agenthooks_dispatcher::operator_urls::install_crypto_provider();
        let client = kube::Client::try_default()
            .await
            .context("--kubernetes-callers: no in-cluster config or KUBECONFIG")?;
        let k = &args.kube_callers;
        let cache = CacheConfig {
            token_ttl: Duration::from_secs(k.caller_token_cache_seconds),
            allowed_ttl: Duration::from_secs(k.caller_access_cache_seconds),
            denied_ttl: Duration::from_secs(k.caller_denied_cache_seconds),
            ..CacheConfig::default()
        };
        tracing::info!(audience = %k.caller_audience, token_cache_s = k.caller_token_cache_seconds, access_cache_s = k.caller_access_cache_seconds, "callers: ServiceAccount tokens (TokenReview) and RBAC on agenthooks/dispatch (SubjectAccessReview)");
        return Ok(Authenticator::Kubernetes(Box::new(KubeCallers::new(
            client,
            k.caller_audience.clone(),
            cache,
        ))));
    }
    tracing::warn!(
        "--allow-anonymous: callers are NOT authenticated; anyone who reaches this port may act for any tenant"
    );
    Ok(Authenticator::Anonymous)
}

async fn shutdown_signal() {
    let mut term = tokio::signal::unix::signal(tokio::signal::unix::SignalKind::terminate())
        .expect("SIGTERM handler");
    tokio::select! {
        _ = tokio::signal::ctrl_c() => {}
        _ = term.recv() => {}
    }
}
