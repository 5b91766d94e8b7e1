//! The create form (issue 14 point 4): its fields in, an AgentHook manifest out, or the
//! fields at fault. Only the form's own shape is checked here (numbers, known fields);
//! the rules of a hook are the shared validation's, run on the manifest afterwards. Pure.

use agenthooks_crds::agenthook::{AgentHookSpec, HookScope};
use serde_json::{Map, Value, json};

/// The form's fields, as sent (`application/x-www-form-urlencoded`).
#[derive(Debug, Clone, Default, PartialEq, Eq)]
pub struct HookForm {
    pub namespace: String,
    pub name: String,
    pub event: String,
    pub scope: String,
    /// Comma- or whitespace-separated.
    pub agent_ids: String,
    pub priority: String,
    pub enabled: bool,
    pub matcher: String,
    pub tool_kinds: Vec<String>,
    pub if_expr: String,
    pub timeout_ms: String,
    /// `""` (the event's default), `allow` or `block`.
    pub on_timeout: String,
    /// `http`, `prompt` or `command`.
    pub handler: String,
    pub http_url: String,
    pub http_header_name: String,
    /// `SECRET/KEY` of a Secret labelled as a hook secret, or `""`.
    pub http_header_secret: String,
    pub command: String,
    pub prompt_template: String,
    pub prompt_model: String,
    /// `validate`, `apply` or `download`.
    pub action: String,
    pub csrf: String,
    /// Sent by the Edit page's form: the person is changing that existing hook.
    pub editing: bool,
}

/// A field of the form (or of the manifest it makes) and what is wrong with it.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct FieldError {
    /// A manifest path (`spec.timeoutMs`, `metadata.name`) or a form field (`action`).
    pub field: String,
    pub message: String,
}

impl HookForm {
    /// A new form's defaults: `pre_tool_use`, `tenant` scope, enabled, an http handler.
    pub fn new_default(namespace: &str) -> HookForm {
        HookForm {
            namespace: namespace.to_owned(),
            event: "pre_tool_use".into(),
            scope: "tenant".into(),
            priority: "0".into(),
            enabled: true,
            handler: "http".into(),
            ..HookForm::default()
        }
    }

    /// The form of an existing hook (to edit it), and the spec fields the form does not
    /// show (server-side apply leaves them as they are; a standalone console hook never
    /// has them).
    pub fn from_spec(
        namespace: &str,
        name: &str,
        spec: &AgentHookSpec,
    ) -> (HookForm, Vec<&'static str>) {
        let mut hidden = Vec::new();
        let mut f = HookForm {
            namespace: namespace.to_owned(),
            name: name.to_owned(),
            event: spec.event.as_str().to_owned(),
            scope: match spec.scope {
                HookScope::Global => "global",
                HookScope::Tenant => "tenant",
                HookScope::Agent => "agent",
            }
            .to_owned(),
            agent_ids: spec.agent_ids.join(", "),
            priority: spec.priority.to_string(),
            enabled: spec.enabled,
            matcher: spec.matcher.clone(),
            tool_kinds: spec
                .tool_kinds
                .iter()
                .map(|k| k.as_str().to_owned())
                .collect(),
            if_expr: spec.if_expr.clone(),
            timeout_ms: spec.timeout_ms.map(|t| t.to_string()).unwrap_or_default(),
            on_timeout: spec
                .on_timeout
                .map(|o| o.as_str().to_owned())
                .unwrap_or_default(),
            handler: spec.handler.type_.as_str().to_owned(),
            ..HookForm::default()
        };
        if spec.tenant.is_some() {
            hidden.push("spec.tenant");
        }
        if let Some(h) = &spec.handler.http {
            f.http_url = h.url.clone();
            match h.headers.as_slice() {
                [] => {}
                [one] if one.value_from.is_some() => {
                    let r = &one.value_from.as_ref().expect("checked").secret_key_ref;
                    f.http_header_name = one.name.clone();
                    f.http_header_secret = format!("{}/{}", r.name, r.key);
                }
                _ => hidden.push("spec.handler.http.headers"),
            }
        }
        if let Some(c) = &spec.handler.command {
            f.command = c.command.clone();
            if !c.allowed_env_vars.is_empty() {
                hidden.push("spec.handler.command.allowedEnvVars");
            }
            if c.cwd.is_some() {
                hidden.push("spec.handler.command.cwd");
            }
            if !c.dialect.is_default() {
                hidden.push("spec.handler.command.dialect");
            }
        }
        if let Some(p) = &spec.handler.prompt {
            f.prompt_template = p.prompt_template.clone();
            f.prompt_model = p.model.clone().unwrap_or_default();
            if p.max_invocations_per_turn.is_some() {
                hidden.push("spec.handler.prompt.maxInvocationsPerTurn");
            }
            if p.allow_rewrite {
                hidden.push("spec.handler.prompt.allowRewrite");
            }
        }
        (f, hidden)
    }

