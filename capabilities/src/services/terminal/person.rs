//! A person at a terminal: the operator watching an agent's session (the console's page,
//! `dsh attach`), taking it over, typing into it, resizing it, and handing it back.
//!
//! Watching costs the session's owner nothing while nobody watches: the session bumps a
//! `watch` channel only while it has receivers. A [`Viewer`] pulls frames at its own
//! pace: the screen first, then the raw output as it comes, at most one frame per
//! interval (output arriving meanwhile is coalesced into the next frame), and when more
//! is pending than [`MAX_OUTPUT_FRAME`] (a viewer that fell behind, or a flood) the
//! screen again instead of the bytes: a slow viewer gets the latest screen, never a
//! backlog, and nothing is buffered for it.
//!
//! While a person holds a session, the agent's sends and signals are refused with
//! `TERMINAL_HELD` at the send gate, and reads work as ever. A send that passed the gate
//! before the person took over goes on: its input was written, and it settles as any
//! send does (what the person types meanwhile is in its output). Releasing the hold
//! puts back the size the session had before the person resized it.

use std::sync::Arc;
use std::time::{Duration, Instant};

use crate::error::{ErrorCode, ToolError};
pub use crate::services::people::Frame;
use crate::services::people::{
    FrameFuture, PeopleTerminals, TerminalView, TypedFuture, WatchedTerminal,
};

use super::sessions::Session;
use super::TerminalService;

/// The most raw output one frame carries: past it a viewer gets the screen instead.
pub const MAX_OUTPUT_FRAME: u64 = 64 * 1024;

/// Who holds a session, and the size it had before they resized it.
pub(super) struct Person {
    by: String,
    size_before: Option<(u16, u16)>,
}

/// One person's view of a session.
pub struct Viewer {
    session: Arc<Session>,
    changes: tokio::sync::watch::Receiver<u64>,
    /// The output shown so far (a count of bytes); `None` before the first screen.
    seen: Option<u64>,
    held: Option<String>,
    last_frame: Option<Instant>,
    exit_shown: bool,
    /// Rendered: every frame is the screen, or the difference from the screen shown
    /// before (this is that screen), never the program's own bytes.
    rendered: Option<Option<vt100::Screen>>,
}

impl Session {
    pub(super) fn held_by(&self) -> Option<String> {
        self.person.lock().unwrap().as_ref().map(|p| p.by.clone())
    }

    /// The send gate's check: `TERMINAL_HELD` while a person holds the session.
    pub(super) fn not_held(&self) -> Result<(), ToolError> {
        match self.held_by() {
            None => Ok(()),
            Some(by) => Err(ToolError::new(
                ErrorCode::TerminalHeld,
                format!(
                    "a person is typing in terminal session {} (held by {by}): nothing was sent; \
                     terminal_read still works, and sends work again once they release it",
                    self.id
                ),
            )),
        }
    }

    fn resize_to(&self, cols: u16, rows: u16) -> Result<(), ToolError> {
        use std::os::fd::AsFd;
        dsh_launch::pty::resize(self.master.get_ref().as_fd(), cols, rows).map_err(|error| {
            ToolError::new(
                ErrorCode::Internal,
                format!("cannot resize terminal session {}: {error}", self.id),
            )
        })?;
        self.output.lock().unwrap().set_size(rows, cols);
        *self.size.lock().unwrap() = (cols, rows);
        self.tell_viewers();
        Ok(())
    }
}

impl TerminalService {
    /// A view of `owner`'s session `id`: its raw output, or (`rendered`) only the
    /// screen as the emulator rendered it (what a real terminal is given: the program's
    /// escape sequences never reach it, only those that draw the screen).
    pub fn view(&self, owner: &str, id: &str, rendered: bool) -> Result<Viewer, ToolError> {
        let session = self.get(owner, id)?;
        Ok(Viewer {
            changes: session.viewed.subscribe(),
            session,
            seen: None,
            held: None,
            last_frame: None,
            exit_shown: false,
            rendered: rendered.then_some(None),
        })
    }

