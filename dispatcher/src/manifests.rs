//! AgentHook manifests for standalone mode and `check` (DESIGN "Standalone mode").
//!
//! Reads the same YAML `kubectl apply` takes: a file, a multi-document file, or a
//! directory of `*.yaml`/`*.yml`/`*.json` files (sorted by name). Documents of kind
//! `AgentHook` become hooks, and so do the items of a `List` (a cluster's export,
//! `kubectl get agenthooks -A -o yaml`); `Namespace` documents give namespaces their tenant label;
//! `Secret` documents (`data` or `stringData`) feed `valueFrom.secretKeyRef` headers when
//! they carry the opt-in label `agenthooks.io/hook-secret: "true"`, as in a cluster
//! (CONTRACT §9.6; the same rule, [`agenthooks_crds::rules::hook_secret`], so a hooks
//! directory that loads here is accepted by the operator too);
//! `TenantHookBudget` documents become the standalone budget ledger
//! ([`crate::budget::local`]). Any other kind, a duplicate hook or budget, or a hook or
//! budget that fails validation refuses the whole load: a dispatcher never starts
//! half-loaded.

use std::collections::{BTreeMap, HashMap};
use std::path::{Path, PathBuf};

use agenthooks_crds::TenantHookBudgetSpec;
use agenthooks_crds::agenthook::AgentHookSpec;
use agenthooks_crds::rules::hook_secret::{self, SecretAccess};
use agenthooks_crds::sealed::SealKey;
use agenthooks_crds::tenancy::namespace_tenant;
use agenthooks_crds::{Edition, GROUP, VERSION};
use base64::Engine;
use base64::engine::general_purpose::STANDARD as BASE64;
use serde::Deserialize;

use agenthooks_crds::snapshot::{SealedHeader, SnapshotHook};

use crate::budget::local::LocalBudget;
use crate::hookset::HookSet;

/// Everything a hooks path holds for standalone mode.
#[derive(Debug)]
pub struct Loaded {
    pub hooks: HookSet,
    /// TenantHookBudget documents, one per tenant at most, in file order.
    pub budgets: Vec<LocalBudget>,
    /// Namespaces (not the master namespace) whose hooks took their namespace's name as
    /// tenant because no `Namespace` document with an `agenthooks.io/tenant` label names
    /// another: a hooks file copied without its `Namespace` document guards a tenant no
    /// caller sends. Sorted; the caller warns of them.
    pub unlabelled_namespaces: Vec<String>,
}

impl Loaded {
    /// One warning line for [`Loaded::unlabelled_namespaces`], if any.
    pub fn unlabelled_warning(&self) -> Option<String> {
        (!self.unlabelled_namespaces.is_empty()).then(|| {
            format!(
                "hooks in namespace(s) {} apply to the tenant of the same name: no Namespace document with label {} names their tenant in the hooks files",
                self.unlabelled_namespaces.join(", "),
                agenthooks_crds::TENANT_LABEL
            )
        })
    }
}

/// `a, b, c` for the paths of a [`LoadError::Empty`].
fn shown(paths: &[PathBuf]) -> String {
    let shown: Vec<String> = paths.iter().map(|p| p.display().to_string()).collect();
    shown.join(", ")
}

struct PendingBudget {
    path: PathBuf,
    doc: usize,
    namespace: String,
    name: String,
    spec: TenantHookBudgetSpec,
}

/// Fields a TenantHookBudget spec may hold (unknown ones are refused, like the API
/// server's structural schema does).
const BUDGET_SPEC_FIELDS: [&str; 2] = ["tenant", "monthlyTokens"];

/// Why a hooks path could not be loaded. Every message names the file, the document
/// (1-based) and the field.
#[derive(Debug, thiserror::Error)]
pub enum LoadError {
    #[error("{path}: {error}")]
    Io {
        path: PathBuf,
        error: std::io::Error,
    },
    #[error("{path}: document {doc}: {message}")]
    Document {
        path: PathBuf,
        doc: usize,
        message: String,
    },
    #[error("{}: no AgentHook found", shown(paths))]
    Empty { paths: Vec<PathBuf> },
}

