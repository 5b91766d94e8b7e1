//! The agenthooks vs OPA bench (issue 15; `e2e/benches/opa.rs`, bench/README.md): hook sets
//! generated as AgentHook manifests with the equivalent Rego policy, the events both
//! engines decide, a plain model of what every rule selects, our engine's side of the
//! in-process comparison in one function ([`ours_selected`]), and the OPA driver
//! (`e2e/opa/driver`, built by `e2e/opa/build.sh`).
//!
//! # The rules
//!
//! Every rule is a tenant-scoped `pre_tool_use` AgentHook in namespace `tenant-tK`
//! (labelled `agenthooks.io/tenant: tK`) with two filters: a `matcher` regex on
//! `tool_name`, drawn from a small pool (so patterns repeat, as in real sets) or, for one
//! rule in ten, a pattern of its own; and an `ifExpr` on `tool_input.cmd`
//! (`startsWith`, `contains` or `endsWith` of a string of its own). Its Rego twin is one
//! `deny contains "<namespace>/<name>" if { ... }` rule with the same four tests:
//! `input.event`, `input.tenant_id` (both equality, which OPA's rule index uses, as our
//! index uses event and tenant), `regex.match` and `startswith`/`contains`/`endswith`.
//!
//! Two shapes ([`RuleSet::spread`], [`RuleSet::one_tenant`]): N rules spread round-robin
//! over [`TENANTS`] tenants, every matcher matching the timed tool (`exec`), so for a timed
//! event every hook of its tenant has both filters evaluated (the `ifExpr` is false, the
//! answer allow); and N rules in one tenant of which only `selected` have a matcher that
//! matches `exec` (the others are skipped by their matcher).

use std::collections::BTreeSet;
use std::fmt::Write as _;

use agenthooks_dispatcher::event::Event;
use agenthooks_dispatcher::hookset::HookSet;
use agenthooks_dispatcher::runner::{LazyScope, Matcher, filters_match};

/// Tenants the spread sets use (`t0` … `t99`).
pub const TENANTS: usize = 100;
/// The tool of the timed events; every matcher of a spread set matches it.
pub const TIMED_TOOL: &str = "exec";
/// The command of the timed events: no rule's condition holds for it.
pub const TIMED_CMD: &str = "ls -la /var/log";
/// Bytes of the large field (`tool_input.content`) of a large event: with `cmd` the
/// `tool_input` is just under the dispatcher's 256 KiB cap (`MAX_TOOL_INPUT_BYTES`).
pub const LARGE_FIELD_BYTES: usize = 256 * 1024 - 128;
/// The Rego package, so the query is `data.agenthooks.deny`.
pub const REGO_PACKAGE: &str = "agenthooks";
/// The query both the driver and `POST /v1/data/agenthooks/deny` ask.
pub const REGO_QUERY: &str = "data.agenthooks.deny";

/// Our engine's decision on an already-parsed event (as the server has it after reading
/// the body), the way `chain::decide` reaches it: [`HookSet::select`] (resolution: the
/// hooks of the event, tenant and agent, in order, of which those whose `matcher` matches
/// the tool, through the matcher index), then [`filters_match`] with the matcher already
/// applied (`toolKinds` and `ifExpr`), with one [`LazyScope`] per event → the
/// `namespace/name` of every hook that selects the event, in resolution order. `Err` is a
/// CEL evaluation error (a hook's `error`, which blocks).
///
/// The one place the bench calls our engine in process: when the engine's signatures
/// change, adapt this function and nothing else.
pub fn ours_selected(set: &HookSet, event: &Event) -> Result<Vec<String>, String> {
    let mut scope = LazyScope::default();
    let mut selected = Vec::new();
    for hook in set.select(event.event, &event.tenant_id, &event.agent_id, event.tool()) {
        if filters_match(hook, event, &mut scope, Matcher::Applied)? {
            selected.push(hook.key.clone());
        }
    }
    Ok(selected)
}

/// A rule's condition on `tool_input.cmd`.
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum Cond {
    StartsWith(String),
    Contains(String),
    EndsWith(String),
}

