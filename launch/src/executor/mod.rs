//! Executors: what confines a run. It owns the [`Executor`] trait, the one list of
//! executors ([`ExecutorKind`], made by `executors!` below), what a prepared run is to the
//! launcher ([`Prepared`]) and what an executor is built from ([`HostSetup`]). The
//! executors themselves are one file each: `local` ([`local::Local`]), `sandbox`
//! ([`sandbox::Sandbox`]) and `container` ([`container::Container`]).
//!
//! An executor is a type implementing [`Executor`]: it is built once per host
//! ([`Executor::for_host`]: the launcher builds each at first use, or at start when the
//! configuration names it) and asked once per run ([`Executor::prepare`], in the parent
//! before the spawn), which makes the run's confinement as a value of its own type
//! ([`Executor::Prepared`]: its ruleset, mount steps, namespaces, private `TMPDIR`), or
//! fails with an error of its own type ([`Executor::Error`], which says how it reaches
//! the host as a [`LaunchError`]). The launcher keeps each built executor behind
//! `AnyExecutor`, the object-safe form of the trait, in one table indexed by kind.
//!
//! A prepared run converts into a [`Prepared`]: the plain data its child applies (spawn's
//! `ChildSandbox`: descriptors by number, flags, ids, the seccomp program, the mount
//! steps) and, held apart, whatever the parent keeps for the run's life (the slot, the
//! `TMPDIR`, a container's workspace tree and namespaces, which the data names by
//! descriptor). No executor code runs in the child: after a `vfork`-style clone it shares
//! dsh's memory and may neither allocate nor take a lock, so what an executor does there
//! must be expressible as those steps, which `spawn.rs` carries out with raw system calls
//! (a new kind of step is a change to `spawn.rs`, reviewed with the rest of the process
//! layer's `unsafe`). A run that is not confined converts into no `Prepared` at all.
//! [`Executor::marker`] is the `[sandbox: …]` line its results carry, and
//! [`Executor::lacks`] what this kernel (or dsh's rights) does not give it, logged when the
//! host starts.
//!
//! **Strength is declared**, not taken from the list's order: each executor says how
//! strongly it confines ([`Executor::STRENGTH`]), and wherever dsh picks the stronger of
//! two executors (a call whose scope and tool name several, [`ExecutorKind::strongest`];
//! the order of a set of kinds, [`Ord`] on [`ExecutorKind`]) it compares those.
//!
//! **Adding an executor** is its file here (a type implementing [`Executor`], its prepared
//! run, its error and how that error reaches the host; with its `pub mod` line) and one
//! line of the list below; its name in `dsh.toml` (the serde form), its place in the order
//! of kinds, the launcher's table entry and its start-up report follow from the list.
//!
//! Which executor runs a call is decided by the host, in one place (its `CallCtx::executor`),
//! from the call's scope and tool (`[process.executor]`), for every kind of process a
//! call starts: commands, background jobs, terminals and language servers.

pub mod container;
pub mod local;
pub mod sandbox;

use std::os::fd::OwnedFd;
use std::path::{Path, PathBuf};

pub use local::Local;
pub use sandbox::{kernel_abi, MountOp, MountStep, PrivateTmp, Sandbox, SandboxError, SandboxRun};

use crate::config::SandboxConfig;
use crate::spawn::ChildSandbox;
use crate::{HostPlaces, LaunchError};

