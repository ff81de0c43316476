//! The dsh binary's link: release builds for x86-64 Linux link the functions an idle
//! server runs first and together (see [`link_startup_order`]). Also tells the tests and
//! benches where the engine's build put the plugin components (`DSH_PLUGIN_WASM_DIR`) and
//! the target directory the test plugins build into (`DSH_WASM_TARGET_DIR`): the engine
//! crate's build script (`engine/build.rs`) builds them, before this crate compiles.

use std::path::{Path, PathBuf};

#[path = "../engine/guest_build.rs"]
#[allow(dead_code)]
mod guest_build;

fn main() {
    let manifest_dir = PathBuf::from(std::env::var("CARGO_MANIFEST_DIR").unwrap());
    guest_build::announce_dirs();
    println!("cargo:rerun-if-changed=build.rs");
    link_startup_order(&manifest_dir);
}

/// Release builds of the dsh binary for x86-64 Linux link the functions an idle server
/// runs first and together (`link/startup-order.txt`, written by
/// `link/generate-startup-order.py`). Spread over the binary's text as they otherwise
/// are, the kernel's fault-around (64 KiB around each page fault) mapped most of the text
/// at start-up: an idle server's peak RSS was 31 MiB, 18-19 MiB with them together
/// (`cargo bench --bench mcp`). lld, rustc's default linker there, reads the list (and
/// skips names it does not find); a build told to use another linker does without it.
fn link_startup_order(manifest_dir: &Path) {
    let var = |name: &str| std::env::var(name).unwrap_or_default();
    let flags = var("CARGO_ENCODED_RUSTFLAGS");
    let own_linker = flags.contains("linker")
        || flags.contains("fuse-ld")
        || std::env::var_os("CARGO_TARGET_X86_64_UNKNOWN_LINUX_GNU_LINKER").is_some();
    if var("PROFILE") != "release" || var("TARGET") != "x86_64-unknown-linux-gnu" || own_linker {
        return;
    }
    let order = manifest_dir.join("link/startup-order.txt");
    println!("cargo:rerun-if-changed={}", order.display());
    println!(
        "cargo:rustc-link-arg-bin=dsh=-Wl,--symbol-ordering-file={}",
        order.display()
    );
    println!("cargo:rustc-link-arg-bin=dsh=-Wl,--no-warn-symbol-ordering");
}