impl Cond {
    /// The `ifExpr` (CEL).
    pub fn cel(&self) -> String {
        match self {
            Cond::StartsWith(s) => format!("tool_input.cmd.startsWith({})", quoted(s)),
            Cond::Contains(s) => format!("tool_input.cmd.contains({})", quoted(s)),
            Cond::EndsWith(s) => format!("tool_input.cmd.endsWith({})", quoted(s)),
        }
    }

    /// The Rego expression.
    pub fn rego(&self) -> String {
        match self {
            Cond::StartsWith(s) => format!("startswith(input.tool_input.cmd, {})", quoted(s)),
            Cond::Contains(s) => format!("contains(input.tool_input.cmd, {})", quoted(s)),
            Cond::EndsWith(s) => format!("endswith(input.tool_input.cmd, {})", quoted(s)),
        }
    }

    /// Whether it holds for `cmd` (the model).
    pub fn holds(&self, cmd: &str) -> bool {
        match self {
            Cond::StartsWith(s) => cmd.starts_with(s.as_str()),
            Cond::Contains(s) => cmd.contains(s.as_str()),
            Cond::EndsWith(s) => cmd.ends_with(s.as_str()),
        }
    }

    /// A command for which it holds.
    pub fn trigger(&self) -> String {
        match self {
            Cond::StartsWith(s) => format!("{s}data"),
            Cond::Contains(s) => format!("curl -H 'x: {s}' https://a.example"),
            Cond::EndsWith(s) => format!("cat /etc/{s}"),
        }
    }
}

/// A JSON (and CEL, and Rego) string literal: the strings here hold no quote or escape.
fn quoted(s: &str) -> String {
    serde_json::to_string(s).expect("a string serializes")
}

/// One generated rule: an AgentHook and its Rego twin.
#[derive(Debug, Clone)]
pub struct Rule {
    /// Its number in the set (its name is `hook-NNNNN`).
    pub id: usize,
    /// The tenant (`tK`); the namespace is `tenant-tK`.
    pub tenant: String,
    /// The `matcher` regex, the same text in Rust's regex and Go's RE2 syntax.
    pub matcher: String,
    /// A tool name the matcher matches (for agreement events).
    pub sample_tool: String,
    /// The `ifExpr`.
    pub cond: Cond,
}

impl Rule {
    /// `tenant-tK`.
    pub fn namespace(&self) -> String {
        format!("tenant-{}", self.tenant)
    }
    /// `hook-NNNNN`.
    pub fn name(&self) -> String {
        format!("hook-{:05}", self.id)
    }
    /// `namespace/name`: the id both engines answer.
    pub fn key(&self) -> String {
        format!("{}/{}", self.namespace(), self.name())
    }
}

/// Matchers of the spread sets, each with another tool it matches: every one matches
/// [`TIMED_TOOL`].
const MATCHING_POOL: &[(&str, &str)] = &[
    ("^exec$", "exec"),
    ("exec", "exec_sql"),
    ("^(exec|bash|sh)$", "bash"),
    ("^(Bash|exec|run_shell_command|shell)$", "run_shell_command"),
    ("^ex", "export"),
    ("(?i)^EXEC$", "EXEC"),
    ("^e[a-z]+c$", "etc"),
    (".*", "read_file"),
];

/// Matchers that never match [`TIMED_TOOL`] (the one-tenant set's skipped hooks), each
/// with a tool it matches.
const SKIPPED_POOL: &[(&str, &str)] = &[
    ("^Bash$", "Bash"),
    ("^mcp__github__.*", "mcp__github__create_issue"),
    ("^(read_file|write_file)$", "write_file"),
    ("^web_(search|fetch)$", "web_fetch"),
    ("^Task$", "Task"),
];

/// One rule in ten gets a matcher of its own.
const DISTINCT_EVERY: usize = 10;

fn cond(id: usize) -> Cond {
    match id % 3 {
        0 => Cond::StartsWith(format!("rm -rf /srv/v{id}/")),
        1 => Cond::Contains(format!("token-{id}-secret")),
        _ => Cond::EndsWith(format!(".key{id}x")),
    }
}