    /// Reads the fields. Errors: an unknown field, or a single-valued one given twice.
    pub fn parse(pairs: Vec<(String, String)>) -> Result<HookForm, FieldError> {
        let mut f = HookForm::default();
        let mut seen: Vec<String> = Vec::new();
        for (k, v) in pairs {
            if k != "toolKinds" {
                if seen.contains(&k) {
                    return Err(err(&k, format!("{k}: given twice")));
                }
                seen.push(k.clone());
            }
            let slot = match k.as_str() {
                "namespace" => &mut f.namespace,
                "name" => &mut f.name,
                "event" => &mut f.event,
                "scope" => &mut f.scope,
                "agentIds" => &mut f.agent_ids,
                "priority" => &mut f.priority,
                "matcher" => &mut f.matcher,
                "ifExpr" => &mut f.if_expr,
                "timeoutMs" => &mut f.timeout_ms,
                "onTimeout" => &mut f.on_timeout,
                "handler" => &mut f.handler,
                "httpUrl" => &mut f.http_url,
                "httpHeaderName" => &mut f.http_header_name,
                "httpHeaderSecret" => &mut f.http_header_secret,
                "command" => &mut f.command,
                "promptTemplate" => &mut f.prompt_template,
                "promptModel" => &mut f.prompt_model,
                "action" => &mut f.action,
                "csrf" => &mut f.csrf,
                "enabled" => {
                    f.enabled = v == "true";
                    continue;
                }
                "editing" => {
                    f.editing = v == "true";
                    continue;
                }
                "toolKinds" => {
                    f.tool_kinds.push(v);
                    continue;
                }
                other => return Err(err(other, format!("{other}: not a field of this form"))),
            };
            *slot = v;
        }
        Ok(f)
    }

    /// The AgentHook manifest the form describes (`apiVersion`, `kind`, `metadata`,
    /// `spec`; empty optional fields left out). Errors: every field whose text cannot be
    /// what the spec needs (a number, a known handler).
    pub fn manifest(&self) -> Result<Value, Vec<FieldError>> {
        let mut errors = Vec::new();
        let mut spec = Map::new();
        spec.insert("event".into(), json!(self.event.trim()));
        spec.insert("scope".into(), json!(self.scope.trim()));
        let agents: Vec<&str> = self
            .agent_ids
            .split(|c: char| c == ',' || c.is_whitespace())
            .filter(|s| !s.is_empty())
            .collect();
        if !agents.is_empty() {
            spec.insert("agentIds".into(), json!(agents));
        }
        match integer(&self.priority) {
            Ok(Some(p)) => {
                spec.insert("priority".into(), json!(p));
            }
            Ok(None) => {}
            Err(m) => errors.push(err("spec.priority", format!("spec.priority: {m}"))),
        }
        spec.insert("enabled".into(), json!(self.enabled));
        if !self.matcher.is_empty() {
            spec.insert("matcher".into(), json!(self.matcher));
        }
        if !self.tool_kinds.is_empty() {
            spec.insert("toolKinds".into(), json!(self.tool_kinds));
        }
        if !self.if_expr.trim().is_empty() {
            spec.insert("ifExpr".into(), json!(self.if_expr.trim()));
        }
        match integer(&self.timeout_ms) {
            Ok(Some(t)) => {
                spec.insert("timeoutMs".into(), json!(t));
            }
            Ok(None) => {}
            Err(m) => errors.push(err("spec.timeoutMs", format!("spec.timeoutMs: {m}"))),
        }
        if !self.on_timeout.is_empty() {
            spec.insert("onTimeout".into(), json!(self.on_timeout));
        }
        let handler = match self.handler.as_str() {
            "http" => {
                let mut http = json!({"url": self.http_url.trim()});
                let header = self.http_header_name.trim();
                match (header.is_empty(), self.http_header_secret.split_once('/')) {
                    (true, _) if self.http_header_secret.is_empty() => {}
                    (false, Some((secret, key))) if !secret.is_empty() && !key.is_empty() => {
                        http["headers"] = json!([{"name": header, "valueFrom": {"secretKeyRef": {"name": secret, "key": key}}}]);
                    }
                    (true, _) => errors.push(err(
                        "spec.handler.http.headers[0].name",
                        "spec.handler.http.headers[0].name: a header taken from a Secret needs a name",
                    )),
                    (false, _) => errors.push(err(
                        "spec.handler.http.headers[0].valueFrom",
                        "spec.handler.http.headers[0].valueFrom: choose the Secret and key the header's value comes from",
                    )),
                }
                json!({"type": "http", "http": http})
            }
            "prompt" => {
                let mut prompt = json!({"promptTemplate": self.prompt_template});
                if !self.prompt_model.trim().is_empty() {
                    prompt["model"] = json!(self.prompt_model.trim());
                }
                json!({"type": "prompt", "prompt": prompt})
            }
            "command" => json!({"type": "command", "command": {"command": self.command}}),
            other => {
                errors.push(err(
                    "spec.handler.type",
                    format!("spec.handler.type: {other:?} is not one of http, prompt, command"),
                ));
                Value::Null
            }
        };
        spec.insert("handler".into(), handler);
        if !errors.is_empty() {
            return Err(errors);
        }
        Ok(json!({
            "apiVersion": format!("{}/{}", agenthooks_crds::GROUP, agenthooks_crds::VERSION),
            "kind": "AgentHook",
            "metadata": {"name": self.name.trim(), "namespace": self.namespace.trim()},
            "spec": spec,
        }))
    }
}

