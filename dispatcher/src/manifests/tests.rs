use super::*;
use agenthooks_crds::HookEvent;

fn write(dir: &Path, name: &str, text: &str) -> PathBuf {
    let p = dir.join(name);
    std::fs::write(&p, text).unwrap();
    p
}

const HOOK: &str = "apiVersion: agenthooks.io/v1alpha1
kind: AgentHook
metadata: {name: NAME, namespace: tenant-acme}
spec:
  event: pre_tool_use
  handler: {type: http, http: {url: 'https://policy.example.com/hook'}}
";

fn load_lite(p: &Path) -> Result<HookSet, LoadError> {
    load(p, "agenthooks-system", Edition::Lite, &SealKey::generate())
}

#[test]
fn loads_multi_document_files_and_directories() {
    let dir = tempfile::tempdir().unwrap();
    write(
        dir.path(),
        "a.yaml",
        &format!(
            "{}---\n{}",
            HOOK.replace("NAME", "one"),
            HOOK.replace("NAME", "two")
        ),
    );
    write(dir.path(), "b.yml", &HOOK.replace("NAME", "three"));
    write(dir.path(), "README.md", "not yaml: [");
    let set = load_lite(dir.path()).unwrap();
    assert_eq!(set.len(), 3);
    let one = set.get("tenant-acme/one").unwrap();
    assert_eq!(one.uid, "standalone:tenant-acme/one");
    assert_eq!(one.compiled.tenant, "tenant-acme");
    let set = load_lite(&dir.path().join("a.yaml")).unwrap();
    assert_eq!(set.len(), 2);
}

#[test]
fn namespace_documents_set_the_tenant() {
    let dir = tempfile::tempdir().unwrap();
    let ns = "apiVersion: v1\nkind: Namespace\nmetadata: {name: tenant-acme, labels: {agenthooks.io/tenant: acme}}\n---\n";
    let p = write(
        dir.path(),
        "h.yaml",
        &format!("{ns}{}", HOOK.replace("NAME", "h")),
    );
    let set = load_lite(&p).unwrap();
    assert_eq!(set.get("tenant-acme/h").unwrap().compiled.tenant, "acme");
    assert_eq!(set.resolve(HookEvent::PreToolUse, "acme", "a").count(), 1);
}

#[test]
fn hooks_whose_namespace_names_no_tenant_are_listed_for_a_warning() {
    // Review finding: the sample hook file loaded without its Namespace document guarded
    // tenant "tenant-acme", which no caller sends, without a word.
    let dir = tempfile::tempdir().unwrap();
    let master = HOOK
        .replace("NAME", "m")
        .replace("tenant-acme", "agenthooks-system");
    let p = write(
        dir.path(),
        "h.yaml",
        &format!(
            "{}---
{master}",
            HOOK.replace("NAME", "h")
        ),
    );
    let key = SealKey::generate();
    let loaded = load_all(&p, "agenthooks-system", Edition::Lite, &key).unwrap();
    assert_eq!(loaded.unlabelled_namespaces, ["tenant-acme"]);
    let w = loaded.unlabelled_warning().unwrap();
    assert!(
        w.contains("tenant-acme") && w.contains("agenthooks.io/tenant"),
        "{w}"
    );
    let ns = "apiVersion: v1\nkind: Namespace\nmetadata: {name: tenant-acme, labels: {agenthooks.io/tenant: acme}}\n---\n";
    write(
        dir.path(),
        "h.yaml",
        &format!("{ns}{}", HOOK.replace("NAME", "h")),
    );
    let loaded = load_all(&p, "agenthooks-system", Edition::Lite, &key).unwrap();
    assert!(loaded.unlabelled_namespaces.is_empty());
    assert_eq!(loaded.unlabelled_warning(), None);
}