/// How a set is laid out.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Shape {
    /// Rules round-robin over [`TENANTS`] tenants, every matcher matching the timed tool.
    Spread,
    /// Every rule in tenant `t0`; `selected` of them match the timed tool.
    OneTenant { selected: usize },
}

/// A generated hook set with its Rego twin, its events and a model of both.
pub struct RuleSet {
    /// Short name, e.g. `10` or `1000/1t/10sel`.
    pub label: String,
    pub shape: Shape,
    pub rules: Vec<Rule>,
    /// The matchers compiled once, for [`RuleSet::model`].
    regexes: Vec<regex::Regex>,
}

/// One event both engines decide.
#[derive(Debug, Clone)]
pub struct BenchEvent {
    pub tenant: String,
    pub tool: String,
    pub cmd: String,
    /// `tool_input.content` of [`LARGE_FIELD_BYTES`] bytes besides `cmd`.
    pub large: bool,
    /// A timed event (every filter of its tenant's hooks evaluated, nothing selected);
    /// else an agreement event.
    pub timed: bool,
}

impl BenchEvent {
    /// The event as JSON: the body of `POST /v1/dispatch` and OPA's `input`.
    pub fn json(&self) -> serde_json::Value {
        let mut tool_input = serde_json::json!({ "cmd": self.cmd });
        if self.large {
            tool_input["content"] = serde_json::Value::String(large_field());
        }
        serde_json::json!({
            "event": "pre_tool_use",
            "tenant_id": self.tenant,
            "agent_id": "bench-agent",
            "session_id": "bench-session",
            "tool_name": self.tool,
            "tool_input": tool_input,
        })
    }

    /// The body of `POST /v1/dispatch` (and of the axum ceiling).
    pub fn dispatch_body(&self) -> Vec<u8> {
        serde_json::to_vec(&self.json()).expect("an event serializes")
    }

    /// The body of OPA's `POST /v1/data/agenthooks/deny`: `{"input": <event>}`.
    pub fn opa_body(&self) -> Vec<u8> {
        serde_json::to_vec(&serde_json::json!({ "input": self.json() }))
            .expect("an event serializes")
    }

    /// The parsed event, as the dispatcher has it after reading the body.
    pub fn parsed(&self) -> Event {
        Event::parse(&self.dispatch_body()).expect("a bench event parses")
    }

    /// `small` or `256 KiB`.
    pub fn size_label(&self) -> &'static str {
        if self.large { "256 KiB" } else { "small" }
    }
}

/// Text for the large field: words, no character JSON escapes.
fn large_field() -> String {
    const WORDS: &str =
        "lorem ipsum dolor sit amet consectetur adipiscing elit sed do eiusmod tempor ";
    let mut s = String::with_capacity(LARGE_FIELD_BYTES);
    while s.len() < LARGE_FIELD_BYTES {
        s.push_str(WORDS);
    }
    s.truncate(LARGE_FIELD_BYTES);
    s
}

impl RuleSet {
    /// `n` rules round-robin over [`TENANTS`] tenants (rule `i` in `t{i % 100}`), every
    /// matcher matching [`TIMED_TOOL`]: from [`MATCHING_POOL`], one in ten a pattern of its
    /// own (`^(exec|mcp__srvI__[a-z_]+)$`).
    pub fn spread(n: usize) -> RuleSet {
        let rules = (0..n)
            .map(|id| {
                let (matcher, sample_tool) = if id % DISTINCT_EVERY == DISTINCT_EVERY - 1 {
                    (
                        format!("^(exec|mcp__srv{id}__[a-z_]+)$"),
                        format!("mcp__srv{id}__read"),
                    )
                } else {
                    let (m, t) = MATCHING_POOL[id % MATCHING_POOL.len()];
                    (m.to_string(), t.to_string())
                };
                Rule {
                    id,
                    tenant: format!("t{}", id % TENANTS),
                    matcher,
                    sample_tool,
                    cond: cond(id),
                }
            })
            .collect();
        RuleSet::new(n.to_string(), Shape::Spread, rules)
    }

