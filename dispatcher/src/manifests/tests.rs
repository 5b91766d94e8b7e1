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
    let secret = "apiVersion: v1\nkind: Secret\nmetadata: {name: tok, namespace: tenant-acme}\ndata: {token: QmVhcmVyIHQ=}\n---\n";
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