#[test]
fn invalid_hook_refuses_the_whole_load_naming_file_document_and_field() {
    let dir = tempfile::tempdir().unwrap();
    let bad = HOOK.replace("NAME", "bad").replace(
        "  event: pre_tool_use\n",
        "  event: pre_tool_use\n  timeoutMs: 20000\n",
    );
    let p = write(
        dir.path(),
        "h.yaml",
        &format!("{}---\n{bad}", HOOK.replace("NAME", "good")),
    );
    let err = load_lite(&p).unwrap_err().to_string();
    assert!(err.contains("h.yaml: document 2: AgentHook tenant-acme/bad: spec.timeoutMs: 20000 ms is over the 10000 ms maximum"), "{err}");
}

#[test]
fn schema_errors_name_the_field() {
    let dir = tempfile::tempdir().unwrap();
    let p = write(
        dir.path(),
        "h.yaml",
        &HOOK
            .replace("NAME", "x")
            .replace("pre_tool_use", "pre_tool_call"),
    );
    let err = load_lite(&p).unwrap_err().to_string();
    assert!(
        err.contains("document 1") && err.contains("pre_tool_call"),
        "{err}"
    );
    let p = write(
        dir.path(),
        "k.yaml",
        "apiVersion: v1\nkind: ConfigMap\nmetadata: {name: x}\n",
    );
    assert!(
        load_lite(&p)
            .unwrap_err()
            .to_string()
            .contains("kind: \"ConfigMap\"")
    );
    let p = write(
        dir.path(),
        "d.yaml",
        &format!(
            "{}---\n{}",
            HOOK.replace("NAME", "x"),
            HOOK.replace("NAME", "x")
        ),
    );
    assert!(
        load_lite(&p)
            .unwrap_err()
            .to_string()
            .contains("defined twice")
    );
    let p = write(dir.path(), "e.yaml", "# nothing\n");
    assert!(matches!(load_lite(&p), Err(LoadError::Empty { .. })));
    assert!(matches!(
        load_lite(&dir.path().join("missing.yaml")),
        Err(LoadError::Io { .. })
    ));
}

#[test]
fn standard_edition_refuses_command_hooks_at_load() {
    let dir = tempfile::tempdir().unwrap();
    let cmd = HOOK.replace("NAME", "c").replace(
        "{type: http, http: {url: 'https://policy.example.com/hook'}}",
        "{type: command, command: {command: 'exit 0'}}",
    );
    let p = write(dir.path(), "c.yaml", &cmd);
    assert!(load_lite(&p).is_ok());
    let err = load(
        &p,
        "agenthooks-system",
        Edition::Standard,
        &SealKey::generate(),
    )
    .unwrap_err()
    .to_string();
    assert!(
        err.contains("spec.handler.type: the command handler runs only on the Lite edition"),
        "{err}"
    );
}

#[test]
fn secret_documents_feed_headers_sealed() {
    let dir = tempfile::tempdir().unwrap();
    let hook = HOOK.replace("NAME", "h").replace(
        "http: {url: 'https://policy.example.com/hook'}",
        "http: {url: 'https://policy.example.com/hook', headers: [{name: Authorization, valueFrom: {secretKeyRef: {name: tok, key: token}}}, {name: X-Plain, value: p}]}",
    );
    let secret = "apiVersion: v1\nkind: Secret\nmetadata: {name: tok, namespace: tenant-acme, labels: {agenthooks.io/hook-secret: \"true\"}}\ndata: {token: QmVhcmVyIHQ=}\n---\n";
    let p = write(dir.path(), "h.yaml", &format!("{secret}{hook}"));
    let key = SealKey::generate();
    let set = load(&p, "agenthooks-system", Edition::Lite, &key).unwrap();
    let h = set.get("tenant-acme/h").unwrap();
    assert!(!h.sealed_headers[0].sealed.contains("Bearer"));
    assert_eq!(
        crate::hookset::open_headers(h, &key).unwrap(),
        vec![
            ("Authorization".into(), "Bearer t".into()),
            ("X-Plain".into(), "p".into())
        ]
    );
    let p = write(dir.path(), "nosecret.yaml", &hook);
    assert!(
        load(&p, "agenthooks-system", Edition::Lite, &key)
            .unwrap_err()
            .to_string()
            .contains("Secret tenant-acme/tok key \"token\" not found")
    );
}

