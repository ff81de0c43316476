//! The `local` executor: the command runs as dsh's user with its rights — contained and
//! killed whole like every run, but not confined. It owns [`Local`] and its prepared run,
//! [`Unconfined`], which gives the child nothing to apply; it cannot fail.

use std::convert::Infallible;
use std::path::Path;

use super::{Executor, HostSetup, Lack, Prepared};
use crate::LaunchError;

/// `local`: see the module doc.
#[derive(Debug, Clone, Copy, Default)]
pub struct Local;

/// A `local` run's preparation: nothing (no [`Prepared`]: the child applies nothing).
#[derive(Debug, Clone, Copy, Default)]
pub struct Unconfined;

impl From<Unconfined> for Option<Prepared> {
    fn from(_: Unconfined) -> Self {
        None
    }
}

/// An executor that cannot fail never reaches the host.
impl From<Infallible> for LaunchError {
    fn from(never: Infallible) -> Self {
        match never {}
    }
}

impl Executor for Local {
    /// Confines nothing.
    const STRENGTH: u8 = 0;
    type Prepared = Unconfined;
    type Error = Infallible;

    fn for_host(_: &HostSetup<'_>) -> Result<Self, Infallible> {
        Ok(Local)
    }

    fn prepare(
        &self,
        _: &Path,
        _: Option<&Path>,
        _: Option<std::os::fd::OwnedFd>,
    ) -> Result<Unconfined, Infallible> {
        Ok(Unconfined)
    }

    fn marker(&self) -> Option<&str> {
        None
    }

    fn lacks(&self) -> Vec<Lack> {
        Vec::new()
    }
}
