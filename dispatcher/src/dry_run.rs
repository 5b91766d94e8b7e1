//! Dry run of one hook on a sample event (DESIGN "Dispatch API" `POST /v1/test`; issue 5
//! point 3): what the hook would decide, with everything a person needs to see why.
//!
//! A dry run goes through the same steps as a real run of that hook — event kind and
//! scope, `matcher`, `ifExpr`, then the handler under the hook's own timeout, the SSRF
//! guard and the edition rules — but it leaves nothing behind: no audit row, no span, no
//! breaker record, no execution counter or metric, nothing sent to the operator, no
//! tenant budget reserved or settled, no per-turn count and no decision-cache read or
//! write (prompt hooks run through [`PromptEvaluator::evaluate_dry_run`]). It runs the
//! hook through dispatch's own driver ([`crate::chain::drive`]) with the observer that
//! records nothing ([`crate::observer::Dry`]), so the chain's rules cannot drift apart.
//!
//! A hook comes from the served set ([`crate::hookset::HookSet::get`]) or from an inline
//! AgentHook manifest ([`inline_hook`]), validated by the one validation function of the
//! operator and the hooks files (`agenthooks_crds::validation::validate`, through
//! [`HookSet::build`]).
//!
//! [`PromptEvaluator::evaluate_dry_run`]: crate::handlers::prompt::PromptEvaluator::evaluate_dry_run

use agenthooks_crds::agenthook::AgentHookSpec;
use agenthooks_crds::sealed::SealKey;
use agenthooks_crds::snapshot::{SealedHeader, SnapshotHook};
use agenthooks_crds::tenancy::namespace_tenant;
use agenthooks_crds::{Edition, GROUP, VERSION};
use serde::Serialize;
use serde_json::Value;

use crate::chain::{Decision, Filters, LOOP_DEPTH_EXCEEDED, Verdict, drive};
use crate::decision::outcome::ErrorKind;
use crate::decision::outcome::Outcome;
use crate::decision::outcome::PromptMetadata;
use crate::event::{Event, MAX_LOOP_DEPTH};
use crate::hookset::{HookSet, LoadedHook};
use crate::observer::Dry;
use crate::runner::{Engine, Matcher};

/// Options of one dry run.
#[derive(Debug, Clone, Copy, Default, PartialEq, Eq)]
pub struct DryRunOptions {
    /// Run the handler even when the event kind, scope, depth, `matcher` or `ifExpr`
    /// would skip the hook (to try a handler on an event it would not select). The
    /// filters' results are reported either way.
    pub force: bool,
}