/// CONTRACT §9.6 in standalone mode, as in a cluster: a Secret document without the opt-in
/// label (or with another value) refuses the load, naming the Secret and the label; the
/// same files load once the label is there.
#[test]
fn a_secret_document_without_the_opt_in_label_refuses_the_load() {
    let dir = tempfile::tempdir().unwrap();
    let hook = HOOK.replace("NAME", "h").replace(
        "http: {url: 'https://policy.example.com/hook'}",
        "http: {url: 'https://policy.example.com/hook', headers: [{name: Authorization, valueFrom: {secretKeyRef: {name: tok, key: token}}}]}",
    );
    let key = SealKey::generate();
    for labels in [
        "",
        ", labels: {app: x}",
        ", labels: {agenthooks.io/hook-secret: \"false\"}",
        ", labels: {agenthooks.io/hook-secret: \"True\"}",
    ] {
        let secret = format!(
            "apiVersion: v1\nkind: Secret\nmetadata: {{name: tok, namespace: tenant-acme{labels}}}\nstringData: {{token: t}}\n---\n"
        );
        let p = write(dir.path(), "h.yaml", &format!("{secret}{hook}"));
        let err = load(&p, "agenthooks-system", Edition::Lite, &key)
            .unwrap_err()
            .to_string();
        assert_eq!(
            err,
            format!(
                "{}: document 2: spec.handler.http.headers[name=Authorization].valueFrom.secretKeyRef: Secret tenant-acme/tok is not opted in to hook use; hooks may read a Secret only if its owner labels it agenthooks.io/hook-secret: \"true\" (add it to the Secret document's metadata.labels)",
                p.display()
            ),
            "labels {labels:?}"
        );
    }
    let secret = "apiVersion: v1\nkind: Secret\nmetadata: {name: tok, namespace: tenant-acme, labels: {agenthooks.io/hook-secret: \"true\"}}\nstringData: {token: t}\n---\n";
    let p = write(dir.path(), "h.yaml", &format!("{secret}{hook}"));
    let set = load(&p, "agenthooks-system", Edition::Lite, &key).unwrap();
    assert_eq!(
        crate::hookset::open_headers(set.get("tenant-acme/h").unwrap(), &key).unwrap(),
        vec![("Authorization".into(), "t".into())]
    );
}

#[test]
fn spec_errors_name_the_field_path() {
    let dir = tempfile::tempdir().unwrap();
    let base = HOOK.replace("NAME", "x");
    let cases: Vec<(String, &str)> = vec![
        (
            base.replace("pre_tool_use", "pre_tool_call"),
            "spec.event: unknown variant `pre_tool_call`, expected one of ",
        ),
        (
            base.replace("  event: pre_tool_use\n", "  event: pre_tool_use\n  priority: high\n"),
            "spec.priority: invalid type: string \"high\", expected i32",
        ),
        (
            base.replace(
                "  handler: {type: http, http: {url: 'https://policy.example.com/hook'}}\n",
                "",
            ),
            "spec.handler: missing field `handler`",
        ),
        (
            base.replace("  event: pre_tool_use\n", "  event: pre_tool_use\n  ifexpr: 'false'\n"),
            "spec.ifexpr: unknown field `ifexpr`, expected one of ",
        ),
        (
            base.replace("  event: pre_tool_use\n", "  event: pre_tool_use\n  timeOutMs: 20000\n"),
            "spec.timeOutMs: unknown field `timeOutMs`, expected one of ",
        ),
        (
            base.replace("{type: http, http: {", "{type: http, bogus: 1, http: {"),
            "spec.handler.bogus: unknown field `bogus`, expected one of ",
        ),
        (
            base.replace("hook'}", "hook', bogus: 1}"),
            "spec.handler.http.bogus: unknown field `bogus`, expected ",
        ),
        (
            base.replace(
                "hook'}",
                "hook', headers: [{name: A, valueFrom: {secretKeyRef: {name: s, key: k, optional: true}}}]}",
            ),
            "spec.handler.http.headers[0].valueFrom.secretKeyRef.optional: unknown field `optional`, expected ",
        ),
        (
            base.replace("  event: pre_tool_use\n", "  event: pre_tool_use\n  timeoutMs: soon\n"),
            "spec.timeoutMs: invalid type: string \"soon\", expected i64",
        ),
    ];
    for (i, (text, want)) in cases.iter().enumerate() {
        let p = write(dir.path(), &format!("h{i}.yaml"), text);
        let err = load_lite(&p).unwrap_err().to_string();
        let prefix = format!("{}: document 1: {want}", p.display());
        assert!(err.starts_with(&prefix), "got:  {err}\nwant: {prefix}");
    }
    // The second document of a file is counted as such.
    let p = write(
        dir.path(),
        "two.yaml",
        &format!(
            "{}---\n{}",
            HOOK.replace("NAME", "a"),
            base.replace(
                "  event: pre_tool_use\n",
                "  event: pre_tool_use\n  priority: high\n"
            )
        ),
    );
    assert_eq!(
        load_lite(&p).unwrap_err().to_string(),
        format!(
            "{}: document 2: spec.priority: invalid type: string \"high\", expected i32",
            p.display()
        )
    );
}