#[derive(Deserialize)]
#[serde(rename_all = "camelCase")]
struct Header {
    #[serde(default)]
    api_version: String,
    #[serde(default)]
    kind: String,
    #[serde(default)]
    metadata: Meta,
}

#[derive(Deserialize, Default)]
#[serde(rename_all = "camelCase")]
struct Meta {
    #[serde(default)]
    name: String,
    #[serde(default)]
    namespace: Option<String>,
    #[serde(default)]
    labels: Option<BTreeMap<String, String>>,
    #[serde(default)]
    creation_timestamp: Option<String>,
    #[serde(default)]
    generation: Option<i64>,
    #[serde(default)]
    uid: Option<String>,
}

#[derive(Deserialize)]
#[serde(rename_all = "camelCase")]
struct HookDoc {
    spec: AgentHookSpec,
}

#[derive(Deserialize)]
struct BudgetDoc {
    spec: TenantHookBudgetSpec,
}

#[derive(Deserialize)]
#[serde(rename_all = "camelCase")]
struct SecretDoc {
    #[serde(default)]
    data: BTreeMap<String, String>,
    #[serde(default)]
    string_data: BTreeMap<String, String>,
}

struct PendingHook {
    path: PathBuf,
    doc: usize,
    meta: Meta,
    namespace: String,
    spec: AgentHookSpec,
}

/// Loads every AgentHook under `path` and compiles them into a [`HookSet`] for
/// `edition`, sealing header values with `key`. Hooks get `uid`
/// `standalone:<namespace>/<name>` and generation 1 unless their metadata says otherwise.
/// TenantHookBudget documents are checked and left out (see [`load_all`]).
pub fn load(
    path: &Path,
    master_namespace: &str,
    edition: Edition,
    key: &SealKey,
) -> Result<HookSet, LoadError> {
    load_all(path, master_namespace, edition, key).map(|l| l.hooks)
}

/// [`load`], plus the TenantHookBudget documents. A budget's tenant is its
/// `spec.tenant` in the master namespace, else its namespace's tenant (a `spec.tenant`
/// naming another tenant there is refused, `TenantMismatch`, DESIGN "Tenancy and
/// scope"); `spec.monthlyTokens` defaults to 1,000,000 and may not be negative; two
/// budgets for one tenant refuse the load.
pub fn load_all(
    path: &Path,
    master_namespace: &str,
    edition: Edition,
    key: &SealKey,
) -> Result<Loaded, LoadError> {
    load_paths(&[path], master_namespace, edition, key)
}