/// What a dry run found (the body of `POST /v1/test`, camelCase like `/v1/dispatch`).
/// Every key is always present; `null` where it does not apply.
#[derive(Debug, Clone, PartialEq, Serialize, schemars::JsonSchema)]
#[serde(rename_all = "camelCase")]
pub struct DryRunReport {
    /// `namespace/name` of the hook.
    pub hook: String,
    /// Its uid (`dry-run:<namespace>/<name>` for an inline spec without one).
    pub uid: String,
    /// `command`, `http` or `prompt`.
    pub handler: &'static str,
    /// Whether the handler ran.
    pub ran: bool,
    /// Why the hook would not run on this event (and, without `force`, did not), e.g.
    /// `matcher "^Bash$" does not match tool_name "Read"`; `null` when it would run.
    pub skipped: Option<String>,
    /// The hook's outcome (`allow|block|error|timeout`, as in audit rows); `null` when it
    /// did not run. A CEL evaluation error is `error` (kind `cel_eval`) without a run, as
    /// in a real chain.
    pub decision: Option<Outcome>,
    /// What the chain would answer if this were the only hook (CONTRACT §4): `block`
    /// for a block, an error, a blocking timeout (`onTimeout`), an over-cap rewrite or a
    /// depth over 3; always `allow` on a non-blocking event (CONTRACT §1.2) unless the
    /// hook is `blocking: true` (issue 16), which the event then waits for.
    pub verdict: Verdict,
    /// The hook's reason (a block's or an error's), or the chain's.
    pub reason: Option<String>,
    /// Wall time of the handler run in milliseconds (0 when it did not run).
    pub duration_ms: f64,
    /// The hook is for the sample's event kind.
    pub event_matched: bool,
    /// The hook is enabled and applies to the sample's tenant and agent (CONTRACT §3.1).
    pub scope_matched: bool,
    /// `matcher` matches `tool_name` and `toolKinds` include the call's kind (`true` for a
    /// hook with neither).
    pub matcher_matched: bool,
    /// `ifExpr`'s value; `null` when the hook has no `ifExpr` or it failed to evaluate.
    pub cel_matched: Option<bool>,
    /// This hook's breaker is open on this dispatcher for the sample's tenant: a real event
    /// would be answered as the hook's fault, `CircuitOpen` (a dry run still runs the
    /// handler and never records into the breaker).
    pub breaker_open: bool,
    /// Command: captured stdout, cut to 1024 bytes.
    pub stdout: Option<String>,
    /// Command: captured stderr, cut to 1024 bytes.
    pub stderr: Option<String>,
    /// HTTP: status code of the hook's answer.
    pub status_code: Option<u16>,
    /// `additionalContext` of an allowing hook.
    pub additional_context: Option<String>,
    /// `updatedInput` the hook proposed (shown even when the chain would drop it).
    #[schemars(with = "Option<serde_json::Map<String, Value>>")]
    pub updated_input: Option<Value>,
    /// `updatedToolOutput` as the chain would give it (`post_tool_use`; a rewrite the chain
    /// refuses withholds the output instead: `verdict` `block`).
    pub updated_tool_output: Option<Value>,
    /// RFC 6902 JSON Patch from the sample's `tool_input` to `updatedInput`.
    #[schemars(with = "Option<Vec<serde_json::Map<String, Value>>>")]
    pub diff: Option<Value>,
    /// `updatedInput` came from a hook outside the master namespace: a real chain drops
    /// it (CONTRACT §4.5).
    pub mutation_denied: bool,
    /// The error of an `error` or `timeout` outcome (the hook's reason).
    pub error: Option<String>,
    /// Its machine kind (`exit_status`, `ssrf_blocked`, `http_4xx`, `cel_eval`, ...).
    pub error_kind: Option<ErrorKind>,
    /// Prompt: model, tokens reported by the provider (charged to no budget),
    /// `injectionDetected`; `cacheHit` is always false (the cache is not used).
    pub prompt: Option<PromptMetadata>,
}

/// Runs `hook` on `event` as a dry run (see the module docs).
pub async fn dry_run(
    engine: &Engine,
    hook: &std::sync::Arc<LoadedHook>,
    event: &Event,
    options: DryRunOptions,
) -> DryRunReport {
    let spec = &hook.spec;
    // As dispatch: the event waits for this hook when it is a blocking event's, or a
    // `blocking: true` hook of an event that may wait (issue 16).
    let blocking = crate::chain::waits_for_any(event, std::iter::once(&**hook));
    let event_matched = spec.event == event.event;
    let scope_matched = hook.admits(&event.tenant_id, &event.agent_id);
    let matcher_matched = match &hook.compiled.matcher {
        None => true,
        Some(re) => event.tool().is_some_and(|t| re.is_match(t)),
    };
    // spec.toolKinds, as dispatch reads it (runner::filters_match).
    let kinds = &hook.compiled.tool_kinds;
    let kind_matched =
        kinds.is_empty() || event.tool.as_ref().is_some_and(|t| kinds.contains(&t.kind));
    // The scope dispatch gives ifExpr, with the tool facts (`tool`, `tool_kind`).
    let mut scope = crate::runner::LazyScope::default();
    let cel = hook
        .compiled
        .if_expr
        .as_ref()
        .map(|expr| scope.evaluate(expr, event));
    let cel_matched = match &cel {
        Some(Ok(b)) => Some(*b),
        _ => None,
    };
    let depth_exceeded = event.depth > MAX_LOOP_DEPTH;
    let skipped = if depth_exceeded {
        Some(format!(
            "{LOOP_DEPTH_EXCEEDED}: depth {} is over {MAX_LOOP_DEPTH}; no hook runs",
            event.depth
        ))
    } else if !event_matched {
        Some(format!(
            "the hook is for event {}, not {}",
            spec.event, event.event
        ))
    } else if !scope_matched {
        Some(scope_miss(hook, event))
    } else if !matcher_matched {
        Some(format!(
            "matcher {:?} does not match tool_name {:?}",
            spec.matcher,
            event.tool().unwrap_or("")
        ))
    } else if !kind_matched {
        Some(format!(
            "toolKinds {:?} do not include this call's kind {:?}",
            kinds.iter().map(|k| k.as_str()).collect::<Vec<_>>(),
            event.tool.as_ref().map_or("none", |t| t.kind.as_str())
        ))
    } else if cel_matched == Some(false) {
        Some(format!("ifExpr {:?} is false for this event", spec.if_expr))
    } else {
        None
    };

    let mut report = DryRunReport {
        hook: hook.key.clone(),
        uid: hook.uid.clone(),
        handler: spec.handler.type_.as_str(),
        ran: false,
        skipped: skipped.clone(),
        decision: None,
        verdict: Verdict::Allow,
        reason: None,
        duration_ms: 0.0,
        event_matched,
        scope_matched,
        matcher_matched: matcher_matched && kind_matched,
        cel_matched,
        breaker_open: hook.breaker.is_open(&event.tenant_id),
        stdout: None,
        stderr: None,
        status_code: None,
        additional_context: None,
        updated_input: None,
        updated_tool_output: None,
        diff: None,
        mutation_denied: false,
        error: None,
        error_kind: None,
        prompt: None,
    };
    if skipped.is_some() && !options.force {
        if depth_exceeded && blocking {
            report.verdict = Verdict::Block;
            report.reason = Some(LOOP_DEPTH_EXCEEDED.into());
        }
        return report;
    }
    // The same driver as dispatch, with the observer that records nothing: the chain's
    // rules (stop, onTimeout, rewrite caps, the chain budget) are dispatch's own.
    let filters = if options.force {
        Filters::Skip
    } else {
        Filters::Apply(Matcher::Test)
    };
    let decision = drive(engine, &Dry, std::iter::once(hook), event.clone(), filters).await;
    fill_result(&mut report, event, decision, blocking);
    report
}

