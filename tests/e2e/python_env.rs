//! The Python the MCP client tests run with: a virtual environment the tests make for
//! themselves under the target directory (`target/tmp/mcp-venv`), with the packages of
//! `tests/mcp/requirements.txt` and the Python language server the lsp tests drive
//! ([`LSP_PACKAGES`], its `pylsp` in [`venv_program`]), so `cargo test` needs no
//! `pip install` first and works on a system Python that refuses installs into itself (PEP 668). It is made once and
//! remade when the requirements change; `DSH_TEST_PYTHON` names another interpreter
//! that already has them.

use std::path::{Path, PathBuf};
use std::process::Command;

/// Installed besides the requirements: the language server of tests/e2e/lsp.rs.
pub const LSP_PACKAGES: &[&str] = &["python-lsp-server==1.15.0"];

/// A program of the test environment (`pylsp`), making the environment when needed.
/// With `DSH_TEST_PYTHON` set, the program beside that interpreter.
pub fn venv_program(name: &str) -> PathBuf {
    python().with_file_name(name)
}

/// The interpreter to run pytest with, making the environment when needed. Several
/// test processes may ask at once: a lock file serialises them.
pub fn python() -> PathBuf {
    if let Some(python) = std::env::var_os("DSH_TEST_PYTHON") {
        return PathBuf::from(python);
    }
    let root = Path::new(env!("CARGO_MANIFEST_DIR")).parent().unwrap();
    let requirements_path = root.join("tests/mcp/requirements.txt");
    let requirements =
        std::fs::read_to_string(&requirements_path).unwrap() + &LSP_PACKAGES.join("\n");
    let venv = Path::new(env!("CARGO_TARGET_TMPDIR")).join("mcp-venv");
    let python = venv.join("bin/python");
    let stamp = venv.join("dsh-requirements.txt");
    std::fs::create_dir_all(env!("CARGO_TARGET_TMPDIR")).unwrap();
    let lock = std::fs::File::create(Path::new(env!("CARGO_TARGET_TMPDIR")).join("mcp-venv.lock"))
        .unwrap();
    // SAFETY: flock on a descriptor we own; released when `lock` closes.
    unsafe { libc::flock(std::os::fd::AsRawFd::as_raw_fd(&lock), libc::LOCK_EX) };
    if python.exists() && std::fs::read_to_string(&stamp).ok().as_deref() == Some(&requirements) {
        return python;
    }
    let _ = std::fs::remove_dir_all(&venv);
    run(
        Command::new("python3").args(["-m", "venv"]).arg(&venv),
        "python3 -m venv (on Debian and Ubuntu: apt-get install python3-venv)",
    );
    run(
        Command::new(&python)
            .args([
                "-m",
                "pip",
                "install",
                "--quiet",
                "--disable-pip-version-check",
                "-r",
            ])
            .arg(&requirements_path)
            .args(LSP_PACKAGES),
        "pip install -r tests/mcp/requirements.txt python-lsp-server into the test environment",
    );
    std::fs::write(&stamp, requirements).unwrap();
    python
}

fn run(command: &mut Command, what: &str) {
    let output = command
        .output()
        .unwrap_or_else(|e| panic!("cannot run {what}: {e}"));
    assert!(
        output.status.success(),
        "{what} failed:\n{}{}",
        String::from_utf8_lossy(&output.stdout),
        String::from_utf8_lossy(&output.stderr)
    );
}