    /// `n` rules in tenant `t0`, of which `selected` (spread evenly through the set) have
    /// a matcher matching [`TIMED_TOOL`]; the others' matchers never match it (from
    /// [`SKIPPED_POOL`], one in ten `^mcp__srvI__.*` of its own).
    pub fn one_tenant(n: usize, selected: usize) -> RuleSet {
        let stride = n.checked_div(selected).unwrap_or(usize::MAX).max(1);
        let rules = (0..n)
            .map(|id| {
                let picked = id % stride == 0 && id / stride < selected;
                let (matcher, sample_tool) = if picked {
                    let (m, t) = MATCHING_POOL[(id / stride) % MATCHING_POOL.len()];
                    (m.to_string(), t.to_string())
                } else if id % DISTINCT_EVERY == DISTINCT_EVERY - 1 {
                    (format!("^mcp__srv{id}__.*"), format!("mcp__srv{id}__read"))
                } else {
                    let (m, t) = SKIPPED_POOL[id % SKIPPED_POOL.len()];
                    (m.to_string(), t.to_string())
                };
                Rule {
                    id,
                    tenant: "t0".into(),
                    matcher,
                    sample_tool,
                    cond: cond(id),
                }
            })
            .collect();
        RuleSet::new(
            format!("{n} in 1 tenant, {selected} selected"),
            Shape::OneTenant { selected },
            rules,
        )
    }

    fn new(label: String, shape: Shape, rules: Vec<Rule>) -> RuleSet {
        let regexes = rules
            .iter()
            .map(|r| regex::Regex::new(&r.matcher).expect("a generated matcher compiles"))
            .collect();
        RuleSet {
            label,
            shape,
            rules,
            regexes,
        }
    }

    /// Rules in all.
    pub fn len(&self) -> usize {
        self.rules.len()
    }

    /// No rule.
    pub fn is_empty(&self) -> bool {
        self.rules.is_empty()
    }

    /// The tenants of the timed events: up to four tenants that have rules.
    pub fn timed_tenants(&self) -> Vec<String> {
        match self.shape {
            Shape::OneTenant { .. } => vec!["t0".into()],
            Shape::Spread => {
                let with_rules = self.len().min(TENANTS);
                let mut picked: Vec<String> = [0, 3, 5, 7]
                    .iter()
                    .map(|k| format!("t{}", k % with_rules.max(1)))
                    .collect();
                picked.dedup();
                picked
            }
        }
    }

    /// Hooks resolved for a timed event, and of those, hooks whose matcher matches it
    /// (so whose `ifExpr` is evaluated too), for the first timed tenant.
    pub fn per_event(&self) -> (usize, usize) {
        let tenant = &self.timed_tenants()[0];
        let (mut resolved, mut both) = (0, 0);
        for (r, re) in self.rules.iter().zip(&self.regexes) {
            if &r.tenant == tenant {
                resolved += 1;
                both += usize::from(re.is_match(TIMED_TOOL));
            }
        }
        (resolved, both)
    }

    /// The model: keys of the rules that select the event (tenant, matcher and condition),
    /// sorted.
    pub fn model(&self, e: &BenchEvent) -> Vec<String> {
        let mut keys: Vec<String> = self
            .rules
            .iter()
            .zip(&self.regexes)
            .filter(|(r, re)| r.tenant == e.tenant && re.is_match(&e.tool) && r.cond.holds(&e.cmd))
            .map(|(r, _)| r.key())
            .collect();
        keys.sort();
        keys
    }

