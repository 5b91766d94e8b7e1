//! AgentHook manifests: [`manifests::load_all`] (YAML documents → header, kind, spec →
//! [`HookSet::build`](agenthooks_dispatcher::hookset::HookSet::build), which runs `agenthooks_crds::validation::validate`: regex, CEL,
//! scope, tenancy, edition, URL, headers), as standalone mode and `check` load a hooks
//! file. Input: the whole file is one hooks file (written to a temporary file, because
//! the loader reads paths).
//!
//! Properties: no panic, no hang; a refusal names the document; every hook of an
//! accepted file holds what validation promises (timeout within 1..=[`MAX_TIMEOUT_MS`],
//! an `ifExpr` within [`MAX_COST`], `master` only in the master namespace, `global` only
//! there, `agent` scope with agent ids, the handler its type names, an http URL that
//! passes the static URL rules).

use std::path::PathBuf;
use std::sync::LazyLock;

use agenthooks_crds::agenthook::{HandlerType, HookScope, MAX_TIMEOUT_MS};
use agenthooks_crds::expr::MAX_COST;
use agenthooks_crds::sealed::SealKey;
use agenthooks_crds::validation::check_hook_url;
use agenthooks_crds::{DEFAULT_MASTER_NAMESPACE, Edition};
use agenthooks_dispatcher::manifests::{self, LoadError};

static KEY: LazyLock<SealKey> = LazyLock::new(|| SealKey::from_bytes(&[7u8; 32]).unwrap());

/// One file per process (libFuzzer runs one input at a time; the replay test runs its
/// targets on one thread), named after the process and thread so runs do not meet.
fn scratch() -> PathBuf {
    let dir = std::env::temp_dir().join(format!("agenthooks-fuzz-{}", std::process::id()));
    std::fs::create_dir_all(&dir).expect("temporary directory");
    dir.join(format!("{:?}.yaml", std::thread::current().id()).replace(['(', ')'], ""))
}

/// The target body: `data` as a hooks file, loaded for the lite edition.
pub fn run(data: &[u8]) {
    let path = scratch();
    std::fs::write(&path, data).expect("write the hooks file");
    let loaded = manifests::load_all(&path, DEFAULT_MASTER_NAMESPACE, Edition::Lite, &KEY);
    let _ = std::fs::remove_file(&path);
    let loaded = match loaded {
        Ok(l) => l,
        Err(LoadError::Document { doc, message, .. }) => {
            assert!(doc >= 1 && !message.is_empty());
            return;
        }
        Err(LoadError::Empty { .. }) | Err(LoadError::Io { .. }) => return,
    };
    assert!(!loaded.hooks.is_empty(), "an accepted file has a hook");
    for hook in loaded.hooks.iter() {
        let spec = &hook.source.spec;
        let c = &hook.compiled;
        let master = hook.source.namespace == DEFAULT_MASTER_NAMESPACE;
        assert_eq!(
            hook.key,
            format!("{}/{}", hook.source.namespace, hook.source.name)
        );
        assert!(
            (1..=MAX_TIMEOUT_MS).contains(&c.timeout_ms),
            "timeout {}",
            c.timeout_ms
        );
        assert_eq!(c.master, master, "master flag of {}", hook.key);
        if spec.scope == HookScope::Global {
            assert!(
                master,
                "global hook {} outside the master namespace",
                hook.key
            );
        }
        if spec.scope == HookScope::Agent {
            assert!(
                !spec.agent_ids.is_empty(),
                "agent hook {} without agent ids",
                hook.key
            );
        }
        if let Some(e) = &c.if_expr {
            assert!(e.cost() <= MAX_COST, "ifExpr cost {} accepted", e.cost());
        }
        if spec.if_expr.is_empty() {
            assert!(c.if_expr.is_none(), "an empty ifExpr compiled");
        }
        let h = &spec.handler;
        match h.type_ {
            HandlerType::Command => assert!(h.command.is_some(), "command hook without command"),
            HandlerType::Http => {
                let http = h.http.as_ref().expect("http hook without http");
                check_hook_url(&http.url).expect("an accepted http hook has a valid URL");
            }
            HandlerType::Prompt => {
                assert!(h.prompt.is_some(), "prompt hook without prompt");
                assert!(
                    c.matcher.is_some() || c.if_expr.is_some(),
                    "prompt hook {} without a filter",
                    hook.key
                );
            }
        }
    }
}
