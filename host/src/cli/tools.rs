//! `dsh tools`: the tool manuals a scope sees, as text or JSON.

use std::process::ExitCode;

use serde_json::json;

use dsh::registry::DEFAULT_SCOPE;

use super::{print, Globals};

#[derive(clap::Args)]
pub struct Args {
    /// The scope to list (scopes are defined in dsh.toml)
    #[arg(long, default_value = DEFAULT_SCOPE)]
    scope: String,
    /// Print JSON: [{name, description, inputSchema, idempotent}]
    #[arg(long)]
    json: bool,
}

pub async fn run(globals: &Globals, args: Args) -> anyhow::Result<ExitCode> {
    let host = globals.start().await?;
    let scope = host
        .registry
        .scope(&args.scope)
        .map_err(|e| anyhow::anyhow!(e.message))?;
    let specs = host.registry.schemas(&scope);
    if args.json {
        let manuals: Vec<_> = specs
            .iter()
            .map(|s| {
                json!({
                    "name": s.name,
                    "description": s.description,
                    "inputSchema": s.input_schema,
                    "idempotent": s.idempotent,
                })
            })
            .collect();
        print::json(&manuals)?;
    } else {
        for spec in specs {
            println!(
                "{}\n  {}\n  arguments: {}\n",
                spec.name, spec.description, spec.input_schema
            );
        }
    }
    Ok(ExitCode::SUCCESS)
}