/// Why the scope rules skip `hook` for `event` (only called when they do).
fn scope_miss(hook: &LoadedHook, event: &Event) -> String {
    let spec = &hook.spec;
    if !spec.enabled {
        return "the hook is disabled (spec.enabled: false)".into();
    }
    if hook.compiled.tenant != event.tenant_id {
        return format!(
            "the hook applies to tenant {:?}, not tenant_id {:?}",
            hook.compiled.tenant, event.tenant_id
        );
    }
    format!(
        "the hook applies to agents {:?}, not agent_id {:?}",
        spec.agent_ids, event.agent_id
    )
}

/// Copies what the driver decided for the one hook into the report.
fn fill_result(report: &mut DryRunReport, event: &Event, decision: Decision, blocking: bool) {
    let Some(mut run) = decision.hooks.into_iter().next() else {
        // Nothing ran (the depth rule with `force`).
        report.verdict = if blocking {
            decision.decision
        } else {
            Verdict::Allow
        };
        report.reason = decision.reason;
        return;
    };
    let result = run.result.take();
    report.ran = result.is_some() && run.error_kind != Some(ErrorKind::CelEval);
    report.decision = Some(run.decision);
    report.duration_ms = run.duration_ms;
    report.error_kind = run.error_kind;
    report.mutation_denied = run.mutation_denied;
    if matches!(run.decision, Outcome::Error | Outcome::Timeout) {
        report.error = run.reason.clone();
    }
    report.reason = decision.reason.or(run.reason);
    report.updated_tool_output = decision.updated_tool_output;
    report.verdict = if blocking {
        decision.decision
    } else {
        Verdict::Allow
    };
    let Some(result) = result else { return };
    report.stdout = result.metadata.stdout;
    report.stderr = result.metadata.stderr;
    report.status_code = result.metadata.http_status;
    report.prompt = result.metadata.prompt;
    report.additional_context = result.additional_context;
    if let Some(new_input) = result.updated_input {
        report.diff = Some(
            serde_json::to_value(json_patch::diff(&event.tool_input, &new_input))
                .unwrap_or(Value::Null),
        );
        report.updated_input = Some(new_input);
    }
}

/// Where an inline spec is validated: this dispatcher's master namespace and edition,
/// its seal key (literal header values are sealed like a hooks file's), and the hooks it
/// serves (which tell a namespace's tenant).
#[derive(Clone, Copy)]
pub struct InlineContext<'a> {
    pub master_namespace: &'a str,
    pub edition: Edition,
    pub seal_key: &'a SealKey,
    pub served: Option<&'a HookSet>,
    /// Validate only (the console's form): a header's `valueFrom.secretKeyRef` is
    /// accepted and sealed as an empty value instead of refused. Such a hook must never
    /// run.
    pub validate_only: bool,
}

