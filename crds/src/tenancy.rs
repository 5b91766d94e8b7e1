//! Tenancy (DESIGN "Tenancy and scope") and editions (DESIGN "Editions").

use std::collections::BTreeMap;

/// The tenant of a namespace: its label `agenthooks.io/tenant`, else its name.
pub fn namespace_tenant<'a>(
    namespace: &'a str,
    labels: Option<&'a BTreeMap<String, String>>,
) -> &'a str {
    labels
        .and_then(|l| l.get(crate::TENANT_LABEL))
        .map(String::as_str)
        .filter(|t| !t.is_empty())
        .unwrap_or(namespace)
}

/// Product edition: `lite` runs `command` hooks, `standard` never does (seed "Handler types").
#[derive(Debug, Clone, Copy, PartialEq, Eq, Default, serde::Serialize, serde::Deserialize)]
#[serde(rename_all = "lowercase")]
pub enum Edition {
    #[default]
    Lite,
    Standard,
}

impl std::str::FromStr for Edition {
    type Err = String;
    fn from_str(s: &str) -> Result<Self, Self::Err> {
        match s {
            "lite" => Ok(Edition::Lite),
            "standard" => Ok(Edition::Standard),
            other => Err(format!("edition must be lite or standard, not {other:?}")),
        }
    }
}

impl std::fmt::Display for Edition {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.write_str(match self {
            Edition::Lite => "lite",
            Edition::Standard => "standard",
        })
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn label_wins_over_namespace_name() {
        let mut labels = BTreeMap::new();
        assert_eq!(namespace_tenant("team-a", Some(&labels)), "team-a");
        labels.insert(crate::TENANT_LABEL.to_string(), "acme".to_string());
        assert_eq!(namespace_tenant("team-a", Some(&labels)), "acme");
        assert_eq!(namespace_tenant("team-a", None), "team-a");
    }

    #[test]
    fn edition_parses_two_words_only() {
        assert_eq!("lite".parse::<Edition>(), Ok(Edition::Lite));
        assert_eq!("standard".parse::<Edition>(), Ok(Edition::Standard));
        assert!("Standard".parse::<Edition>().is_err());
    }
}
