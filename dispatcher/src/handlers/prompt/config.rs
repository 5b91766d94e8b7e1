//! The providers file: which model APIs the prompt handler may call, with which key, and
//! the model aliases hooks name (CONTRACT §5 prompt.6; issue 4 point 1).
//!
//! ```yaml
//! providers:
//!   - name: anthropic               # unique; models refer to it
//!     kind: anthropic               # openai (chat completions) | anthropic (Messages API)
//!     baseUrl: https://api.anthropic.com
//!     apiKeyFile: /var/run/secrets/agenthooks/anthropic/api-key   # a mounted Secret
//! models:
//!   haiku: {provider: anthropic, model: claude-3-5-haiku-latest}
//! defaultModel: haiku               # used when a hook names no model
//! ```
//!
//! Base URLs are set by the platform team, so they are not subject to the hook SSRF
//! guard. The API key is read once at load (trailing whitespace trimmed; a rotated
//! Secret needs a restart) and is never logged: [`ApiKey`]'s `Debug` prints `<redacted>`.
//! Every error names the file and the field, e.g.
//! `providers.yaml: models.haiku.provider: unknown provider "anthropc"`.

use std::collections::BTreeMap;
use std::path::{Path, PathBuf};

use serde::Deserialize;
use url::Url;

/// The wire format a provider speaks.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Deserialize)]
#[serde(rename_all = "lowercase")]
pub enum ProviderKind {
    /// OpenAI-compatible chat completions: `POST {baseUrl}/chat/completions`,
    /// `Authorization: Bearer <key>`.
    Openai,
    /// Anthropic Messages: `POST {baseUrl}/v1/messages`, `x-api-key` and
    /// `anthropic-version` headers.
    Anthropic,
}

impl ProviderKind {
    /// `openai` or `anthropic` (metrics label, logs).
    pub fn as_str(self) -> &'static str {
        match self {
            ProviderKind::Openai => "openai",
            ProviderKind::Anthropic => "anthropic",
        }
    }
}

/// An API key. `Debug` and `Display` never show it.
#[derive(Clone, PartialEq, Eq)]
pub struct ApiKey(String);

impl ApiKey {
    /// A key from its text (tests).
    pub fn new(key: impl Into<String>) -> ApiKey {
        ApiKey(key.into())
    }
    /// The secret, for the request header only.
    pub fn expose(&self) -> &str {
        &self.0
    }
}

impl std::fmt::Debug for ApiKey {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.write_str("<redacted>")
    }
}

/// One provider, checked.
#[derive(Debug, Clone, PartialEq)]
pub struct Provider {
    pub name: String,
    pub kind: ProviderKind,
    /// `http` or `https`, no query or fragment; a trailing `/` is dropped.
    pub base_url: String,
    pub api_key: ApiKey,
}

impl Provider {
    /// The endpoint a request is POSTed to: `{baseUrl}/chat/completions` (openai) or
    /// `{baseUrl}/v1/messages` (anthropic).
    pub fn endpoint(&self) -> String {
        match self.kind {
            ProviderKind::Openai => format!("{}/chat/completions", self.base_url),
            ProviderKind::Anthropic => format!("{}/v1/messages", self.base_url),
        }
    }
}

/// A model alias resolved: the provider to call and the model name it knows.
#[derive(Debug, Clone, PartialEq)]
pub struct ResolvedModel<'a> {
    pub alias: &'a str,
    pub provider: &'a Provider,
    pub model: &'a str,
}

/// The checked providers file.
#[derive(Debug, Clone, PartialEq)]
pub struct ProvidersConfig {
    /// Where it was read from (shown in errors and logs).
    pub file: PathBuf,
    pub providers: Vec<Provider>,
    /// alias → (index into `providers`, model name).
    pub models: BTreeMap<String, (usize, String)>,
    pub default_model: Option<String>,
}