/// An optional integer field: empty is `None`.
fn integer(text: &str) -> Result<Option<i64>, String> {
    let t = text.trim();
    if t.is_empty() {
        return Ok(None);
    }
    t.parse::<i64>()
        .map(Some)
        .map_err(|_| format!("{t:?} is not a whole number"))
}

fn err(field: &str, message: impl Into<String>) -> FieldError {
    FieldError {
        field: field.to_owned(),
        message: message.into(),
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn form(q: &str) -> HookForm {
        HookForm::parse(
            url::form_urlencoded::parse(q.as_bytes())
                .into_owned()
                .collect(),
        )
        .unwrap()
    }

    #[test]
    fn a_filled_form_makes_the_manifest_kubectl_would_take() {
        let f = form(
            "namespace=acme&name=guard&event=pre_tool_use&scope=agent&agentIds=a1,+a2&priority=7&enabled=true&matcher=%5EBash%24&toolKinds=shell&toolKinds=mcp&ifExpr=true&timeoutMs=3000&onTimeout=block&handler=http&httpUrl=https://p.example/h&httpHeaderName=Authorization&httpHeaderSecret=policy-token/token&action=validate&csrf=x",
        );
        assert_eq!(
            f.manifest().unwrap(),
            json!({
                "apiVersion": "agenthooks.io/v1alpha1", "kind": "AgentHook",
                "metadata": {"name": "guard", "namespace": "acme"},
                "spec": {
                    "event": "pre_tool_use", "scope": "agent", "agentIds": ["a1", "a2"],
                    "priority": 7, "enabled": true, "matcher": "^Bash$",
                    "toolKinds": ["shell", "mcp"], "ifExpr": "true", "timeoutMs": 3000,
                    "onTimeout": "block",
                    "handler": {"type": "http", "http": {"url": "https://p.example/h",
                        "headers": [{"name": "Authorization", "valueFrom": {"secretKeyRef": {"name": "policy-token", "key": "token"}}}]}}
                }
            })
        );
    }

    #[test]
    fn an_existing_hook_fills_the_form_back_to_the_same_spec() {
        let m = form(
            "namespace=acme&name=guard&event=pre_tool_use&scope=agent&agentIds=a1,+a2&priority=7&enabled=true&matcher=%5EBash%24&toolKinds=shell&ifExpr=true&timeoutMs=3000&onTimeout=block&handler=http&httpUrl=https://p.example/h&httpHeaderName=Authorization&httpHeaderSecret=policy-token/token",
        )
        .manifest()
        .unwrap();
        let spec: AgentHookSpec = serde_json::from_value(m["spec"].clone()).unwrap();
        let (f, hidden) = HookForm::from_spec("acme", "guard", &spec);
        assert!(hidden.is_empty(), "{hidden:?}");
        assert_eq!(f.manifest().unwrap(), m);
        let cmd: AgentHookSpec = serde_json::from_value(json!({"event": "stop", "handler": {"type": "command", "command": {"command": "true", "allowedEnvVars": ["HOME"], "cwd": "/w"}}})).unwrap();
        let (_, hidden) = HookForm::from_spec("a", "b", &cmd);
        assert_eq!(
            hidden,
            [
                "spec.handler.command.allowedEnvVars",
                "spec.handler.command.cwd"
            ]
        );
    }

    #[test]
    fn an_unchecked_box_is_disabled_and_empty_optionals_are_left_out() {
        let m = form("namespace=acme&name=c&event=stop&scope=tenant&handler=command&command=true&priority=&timeoutMs=")
            .manifest()
            .unwrap();
        assert_eq!(
            m["spec"],
            json!({"event": "stop", "scope": "tenant", "enabled": false,
                   "handler": {"type": "command", "command": {"command": "true"}}})
        );
    }

    #[test]
    fn fields_that_are_not_numbers_or_known_are_named() {
        let errs = form("name=x&timeoutMs=soon&priority=1.5&handler=shell")
            .manifest()
            .unwrap_err();
        let fields: Vec<&str> = errs.iter().map(|e| e.field.as_str()).collect();
        assert_eq!(
            fields,
            ["spec.priority", "spec.timeoutMs", "spec.handler.type"]
        );
        let unknown = HookForm::parse(vec![("colour".into(), "red".into())]).unwrap_err();
        assert_eq!(unknown.field, "colour");
        let twice = HookForm::parse(vec![
            ("name".into(), "a".into()),
            ("name".into(), "b".into()),
        ])
        .unwrap_err();
        assert_eq!(twice.field, "name");
        let half_header = form("handler=http&httpUrl=https://p.example&httpHeaderName=X-Key")
            .manifest()
            .unwrap_err();
        assert_eq!(
            half_header[0].field,
            "spec.handler.http.headers[0].valueFrom"
        );
    }
}