#[test]
fn unknown_fields_in_any_spec_block_are_refused() {
    // One stray key in each of the eight spec structs; a typo must never be dropped
    // silently (an ignored `ifexpr` makes a hook run on every event).
    let dir = tempfile::tempdir().unwrap();
    let hook = |spec: &str| {
        format!(
            "apiVersion: agenthooks.io/v1alpha1\nkind: AgentHook\nmetadata: {{name: x, namespace: tenant-acme}}\nspec:\n{spec}"
        )
    };
    let http = |block: &str| {
        hook(&format!(
            "  event: pre_tool_use\n  handler: {{type: http, http: {block}}}\n"
        ))
    };
    let cases: Vec<(String, &str)> = vec![
        // AgentHookSpec
        (
            hook(
                "  event: pre_tool_use\n  ifexpr: 'false'\n  handler: {type: http, http: {url: 'https://p.example/h'}}\n",
            ),
            "spec.ifexpr: unknown field `ifexpr`",
        ),
        // HandlerSpec
        (
            hook(
                "  event: pre_tool_use\n  handler: {type: http, bogus: 1, http: {url: 'https://p.example/h'}}\n",
            ),
            "spec.handler.bogus: unknown field `bogus`",
        ),
        // CommandHandlerSpec
        (
            hook(
                "  event: pre_tool_use\n  handler: {type: command, command: {command: 'exit 0', env: [A]}}\n",
            ),
            "spec.handler.command.env: unknown field `env`",
        ),
        // HttpHandlerSpec
        (
            http("{url: 'https://p.example/h', timeoutMs: 100}"),
            "spec.handler.http.timeoutMs: unknown field `timeoutMs`",
        ),
        // HttpHeader
        (
            http("{url: 'https://p.example/h', headers: [{name: A, value: b, secret: true}]}"),
            "spec.handler.http.headers[0].secret: unknown field `secret`",
        ),
        // HeaderValueSource
        (
            http(
                "{url: 'https://p.example/h', headers: [{name: A, valueFrom: {configMapKeyRef: {name: c, key: k}}}]}",
            ),
            "spec.handler.http.headers[0].valueFrom.configMapKeyRef: unknown field `configMapKeyRef`",
        ),
        // SecretKeyRef
        (
            http(
                "{url: 'https://p.example/h', headers: [{name: A, valueFrom: {secretKeyRef: {name: s, key: k, namespace: other}}}]}",
            ),
            "spec.handler.http.headers[0].valueFrom.secretKeyRef.namespace: unknown field `namespace`",
        ),
        // PromptHandlerSpec
        (
            hook(
                "  event: pre_tool_use\n  matcher: x\n  handler: {type: prompt, prompt: {promptTemplate: t, temperature: 0}}\n",
            ),
            "spec.handler.prompt.temperature: unknown field `temperature`",
        ),
    ];
    for (i, (text, want)) in cases.iter().enumerate() {
        let p = write(dir.path(), &format!("u{i}.yaml"), text);
        let err = load_lite(&p).unwrap_err().to_string();
        let prefix = format!("{}: document 1: {want}, expected ", p.display());
        assert!(err.starts_with(&prefix), "got:  {err}\nwant: {prefix}");
    }
    // Without the stray keys, the same blocks load.
    let ok = http(
        "{url: 'https://p.example/h', headers: [{name: A, value: b}, {name: C, valueFrom: {secretKeyRef: {name: s, key: k}}}]}",
    );
    let secret = "apiVersion: v1\nkind: Secret\nmetadata: {name: s, namespace: tenant-acme, labels: {agenthooks.io/hook-secret: \"true\"}}\nstringData: {k: v}\n---\n";
    let p = write(dir.path(), "ok.yaml", &format!("{secret}{ok}"));
    assert_eq!(load_lite(&p).unwrap().len(), 1);
}

