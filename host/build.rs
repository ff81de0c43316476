//! Builds the guest components in `plugins/` for `wasm32-wasip2` (adding the target
//! with rustup when it is missing) and embeds the default set in the binary.
//!
//! The components build in their own target directory (`target/wasm-plugins`) with the
//! plugins' release profile. `DSH_PLUGIN_WASM_DIR` (set for the tests and benches)
//! points at every built component, the test-only ones included.

use std::path::{Path, PathBuf};
use std::process::Command;

/// Tool plugins embedded in `dsh` and loaded with no configuration.
const EMBEDDED_TOOLS: &[&str] = &["bash", "jobs", "terminal"];
/// Guards and result filters embedded in `dsh`, loaded only when `[pipeline]` in
/// dsh.toml names them.
const EMBEDDED_STAGES: &[&str] = &[
    "deny_destructive",
    "workspace_only",
    "ask_git_push",
    "redact_secrets",
];

fn main() {
    let manifest_dir = PathBuf::from(std::env::var("CARGO_MANIFEST_DIR").unwrap());
    let root = manifest_dir.parent().unwrap().to_path_buf();
    let plugins = root.join("plugins");
    let out_dir = PathBuf::from(std::env::var("OUT_DIR").unwrap());
    // OUT_DIR is TARGET/PROFILE/build/dsh-HASH/out.
    let target_dir = out_dir
        .ancestors()
        .nth(4)
        .expect("OUT_DIR is inside the target directory");
    let wasm_target_dir = target_dir.join("wasm-plugins");

    watch(&root.join("wit"));
    watch(&plugins.join("fixtures"));
    watch(&plugins.join("shared"));
    println!(
        "cargo:rerun-if-changed={}",
        plugins.join("Cargo.toml").display()
    );
    println!(
        "cargo:rerun-if-changed={}",
        plugins.join("Cargo.lock").display()
    );
    for group in [plugins.clone(), plugins.join("guards")] {
        for entry in std::fs::read_dir(&group)
            .expect("plugins/ and plugins/guards/ exist")
            .flatten()
        {
            let crate_dir = entry.path();
            if crate_dir.join("Cargo.toml").exists() {
                println!(
                    "cargo:rerun-if-changed={}",
                    crate_dir.join("Cargo.toml").display()
                );
                watch(&crate_dir.join("src"));
            }
        }
    }

    ensure_wasm_target();
    let cargo = std::env::var("CARGO").unwrap_or_else(|_| "cargo".into());
    let output = Command::new(cargo)
        .args([
            "build",
            "--release",
            "--target",
            "wasm32-wasip2",
            "--manifest-path",
        ])
        .arg(plugins.join("Cargo.toml"))
        .env("CARGO_TARGET_DIR", &wasm_target_dir)
        // The host's own build settings must not leak into the guest build.
        .env_remove("RUSTFLAGS")
        .env_remove("CARGO_ENCODED_RUSTFLAGS")
        .env_remove("CARGO_BUILD_TARGET")
        .env_remove("RUSTC_WORKSPACE_WRAPPER")
        .output()
        .expect("run cargo for the plugins");
    if !output.status.success() {
        panic!(
            "building plugins/ for wasm32-wasip2 failed:\n{}",
            String::from_utf8_lossy(&output.stderr)
        );
    }

    let built = wasm_target_dir.join("wasm32-wasip2").join("release");
    let mut embedded = String::from("/// The embedded plugins: (name, component bytes).\npub const PLUGINS: &[(&str, &[u8])] = &[\n");
    for name in EMBEDDED_TOOLS.iter().chain(EMBEDDED_STAGES) {
        let wasm = built.join(format!("{name}.wasm"));
        let copy = out_dir.join(format!("{name}.wasm"));
        std::fs::copy(&wasm, &copy).unwrap_or_else(|e| panic!("{}: {e}", wasm.display()));
        embedded.push_str(&format!(
            "    ({name:?}, include_bytes!({:?})),\n",
            copy.display().to_string()
        ));
    }
    embedded.push_str("];\n");
    embedded.push_str(&format!(
        "/// The embedded guards and result filters (loaded when `[pipeline]` names them).\npub const STAGES: &[&str] = &{EMBEDDED_STAGES:?};\n"
    ));
    std::fs::write(out_dir.join("embedded.rs"), embedded).unwrap();
    println!("cargo:rustc-env=DSH_PLUGIN_WASM_DIR={}", built.display());
}

fn watch(dir: &Path) {
    println!("cargo:rerun-if-changed={}", dir.display());
}

/// Adds the wasm32-wasip2 target when rustup manages the toolchain and lacks it.
fn ensure_wasm_target() {
    let rustc = std::env::var("RUSTC").unwrap_or_else(|_| "rustc".into());
    let has_target = Command::new(&rustc)
        .args(["--print", "target-libdir", "--target", "wasm32-wasip2"])
        .output()
        .ok()
        .filter(|o| o.status.success())
        .map(|o| PathBuf::from(String::from_utf8_lossy(&o.stdout).trim()))
        .is_some_and(|dir| dir.exists());
    if has_target {
        return;
    }
    let status = Command::new("rustup")
        .args(["target", "add", "wasm32-wasip2"])
        .status();
    match status {
        Ok(status) if status.success() => {}
        _ => panic!(
            "the wasm32-wasip2 target is missing and `rustup target add wasm32-wasip2` failed"
        ),
    }
}
