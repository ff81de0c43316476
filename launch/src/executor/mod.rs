//! Executors: what confines a run. The [`Executor`] trait is the seam; `local`
//! ([`Local`]), `sandbox` ([`sandbox::Sandbox`]) and `container`
//! ([`container::Container`]) are its implementations, one per [`ExecutorKind`] of
//! `[process.executor]`.
//!
//! An executor is made once per host (the launcher builds each at first use, or at start
//! when the configuration names it) and asked once per run: [`Executor::prepare`], in
//! the parent before the spawn, makes the run's [`Prepared`] confinement (its ruleset,
//! mount steps, namespaces, private `TMPDIR`). The child applies it between fork and
//! `exec` as data: [`Prepared::child`] hands [`crate::spawn`] a
//! `ChildSandbox` of descriptors and steps, which the child carries out with raw system
//! calls only. No executor code runs in the child: after a `vfork`-style clone it shares
//! dsh's memory and may neither allocate nor take a lock, so what an executor does there
//! must be expressible as those steps (a new kind of step is a change to `spawn.rs`,
//! reviewed with the rest of the process layer's `unsafe`). [`Executor::marker`] is the
//! `[sandbox: …]` line its results carry, and [`Executor::lacks`] what this kernel (or
//! dsh's rights) does not give it, logged when the host starts.
//!
//! Which executor runs a call is decided by the host, in one place (its `CallCtx::executor`),
//! from the call's scope and tool (`[process.executor]`), for every kind of process a
//! call starts: commands, background jobs, terminals and language servers.

pub mod container;
pub mod sandbox;

use std::path::Path;

pub use sandbox::{kernel_abi, MountOp, MountStep, Prepared, PrivateTmp, Sandbox, SandboxError};

use super::config::{ExecutorKind, SandboxFeature};

/// Something an executor would use that this host does not give it.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Lack {
    /// What is missing, and what that means for a run.
    pub what: String,
    /// Whether every run under this executor is refused for it (it fails closed), rather
    /// than run with less confinement (the marker then says which part is unconfined).
    pub refuses: bool,
}

/// What confines a run; see the module doc.
pub trait Executor: std::fmt::Debug + Send + Sync {
    /// Its `[process.executor]` name.
    fn kind(&self) -> ExecutorKind;

    /// One run's confinement, made in the parent before the spawn: the run starts in
    /// `cwd` (a confined run's must lie in the workspace, else
    /// [`SandboxError::OutsideWorkspace`]); `terminal` is a terminal session's own PTY,
    /// which the run may open again. `None`: the child applies nothing.
    fn prepare(
        &self,
        cwd: &Path,
        terminal: Option<&Path>,
    ) -> Result<Option<Prepared>, SandboxError>;

    /// The line a confined run's result carries (`[sandbox: fs=workspace net=off]`);
    /// `None` for a run that is not confined.
    fn marker(&self) -> Option<&str>;

    /// What this host lacks for it (empty: nothing).
    fn lacks(&self) -> Vec<Lack>;
}

/// `local`: the command runs as dsh's user with its rights — contained and killed
/// whole like every run, but not confined.
#[derive(Debug, Clone, Copy, Default)]
pub struct Local;

impl Executor for Local {
    fn kind(&self) -> ExecutorKind {
        ExecutorKind::Local
    }

    fn prepare(&self, _: &Path, _: Option<&Path>) -> Result<Option<Prepared>, SandboxError> {
        Ok(None)
    }

    fn marker(&self) -> Option<&str> {
        None
    }

    fn lacks(&self) -> Vec<Lack> {
        Vec::new()
    }
}

impl Executor for Sandbox {
    fn kind(&self) -> ExecutorKind {
        ExecutorKind::Sandbox
    }

    fn prepare(
        &self,
        cwd: &Path,
        terminal: Option<&Path>,
    ) -> Result<Option<Prepared>, SandboxError> {
        self.check_cwd(cwd)?;
        self.prepare_run(terminal).map(Some)
    }

    fn marker(&self) -> Option<&str> {
        Some(self.marker_line())
    }

    fn lacks(&self) -> Vec<Lack> {
        landlock_lacks(self)
    }
}

impl Executor for container::Container {
    fn kind(&self) -> ExecutorKind {
        ExecutorKind::Container
    }

    fn prepare(
        &self,
        cwd: &Path,
        terminal: Option<&Path>,
    ) -> Result<Option<Prepared>, SandboxError> {
        self.check_cwd(cwd)?;
        self.prepare_run(terminal).map(Some)
    }

    fn marker(&self) -> Option<&str> {
        Some(self.sandbox().marker_line())
    }

    fn lacks(&self) -> Vec<Lack> {
        landlock_lacks(self.sandbox())
    }
}

/// The Landlock features `sandbox`'s ABI lacks: a required one refuses every run, any
/// other leaves that part unconfined.
fn landlock_lacks(sandbox: &Sandbox) -> Vec<Lack> {
    SandboxFeature::ALL
        .into_iter()
        .filter(|feature| sandbox.abi() < feature.abi())
        .map(|feature| {
            let refuses = sandbox.requires(feature);
            Lack {
                what: format!(
                    "Landlock {} (ABI {}; this kernel's is {}): {}",
                    feature.name(),
                    feature.abi(),
                    sandbox.abi(),
                    if refuses {
                        "required by [process.sandbox] require, so every run is refused"
                    } else {
                        "not required, so runs go on without it and their marker says so"
                    }
                ),
                refuses,
            }
        })
        .collect()
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::config::SandboxConfig;
    use crate::own_files::OwnFiles;

    #[test]
    fn each_executor_says_what_it_is_and_what_this_host_lacks_for_it() {
        let dir = tempfile::tempdir().unwrap();
        let own = OwnFiles::new(&dir.path().join("state"), None, None);
        std::fs::create_dir_all(dir.path().join("work")).unwrap();
        let work = dir.path().join("work");
        assert_eq!(Local.kind(), ExecutorKind::Local);
        assert!(Local.marker().is_none() && Local.lacks().is_empty());
        assert!(Local.prepare(Path::new("/"), None).unwrap().is_none());

        // Landlock ABI 3 assumed: TCP rules (4) and scoping (6) are missing; `net` is
        // required, `signals` is not.
        let config = SandboxConfig {
            assume_abi: Some(3),
            require: vec![SandboxFeature::Fs, SandboxFeature::Net],
            ..SandboxConfig::default()
        };
        let sandbox = Sandbox::new(&config, &work, &own).unwrap();
        let executor: &dyn Executor = &sandbox;
        assert_eq!(executor.kind(), ExecutorKind::Sandbox);
        let lacks = executor.lacks();
        assert_eq!(lacks.len(), 2, "{lacks:?}");
        assert!(lacks[0].what.starts_with("Landlock net (ABI 4") && lacks[0].refuses);
        assert!(lacks[1].what.starts_with("Landlock signals (ABI 6") && !lacks[1].refuses);
        assert!(matches!(
            executor.prepare(&work, None),
            Err(SandboxError::Unavailable { .. })
        ));
        assert_eq!(
            executor.marker(),
            Some("[sandbox: fs=workspace net=unconfined signals=unscoped]")
        );
        // A working directory outside the workspace is refused before anything else.
        let kernel = Sandbox::new(&SandboxConfig::default(), &work, &own).unwrap();
        assert!(matches!(
            Executor::prepare(&kernel, dir.path(), None),
            Err(SandboxError::OutsideWorkspace { .. })
        ));
        let prepared = Executor::prepare(&kernel, &work, None).unwrap().unwrap();
        assert_eq!(prepared.marker(), kernel.marker_line());
    }
}