/// [`load_all`] on several paths (files or directories) taken as one hooks folder: a
/// hook may be defined once in all of them, and a `Namespace` or `Secret` document in
/// one applies to hooks in the others.
pub fn load_paths(
    paths: &[&Path],
    master_namespace: &str,
    edition: Edition,
    key: &SealKey,
) -> Result<Loaded, LoadError> {
    let mut files = Vec::new();
    for path in paths {
        files.extend(list_files(path)?);
    }
    let mut gathered = Gathered::default();
    for file in &files {
        let text = std::fs::read_to_string(file).map_err(|error| LoadError::Io {
            path: file.clone(),
            error,
        })?;
        for (i, doc) in serde_norway::Deserializer::from_str(&text).enumerate() {
            let n = i + 1;
            let value = serde_norway::Value::deserialize(doc).map_err(|e| LoadError::Document {
                path: file.clone(),
                doc: n,
                message: format!("not YAML: {e}"),
            })?;
            gathered.take(file, n, "", value)?;
        }
    }
    let Gathered {
        budgets,
        hooks,
        namespaces,
        secrets,
    } = gathered;
    if hooks.is_empty() {
        return Err(LoadError::Empty {
            paths: paths.iter().map(|p| p.to_path_buf()).collect(),
        });
    }
    let unlabelled: std::collections::BTreeSet<String> = hooks
        .iter()
        .filter(|h| {
            h.namespace != master_namespace
                && namespaces
                    .get(&h.namespace)
                    .and_then(|l| l.get(agenthooks_crds::TENANT_LABEL))
                    .is_none_or(|t| t.is_empty())
        })
        .map(|h| h.namespace.clone())
        .collect();
    let mut sources = Vec::with_capacity(hooks.len());
    let mut origin: HashMap<(String, String), (PathBuf, usize)> = HashMap::new();
    for h in hooks {
        let tenant = namespace_tenant(&h.namespace, namespaces.get(&h.namespace)).to_string();
        let mut headers = Vec::new();
        if let Some(http) = &h.spec.handler.http {
            for header in &http.headers {
                let value: Vec<u8> = match (&header.value, &header.value_from) {
                    (Some(v), _) => v.clone().into_bytes(),
                    (None, Some(from)) => {
                        let r = &from.secret_key_ref;
                        let herr = |message: String| LoadError::Document {
                            path: h.path.clone(),
                            doc: h.doc,
                            message,
                        };
                        let found = secrets.get(&(h.namespace.clone(), r.name.clone()));
                        match hook_secret::access(
                            found.is_some(),
                            found.and_then(|(labels, _)| labels.as_ref()),
                        ) {
                            SecretAccess::OptedIn => found
                                .and_then(|(_, values)| values.get(&r.key))
                                .cloned()
                                .ok_or_else(|| {
                                    herr(format!(
                                        "spec.handler.http.headers: Secret {}/{} key {:?} not found in the hooks files",
                                        h.namespace, r.name, r.key
                                    ))
                                })?,
                            SecretAccess::NotOptedIn => {
                                return Err(herr(format!(
                                    "{} (add it to the Secret document's metadata.labels)",
                                    hook_secret::not_opted_in_message(
                                        &format!(
                                            "spec.handler.http.headers[name={}].valueFrom.secretKeyRef",
                                            header.name
                                        ),
                                        &h.namespace,
                                        &r.name
                                    )
                                )));
                            }
                            SecretAccess::Missing => {
                                return Err(herr(format!(
                                    "spec.handler.http.headers: Secret {}/{} key {:?} not found in the hooks files",
                                    h.namespace, r.name, r.key
                                )));
                            }
                        }
                    }
                    (None, None) => Vec::new(), // refused by validation below
                };
                headers.push(SealedHeader {
                    name: header.name.clone(),
                    sealed: key.seal(&value),
                });
            }
        }
        origin.insert(
            (h.namespace.clone(), h.meta.name.clone()),
            (h.path.clone(), h.doc),
        );
        sources.push(SnapshotHook {
            uid: h
                .meta
                .uid
                .clone()
                .unwrap_or_else(|| format!("standalone:{}/{}", h.namespace, h.meta.name)),
            generation: h.meta.generation.unwrap_or(1),
            created_at: h.meta.creation_timestamp.clone().unwrap_or_default(),
            namespace: h.namespace,
            name: h.meta.name,
            namespace_tenant: tenant,
            spec: h.spec,
            sealed_headers: headers,
            open_breakers: Vec::new(),
            reset_token: None,
        });
    }
    let (set, rejected) = HookSet::build(sources, master_namespace, edition, 1, None);
    if let Some(r) = rejected.into_iter().next() {
        let (path, doc) = origin
            .remove(&(r.namespace.clone(), r.name.clone()))
            .unwrap_or_default();
        return Err(LoadError::Document {
            path,
            doc,
            message: format!("AgentHook {}/{}: {}", r.namespace, r.name, r.errors),
        });
    }
    let budgets = resolve_budgets(budgets, &namespaces, master_namespace)?;
    Ok(Loaded {
        hooks: set,
        budgets,
        unlabelled_namespaces: unlabelled.into_iter().collect(),
    })
}

/// (namespace, name) of a Secret document → (labels, values).
type SecretValues = (Option<BTreeMap<String, String>>, BTreeMap<String, Vec<u8>>);

/// The documents of the hooks files, by kind, before the hooks are compiled.
#[derive(Default)]
struct Gathered {
    budgets: Vec<PendingBudget>,
    hooks: Vec<PendingHook>,
    namespaces: HashMap<String, BTreeMap<String, String>>,
    secrets: HashMap<(String, String), SecretValues>,
}