    /// The events of this set: first the timed ones (small, then large, one per timed
    /// tenant), then agreement events: for 16 rules spread through the set, its
    /// condition's trigger with `exec`, with its own sample tool and with `read_file`, a
    /// large one for four of them, and three more: an unknown tenant, the tool `Glob`
    /// (only `.*` matches it) and an empty command.
    pub fn events(&self) -> Vec<BenchEvent> {
        let ev = |tenant: &str, tool: &str, cmd: &str, large: bool, timed: bool| BenchEvent {
            tenant: tenant.into(),
            tool: tool.into(),
            cmd: cmd.into(),
            large,
            timed,
        };
        let mut out = Vec::new();
        for large in [false, true] {
            for t in self.timed_tenants() {
                out.push(ev(&t, TIMED_TOOL, TIMED_CMD, large, true));
            }
        }
        let samples = 16.min(self.len());
        for k in 0..samples {
            let r = &self.rules[k * self.len() / samples];
            let trigger = r.cond.trigger();
            out.push(ev(&r.tenant, TIMED_TOOL, &trigger, false, false));
            out.push(ev(&r.tenant, &r.sample_tool, &trigger, false, false));
            out.push(ev(&r.tenant, "read_file", &trigger, false, false));
            if k % 4 == 0 {
                out.push(ev(&r.tenant, &r.sample_tool, &trigger, true, false));
            }
        }
        if let Some(r) = self.rules.first() {
            let trigger = r.cond.trigger();
            out.push(ev("no-such-tenant", TIMED_TOOL, &trigger, false, false));
            out.push(ev(&r.tenant, "Glob", &trigger, false, false));
            out.push(ev(&r.tenant, TIMED_TOOL, "", false, false));
        }
        out
    }

    /// The hooks as AgentHook manifests (with a labelled Namespace document per tenant),
    /// every one with an `http` handler at `hook_url`, for `--hooks` and
    /// [`agenthooks_dispatcher::manifests::load`].
    pub fn manifests(&self, hook_url: &str) -> String {
        let mut out = String::new();
        let tenants: BTreeSet<&str> = self.rules.iter().map(|r| r.tenant.as_str()).collect();
        for t in tenants {
            let _ = write!(
                out,
                "apiVersion: v1\nkind: Namespace\nmetadata:\n  name: tenant-{t}\n  labels: {{agenthooks.io/tenant: {t}}}\n---\n"
            );
        }
        for r in &self.rules {
            let _ = write!(
                out,
                "apiVersion: agenthooks.io/v1alpha1\nkind: AgentHook\nmetadata: {{name: {}, namespace: {}}}\nspec:\n  event: pre_tool_use\n  scope: tenant\n  matcher: '{}'\n  ifExpr: '{}'\n  handler: {{type: http, http: {{url: '{hook_url}'}}}}\n---\n",
                r.name(),
                r.namespace(),
                r.matcher,
                r.cond.cel(),
            );
        }
        out
    }

    /// The equivalent Rego policy: one `deny` rule per hook.
    pub fn rego(&self) -> String {
        let mut out = format!(
            "# Generated by e2e/src/opa.rs for the agenthooks vs OPA bench: set {:?}, one rule per AgentHook.\npackage {REGO_PACKAGE}\n\n",
            self.label
        );
        for r in &self.rules {
            let _ = write!(
                out,
                "deny contains {} if {{\n\tinput.event == \"pre_tool_use\"\n\tinput.tenant_id == {}\n\tregex.match(`{}`, input.tool_name)\n\t{}\n}}\n\n",
                quoted(&r.key()),
                quoted(&r.tenant),
                r.matcher,
                r.cond.rego(),
            );
        }
        out
    }
}

/// The OPA driver (`opa-bench-driver`, e2e/opa/driver/main.go) as a child process: one
/// prepared query over a file of inputs, spoken to over stdin/stdout.
pub struct OpaDriver {
    child: std::process::Child,
    stdin: std::process::ChildStdin,
    stdout: std::io::BufReader<std::process::ChildStdout>,
    /// Time OPA took to prepare the query (parse, compile, plan), in ns.
    pub prepare_ns: u64,
}

/// One timing summary of the driver's `stats` (or ours, the same way).
#[derive(Debug, Clone, Copy, Default, serde::Serialize)]
pub struct Timing {
    pub n: usize,
    pub p50_ns: f64,
    pub p99_ns: f64,
    pub mean_ns: f64,
}