    /// `by` takes the session over: the agent's sends are refused until it is released.
    /// Taking over again by the same person is a no-op; another person's hold refuses.
    pub fn take_over(&self, owner: &str, id: &str, by: &str) -> Result<(), ToolError> {
        let session = self.get(owner, id)?;
        if !session.alive() {
            return Err(ToolError::new(
                ErrorCode::SessionClosing,
                format!("the shell of terminal session {id} has exited"),
            ));
        }
        let mut person = session.person.lock().unwrap();
        match &*person {
            Some(held) if held.by != by => {
                return Err(ToolError::new(
                    ErrorCode::TerminalHeld,
                    format!("terminal session {id} is held by {}", held.by),
                ))
            }
            Some(_) => return Ok(()),
            None => {}
        }
        *person = Some(Person {
            by: by.to_string(),
            size_before: None,
        });
        drop(person);
        tracing::info!(%owner, %id, %by, "a person took over a terminal session");
        session.tell_viewers();
        Ok(())
    }

    /// `by` hands the session back, at the size it had before they resized it.
    pub fn release(&self, owner: &str, id: &str, by: &str) -> Result<(), ToolError> {
        let session = self.get(owner, id)?;
        let mut person = session.person.lock().unwrap();
        match &*person {
            Some(held) if held.by == by => {}
            Some(held) => {
                return Err(ToolError::new(
                    ErrorCode::TerminalHeld,
                    format!("terminal session {id} is held by {}, not {by}", held.by),
                ))
            }
            None => return Ok(()),
        }
        let released = person.take();
        drop(person);
        if let Some((cols, rows)) = released.and_then(|p| p.size_before) {
            if session.alive() {
                session.resize_to(cols, rows)?;
            }
        }
        tracing::info!(%owner, %id, %by, "a person released a terminal session");
        session.tell_viewers();
        Ok(())
    }

    fn held_by_them(&self, owner: &str, id: &str, by: &str) -> Result<Arc<Session>, ToolError> {
        let session = self.get(owner, id)?;
        match session.held_by() {
            Some(held) if held == by => Ok(session),
            Some(held) => Err(ToolError::new(
                ErrorCode::TerminalHeld,
                format!("terminal session {id} is held by {held}"),
            )),
            None => Err(ToolError::new(
                ErrorCode::InvalidArguments,
                format!("take terminal session {id} over before typing into it"),
            )),
        }
    }

    /// Writes what the person holding the session typed.
    pub async fn type_as_person(
        &self,
        owner: &str,
        id: &str,
        by: &str,
        bytes: &[u8],
    ) -> Result<(), ToolError> {
        let session = self.held_by_them(owner, id, by)?;
        if !session.alive() {
            return Err(ToolError::new(
                ErrorCode::SessionClosing,
                format!("the shell of terminal session {id} has exited"),
            ));
        }
        session.write_all(bytes).await
    }

    /// Resizes the session to the holder's terminal (put back when they release it).
    pub fn resize(
        &self,
        owner: &str,
        id: &str,
        by: &str,
        cols: u16,
        rows: u16,
    ) -> Result<(), ToolError> {
        if cols == 0 || rows == 0 || cols > 1000 || rows > 1000 {
            return Err(ToolError::new(
                ErrorCode::InvalidArguments,
                format!("a terminal of {cols}x{rows}: columns and rows go from 1 to 1000"),
            ));
        }
        let session = self.held_by_them(owner, id, by)?;
        {
            let mut person = session.person.lock().unwrap();
            if let Some(person) = person.as_mut() {
                person
                    .size_before
                    .get_or_insert(*session.size.lock().unwrap());
            }
        }
        session.resize_to(cols, rows)
    }
}