impl Gathered {
    /// Takes document `n` of `file` (`at`: where in it, `""` for the document itself,
    /// `"items[3]: "` for an item of a `List`, as `kubectl get agenthooks -A -o yaml`
    /// writes). Errors name the file, the document and the field.
    fn take(
        &mut self,
        file: &Path,
        n: usize,
        at: &str,
        value: serde_norway::Value,
    ) -> Result<(), LoadError> {
        let derr = |message: String| LoadError::Document {
            path: file.to_path_buf(),
            doc: n,
            message: format!("{at}{message}"),
        };
        if value.is_null() {
            return Ok(());
        }
        let head: Header =
            from_value(value.clone()).map_err(|e| derr(format!("bad header: {e}")))?;
        match head.kind.as_str() {
            "List" => {
                let Some(items) = value.get("items").and_then(|i| i.as_sequence()) else {
                    return Err(derr("items: a List needs a list of items".into()));
                };
                for (j, item) in items.iter().enumerate() {
                    self.take(file, n, &format!("{at}items[{j}]: "), item.clone())?;
                }
            }
            "AgentHook" | "TenantHookBudget" => {
                let want = format!("{GROUP}/{VERSION}");
                if head.api_version != want {
                    return Err(derr(format!(
                        "apiVersion: {:?} is not {want}",
                        head.api_version
                    )));
                }
                if head.metadata.name.is_empty() {
                    return Err(derr("metadata.name: required".into()));
                }
                if !agenthooks_crds::names::is_dns_subdomain(&head.metadata.name) {
                    return Err(derr(format!(
                        "metadata.name: {:?} is not a Kubernetes object name (lowercase letters, digits, '-' and '.', at most 253)",
                        head.metadata.name
                    )));
                }
                if let Some(ns) = &head.metadata.namespace
                    && !agenthooks_crds::names::is_dns_label(ns)
                {
                    return Err(derr(format!(
                        "metadata.namespace: {ns:?} is not a namespace name (lowercase letters, digits and '-', at most 63)"
                    )));
                }
                if head.kind == "TenantHookBudget" {
                    if let Some(spec) = value.get("spec").and_then(|s| s.as_mapping()) {
                        for k in spec.keys() {
                            let k = k.as_str().unwrap_or("?");
                            if !BUDGET_SPEC_FIELDS.contains(&k) {
                                return Err(derr(format!(
                                    "spec.{k}: unknown field, expected one of {BUDGET_SPEC_FIELDS:?}"
                                )));
                            }
                        }
                    }
                    let bd: BudgetDoc = from_value(value).map_err(derr)?;
                    if bd.spec.monthly_tokens < 0 {
                        return Err(derr(format!(
                            "spec.monthlyTokens: must be 0 or more, not {}",
                            bd.spec.monthly_tokens
                        )));
                    }
                    self.budgets.push(PendingBudget {
                        path: file.to_path_buf(),
                        doc: n,
                        namespace: head
                            .metadata
                            .namespace
                            .clone()
                            .unwrap_or_else(|| "default".into()),
                        name: head.metadata.name,
                        spec: bd.spec,
                    });
                    return Ok(());
                }
                let hd: HookDoc = from_value(value).map_err(derr)?;
                let namespace = head
                    .metadata
                    .namespace
                    .clone()
                    .unwrap_or_else(|| "default".into());
                if self
                    .hooks
                    .iter()
                    .any(|h| h.namespace == namespace && h.meta.name == head.metadata.name)
                {
                    return Err(derr(format!(
                        "AgentHook {namespace}/{} is defined twice",
                        head.metadata.name
                    )));
                }
                self.hooks.push(PendingHook {
                    path: file.to_path_buf(),
                    doc: n,
                    meta: head.metadata,
                    namespace,
                    spec: hd.spec,
                });
            }
            "Namespace" => {
                self.namespaces.insert(
                    head.metadata.name.clone(),
                    head.metadata.labels.unwrap_or_default(),
                );
            }
            "Secret" => {
                let sd: SecretDoc = from_value(value).map_err(derr)?;
                let mut values: BTreeMap<String, Vec<u8>> = BTreeMap::new();
                for (k, v) in sd.data {
                    let compact: String = v.split_whitespace().collect();
                    let raw = BASE64
                        .decode(compact)
                        .map_err(|_| derr(format!("data.{k}: not base64")))?;
                    values.insert(k, raw);
                }
                for (k, v) in sd.string_data {
                    values.insert(k, v.into_bytes());
                }
                let ns = head.metadata.namespace.unwrap_or_else(|| "default".into());
                self.secrets
                    .insert((ns, head.metadata.name), (head.metadata.labels, values));
            }
            other => {
                return Err(derr(format!(
                    "kind: {other:?} is not AgentHook, Namespace, Secret, TenantHookBudget or List"
                )));
            }
        }
        Ok(())
    }
}