impl Timing {
    /// Summary of latencies in ns (sorted here).
    pub fn of(mut lat: Vec<u64>) -> Timing {
        if lat.is_empty() {
            return Timing::default();
        }
        lat.sort_unstable();
        let n = lat.len();
        let pct = |p: f64| lat[(((n as f64) * p).ceil() as usize).clamp(1, n) - 1] as f64;
        Timing {
            n,
            p50_ns: pct(0.50),
            p99_ns: pct(0.99),
            mean_ns: lat.iter().sum::<u64>() as f64 / n as f64,
        }
    }
}

impl OpaDriver {
    /// Starts `driver` on `policy` and `inputs` (JSON lines), its stderr to `log`, and
    /// waits for it to be ready (query prepared, inputs converted).
    pub fn start(
        driver: &std::path::Path,
        policy: &std::path::Path,
        inputs: &std::path::Path,
        log: &std::path::Path,
    ) -> OpaDriver {
        use std::process::{Command, Stdio};
        let mut child = Command::new(driver)
            .arg("--policy")
            .arg(policy)
            .arg("--inputs")
            .arg(inputs)
            .arg("--query")
            .arg(REGO_QUERY)
            .stdin(Stdio::piped())
            .stdout(Stdio::piped())
            .stderr(std::fs::File::create(log).expect("driver log"))
            .spawn()
            .unwrap_or_else(|e| panic!("start {}: {e}", driver.display()));
        let stdin = child.stdin.take().expect("piped stdin");
        let stdout = std::io::BufReader::new(child.stdout.take().expect("piped stdout"));
        let mut d = OpaDriver {
            child,
            stdin,
            stdout,
            prepare_ns: 0,
        };
        let ready = d.read();
        assert_eq!(ready["ready"], true, "OPA driver: {ready}");
        d.prepare_ns = ready["prepare_ns"].as_u64().unwrap_or(0);
        d
    }

    fn read(&mut self) -> serde_json::Value {
        use std::io::BufRead;
        let mut line = String::new();
        let n = self
            .stdout
            .read_line(&mut line)
            .expect("read the OPA driver");
        assert!(n > 0, "the OPA driver exited");
        let v: serde_json::Value = serde_json::from_str(&line).expect("the driver answers JSON");
        if let Some(e) = v.get("error") {
            panic!("OPA driver: {e}");
        }
        v
    }

    fn call(&mut self, command: &str) -> serde_json::Value {
        use std::io::Write;
        writeln!(self.stdin, "{command}").expect("write to the OPA driver");
        self.stdin.flush().expect("flush to the OPA driver");
        self.read()
    }

    /// The decision (sorted ids) for every input, in file order.
    pub fn decide(&mut self) -> Vec<Vec<String>> {
        let v = self.call("decide");
        serde_json::from_value(v["decisions"].clone()).expect("decisions")
    }

    /// Evaluates inputs `which` in turn for `millis` ms, each timed, adding to `group`;
    /// the driver checks every timed result against [`OpaDriver::decide`]'s. Returns the
    /// number of evaluations.
    pub fn time(&mut self, group: &str, millis: u64, which: &[usize]) -> usize {
        let list: Vec<String> = which.iter().map(usize::to_string).collect();
        let v = self.call(&format!("time {group} {millis} {}", list.join(",")));
        v["n"].as_u64().expect("n") as usize
    }

    /// Everything timed in `group`.
    pub fn stats(&mut self, group: &str) -> Timing {
        let v = self.call(&format!("stats {group}"));
        Timing {
            n: v["n"].as_u64().unwrap_or(0) as usize,
            p50_ns: v["p50_ns"].as_f64().unwrap_or(0.0),
            p99_ns: v["p99_ns"].as_f64().unwrap_or(0.0),
            mean_ns: v["mean_ns"].as_f64().unwrap_or(0.0),
        }
    }
}

impl Drop for OpaDriver {
    fn drop(&mut self) {
        use std::io::Write;
        let _ = writeln!(self.stdin, "quit");
        let _ = self.stdin.flush();
        let deadline = std::time::Instant::now() + std::time::Duration::from_secs(5);
        while std::time::Instant::now() < deadline {
            if let Ok(Some(_)) = self.child.try_wait() {
                return;
            }
            std::thread::sleep(std::time::Duration::from_millis(20));
        }
        let _ = self.child.kill();
        let _ = self.child.wait();
    }
}

