//! The `dsh:plugin/lsp` binding: a query's path resolves against the call's workdir and
//! must stay inside the session workspace; the op is mapped one to one (exhaustively)
//! onto the service's [`Op`], and its answer back.
//!
//! The contract's answer has no place for a note, so an answer given while the server
//! was still indexing says so in its data: a location list ends with one whose line and
//! column are 0 (no real location has them: they are 1-based) and whose path is
//! `(partial)`, the note its text; a hover ends with the note.

use std::sync::Arc;

use wasmtime::component::Linker;

use crate::bindings::dsh::plugin::lsp::{
    self as interface, Answer as WitAnswer, DocumentSymbol as WitSymbol, Host,
    Location as WitLocation, Op as WitOp, Request as WitRequest,
};
use crate::bindings::dsh::plugin::types::ToolError as WitToolError;
use crate::services::wit::HasCall;
use crate::services::{CallCtx, CallView};

/// What this binding is given of the services: its own, and nothing of another
/// capability's.
type Own = Arc<super::LspService>;

use super::{Answer, Column, LspProvider, Op, Query, Reply};

/// Adds `dsh:plugin/lsp` to `linker`.
pub fn add_to_linker<T: CallView + 'static>(linker: &mut Linker<T>) -> wasmtime::Result<()> {
    interface::add_to_linker::<T, HasCall<Own>>(linker, |state| {
        state.call_ctx().narrow(|services| &services.lsp)
    })
}

impl Host for CallCtx<'_, Own> {
    async fn query(&mut self, query: WitRequest) -> Result<WitAnswer, WitToolError> {
        let op = match query.op {
            WitOp::Definition => Op::Definition,
            WitOp::References => Op::References,
            WitOp::Hover => Op::Hover,
            WitOp::Symbols => Op::Symbols,
        };
        let column = match (query.column, query.symbol) {
            (Some(column), _) => Column::At(column),
            (None, Some(symbol)) => Column::Symbol(symbol),
            (None, None) => Column::At(1),
        };
        let request = Query {
            op,
            path: query.path,
            line: query.line,
            column,
        };
        let service = self.service.clone();
        let workdir = self.call.workdir.clone();
        let executor = self.executor();
        let Reply { answer, indexing } = self
            .host_call(
                "lsp.query",
                service.query(&workdir, &workdir, executor, request),
            )
            .await?;
        Ok(match answer {
            Answer::Locations(found) => WitAnswer::Locations(
                found
                    .into_iter()
                    .map(|l| WitLocation {
                        path: l.path,
                        line: l.line,
                        column: l.column,
                        text: l.text,
                    })
                    .chain(indexing.map(|note| WitLocation {
                        path: "(partial)".into(),
                        line: 0,
                        column: 0,
                        text: note,
                    }))
                    .collect(),
            ),
            Answer::Hover(text) => WitAnswer::Hover(match indexing {
                Some(note) => format!("{text}\n\n({note})"),
                None => text,
            }),
            Answer::Symbols(symbols) => WitAnswer::Symbols(
                symbols
                    .into_iter()
                    .map(|s| WitSymbol {
                        name: s.name,
                        kind: s.kind,
                        depth: s.depth,
                        line: s.line,
                        column: s.column,
                    })
                    .collect(),
            ),
        })
    }
}
