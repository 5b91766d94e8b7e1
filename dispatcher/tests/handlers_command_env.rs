//! CONTRACT §5 command.2: a command hook's environment is built from nothing.
//!
//! This lives in its own test binary because it changes the process environment
//! (`set_var`), which must not race with other threads reading it: the single test below
//! sets the variables before its runtime starts any other work.

use std::time::Duration;

use agenthooks_dispatcher::handlers::HandlerResult;
use agenthooks_dispatcher::handlers::Outcome;
use agenthooks_dispatcher::handlers::command::CommandSpec;
use agenthooks_dispatcher::sandbox::CommandRunner;

/// The handler with the local runner (standalone mode).
async fn run(spec: &CommandSpec, event: &[u8], timeout: Duration) -> HandlerResult {
    agenthooks_dispatcher::handlers::command::run(&CommandRunner::default(), spec, event, timeout)
        .await
}

#[test]
fn only_allow_listed_variables_reach_the_command() {
    // SAFETY: this binary has one test and no other threads exist yet.
    unsafe {
        std::env::set_var("AGENTHOOKS_TEST_SECRET_TOKEN", "sk-live-do-not-leak");
        std::env::set_var("AGENTHOOKS_TEST_ALLOWED", "visible-value");
        std::env::set_var("PATH", "/opt/evil/bin:/usr/local/bin:/usr/bin:/bin");
    }
    let rt = tokio::runtime::Builder::new_current_thread()
        .enable_all()
        .build()
        .unwrap();
    rt.block_on(async {
        let spec = CommandSpec {
            command: "env".to_owned(),
            allowed_env_vars: vec![
                "AGENTHOOKS_TEST_ALLOWED".to_owned(),
                "AGENTHOOKS_TEST_NOT_SET".to_owned(),
            ],
            cwd: None,
            dialect: Default::default(),
        };
        let r = run(&spec, b"{}", Duration::from_secs(5)).await;
        assert_eq!(r.outcome, Outcome::Allow, "{r:?}");
        let out = r.metadata.stdout.expect("stdout captured");
        let vars: Vec<&str> = out.lines().collect();
        assert!(
            vars.contains(&"AGENTHOOKS_TEST_ALLOWED=visible-value"),
            "{out}"
        );
        assert!(vars.contains(&"PATH=/usr/local/bin:/usr/bin:/bin"), "{out}");
        assert!(!out.contains("sk-live-do-not-leak"), "{out}");
        assert!(!out.contains("AGENTHOOKS_TEST_SECRET_TOKEN"), "{out}");
        assert!(!out.contains("AGENTHOOKS_TEST_NOT_SET"), "{out}");
        assert!(!out.contains("/opt/evil/bin"), "{out}");
        for line in &vars {
            let name = line.split('=').next().unwrap_or("");
            assert!(
                matches!(
                    name,
                    "AGENTHOOKS_TEST_ALLOWED" | "PATH" | "PWD" | "SHLVL" | "_" | "TMPDIR" | "HOME"
                ),
                "unexpected variable {line:?} in {out}"
            );
        }

        // PATH listed: the dispatcher's own PATH passes through unchanged.
        let spec = CommandSpec {
            command: "echo \"$PATH\"; echo \"${AGENTHOOKS_TEST_SECRET_TOKEN:-unset}\"".to_owned(),
            allowed_env_vars: vec!["PATH".to_owned()],
            cwd: None,
            dialect: Default::default(),
        };
        let r = run(&spec, b"{}", Duration::from_secs(5)).await;
        assert_eq!(
            r.metadata.stdout.as_deref(),
            Some("/opt/evil/bin:/usr/local/bin:/usr/bin:/bin\nunset\n")
        );

        // Empty list: nothing of the dispatcher's environment, not even PATH.
        let spec = CommandSpec {
            command: "env".to_owned(),
            allowed_env_vars: vec![],
            cwd: None,
            dialect: Default::default(),
        };
        let r = run(&spec, b"{}", Duration::from_secs(5)).await;
        let out = r.metadata.stdout.unwrap();
        assert!(!out.contains("PATH="), "{out}");
        assert!(!out.contains("AGENTHOOKS_TEST_"), "{out}");
    });
}
