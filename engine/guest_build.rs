//! Builds guest components from `plugins/` for `wasm32-wasip2`, in one place for the
//! three builders: the build scripts (`engine/build.rs` builds the embedded set only), and the end-to-end harness and the
//! benches (the whole workspace, test plugins included, once per process). Each includes
//! this file with `#[path]`, so it uses nothing but `std`.
//!
//! The build never changes the toolchain: a missing `wasm32-wasip2` target is an error
//! that names the command adding it.

use std::ffi::OsString;
use std::path::{Path, PathBuf};
use std::process::Command;
use std::sync::OnceLock;

/// The target guest components build for.
pub const WASM_TARGET: &str = "wasm32-wasip2";

/// For a build script: the target directory guest components build into (beside the
/// host's own build, `TARGET/wasm-plugins`) and where their build puts them, both told to
/// the crate being built (`DSH_WASM_TARGET_DIR`, `DSH_PLUGIN_WASM_DIR`: the tests and
/// benches build the test plugins there and find them there).
#[allow(dead_code)] // the build scripts call it; the tests and benches include this file too
pub fn announce_dirs() -> (PathBuf, PathBuf) {
    let out_dir = PathBuf::from(std::env::var("OUT_DIR").unwrap());
    // OUT_DIR is TARGET/PROFILE/build/CRATE-HASH/out.
    let target_dir = out_dir
        .ancestors()
        .nth(4)
        .expect("OUT_DIR is inside the target directory");
    let wasm_target_dir = target_dir.join("wasm-plugins");
    let built = built_dir(&wasm_target_dir);
    println!("cargo:rustc-env=DSH_PLUGIN_WASM_DIR={}", built.display());
    println!(
        "cargo:rustc-env=DSH_WASM_TARGET_DIR={}",
        wasm_target_dir.display()
    );
    (wasm_target_dir, built)
}

/// Where a build into `target_dir` puts the components (`NAME.wasm`).
pub fn built_dir(target_dir: &Path) -> PathBuf {
    target_dir.join(WASM_TARGET).join("release")
}

/// Builds `packages` of the workspace `manifest` (every member when empty) with its
/// release profile into `target_dir`, and returns where the components are. The error
/// is a message for a person: cargo's output.
pub fn build(manifest: &Path, target_dir: &Path, packages: &[&str]) -> Result<PathBuf, String> {
    let cargo = std::env::var_os("CARGO").unwrap_or_else(|| OsString::from("cargo"));
    let mut command = Command::new(cargo);
    command
        .args([
            "build",
            "--release",
            "--target",
            WASM_TARGET,
            "--manifest-path",
        ])
        .arg(manifest)
        .env("CARGO_TARGET_DIR", target_dir)
        // The host's own build settings must not leak into the guest build.
        .env_remove("RUSTFLAGS")
        .env_remove("CARGO_ENCODED_RUSTFLAGS")
        .env_remove("CARGO_BUILD_TARGET")
        .env_remove("RUSTC_WORKSPACE_WRAPPER")
        // 128-bit SIMD (every engine dsh runs has it): the file tools' search is about
        // twice as fast with it.
        .env(
            "CARGO_TARGET_WASM32_WASIP2_RUSTFLAGS",
            "-C target-feature=+simd128",
        );
    for package in packages {
        command.args(["-p", package]);
    }
    let output = command
        .output()
        .map_err(|e| format!("running cargo for {}: {e}", manifest.display()))?;
    if !output.status.success() {
        return Err(format!(
            "building {} for {WASM_TARGET} failed:\n{}",
            manifest.display(),
            String::from_utf8_lossy(&output.stderr)
        ));
    }
    Ok(built_dir(target_dir))
}

/// Builds the whole workspace `manifest` into `target_dir` the first time it is called
/// in this process (later calls wait for that build and return its directory); panics
/// with the build's message when it fails.
pub fn build_all_once(manifest: &Path, target_dir: &Path) -> &'static Path {
    static BUILT: OnceLock<PathBuf> = OnceLock::new();
    BUILT.get_or_init(|| {
        check_wasm_target()
            .and_then(|()| build(manifest, target_dir, &[]))
            .unwrap_or_else(|message| panic!("{message}"))
    })
}

/// `Ok` when the compiler has the `wasm32-wasip2` standard library, else a one-line
/// message naming the command that adds it.
pub fn check_wasm_target() -> Result<(), String> {
    let rustc = std::env::var_os("RUSTC").unwrap_or_else(|| OsString::from("rustc"));
    let installed = Command::new(rustc)
        .args(["--print", "target-libdir", "--target", WASM_TARGET])
        .output()
        .ok()
        .filter(|o| o.status.success())
        .map(|o| PathBuf::from(String::from_utf8_lossy(&o.stdout).trim()))
        .is_some_and(|dir| dir.exists());
    if installed {
        Ok(())
    } else {
        Err(format!(
            "the {WASM_TARGET} target is not installed: dsh's plugins are built for it. \
             Add it with `rustup target add {WASM_TARGET}` (or your distribution's \
             wasm32-wasip2 Rust standard library), then build again."
        ))
    }
}