/// An inline AgentHook manifest as [`inline_hook`] reads it (`POST /v1/test`'s `spec`):
/// the type the API schema states; [`inline_hook`] reads the JSON itself, so that every
/// error names its field. Other keys are ignored, as `kubectl` would keep them.
#[derive(Debug, Clone, PartialEq, serde::Deserialize, schemars::JsonSchema)]
#[serde(rename_all = "camelCase")]
pub struct InlineManifest {
    /// `agenthooks.io/v1alpha1`.
    #[schemars(extend("const" = "agenthooks.io/v1alpha1"))]
    pub api_version: String,
    /// `AgentHook`.
    #[schemars(extend("const" = "AgentHook"))]
    pub kind: String,
    /// Name (required), namespace (default `default`), optionally uid and generation.
    pub metadata: InlineMetadata,
    /// The AgentHook's spec, validated as the operator validates it.
    pub spec: AgentHookSpec,
}

/// `metadata` of an [`InlineManifest`].
#[derive(Debug, Clone, PartialEq, serde::Deserialize, schemars::JsonSchema)]
pub struct InlineMetadata {
    /// The hook's name.
    #[schemars(length(min = 1))]
    pub name: String,
    /// Its namespace (default `default`): the one RBAC is asked about.
    pub namespace: Option<String>,
    /// Its uid in reports (default `dry-run:<namespace>/<name>`).
    pub uid: Option<String>,
    /// Its generation in reports (default 1).
    pub generation: Option<i64>,
}

/// One broken rule of an inline manifest. `field` is the path inside the manifest
/// (`spec.timeoutMs`, `metadata.name`, `apiVersion`); `reason` is the validation
/// reason (`InvalidTimeout`, `EditionForbidsCommand`, ...) or `InvalidField` for shape
/// errors.
#[derive(Debug, Clone, PartialEq, Serialize, schemars::JsonSchema)]
pub struct SpecFieldError {
    /// Where: a path in the manifest (`spec.timeoutMs`; `POST /v1/test` prefixes it with
    /// `spec.`, the request's key).
    pub field: String,
    /// The validation reason (`InvalidTimeout`, ...) or `InvalidField`.
    pub reason: &'static str,
    /// What is wrong, for people.
    pub message: String,
}

/// Why an inline manifest cannot be dry-run: every broken rule (never empty).
#[derive(Debug, Clone, PartialEq, thiserror::Error)]
#[error("{}", .0.iter().map(|e| format!("{}: {}", e.field, e.message)).collect::<Vec<_>>().join("; "))]
pub struct InlineSpecError(pub Vec<SpecFieldError>);

impl InlineSpecError {
    fn one(field: impl Into<String>, message: impl Into<String>) -> InlineSpecError {
        InlineSpecError(vec![SpecFieldError {
            field: field.into(),
            reason: "InvalidField",
            message: message.into(),
        }])
    }
}

/// The namespace of an inline AgentHook manifest: its `metadata.namespace`, `default`
/// when absent (or not a string). The hook [`inline_hook`] builds lives there, and
/// `POST /v1/test` asks RBAC about it (CONTRACT §9.5).
pub fn inline_namespace(manifest: &Value) -> &str {
    manifest
        .get("metadata")
        .and_then(|m| m.get("namespace"))
        .and_then(Value::as_str)
        .unwrap_or("default")
}