/// Why a providers file cannot be used: `{file}: {field}: {message}`.
#[derive(Debug, thiserror::Error, PartialEq)]
#[error("{file}: {field}: {message}")]
pub struct ConfigError {
    pub file: String,
    /// Field path, e.g. `providers[1].apiKeyFile`, `models.haiku.provider`; `(file)` for
    /// the file itself.
    pub field: String,
    pub message: String,
}

#[derive(Deserialize)]
#[serde(rename_all = "camelCase", deny_unknown_fields)]
struct RawFile {
    #[serde(default)]
    providers: Vec<RawProvider>,
    #[serde(default)]
    models: BTreeMap<String, RawModel>,
    #[serde(default)]
    default_model: Option<String>,
}

#[derive(Deserialize)]
#[serde(rename_all = "camelCase", deny_unknown_fields)]
struct RawProvider {
    name: String,
    kind: ProviderKind,
    base_url: String,
    api_key_file: PathBuf,
}

#[derive(Deserialize)]
#[serde(deny_unknown_fields)]
struct RawModel {
    provider: String,
    model: String,
}

impl ProvidersConfig {
    /// Reads and checks a providers file; relative `apiKeyFile` paths are taken from
    /// the file's directory. Errors: [`ConfigError`] naming the file and the field.
    pub fn load(path: &Path) -> Result<ProvidersConfig, ConfigError> {
        let file = path.display().to_string();
        let text = std::fs::read_to_string(path).map_err(|e| ConfigError {
            file: file.clone(),
            field: "(file)".into(),
            message: e.to_string(),
        })?;
        let base = path.parent().unwrap_or(Path::new("."));
        ProvidersConfig::parse(&text, path, |key_path| {
            let p = if key_path.is_relative() {
                base.join(key_path)
            } else {
                key_path.to_path_buf()
            };
            std::fs::read_to_string(&p).map_err(|e| format!("{}: {e}", p.display()))
        })
    }

    /// Parses a providers file's text; `read_key` reads an `apiKeyFile` (tests pass
    /// their own). Same errors as [`ProvidersConfig::load`].
    pub fn parse(
        text: &str,
        path: &Path,
        read_key: impl Fn(&Path) -> Result<String, String>,
    ) -> Result<ProvidersConfig, ConfigError> {
        let file = path.display().to_string();
        let err = |field: String, message: String| ConfigError {
            file: file.clone(),
            field,
            message,
        };
        let de = serde_norway::Deserializer::from_str(text);
        let raw: RawFile = serde_path_to_error::deserialize(de).map_err(|e| {
            let field = e.path().to_string();
            let field = if field == "." { "(file)".into() } else { field };
            // serde_norway may lead its message with the same path: keep it once.
            let message = e.into_inner().to_string();
            let message = match message.split_once(": ") {
                Some((lead, rest)) if field.starts_with(lead) => rest.to_owned(),
                _ => message,
            };
            err(field, message)
        })?;
        let mut providers: Vec<Provider> = Vec::with_capacity(raw.providers.len());
        for (i, p) in raw.providers.into_iter().enumerate() {
            let at = |f: &str| format!("providers[{i}].{f}");
            if p.name.trim().is_empty() {
                return Err(err(at("name"), "must not be empty".into()));
            }
            if providers.iter().any(|q| q.name == p.name) {
                return Err(err(
                    at("name"),
                    format!("provider {:?} is defined twice", p.name),
                ));
            }
            let url = Url::parse(&p.base_url)
                .map_err(|e| err(at("baseUrl"), format!("{:?} is not a URL: {e}", p.base_url)))?;
            if !matches!(url.scheme(), "http" | "https") || url.host().is_none() {
                return Err(err(
                    at("baseUrl"),
                    format!("{:?} must be an http or https URL with a host", p.base_url),
                ));
            }
            if url.query().is_some() || url.fragment().is_some() || !url.username().is_empty() {
                return Err(err(
                    at("baseUrl"),
                    "must carry no query, fragment or user info".into(),
                ));
            }
            let key = read_key(&p.api_key_file).map_err(|e| err(at("apiKeyFile"), e))?;
            let key = key.trim();
            if key.is_empty() {
                return Err(err(
                    at("apiKeyFile"),
                    format!("{} is empty", p.api_key_file.display()),
                ));
            }
            if key.contains(['\r', '\n']) || key.chars().any(|c| c.is_control()) {
                return Err(err(
                    at("apiKeyFile"),
                    format!(
                        "{} holds control characters; one key on one line is expected",
                        p.api_key_file.display()
                    ),
                ));
            }
            providers.push(Provider {
                name: p.name,
                kind: p.kind,
                base_url: url.as_str().trim_end_matches('/').to_owned(),
                api_key: ApiKey(key.to_owned()),
            });
        }
        let mut models = BTreeMap::new();
        for (alias, m) in raw.models {
            let Some(index) = providers.iter().position(|p| p.name == m.provider) else {
                return Err(err(
                    format!("models.{alias}.provider"),
                    format!("unknown provider {:?}", m.provider),
                ));
            };
            if m.model.trim().is_empty() {
                return Err(err(
                    format!("models.{alias}.model"),
                    "must not be empty".into(),
                ));
            }
            models.insert(alias, (index, m.model));
        }
        if let Some(d) = &raw.default_model
            && !models.contains_key(d)
        {
            return Err(err(
                "defaultModel".into(),
                format!("{d:?} is not an alias under models"),
            ));
        }
        Ok(ProvidersConfig {
            file: path.to_path_buf(),
            providers,
            models,
            default_model: raw.default_model,
        })
    }