/// Makes the kind enum of a list of executors (one variant per line: its `dsh.toml`
/// name and its executor's type), with its serde form (the names), its declared strength
/// and order, and the table the launcher builds its executors from.
macro_rules! executors {
    (
        $(#[doc = $doc:literal])*
        pub enum $kind:ident;
        $(
            $(#[doc = $variant_doc:literal])*
            $variant:ident = $name:literal => $executor:ty,
        )+
    ) => {
        $(#[doc = $doc])*
        #[derive(Debug, Clone, Copy, PartialEq, Eq, Hash, ::serde::Deserialize, ::serde::Serialize, ::schemars::JsonSchema)]
        pub enum $kind {
            $(
                $(#[doc = $variant_doc])*
                #[serde(rename = $name)]
                $variant,
            )+
        }

        impl $kind {
            /// Every executor, as the list names them (an order that means nothing: see
            /// [`Self::strength`]).
            pub const ALL: &'static [$kind] = &[$($kind::$variant),+];

            /// Its `[process.executor]` name.
            pub fn name(self) -> &'static str {
                match self {
                    $($kind::$variant => $name,)+
                }
            }

            /// How strongly its executor confines a run, as that executor declares it
            /// ([`Executor::STRENGTH`](crate::executor::Executor::STRENGTH)).
            pub fn strength(self) -> u8 {
                match self {
                    $($kind::$variant => <$executor as $crate::executor::Executor>::STRENGTH,)+
                }
            }

            /// The strongest of `kinds` (none of none): where a call's scope and tool name
            /// several executors, the one it runs under.
            pub fn strongest(kinds: impl IntoIterator<Item = $kind>) -> Option<$kind> {
                kinds.into_iter().max_by_key(|kind| kind.strength())
            }

            /// Its place in the launcher's table.
            pub(crate) fn index(self) -> usize {
                self as usize
            }

            /// Builds its executor for a host; a failure is its reason.
            pub(crate) fn build(
                self,
                host: &$crate::executor::HostSetup<'_>,
            ) -> $crate::executor::Built {
                match self {
                    $($kind::$variant => $crate::executor::build::<$executor>(host),)+
                }
            }
        }

        /// By strength, weakest first (the names only part ties, which the list's
        /// strengths do not have).
        impl Ord for $kind {
            fn cmp(&self, other: &Self) -> std::cmp::Ordering {
                self.strength()
                    .cmp(&other.strength())
                    .then_with(|| self.name().cmp(other.name()))
            }
        }

        impl PartialOrd for $kind {
            fn partial_cmp(&self, other: &Self) -> Option<std::cmp::Ordering> {
                Some(self.cmp(other))
            }
        }
    };
}

executors! {
    /// What runs a command: one variant per executor (`[process.executor]` names them;
    /// the serde form is that name). Ordered by declared strength, weakest first.
    pub enum ExecutorKind;
    /// As the host's user, with its rights (contained and killed whole, not confined).
    Local = "local" => local::Local,
    /// Confined by Landlock and seccomp before exec.
    Sandbox = "sandbox" => sandbox::Sandbox,
    /// The sandbox's confinement in namespaces of its own (PID, network, UTS, user, with
    /// a fresh `/proc`), its root an unprivileged host id ([`container`]).
    Container = "container" => container::Container,
}

/// `local`: what a configuration that names none runs under.
impl Default for ExecutorKind {
    fn default() -> Self {
        ExecutorKind::Local
    }
}

/// Something an executor would use that this host does not give it.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Lack {
    /// What is missing, and what that means for a run.
    pub what: String,
    /// Whether every run under this executor is refused for it (it fails closed), rather
    /// than run with less confinement (the marker then says which part is unconfined).
    pub refuses: bool,
}

/// What a host builds its executors from: `[process.sandbox]` (with
/// `[process.container]` in it) and the host's places.
#[derive(Debug, Clone, Copy)]
pub struct HostSetup<'a> {
    pub config: &'a SandboxConfig,
    pub places: &'a HostPlaces,
}

impl HostSetup<'_> {
    /// The session workspace confined runs write in, or why there is none (a launch for
    /// tests and tools).
    pub fn workspace(&self) -> Result<&Path, SandboxError> {
        self.places.workspace.as_deref().ok_or_else(|| {
            SandboxError::Setup("this host has no session workspace for confined runs".into())
        })
    }
}