/// Builds a servable hook from an inline AgentHook manifest (`apiVersion`
/// `agenthooks.io/v1alpha1`, `kind: AgentHook`, `metadata.name`, optional
/// `metadata.namespace` (default `default`), `uid`, `generation`, and `spec`).
///
/// The spec is read like a hooks file's (unknown fields refused, errors naming the
/// field) and validated by `agenthooks_crds::validation::validate` with `ctx` — so a
/// Standard dispatcher refuses a command spec (`EditionForbidsCommand`) like any other.
/// The namespace's tenant is the one the served hooks of that namespace have, else the
/// namespace's name. `valueFrom.secretKeyRef` headers are refused (no Secret to read
/// here): give `value`, or dry-run the served hook by name.
pub fn inline_hook(
    manifest: &Value,
    ctx: &InlineContext<'_>,
) -> Result<std::sync::Arc<LoadedHook>, InlineSpecError> {
    let Some(doc) = manifest.as_object() else {
        return Err(InlineSpecError::one(
            "",
            "must be an AgentHook manifest object",
        ));
    };
    let want = format!("{GROUP}/{VERSION}");
    let text = |k: &str| doc.get(k).and_then(Value::as_str).unwrap_or("");
    if text("apiVersion") != want {
        return Err(InlineSpecError::one(
            "apiVersion",
            format!("{:?} is not {want}", text("apiVersion")),
        ));
    }
    if text("kind") != "AgentHook" {
        return Err(InlineSpecError::one(
            "kind",
            format!("{:?} is not AgentHook", text("kind")),
        ));
    }
    let meta = doc.get("metadata").and_then(Value::as_object);
    let meta_str = |k: &str| meta.and_then(|m| m.get(k)).and_then(Value::as_str);
    let name = meta_str("name").unwrap_or("");
    if name.is_empty() {
        return Err(InlineSpecError::one("metadata.name", "required"));
    }
    if !agenthooks_crds::names::is_dns_subdomain(name) {
        return Err(InlineSpecError::one(
            "metadata.name",
            format!(
                "{name:?} is not a Kubernetes object name (lowercase letters, digits, '-' and '.', at most 253)"
            ),
        ));
    }
    let namespace = inline_namespace(manifest);
    if !agenthooks_crds::names::is_dns_label(namespace) {
        return Err(InlineSpecError::one(
            "metadata.namespace",
            format!(
                "{namespace:?} is not a namespace name (lowercase letters, digits and '-', at most 63)"
            ),
        ));
    }
    let generation = meta
        .and_then(|m| m.get("generation"))
        .and_then(Value::as_i64)
        .unwrap_or(1);
    let Some(spec_value) = doc.get("spec") else {
        return Err(InlineSpecError::one("spec", "required"));
    };
    let spec: AgentHookSpec =
        crate::manifests::deserialize_at_path(spec_value).map_err(|(path, message)| {
            let field = if path.is_empty() {
                "spec".to_owned()
            } else {
                format!("spec.{path}")
            };
            InlineSpecError::one(field, message)
        })?;
    let mut headers = Vec::new();
    if let Some(http) = &spec.handler.http {
        for (i, h) in http.headers.iter().enumerate() {
            let value = match (&h.value, &h.value_from) {
                (Some(v), _) => v.as_bytes(),
                (None, Some(_)) if ctx.validate_only => b"".as_slice(),
                (None, Some(_)) => {
                    return Err(InlineSpecError::one(
                        format!("spec.handler.http.headers[{i}].valueFrom"),
                        "a dry run cannot read Secrets: give the header a literal value, or dry-run the served hook by name",
                    ));
                }
                (None, None) => b"".as_slice(), // refused by validation below
            };
            headers.push(SealedHeader {
                name: h.name.clone(),
                sealed: ctx.seal_key.seal(value),
            });
        }
    }
    let tenant = ctx
        .served
        .and_then(|s| s.iter().find(|h| h.namespace == namespace))
        .map(|h| h.namespace_tenant.clone())
        .unwrap_or_else(|| namespace_tenant(namespace, None).to_owned());
    let source = SnapshotHook {
        uid: meta_str("uid")
            .map(str::to_owned)
            .unwrap_or_else(|| format!("dry-run:{namespace}/{name}")),
        generation,
        created_at: String::new(),
        namespace: namespace.to_owned(),
        name: name.to_owned(),
        namespace_tenant: tenant,
        spec,
        sealed_headers: headers,
        open_breakers: Vec::new(),
        reset_token: None,
    };
    let (set, rejected) = HookSet::build(vec![source], ctx.master_namespace, ctx.edition, 0, None);
    if let Some(r) = rejected.into_iter().next() {
        return Err(InlineSpecError(
            r.errors
                .0
                .into_iter()
                .map(|e| SpecFieldError {
                    field: e.field.to_owned(),
                    reason: e.reason.as_str(),
                    message: e.message,
                })
                .collect(),
        ));
    }
    Ok(set
        .iter()
        .next()
        .cloned()
        .expect("a hook that validated is in its set"))
}

#[cfg(test)]
mod tests;