/// Gives each budget its tenant and refuses mismatches and duplicates.
fn resolve_budgets(
    pending: Vec<PendingBudget>,
    namespaces: &HashMap<String, BTreeMap<String, String>>,
    master_namespace: &str,
) -> Result<Vec<LocalBudget>, LoadError> {
    let mut out: Vec<LocalBudget> = Vec::with_capacity(pending.len());
    for b in pending {
        let derr = |message: String| LoadError::Document {
            path: b.path.clone(),
            doc: b.doc,
            message,
        };
        let ns_tenant = namespace_tenant(&b.namespace, namespaces.get(&b.namespace)).to_string();
        let tenant = match b.spec.tenant.as_deref().filter(|t| !t.is_empty()) {
            Some(t) if b.namespace == master_namespace => t.to_string(),
            Some(t) if t != ns_tenant => {
                return Err(derr(format!(
                    "spec.tenant: TenantMismatch: {t:?} is not the tenant of namespace {} ({ns_tenant:?}); only a budget in the master namespace {master_namespace} may name another tenant",
                    b.namespace
                )));
            }
            _ => ns_tenant,
        };
        if let Some(other) = out
            .iter()
            .find(|o| o.tenant == tenant || (o.namespace == b.namespace && o.name == b.name))
        {
            return Err(derr(format!(
                "TenantHookBudget {}/{}: tenant {tenant:?} already has TenantHookBudget {}/{}",
                b.namespace, b.name, other.namespace, other.name
            )));
        }
        out.push(LocalBudget {
            namespace: b.namespace,
            name: b.name,
            tenant,
            spec: b.spec,
        });
    }
    Ok(out)
}

/// `serde_norway::from_value` with errors that start with the path of the field
/// (`spec.event: unknown variant ...`, `spec.handler: missing field ...`).
fn from_value<T: serde::de::DeserializeOwned>(value: serde_norway::Value) -> Result<T, String> {
    deserialize_at_path(value).map_err(|(path, message)| {
        if path.is_empty() {
            message
        } else {
            format!("{path}: {message}")
        }
    })
}

/// Deserializes `d`; an error gives the dotted path of the offending field (`""` for the
/// root) and serde's message. A missing field is reported at the field itself, not at
/// the map that lacks it (`handler.type`, not `handler`). Shared by the hooks files and
/// `POST /v1/test` inline specs, so both name fields the same way.
pub(crate) fn deserialize_at_path<'de, T, D>(d: D) -> Result<T, (String, String)>
where
    T: serde::Deserialize<'de>,
    D: serde::Deserializer<'de>,
{
    serde_path_to_error::deserialize(d).map_err(|e| {
        let path = e.path().to_string();
        let message = e.into_inner().to_string();
        let missing = message
            .strip_prefix("missing field `")
            .and_then(|m| m.strip_suffix('`'));
        let path = match (missing, path.as_str()) {
            (Some(name), ".") => name.to_owned(),
            (Some(name), _) => format!("{path}.{name}"),
            (None, ".") => String::new(),
            (None, _) => path,
        };
        (path, message)
    })
}

fn list_files(path: &Path) -> Result<Vec<PathBuf>, LoadError> {
    let meta = std::fs::metadata(path).map_err(|error| LoadError::Io {
        path: path.to_path_buf(),
        error,
    })?;
    if meta.is_file() {
        return Ok(vec![path.to_path_buf()]);
    }
    let mut files: Vec<PathBuf> = std::fs::read_dir(path)
        .map_err(|error| LoadError::Io {
            path: path.to_path_buf(),
            error,
        })?
        .filter_map(|e| e.ok().map(|e| e.path()))
        .filter(|p| {
            p.is_file()
                && matches!(
                    p.extension().and_then(|e| e.to_str()),
                    Some("yaml" | "yml" | "json")
                )
        })
        .collect();
    files.sort();
    Ok(files)
}

#[cfg(test)]
mod tests;