fn budget_doc(ns: &str, name: &str, spec: &str) -> String {
    format!(
        "apiVersion: agenthooks.io/v1alpha1\nkind: TenantHookBudget\nmetadata: {{name: {name}, namespace: {ns}}}\nspec: {spec}\n"
    )
}

fn load_all_lite(p: &Path) -> Result<Loaded, LoadError> {
    load_all(p, "agenthooks-system", Edition::Lite, &SealKey::generate())
}

#[test]
fn budgets_get_their_tenant_and_default_total() {
    let dir = tempfile::tempdir().unwrap();
    let p = write(
        dir.path(),
        "all.yaml",
        &[
            HOOK.replace("NAME", "h"),
            "apiVersion: v1\nkind: Namespace\nmetadata: {name: team-a, labels: {agenthooks.io/tenant: acme}}\n".into(),
            budget_doc("team-a", "monthly", "{monthlyTokens: 5000}"),
            budget_doc("agenthooks-system", "globex", "{tenant: globex}"),
            budget_doc("tenant-initech", "b", "{tenant: tenant-initech, monthlyTokens: 0}"),
        ]
        .join("---\n"),
    );
    let loaded = load_all_lite(&p).unwrap();
    assert_eq!(loaded.hooks.len(), 1);
    let got: Vec<(&str, &str, &str, i64)> = loaded
        .budgets
        .iter()
        .map(|b| {
            (
                b.namespace.as_str(),
                b.name.as_str(),
                b.tenant.as_str(),
                b.spec.monthly_tokens,
            )
        })
        .collect();
    assert_eq!(
        got,
        [
            ("team-a", "monthly", "acme", 5000),
            ("agenthooks-system", "globex", "globex", 1_000_000),
            ("tenant-initech", "b", "tenant-initech", 0),
        ]
    );
    // `load` (check, tests) still returns the hooks alone.
    assert_eq!(load_lite(&p).unwrap().len(), 1);
}

#[test]
fn bad_budgets_refuse_the_load_naming_file_document_and_field() {
    let cases = [
        (
            budget_doc("tenant-acme", "b", "{tenant: globex}"),
            "document 2: spec.tenant: TenantMismatch",
        ),
        (
            budget_doc("tenant-acme", "b", "{monthlyTokens: -1}"),
            "document 2: spec.monthlyTokens: must be 0 or more",
        ),
        (
            budget_doc("tenant-acme", "b", "{monthlyTokenz: 5}"),
            "document 2: spec.monthlyTokenz: unknown field",
        ),
        (
            budget_doc("tenant-acme", "b", "{monthlyTokens: lots}"),
            "document 2: spec.monthlyTokens: invalid type",
        ),
        (
            "apiVersion: agenthooks.io/v1alpha1\nkind: TenantHookBudget\nmetadata: {namespace: tenant-acme}\nspec: {}\n".into(),
            "document 2: metadata.name: required",
        ),
        (
            format!(
                "{}---\n{}",
                budget_doc("tenant-acme", "one", "{}"),
                budget_doc("agenthooks-system", "two", "{tenant: tenant-acme}")
            ),
            "document 3: TenantHookBudget agenthooks-system/two: tenant \"tenant-acme\" already has TenantHookBudget tenant-acme/one",
        ),
    ];
    for (doc, want) in cases {
        let dir = tempfile::tempdir().unwrap();
        let p = write(
            dir.path(),
            "b.yaml",
            &format!("{}---\n{doc}", HOOK.replace("NAME", "h")),
        );
        let err = load_all_lite(&p).unwrap_err().to_string();
        assert!(
            err.contains("b.yaml") && err.contains(want),
            "{want}\n  got: {err}"
        );
    }
}