    /// The hook's alias, or `defaultModel` when it names none. `Err` carries the alias
    /// that could not be resolved (`""` when neither is set).
    pub fn resolve<'a>(&'a self, alias: Option<&'a str>) -> Result<ResolvedModel<'a>, &'a str> {
        let alias = match alias.filter(|a| !a.is_empty()) {
            Some(a) => a,
            None => self.default_model.as_deref().ok_or("")?,
        };
        let (alias, (index, model)) = self.models.get_key_value(alias).ok_or(alias)?;
        Ok(ResolvedModel {
            alias,
            provider: &self.providers[*index],
            model,
        })
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    const GOOD: &str = "
providers:
  - {name: oa, kind: openai, baseUrl: 'https://api.example.com/v1/', apiKeyFile: oa.key}
  - {name: an, kind: anthropic, baseUrl: 'http://127.0.0.1:9', apiKeyFile: /abs/an.key}
models:
  gpt-4o-mini: {provider: oa, model: gpt-4o-mini-2024-07-18}
  haiku: {provider: an, model: claude-3-5-haiku-latest}
defaultModel: haiku
";

    fn keys(p: &Path) -> Result<String, String> {
        match p.to_str() {
            Some("oa.key") => Ok("sk-oa-secret\n".into()),
            Some("/abs/an.key") => Ok("sk-ant-secret".into()),
            Some("empty.key") => Ok("  \n".into()),
            Some("two.key") => Ok("a\nb".into()),
            _ => Err(format!("{}: No such file or directory", p.display())),
        }
    }

    fn parse(text: &str) -> Result<ProvidersConfig, ConfigError> {
        ProvidersConfig::parse(text, Path::new("providers.yaml"), keys)
    }

    #[test]
    fn a_good_file_resolves_aliases_and_the_default() {
        let c = parse(GOOD).unwrap();
        assert_eq!(c.providers[0].base_url, "https://api.example.com/v1");
        assert_eq!(
            c.providers[0].endpoint(),
            "https://api.example.com/v1/chat/completions"
        );
        assert_eq!(c.providers[1].endpoint(), "http://127.0.0.1:9/v1/messages");
        assert_eq!(c.providers[0].api_key.expose(), "sk-oa-secret");
        let r = c.resolve(Some("gpt-4o-mini")).unwrap();
        assert_eq!(
            (r.provider.name.as_str(), r.model),
            ("oa", "gpt-4o-mini-2024-07-18")
        );
        let d = c.resolve(None).unwrap();
        assert_eq!(
            (d.alias, d.provider.kind, d.model),
            ("haiku", ProviderKind::Anthropic, "claude-3-5-haiku-latest")
        );
        assert_eq!(c.resolve(Some("sonnet")).unwrap_err(), "sonnet");
    }