/// What confines a run; see the module doc.
pub trait Executor: std::fmt::Debug + Send + Sync + Sized + 'static {
    /// How strongly it confines a run: where a call names several executors the strongest
    /// wins, so an executor that lets a run do anything another's forbids must not be
    /// stronger than it. 0 confines nothing; no two executors declare the same.
    const STRENGTH: u8;

    /// One run as it prepares it; what the launcher keeps of it is the [`Prepared`] it
    /// converts into (none: the child applies nothing).
    type Prepared: Into<Option<Prepared>>;

    /// Why it cannot be built on this host, or cannot run a command; converted into the
    /// [`LaunchError`] the host maps to a caller's error code.
    type Error: std::error::Error + Send + Sync + 'static + Into<LaunchError>;

    /// It, for a host (once; a failure refuses every run under it, with its reason).
    fn for_host(host: &HostSetup<'_>) -> Result<Self, Self::Error>;

    /// One run's confinement, made in the parent before the spawn: the run starts in
    /// `cwd` (a confined run's must lie in the workspace, else
    /// [`SandboxError::OutsideWorkspace`]); `terminal` is a terminal session's own PTY,
    /// which the run may open again; `network` the network namespace of a run with a
    /// network by policy ([`crate::network`]), which it joins (the launcher makes none for
    /// an executor that does not confine).
    fn prepare(
        &self,
        cwd: &Path,
        terminal: Option<&Path>,
        network: Option<OwnedFd>,
    ) -> Result<Self::Prepared, Self::Error>;

    /// The line a confined run's result carries (`[sandbox: fs=workspace net=off]`);
    /// `None` for a run that is not confined.
    fn marker(&self) -> Option<&str>;

    /// What this host lacks for it (empty: nothing).
    fn lacks(&self) -> Vec<Lack>;
}

/// An [`Executor`] as the launcher holds it: its prepared run made into a [`Prepared`],
/// its error into a [`LaunchError`].
pub(crate) trait AnyExecutor: std::fmt::Debug + Send + Sync {
    fn prepare(
        &self,
        cwd: &Path,
        terminal: Option<&Path>,
        network: Option<OwnedFd>,
    ) -> Result<Option<Prepared>, LaunchError>;
    fn lacks(&self) -> Vec<Lack>;
}

impl<E: Executor> AnyExecutor for E {
    fn prepare(
        &self,
        cwd: &Path,
        terminal: Option<&Path>,
        network: Option<OwnedFd>,
    ) -> Result<Option<Prepared>, LaunchError> {
        Executor::prepare(self, cwd, terminal, network)
            .map(Into::into)
            .map_err(Into::into)
    }

    fn lacks(&self) -> Vec<Lack> {
        Executor::lacks(self)
    }
}

/// An executor as a host built it, or why it could not (an entry of the launcher's
/// table).
pub(crate) type Built = Result<Box<dyn AnyExecutor>, String>;

/// Builds `E` for a host, as the launcher's table holds it.
pub(crate) fn build<E: Executor>(host: &HostSetup<'_>) -> Built {
    E::for_host(host)
        .map(|executor| Box::new(executor) as Box<dyn AnyExecutor>)
        .map_err(|error| error.to_string())
}

/// One confined run as the launcher keeps it: the plain data its child applies before
/// `exec`, its marker and `TMPDIR`, and what the parent holds for the run's life (the
/// executor's own prepared run: the descriptors the data names, its slot and `TMPDIR`,
/// removed when this is dropped).
#[derive(Debug)]
pub struct Prepared {
    child: ChildSandbox,
    marker: String,
    tmp: PathBuf,
    /// Dropped last: the descriptors `child` names stay open while it lives.
    _held: Box<dyn std::fmt::Debug + Send + Sync>,
}

impl Prepared {
    /// A run whose child applies `child`, its result carrying `marker`, its `TMPDIR`
    /// `tmp`; `held` keeps open what `child` names and cleans up after the run.
    pub(crate) fn new(
        child: ChildSandbox,
        marker: String,
        tmp: PathBuf,
        held: impl std::fmt::Debug + Send + Sync + 'static,
    ) -> Self {
        Prepared {
            child,
            marker,
            tmp,
            _held: Box::new(held),
        }
    }

    /// The line the run's result carries: `[sandbox: fs=workspace net=off]`.
    pub fn marker(&self) -> &str {
        &self.marker
    }