/// `kubectl get agenthooks -A -o yaml`: a `List` whose items carry the server's fields
/// (status, managedFields, uid, generation, creationTimestamp).
const EXPORT: &str = "apiVersion: v1
kind: List
metadata: {resourceVersion: \"\"}
items:
- apiVersion: agenthooks.io/v1alpha1
  kind: AgentHook
  metadata:
    name: exported
    namespace: tenant-acme
    uid: 0b7c9d7e-1111-4222-8333-444455556666
    generation: 4
    resourceVersion: \"812\"
    creationTimestamp: \"2025-01-02T03:04:05Z\"
    managedFields: [{manager: kubectl, operation: Apply}]
  spec:
    event: pre_tool_use
    handler: {type: http, http: {url: 'https://policy.example.com/hook'}}
  status:
    observedGeneration: 4
    conditions: [{type: Ready, status: \"True\"}]
";

#[test]
fn a_cluster_export_list_loads_its_items_with_their_uid_and_generation() {
    let dir = tempfile::tempdir().unwrap();
    let p = write(dir.path(), "export.yaml", EXPORT);
    let set = load_lite(&p).unwrap();
    assert_eq!(set.len(), 1);
    let h = set.get("tenant-acme/exported").unwrap();
    assert_eq!(
        (h.uid.as_str(), h.generation),
        ("0b7c9d7e-1111-4222-8333-444455556666", 4)
    );
    // An item's error names the document and the item.
    let bad = EXPORT.replace("event: pre_tool_use", "event: pre_tool");
    let p = write(dir.path(), "bad.yaml", &bad);
    let e = load_lite(&p).unwrap_err().to_string();
    assert!(
        e.contains("bad.yaml: document 1: items[0]: spec.event: unknown variant"),
        "{e}"
    );
    let p = write(dir.path(), "no-items.yaml", "apiVersion: v1\nkind: List\n");
    assert_eq!(
        load_lite(&p).unwrap_err().to_string(),
        format!(
            "{}: document 1: items: a List needs a list of items",
            p.display()
        )
    );
}

#[test]
fn several_paths_load_as_one_folder() {
    let dir = tempfile::tempdir().unwrap();
    let ns = write(
        dir.path(),
        "ns.yaml",
        "apiVersion: v1\nkind: Namespace\nmetadata: {name: tenant-acme, labels: {agenthooks.io/tenant: acme}}\n",
    );
    let a = write(dir.path(), "a.yaml", &HOOK.replace("NAME", "a"));
    let export = write(dir.path(), "export.yaml", EXPORT);
    let loaded = load_paths(
        &[&a, &export, &ns],
        "agenthooks-system",
        Edition::Lite,
        &SealKey::generate(),
    )
    .unwrap();
    assert_eq!(loaded.hooks.len(), 2);
    // The Namespace document of another path gives both hooks their tenant.
    assert_eq!(
        loaded
            .hooks
            .get("tenant-acme/exported")
            .unwrap()
            .compiled
            .tenant,
        "acme"
    );
    assert!(loaded.unlabelled_namespaces.is_empty());
    // A hook in two paths is defined twice.
    let e = load_paths(
        &[&a, &a],
        "agenthooks-system",
        Edition::Lite,
        &SealKey::generate(),
    )
    .unwrap_err();
    assert!(e.to_string().contains("defined twice"), "{e}");
    let empty = write(dir.path(), "empty.yaml", "# nothing\n");
    assert_eq!(
        load_paths(
            &[&empty, &ns],
            "agenthooks-system",
            Edition::Lite,
            &SealKey::generate()
        )
        .unwrap_err()
        .to_string(),
        format!("{}, {}: no AgentHook found", empty.display(), ns.display())
    );
}
