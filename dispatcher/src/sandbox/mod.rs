//! Where command hooks run, and how they are contained (CONTRACT §10.1).
//!
//! - [`supervise`]: the per-run supervisor process (child subreaper) that ends the whole
//!   process tree of a run, `setsid` and double forks included.
//! - [`local`]: one run on this host: private directory, environment from nothing,
//!   capped outputs, timeout.
//! - [`protocol`]: the runner protocol (one length-bounded JSON frame each way).
//! - [`server`]: the command runner (`agenthooks-dispatcher command-runner`), a second
//!   container of the dispatcher Pod, with no secrets and another uid.
//! - [`remote`]: the dispatcher's client of that runner.
//! - [`uids`]: a root runner's uid per run in flight, swept before reuse.

pub mod local;
pub mod protocol;
pub mod remote;
pub mod server;
pub mod supervise;
pub mod uids;

use std::path::PathBuf;

use protocol::{RunOutcome, RunRequest};

/// Where the dispatcher runs command hooks.
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum CommandRunner {
    /// In this process's host, under the same supervisor as the runner (standalone
    /// mode, `check`, and when no `--command-runner` is given).
    Local(local::LocalConfig),
    /// In the command runner listening on this Unix socket (`--command-runner unix:PATH`).
    Remote(PathBuf),
}

impl Default for CommandRunner {
    fn default() -> Self {
        CommandRunner::Local(local::LocalConfig::default())
    }
}

/// `--command-runner` is not `unix:PATH`.
#[derive(Debug, Clone, PartialEq, Eq, thiserror::Error)]
#[error(
    "--command-runner {0:?}: give unix:PATH (the runner's Unix socket), e.g. unix:/run/agenthooks-runner/runner.sock"
)]
pub struct BadRunnerAddress(pub String);

impl std::str::FromStr for CommandRunner {
    type Err = BadRunnerAddress;
    /// Parses `unix:PATH` (an absolute or relative socket path, not empty).
    fn from_str(s: &str) -> Result<Self, Self::Err> {
        match s.strip_prefix("unix:") {
            Some(p) if !p.is_empty() => Ok(CommandRunner::Remote(PathBuf::from(p))),
            _ => Err(BadRunnerAddress(s.to_owned())),
        }
    }
}

impl CommandRunner {
    /// Runs one command hook here or in the runner.
    pub async fn run(&self, req: &RunRequest) -> RunOutcome {
        match self {
            CommandRunner::Local(config) => local::run(config, req).await,
            CommandRunner::Remote(socket) => remote::run(socket, req).await,
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn runner_address_is_unix_path() {
        assert_eq!(
            "unix:/run/x.sock".parse::<CommandRunner>(),
            Ok(CommandRunner::Remote("/run/x.sock".into()))
        );
        for bad in ["", "unix:", "/run/x.sock", "tcp://127.0.0.1:1"] {
            let e = bad.parse::<CommandRunner>().unwrap_err();
            assert!(e.to_string().contains("unix:PATH"), "{e}");
        }
    }
}