    /// The run's `TMPDIR`.
    pub fn tmp(&self) -> &Path {
        &self.tmp
    }

    /// What the child applies before `exec` (data only).
    pub(crate) fn child(&self) -> &ChildSandbox {
        &self.child
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::config::{SandboxConfig, SandboxFeature};
    use crate::own_files::OwnFiles;

    #[test]
    fn each_executor_says_what_it_is_and_what_this_host_lacks_for_it() {
        let dir = tempfile::tempdir().unwrap();
        let own = OwnFiles::new(&dir.path().join("state"), None, None);
        std::fs::create_dir_all(dir.path().join("work")).unwrap();
        let work = dir.path().join("work");
        assert_eq!(ExecutorKind::Local.name(), "local");
        assert!(Executor::marker(&Local).is_none() && Executor::lacks(&Local).is_empty());
        assert!(AnyExecutor::prepare(&Local, Path::new("/"), None, None)
            .unwrap()
            .is_none());

        // Landlock ABI 3 assumed: TCP rules (4) and scoping (6) are missing; `net` is
        // required, `signals` is not.
        let config = SandboxConfig {
            assume_abi: Some(3),
            require: vec![SandboxFeature::Fs, SandboxFeature::Net],
            ..SandboxConfig::default()
        };
        let sandbox = Sandbox::new(&config, &work, &own).unwrap();
        let executor: &dyn AnyExecutor = &sandbox;
        assert_eq!(ExecutorKind::Sandbox.name(), "sandbox");
        let lacks = executor.lacks();
        assert_eq!(lacks.len(), 2, "{lacks:?}");
        assert!(lacks[0].what.starts_with("Landlock net (ABI 4") && lacks[0].refuses);
        assert!(lacks[1].what.starts_with("Landlock signals (ABI 6") && !lacks[1].refuses);
        assert!(matches!(
            executor.prepare(&work, None, None),
            Err(LaunchError::Sandbox(SandboxError::Unavailable { .. }))
        ));
        assert_eq!(
            Executor::marker(&sandbox),
            Some("[sandbox: fs=workspace net=unconfined signals=unscoped]")
        );
        // A working directory outside the workspace is refused before anything else.
        let kernel = Sandbox::new(&SandboxConfig::default(), &work, &own).unwrap();
        assert!(matches!(
            Executor::prepare(&kernel, dir.path(), None, None),
            Err(SandboxError::OutsideWorkspace { .. })
        ));
        let prepared = AnyExecutor::prepare(&kernel, &work, None, None)
            .unwrap()
            .unwrap();
        assert_eq!(prepared.marker(), kernel.marker_line());
    }

    #[test]
    fn the_declared_strengths_order_local_sandbox_container_and_choose_the_stronger() {
        use ExecutorKind::{Container, Local, Sandbox};
        assert_eq!(Local.strength(), <local::Local as Executor>::STRENGTH);
        assert_eq!(Sandbox.strength(), <sandbox::Sandbox as Executor>::STRENGTH);
        assert_eq!(
            Container.strength(),
            <container::Container as Executor>::STRENGTH
        );
        assert!(Local.strength() < Sandbox.strength());
        assert!(Sandbox.strength() < Container.strength());
        assert_eq!(Local.strength(), 0, "local confines nothing");
        // No two executors of the list declare the same strength.
        let mut strengths: Vec<u8> = ExecutorKind::ALL.iter().map(|k| k.strength()).collect();
        strengths.sort_unstable();
        strengths.dedup();
        assert_eq!(strengths.len(), ExecutorKind::ALL.len());
        for (kinds, strongest) in [
            (vec![Local, Sandbox], Sandbox),
            (vec![Container, Local], Container),
            (vec![Sandbox, Container, Local], Container),
            (vec![Local], Local),
        ] {
            assert_eq!(ExecutorKind::strongest(kinds.clone()), Some(strongest));
            assert_eq!(kinds.iter().max(), Some(&strongest));
        }
        assert_eq!(ExecutorKind::strongest([]), None);
        let set: std::collections::BTreeSet<_> = [Container, Local, Sandbox].into();
        assert_eq!(
            set.into_iter().collect::<Vec<_>>(),
            [Local, Sandbox, Container]
        );
        // dsh.toml's names, and nothing else.
        for kind in ExecutorKind::ALL {
            assert_eq!(read_name(kind.name()), Some(*kind));
        }
        assert_eq!(read_name("Local"), None);
        assert_eq!(ExecutorKind::default(), Local);
    }

    /// `name` read as an [`ExecutorKind`] through its serde form.
    fn read_name(name: &str) -> Option<ExecutorKind> {
        use serde::de::value::{Error, StrDeserializer};
        use serde::de::IntoDeserializer;
        let deserializer: StrDeserializer<'_, Error> = name.into_deserializer();
        serde::Deserialize::deserialize(deserializer).ok()
    }

    /// A list whose order is not its strengths': were strength (or the order of its
    /// kinds) taken from the declaration again, the weak executor, listed last, would win.
    mod declared_not_listed {
        use super::super::*;
        use std::convert::Infallible;

        #[derive(Debug)]
        struct Strong;
        #[derive(Debug)]
        struct Weak;

        impl Executor for Strong {
            const STRENGTH: u8 = 7;
            type Prepared = local::Unconfined;
            type Error = Infallible;
            fn for_host(_: &HostSetup<'_>) -> Result<Self, Infallible> {
                Ok(Strong)
            }
            fn prepare(
                &self,
                _: &Path,
                _: Option<&Path>,
                _: Option<OwnedFd>,
            ) -> Result<local::Unconfined, Infallible> {
                Ok(local::Unconfined)
            }
            fn marker(&self) -> Option<&str> {
                Some("[strong]")
            }
            fn lacks(&self) -> Vec<Lack> {
                vec![Lack {
                    what: "strong".into(),
                    refuses: false,
                }]
            }
        }

        impl Executor for Weak {
            const STRENGTH: u8 = 3;
            type Prepared = local::Unconfined;
            type Error = Infallible;
            fn for_host(_: &HostSetup<'_>) -> Result<Self, Infallible> {
                Ok(Weak)
            }
            fn prepare(
                &self,
                _: &Path,
                _: Option<&Path>,
                _: Option<OwnedFd>,
            ) -> Result<local::Unconfined, Infallible> {
                Ok(local::Unconfined)
            }
            fn marker(&self) -> Option<&str> {
                None
            }
            fn lacks(&self) -> Vec<Lack> {
                Vec::new()
            }
        }

        executors! {
            /// Listed strongest first.
            pub enum Listed;
            /// Declares 7.
            Strong = "strong" => Strong,
            /// Declares 3.
            Weak = "weak" => Weak,
        }

        #[test]
        fn the_stronger_is_chosen_by_declared_strength_not_by_place_in_the_list() {
            assert_eq!(Listed::ALL, [Listed::Strong, Listed::Weak]);
            assert_eq!((Listed::Strong.strength(), Listed::Weak.strength()), (7, 3));
            assert_eq!(
                Listed::strongest([Listed::Strong, Listed::Weak]),
                Some(Listed::Strong)
            );
            assert_eq!(
                Listed::strongest([Listed::Weak, Listed::Strong]),
                Some(Listed::Strong)
            );
            assert!(Listed::Weak < Listed::Strong);
            assert_eq!(
                [Listed::Strong, Listed::Weak].iter().max(),
                Some(&Listed::Strong)
            );
            // The table is the list's: each kind builds its own executor.
            let places = HostPlaces::default();
            let host = HostSetup {
                config: &SandboxConfig::default(),
                places: &places,
            };
            for kind in Listed::ALL {
                let built = kind.build(&host).unwrap();
                assert_eq!(
                    !built.lacks().is_empty(),
                    *kind == Listed::Strong,
                    "{kind:?} at {} built {built:?}",
                    kind.index()
                );
                assert_eq!(kind.name(), ["strong", "weak"][kind.index()]);
            }
        }
    }
}