/// The directory `e2e/opa/build.sh` builds into, when OPA and the driver are there and
/// current (`build.sh --cached`); `build` runs the build first when they are not.
pub fn opa_dir(build: bool) -> Option<std::path::PathBuf> {
    let script = std::path::Path::new(env!("CARGO_MANIFEST_DIR")).join("opa/build.sh");
    let mut cmd = std::process::Command::new("bash");
    cmd.arg(&script);
    if !build {
        cmd.arg("--cached");
    }
    let out = cmd
        .stderr(std::process::Stdio::inherit())
        .output()
        .expect("run e2e/opa/build.sh");
    if !out.status.success() {
        assert!(!build, "e2e/opa/build.sh failed");
        return None;
    }
    let text = String::from_utf8_lossy(&out.stdout);
    text.lines()
        .last()
        .map(|l| std::path::PathBuf::from(l.trim()))
}

#[cfg(test)]
mod tests {
    use super::*;
    use agenthooks_crds::Edition;
    use agenthooks_crds::sealed::SealKey;

    fn load(set: &RuleSet) -> HookSet {
        let dir = tempfile::tempdir().unwrap();
        let path = dir.path().join("hooks.yaml");
        std::fs::write(&path, set.manifests("http://127.0.0.1:9/block")).unwrap();
        let loaded = agenthooks_dispatcher::manifests::load_all(
            &path,
            agenthooks_crds::DEFAULT_MASTER_NAMESPACE,
            Edition::Lite,
            &SealKey::generate(),
        )
        .unwrap();
        assert!(loaded.unlabelled_warning().is_none());
        assert!(loaded.hooks.unavailable().is_empty());
        assert_eq!(loaded.hooks.len(), set.len());
        loaded.hooks
    }

    /// Our engine selects what the model says on every event, timed events select
    /// nothing, and the shapes evaluate what they claim to.
    #[test]
    fn our_engine_agrees_with_the_model_and_the_shapes_hold() {
        for set in [
            RuleSet::spread(10),
            RuleSet::spread(300),
            RuleSet::one_tenant(200, 10),
        ] {
            let hooks = load(&set);
            let events = set.events();
            assert!(events.iter().any(|e| !e.timed && !set.model(e).is_empty()));
            for e in &events {
                let mut ours = ours_selected(&hooks, &e.parsed()).unwrap();
                ours.sort();
                assert_eq!(ours, set.model(e), "{} {e:?}", set.label);
                if e.timed {
                    assert!(ours.is_empty());
                }
            }
            let (resolved, both) = set.per_event();
            match set.shape {
                Shape::Spread => {
                    assert_eq!(resolved, set.len().div_ceil(TENANTS).max(1));
                    assert_eq!(both, resolved, "every matcher matches the timed tool");
                }
                Shape::OneTenant { selected } => {
                    assert_eq!((resolved, both), (set.len(), selected));
                }
            }
        }
    }

    #[test]
    fn the_large_event_is_just_under_the_cap() {
        let e = BenchEvent {
            tenant: "t0".into(),
            tool: "exec".into(),
            cmd: TIMED_CMD.into(),
            large: true,
            timed: true,
        };
        let parsed = e.parsed();
        let text = serde_json::to_vec(&parsed.tool_input).unwrap();
        assert!(
            text.len() > 255 * 1024 && text.len() <= 256 * 1024,
            "{}",
            text.len()
        );
    }

    #[test]
    fn the_rego_has_one_rule_per_hook() {
        let set = RuleSet::spread(12);
        let rego = set.rego();
        assert_eq!(rego.matches("deny contains").count(), 12);
        assert!(rego.contains("regex.match(`^exec$`, input.tool_name)"));
        assert!(rego.contains("startswith(input.tool_input.cmd, \"rm -rf /srv/v0/\")"));
    }
}
