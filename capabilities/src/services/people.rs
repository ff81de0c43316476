//! What a person at the host may watch and take over: the terminal sessions of every
//! owner, for the operator's console and `dsh attach`. A capability offers them through
//! [`Capability::for_people`](super::Capability::for_people); the front ends reach them
//! through [`Services::for_people`](super::Services), never by the capability's name.

use std::future::Future;
use std::path::PathBuf;
use std::pin::Pin;
use std::sync::Arc;
use std::time::Duration;

use crate::error::ToolError;

/// One terminal session, as the operator sees it (and as the console and `dsh attach
/// --list --json` show it).
#[derive(Debug, Clone, serde::Serialize)]
pub struct WatchedTerminal {
    pub owner: Arc<str>,
    pub id: String,
    pub shell: String,
    pub cwd: PathBuf,
    pub cols: u16,
    pub rows: u16,
    pub alive: bool,
    /// The shell's exit code once it has exited.
    pub exit_code: Option<i32>,
    /// The command of the terminal's foreground process.
    pub foreground: Option<String>,
    /// Who holds it, when a person took it over (`console`, `attach (pid N)`).
    pub held_by: Option<String>,
}

/// What a viewer is shown next.
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum Frame {
    /// Bytes that redraw the whole screen (contents, attributes, cursor); in a rendered
    /// view, after the first, those that change the screen shown before into this one.
    Screen(Vec<u8>),
    /// Raw output, as the terminal wrote it.
    Output(Vec<u8>),
    /// The session was taken over (by whom) or released.
    Held(Option<String>),
    /// The shell exited (its code).
    Exited(Option<i32>),
}

/// A boxed future of the next frame.
pub type FrameFuture<'a> = Pin<Box<dyn Future<Output = Option<Frame>> + Send + 'a>>;
/// A boxed future of what a person typed, written.
pub type TypedFuture<'a> = Pin<Box<dyn Future<Output = Result<(), ToolError>> + Send + 'a>>;

/// One person's view of one session.
pub trait TerminalView: Send {
    /// The next frame: the screen first, then what changes, no sooner than `interval`
    /// after the frame before. `None` once the session's end has been shown.
    fn next(&mut self, interval: Duration) -> FrameFuture<'_>;
}

/// The terminal sessions a person may watch and take over.
pub trait PeopleTerminals: Send + Sync + std::fmt::Debug {
    /// Every session of every owner.
    fn terminals(&self) -> Vec<WatchedTerminal>;
    /// A view of `owner`'s session `id`: its raw output (for a terminal emulator in a
    /// browser page), or `rendered`, only the escape sequences that draw its screen (for
    /// a person's real terminal, which the program's own sequences must not reach).
    fn view(
        &self,
        owner: &str,
        id: &str,
        rendered: bool,
    ) -> Result<Box<dyn TerminalView>, ToolError>;
    /// `by` takes the session over: the agent's sends are refused (`TERMINAL_HELD`)
    /// until it is released.
    fn take_over(&self, owner: &str, id: &str, by: &str) -> Result<(), ToolError>;
    /// `by` hands it back, at the size it had before they resized it.
    fn release(&self, owner: &str, id: &str, by: &str) -> Result<(), ToolError>;
    /// Writes what `by`, who holds it, typed.
    fn type_in<'a>(
        &'a self,
        owner: &'a str,
        id: &'a str,
        by: &'a str,
        typed: &'a [u8],
    ) -> TypedFuture<'a>;
    /// Resizes it to `by`'s terminal (`by` must hold it).
    fn resize(
        &self,
        owner: &str,
        id: &str,
        by: &str,
        cols: u16,
        rows: u16,
    ) -> Result<(), ToolError>;
}