impl PeopleTerminals for TerminalService {
    fn terminals(&self) -> Vec<WatchedTerminal> {
        let mut every: Vec<WatchedTerminal> = self
            .all_sessions()
            .iter()
            .map(|session| {
                let info = session.info();
                WatchedTerminal {
                    owner: session.owner.clone(),
                    id: info.id,
                    shell: info.shell,
                    cwd: info.cwd,
                    cols: info.cols,
                    rows: info.rows,
                    alive: info.alive,
                    exit_code: info.exit_code,
                    foreground: info.foreground,
                    held_by: info.held_by,
                }
            })
            .collect();
        // Oldest first: ids count up.
        every.sort_by_key(|t| {
            (
                t.owner.clone(),
                t.id.trim_start_matches("term-").parse::<u64>().unwrap_or(0),
            )
        });
        every
    }

    fn view(
        &self,
        owner: &str,
        id: &str,
        rendered: bool,
    ) -> Result<Box<dyn TerminalView>, ToolError> {
        TerminalService::view(self, owner, id, rendered)
            .map(|viewer| Box::new(viewer) as Box<dyn TerminalView>)
    }

    fn take_over(&self, owner: &str, id: &str, by: &str) -> Result<(), ToolError> {
        TerminalService::take_over(self, owner, id, by)
    }

    fn release(&self, owner: &str, id: &str, by: &str) -> Result<(), ToolError> {
        TerminalService::release(self, owner, id, by)
    }

    fn type_in<'a>(
        &'a self,
        owner: &'a str,
        id: &'a str,
        by: &'a str,
        typed: &'a [u8],
    ) -> TypedFuture<'a> {
        Box::pin(self.type_as_person(owner, id, by, typed))
    }

    fn resize(
        &self,
        owner: &str,
        id: &str,
        by: &str,
        cols: u16,
        rows: u16,
    ) -> Result<(), ToolError> {
        TerminalService::resize(self, owner, id, by, cols, rows)
    }
}

impl TerminalView for Viewer {
    fn next(&mut self, interval: Duration) -> FrameFuture<'_> {
        Box::pin(Viewer::next(self, interval))
    }
}

impl Viewer {
    /// The session's id and owner.
    pub fn session(&self) -> (&str, &str) {
        (&self.session.id, &self.session.owner)
    }

