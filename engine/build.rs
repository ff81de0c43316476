//! Builds the embedded plugin set (named in `src/engine/embedded/set.rs`) from
//! `plugins/` for `wasm32-wasip2` and embeds it in the engine (so in the binary). Only those crates build
//! here: the test plugins are built by the tests and benches that use them
//! (`guest_build.rs`). A missing `wasm32-wasip2` target stops the build with the command
//! that adds it; the build never changes the toolchain itself.
//!
//! The components build in their own target directory (`target/wasm-plugins`) with the
//! plugins' release profile. Each is then precompiled for this machine (see
//! [`precompiler`]) and its code embedded beside it. `DSH_PLUGIN_WASM_DIR` (set for the tests and benches) is
//! where that build puts components; the tests' own build adds the test-only ones there.

use std::path::{Path, PathBuf};

use sha2::Digest;

#[path = "src/engine/compile_settings.rs"]
mod compile_settings;
#[path = "src/engine/embedded/set.rs"]
#[allow(dead_code)]
mod embedded_set;
#[path = "guest_build.rs"]
#[allow(dead_code)]
mod guest_build;

use embedded_set::EMBEDDED;

fn main() {
    let manifest_dir = PathBuf::from(std::env::var("CARGO_MANIFEST_DIR").unwrap());
    let root = manifest_dir.parent().unwrap().to_path_buf();
    let plugins = root.join("plugins");
    let out_dir = PathBuf::from(std::env::var("OUT_DIR").unwrap());
    // Where the components are, and the target directory the tests build the test
    // plugins into (tests/e2e/support.rs, benches/support).
    let (wasm_target_dir, built) = guest_build::announce_dirs();

    // What the embedded crates are built from: the WIT, the workspace's Cargo files,
    // the SDK they all use (a workspace dependency, so not in their own manifests), and
    // each crate with its path dependencies.
    watch(&root.join("wit"));
    // The list of what to build (its change alone must rebuild and re-embed).
    watch(&manifest_dir.join("src/engine/embedded/set.rs"));
    watch(&plugins.join("sdk/Cargo.toml"));
    watch(&plugins.join("sdk/src"));
    watch(&plugins.join("Cargo.toml"));
    watch(&plugins.join("Cargo.lock"));
    let mut crates: Vec<PathBuf> = EMBEDDED
        .iter()
        .filter_map(|p| plugins.join(p.dir).canonicalize().ok())
        .collect();
    let mut watched = Vec::new();
    while let Some(dir) = crates.pop() {
        if watched.contains(&dir) {
            continue;
        }
        watch(&dir.join("Cargo.toml"));
        watch(&dir.join("src"));
        crates.extend(path_dependencies(&dir));
        watched.push(dir);
    }

    if let Err(message) = guest_build::check_wasm_target() {
        // Cargo prints this as the build's one error, without a backtrace.
        println!("cargo::error={message}");
        return;
    }
    let packages: Vec<&str> = EMBEDDED.iter().map(|p| p.name).collect();
    if let Err(message) =
        guest_build::build(&plugins.join("Cargo.toml"), &wasm_target_dir, &packages)
    {
        panic!("{message}");
    }

    // Each component's SHA-256 is computed here, so finding its compile cache entry at
    // start-up never reads (and never brings into memory) the component's bytes.
    let precompiler = precompiler();
    let mut embedded = String::from(
        "/// The embedded plugins, as `EMBEDDED` lists them, each with its SHA-256 and its\n\
         /// code precompiled for the machine that built dsh.\n\
         pub const PLUGINS: &[EmbeddedComponent] = &[\n",
    );
    for plugin in EMBEDDED {
        let wasm = built.join(format!("{}.wasm", plugin.name));
        let copy = out_dir.join(format!("{}.wasm", plugin.name));
        std::fs::copy(&wasm, &copy).unwrap_or_else(|e| panic!("{}: {e}", wasm.display()));
        let bytes = std::fs::read(&copy).unwrap_or_else(|e| panic!("{}: {e}", copy.display()));
        let digest: String = sha2::Sha256::digest(&bytes)
            .iter()
            .map(|b| format!("{b:02x}"))
            .collect();
        let precompiled = match &precompiler {
            Some(engine) => {
                let code = engine
                    .precompile_component(&bytes)
                    .unwrap_or_else(|e| panic!("precompiling {}: {e:#}", plugin.name));
                let path = out_dir.join(format!("{}.cwasm", plugin.name));
                std::fs::write(&path, code).unwrap_or_else(|e| panic!("{}: {e}", path.display()));
                format!("Some(include_bytes!({:?}))", path.display().to_string())
            }
            None => "None".to_string(),
        };
        embedded.push_str(&format!(
            "    EmbeddedComponent {{ name: {:?}, bytes: include_bytes!({:?}), digest: {digest:?}, \
             precompiled: {precompiled} }},\n",
            plugin.name,
            copy.display().to_string()
        ));
    }
    embedded.push_str("];\n");
    std::fs::write(out_dir.join("embedded.rs"), embedded).unwrap();
}

/// The engine that precompiles the embedded components for the machine that builds dsh,
/// with the runtime's compile settings: a first start then loads their code instead of
/// compiling it (several seconds of CPU). `None` for a cross build, whose code this
/// machine's engine would not make: that binary compiles them at its first start.
fn precompiler() -> Option<wasmtime::Engine> {
    if std::env::var("TARGET").ok() != std::env::var("HOST").ok() {
        return None;
    }
    let mut config = wasmtime::Config::new();
    compile_settings::apply(&mut config);
    Some(wasmtime::Engine::new(&config).expect("an engine with the runtime's compile settings"))
}

fn watch(path: &Path) {
    println!("cargo:rerun-if-changed={}", path.display());
}

/// The directories of the crate at `dir`'s path dependencies (`path = "..."` in its
/// Cargo.toml), which its build depends on too.
fn path_dependencies(dir: &Path) -> Vec<PathBuf> {
    let manifest = std::fs::read_to_string(dir.join("Cargo.toml")).unwrap_or_default();
    manifest
        .split("path = \"")
        .skip(1)
        .filter_map(|rest| rest.split('"').next())
        .filter_map(|relative| dir.join(relative).canonicalize().ok())
        .collect()
}