    #[test]
    fn the_key_never_shows_in_debug() {
        let c = parse(GOOD).unwrap();
        let shown = format!("{c:?}");
        assert!(!shown.contains("sk-oa-secret"), "{shown}");
        assert!(shown.contains("<redacted>"));
    }

    #[test]
    fn no_default_and_no_alias_resolves_to_an_empty_name() {
        let c = parse("providers: []\nmodels: {}\n").unwrap();
        assert_eq!(c.resolve(None).unwrap_err(), "");
    }

    #[test]
    fn errors_name_the_file_and_the_field() {
        let cases = [
            (
                "providers: [{name: a, kind: gemini, baseUrl: 'http://x', apiKeyFile: oa.key}]",
                "providers.yaml: providers[0].kind: unknown variant `gemini`",
            ),
            (
                "providers: [{name: a, kind: openai, baseUrl: 'ftp://x', apiKeyFile: oa.key}]",
                "providers.yaml: providers[0].baseUrl: \"ftp://x\" must be an http or https URL with a host",
            ),
            (
                "providers: [{name: a, kind: openai, baseUrl: 'http://x?k=1', apiKeyFile: oa.key}]",
                "providers.yaml: providers[0].baseUrl: must carry no query",
            ),
            (
                "providers: [{name: a, kind: openai, baseUrl: 'http://x', apiKeyFile: missing.key}]",
                "providers.yaml: providers[0].apiKeyFile: missing.key: No such file",
            ),
            (
                "providers: [{name: a, kind: openai, baseUrl: 'http://x', apiKeyFile: empty.key}]",
                "providers.yaml: providers[0].apiKeyFile: empty.key is empty",
            ),
            (
                "providers: [{name: a, kind: openai, baseUrl: 'http://x', apiKeyFile: two.key}]",
                "providers.yaml: providers[0].apiKeyFile: two.key holds control characters",
            ),
            (
                "providers: [{name: a, kind: openai, baseUrl: 'http://x', apiKeyFile: oa.key}, {name: a, kind: openai, baseUrl: 'http://y', apiKeyFile: oa.key}]",
                "providers.yaml: providers[1].name: provider \"a\" is defined twice",
            ),
            (
                "providers: [{name: a, kind: openai, baseUrl: 'http://x', apiKeyFile: oa.key, apiKey: inline}]",
                "providers.yaml: providers[0].apiKey: unknown field `apiKey`",
            ),
            (
                "models: {haiku: {provider: nope, model: m}}",
                "providers.yaml: models.haiku.provider: unknown provider \"nope\"",
            ),
            (
                "providers: [{name: a, kind: openai, baseUrl: 'http://x', apiKeyFile: oa.key}]\nmodels: {m: {provider: a, model: ''}}",
                "providers.yaml: models.m.model: must not be empty",
            ),
            (
                "defaultModel: haiku",
                "providers.yaml: defaultModel: \"haiku\" is not an alias under models",
            ),
        ];
        for (text, want) in cases {
            let got = parse(text).unwrap_err().to_string();
            assert!(got.starts_with(want), "{text}\n got: {got}\nwant: {want}");
        }
    }

    #[test]
    fn load_reads_a_relative_key_file_next_to_the_providers_file() {
        let dir = tempfile::tempdir().unwrap();
        std::fs::write(dir.path().join("k"), "sk-file\n").unwrap();
        let p = dir.path().join("providers.yaml");
        std::fs::write(
            &p,
            "providers: [{name: a, kind: openai, baseUrl: 'http://x', apiKeyFile: k}]\n",
        )
        .unwrap();
        let c = ProvidersConfig::load(&p).unwrap();
        assert_eq!(c.providers[0].api_key.expose(), "sk-file");
        let missing = ProvidersConfig::load(&dir.path().join("nope.yaml")).unwrap_err();
        assert_eq!(missing.field, "(file)");
        assert!(missing.file.ends_with("nope.yaml"));
    }
}
