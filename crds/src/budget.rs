//! The `TenantHookBudget` custom resource (DESIGN "TenantHookBudget").

// kube's `printcolumn(...)` repeats `type_ = ...` across columns, which clippy reads as
// duplicated attributes.
#![allow(clippy::duplicated_attributes)]

use k8s_openapi::apimachinery::pkg::apis::meta::v1::Condition;
use kube::{CustomResource, KubeSchema};
use serde::{Deserialize, Serialize};

/// Default monthly token budget of a tenant (seed: 1,000,000).
pub const DEFAULT_MONTHLY_TOKENS: i64 = 1_000_000;

/// Spec of a tenant's monthly token budget for LLM-evaluated hooks.
#[derive(CustomResource, KubeSchema, Serialize, Deserialize, Clone, Debug, PartialEq)]
#[kube(
    group = "agenthooks.io",
    version = "v1alpha1",
    kind = "TenantHookBudget",
    plural = "tenanthookbudgets",
    shortname = "thb",
    category = "agenthooks",
    namespaced,
    status = "TenantHookBudgetStatus",
    derive = "PartialEq",
    doc = "A tenant's monthly token budget for prompt hooks.",
    printcolumn(name = "Period", type_ = "string", json_path = ".status.period"),
    printcolumn(name = "Used", type_ = "integer", json_path = ".status.used"),
    printcolumn(name = "Remaining", type_ = "integer", json_path = ".status.remaining"),
    printcolumn(name = "State", type_ = "string", json_path = ".status.state"),
    printcolumn(
        name = "Age",
        type_ = "date",
        json_path = ".metadata.creationTimestamp"
    )
)]
#[serde(rename_all = "camelCase")]
pub struct TenantHookBudgetSpec {
    /// Tenant, when the budget lives in the master namespace; else the namespace's tenant.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    #[schemars(length(max = 253))]
    pub tenant: Option<String>,
    /// Tokens a month (UTC); default 1,000,000.
    #[serde(default = "default_monthly_tokens")]
    #[schemars(range(min = 0))]
    pub monthly_tokens: i64,
}

fn default_monthly_tokens() -> i64 {
    DEFAULT_MONTHLY_TOKENS
}

/// Status of a budget.
#[derive(KubeSchema, Serialize, Deserialize, Clone, Debug, Default, PartialEq)]
#[serde(rename_all = "camelCase")]
pub struct TenantHookBudgetStatus {
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub observed_generation: Option<i64>,
    /// UTC month, `YYYY-MM`.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub period: Option<String>,
    #[serde(default)]
    pub used: i64,
    #[serde(default)]
    pub remaining: i64,
    /// `Ok`, `Warning` (below 20% remaining) or `Exhausted` (0).
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub state: Option<String>,
    #[serde(default, skip_serializing_if = "Vec::is_empty")]
    #[x_kube(merge_strategy = ListMerge::Map(vec!["type".into()]))]
    pub conditions: Vec<Condition>,
}