    /// The next frame: the screen first, then what changes, no sooner than `interval`
    /// after the frame before. `None` once the session's end has been shown.
    pub async fn next(&mut self, interval: Duration) -> Option<Frame> {
        loop {
            // Marks what this pass looks at as seen: a change after it wakes the wait.
            self.changes.borrow_and_update();
            let held = self.session.held_by();
            if held != self.held {
                self.held = held.clone();
                return Some(Frame::Held(held));
            }
            let (total, kept_from) = self.session.output_span();
            let behind = match self.seen {
                None => true,
                Some(seen) => seen < kept_from || total - seen > MAX_OUTPUT_FRAME,
            };
            let pending = self.seen.is_none_or(|seen| total > seen);
            if pending {
                if let Some(due) = self.last_frame.map(|last| last + interval) {
                    if Instant::now() < due {
                        tokio::time::sleep_until(due.into()).await;
                        continue;
                    }
                }
                self.last_frame = Some(Instant::now());
                if let Some(shown) = &mut self.rendered {
                    let (screen, at) = self.session.screen_parsed();
                    self.seen = Some(at);
                    let bytes = match shown.as_ref() {
                        Some(before) if before.size() == screen.size() => screen.state_diff(before),
                        _ => screen.state_formatted(),
                    };
                    *shown = Some(screen);
                    return Some(Frame::Screen(bytes));
                }
                if behind {
                    let (screen, at) = self.session.screen_now();
                    self.seen = Some(at);
                    return Some(Frame::Screen(screen));
                }
                let (bytes, _, at) = self.session.raw_since(self.seen.unwrap_or(0));
                self.seen = Some(at);
                return Some(Frame::Output(bytes));
            }
            if !self.session.alive() {
                if self.exit_shown {
                    return None;
                }
                self.exit_shown = true;
                return Some(Frame::Exited(self.session.exit_code()));
            }
            if self.changes.changed().await.is_err() {
                return None;
            }
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::services::terminal::{OpenSpec, SendWait, View};
    use std::sync::atomic::Ordering;

    const OWNER: &str = "agent";

    use crate::services::terminal::tests::service;

    fn open(terminals: &TerminalService) -> String {
        let spec = OpenSpec {
            cwd: std::env::temp_dir(),
            env: Vec::new(),
            shell: Some("bash".into()),
            cols: 120,
            rows: 40,
            executor: crate::services::process::ExecutorKind::Local,
            network: None,
        };
        terminals.open(Arc::from(OWNER), spec).unwrap().id
    }

    fn wait_for(terminals: &TerminalService, pattern: &str) -> SendWait {
        SendWait {
            quiet: Duration::from_millis(200),
            pattern: Some(terminals.wait_pattern(pattern).unwrap()),
            timeout: Duration::from_secs(20),
        }
    }

    /// Frames until one's text contains `needle` (within 20 s); all of them.
    async fn frames_until(viewer: &mut Viewer, needle: &str) -> Vec<Frame> {
        let mut frames = Vec::new();
        let deadline = Instant::now() + Duration::from_secs(20);
        loop {
            let frame = tokio::time::timeout_at(deadline.into(), viewer.next(Duration::ZERO))
                .await
                .unwrap_or_else(|_| panic!("no frame with {needle:?} in 20 s: {frames:?}"))
                .expect("the session is there");
            let found = match &frame {
                Frame::Screen(bytes) | Frame::Output(bytes) => {
                    String::from_utf8_lossy(bytes).contains(needle)
                }
                _ => false,
            };
            frames.push(frame);
            if found {
                return frames;
            }
        }
    }

    /// A bash session at its prompt, and a raw view of it that has shown the prompt.
    async fn watched_shell() -> (TerminalService, String, Viewer) {
        let terminals = service();
        let id = open(&terminals);
        terminals
            .send(OWNER, &id, "", true, wait_for(&terminals, r"\$ $"), false)
            .await
            .unwrap();
        let mut viewer = terminals.view(OWNER, &id, false).unwrap();
        frames_until(&mut viewer, "$").await;
        (terminals, id, viewer)
    }

    #[tokio::test(flavor = "multi_thread", worker_threads = 2)]
    async fn nobody_watching_costs_nothing_and_a_viewer_gets_the_screen_then_the_output() {
        let terminals = service();
        let id = open(&terminals);
        terminals
            .send(OWNER, &id, "", true, wait_for(&terminals, r"\$ $"), false)
            .await
            .unwrap();
        let session = terminals.get(OWNER, &id).unwrap();
        assert_eq!(session.viewed.receiver_count(), 0);
        let before = *session.viewed.borrow();
        terminals
            .send(
                OWNER,
                &id,
                "echo unwatched",
                true,
                wait_for(&terminals, "unwatched\r\n"),
                false,
            )
            .await
            .unwrap();
        assert_eq!(
            *session.viewed.borrow(),
            before,
            "output nobody watches is told to nobody"
        );
        let mut viewer = terminals.view(OWNER, &id, false).unwrap();
        match viewer.next(Duration::ZERO).await {
            Some(Frame::Screen(screen)) => assert!(
                String::from_utf8_lossy(&screen).contains("unwatched"),
                "the first frame is the screen as it is"
            ),
            other => panic!("the first frame is the screen: {other:?}"),
        }
        terminals
            .send(
                OWNER,
                &id,
                "echo watched-$((6*7))",
                true,
                wait_for(&terminals, "watched-42"),
                false,
            )
            .await
            .unwrap();
        let frames = frames_until(&mut viewer, "watched-42").await;
        assert!(
            frames.iter().all(|f| matches!(f, Frame::Output(_))),
            "what follows is the raw output: {frames:?}"
        );
        terminals.close(OWNER, &id).unwrap();
        let mut ended = Vec::new();
        while let Some(frame) =
            tokio::time::timeout(Duration::from_secs(10), viewer.next(Duration::ZERO))
                .await
                .expect("a closed session ends its stream")
        {
            ended.push(frame);
        }
        assert!(
            ended.iter().any(|f| matches!(f, Frame::Exited(_))),
            "{ended:?}"
        );
    }

    #[tokio::test(flavor = "multi_thread", worker_threads = 2)]
    async fn a_held_terminal_refuses_the_agent_takes_the_persons_typing_and_goes_back_on_release() {
        let (terminals, id, mut viewer) = watched_shell().await;
        let typing = terminals
            .type_as_person(OWNER, &id, "console", b"echo sneaky\r")
            .await
            .unwrap_err();
        assert_eq!(
            typing.code,
            ErrorCode::InvalidArguments,
            "typing needs a hold first"
        );
        terminals.take_over(OWNER, &id, "console").unwrap();
        assert_eq!(terminals.terminals()[0].held_by.as_deref(), Some("console"));
        let refused = terminals
            .send(
                OWNER,
                &id,
                "echo agent",
                true,
                wait_for(&terminals, "agent"),
                false,
            )
            .await
            .unwrap_err();
        assert_eq!(refused.code, ErrorCode::TerminalHeld, "{}", refused.message);
        assert!(
            refused.message.contains("a person is typing"),
            "{}",
            refused.message
        );
        let signal = terminals.signal(OWNER, &id, "INT").unwrap_err();
        assert_eq!(signal.code, ErrorCode::TerminalHeld);
        let other = terminals
            .take_over(OWNER, &id, "attach (pid 1)")
            .unwrap_err();
        assert_eq!(
            other.code,
            ErrorCode::TerminalHeld,
            "one person holds it at a time"
        );
        assert_eq!(
            terminals
                .release(OWNER, &id, "attach (pid 1)")
                .unwrap_err()
                .code,
            ErrorCode::TerminalHeld,
            "only the holder releases"
        );
        terminals
            .type_as_person(OWNER, &id, "console", b"echo typed-$((40+2))\r")
            .await
            .unwrap();
        let frames = frames_until(&mut viewer, "typed-42").await;
        assert!(
            frames.contains(&Frame::Held(Some("console".into()))),
            "{frames:?}"
        );
        let read = terminals.read(OWNER, &id, View::Plain, 0, 1 << 20).unwrap();
        assert!(
            format!("{read:?}").contains("typed-42"),
            "the agent still reads while the person holds it"
        );
        terminals.resize(OWNER, &id, "console", 100, 30).unwrap();
        assert_eq!(
            (terminals.terminals()[0].cols, terminals.terminals()[0].rows),
            (100, 30)
        );
        terminals.release(OWNER, &id, "console").unwrap();
        assert_eq!(
            (terminals.terminals()[0].cols, terminals.terminals()[0].rows),
            (120, 40),
            "releasing puts back the agent's size"
        );
        let sent = terminals
            .send(
                OWNER,
                &id,
                "echo agent-$((2+2))",
                true,
                wait_for(&terminals, "agent-4"),
                false,
            )
            .await
            .unwrap();
        assert_eq!(sent.settled, "pattern", "{:?}", sent.output);
        terminals.close(OWNER, &id).unwrap();
    }

    #[tokio::test(flavor = "multi_thread", worker_threads = 2)]
    async fn a_viewer_that_falls_behind_gets_the_latest_screen_not_the_backlog() {
        let (terminals, id, mut viewer) = watched_shell().await;
        // 4 MB while the viewer reads nothing: more than a frame, more than the
        // scrollback keeps.
        terminals
            .send(
                OWNER,
                &id,
                "head -c 4000000 /dev/zero | tr '\\0' x; echo; echo flood-$((1+1))",
                true,
                wait_for(&terminals, "flood-2\r\n"),
                false,
            )
            .await
            .unwrap();
        let session = terminals.get(OWNER, &id).unwrap();
        assert!(!session.sending.load(Ordering::Acquire));
        match viewer.next(Duration::ZERO).await {
            Some(Frame::Screen(screen)) => {
                assert!(String::from_utf8_lossy(&screen).contains("flood-2"));
                assert!(
                    screen.len() < 64 * 1024,
                    "a screen, not the backlog: {} bytes",
                    screen.len()
                );
            }
            other => panic!(
                "a viewer behind gets the screen: {:?}",
                other.map(|f| format!("{f:?}").len())
            ),
        }
        terminals.close(OWNER, &id).unwrap();
    }

    #[tokio::test(flavor = "multi_thread", worker_threads = 2)]
    async fn a_flood_reaches_a_viewer_as_at_most_one_frame_per_interval() {
        let (terminals, id, mut viewer) = watched_shell().await;
        // Output all the time for 3 s: many reads of the PTY a second.
        terminals
            .send(
                OWNER,
                &id,
                "end=$((SECONDS+3)); while [ $SECONDS -lt $end ]; do echo flooding; done",
                true,
                wait_for(&terminals, "nothing"),
                true,
            )
            .await
            .unwrap();
        let interval = Duration::from_millis(33);
        frames_until(&mut viewer, "flooding").await;
        let (started, mut frames) = (Instant::now(), 0);
        while started.elapsed() < Duration::from_secs(1) {
            match viewer.next(interval).await {
                Some(Frame::Screen(_) | Frame::Output(_)) => frames += 1,
                Some(_) => {}
                None => break,
            }
        }
        let seconds = started.elapsed().as_secs_f64();
        assert!(
            frames as f64 <= seconds / interval.as_secs_f64() + 1.0,
            "{frames} frames in {seconds:.2} s: more than one per {interval:?}"
        );
        assert!(frames >= 2, "the flood reached the viewer: {frames} frames");
        terminals.close(OWNER, &id).unwrap();
    }

    #[tokio::test(flavor = "multi_thread", worker_threads = 2)]
    async fn a_rendered_view_passes_none_of_the_programs_own_escape_sequences() {
        let terminals = service();
        let id = open(&terminals);
        terminals
            .send(OWNER, &id, "", true, wait_for(&terminals, r"\$ $"), false)
            .await
            .unwrap();
        let mut raw = terminals.view(OWNER, &id, false).unwrap();
        let mut rendered = terminals.view(OWNER, &id, true).unwrap();
        frames_until(&mut raw, "$").await;
        frames_until(&mut rendered, "$").await;
        // A window title, a clipboard write (OSC 52) and a hyperlink: what a program may
        // send a terminal, and what a person's terminal must not be sent.
        let hostile = r"printf '\033]0;owned-title\007\033]52;c;ZWNobyBwd25lZA==\007\033]8;;http://x/\007link\033]8;;\007 done-%s\n' $((1+1))";
        terminals
            .send(
                OWNER,
                &id,
                hostile,
                true,
                wait_for(&terminals, "done-2"),
                false,
            )
            .await
            .unwrap();
        let raw_frames = frames_until(&mut raw, "done-2").await;
        let rendered_frames = frames_until(&mut rendered, "done-2").await;
        let bytes = |frames: &[Frame]| -> Vec<u8> {
            frames
                .iter()
                .flat_map(|f| match f {
                    Frame::Screen(b) | Frame::Output(b) => b.clone(),
                    _ => Vec::new(),
                })
                .collect()
        };
        let osc = |b: &[u8]| b.windows(2).any(|w| w == b"\x1b]");
        assert!(
            osc(&bytes(&raw_frames)),
            "the raw view is the program's bytes"
        );
        let shown = bytes(&rendered_frames);
        assert!(
            !osc(&shown),
            "no operating-system command reaches a rendered view: {:?}",
            String::from_utf8_lossy(&shown)
        );
        assert!(rendered_frames
            .iter()
            .all(|f| matches!(f, Frame::Screen(_))));
        terminals.close(OWNER, &id).unwrap();
    }
}
