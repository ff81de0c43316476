//! The `lsp` tool against real language servers: pylsp (installed into the test venv,
//! see `python_env`) and typescript-language-server with typescript (installed with npm
//! under the target directory, once, by [`typescript_language_server`]), on small
//! projects the tests write, through `dsh serve`.

use std::path::{Path, PathBuf};
use std::process::Command;
use std::time::{Duration, Instant};

use serde_json::{json, Value};

use crate::mcp_stdio::McpServer;
use crate::python_env::venv_program;
use crate::support::{built_plugin, Env};

/// The npm packages of the TypeScript server, pinned.
const NODE_PACKAGES: &[&str] = &["typescript-language-server@5.3.0", "typescript@5.9.3"];

/// typescript-language-server, installed with typescript under the target directory
/// the first time (a lock serialises test processes; a stamp names the versions).
pub fn typescript_language_server() -> PathBuf {
    let dir = Path::new(env!("CARGO_TARGET_TMPDIR")).join("lsp-node");
    let program = dir.join("node_modules/.bin/typescript-language-server");
    let stamp = dir.join("dsh-packages.txt");
    let wanted = NODE_PACKAGES.join("\n");
    std::fs::create_dir_all(&dir).unwrap();
    let lock = std::fs::File::create(dir.with_extension("lock")).unwrap();
    // SAFETY: flock on a descriptor we own; released when `lock` closes.
    unsafe { libc::flock(std::os::fd::AsRawFd::as_raw_fd(&lock), libc::LOCK_EX) };
    if program.exists() && std::fs::read_to_string(&stamp).ok().as_deref() == Some(&wanted) {
        return program;
    }
    let output = Command::new("npm")
        .args(["install", "--no-audit", "--no-fund", "--silent", "--prefix"])
        .arg(&dir)
        .args(NODE_PACKAGES)
        .output()
        .expect("cannot run npm (install Node.js and npm)");
    assert!(
        output.status.success(),
        "npm install {NODE_PACKAGES:?} failed:\n{}{}",
        String::from_utf8_lossy(&output.stdout),
        String::from_utf8_lossy(&output.stderr)
    );
    std::fs::write(&stamp, wanted).unwrap();
    program
}

/// A config with pylsp for `.py`, typescript-language-server for `.ts`, and a server
/// whose binary does not exist for `.gh`; no defaults from PATH.
fn config() -> String {
    format!(
        r#"
[lsp]
defaults = false
request_timeout_ms = 60000

[lsp.servers.pylsp]
command = ["{}"]
extensions = ["py"]
root_markers = ["pyproject.toml"]

[lsp.servers.typescript]
command = ["{}", "--stdio"]
extensions = ["ts"]
root_markers = ["tsconfig.json"]
initialization_options = {{ tsserver = {{ useSyntaxServer = "never" }} }}

[lsp.servers.ghost]
command = ["no-such-language-server-binary"]
extensions = ["gh"]
"#,
        venv_program("pylsp").display(),
        typescript_language_server().display()
    )
}

const UTIL_PY: &str = "def add(a, b):
    \"\"\"Add two numbers.\"\"\"
    return a + b


class Greeter:
    def greet(self, name):
        return \"hi \" + name
";

const MAIN_PY: &str = "from util import add, Greeter

total = add(1, 2)
again = add(total, 3)
";

const LIB_TS: &str = "/** Twice the number. */
export function double(n: number): number {
  return n * 2;
}

export class Counter {
  count = 0;
  bump(): number {
    return ++this.count;
  }
}
";

const MAIN_TS: &str = "import { double } from \"./lib\";

const x = double(21);
console.log(double(x));
";

/// Writes the Python project at the workspace root and the TypeScript one in `web/`.
fn write_projects(env: &Env) {
    let work = env.workdir();
    std::fs::write(work.join("util.py"), UTIL_PY).unwrap();
    std::fs::write(work.join("main.py"), MAIN_PY).unwrap();
    std::fs::write(work.join("notes.xyz"), "nothing\n").unwrap();
    std::fs::write(work.join("thing.gh"), "nothing\n").unwrap();
    std::fs::create_dir_all(work.join("web")).unwrap();
    std::fs::write(
        work.join("web/tsconfig.json"),
        r#"{"compilerOptions":{"strict":true,"target":"es2020","module":"commonjs"}}"#,
    )
    .unwrap();
    std::fs::write(work.join("web/lib.ts"), LIB_TS).unwrap();
    std::fs::write(work.join("web/main.ts"), MAIN_TS).unwrap();
}

fn start(env: &Env) -> McpServer {
    write_projects(env);
    McpServer::start(env, &config())
}

/// The `lsp` tool's input schema, from `tools/list`.
fn schema(server: &McpServer) -> Value {
    let listed = server.request("tools/list", json!({})).wait(server);
    listed["result"]["tools"]
        .as_array()
        .unwrap()
        .iter()
        .find(|tool| tool["name"] == "lsp")
        .unwrap_or_else(|| panic!("no lsp tool listed: {listed}"))["inputSchema"]
        .clone()
}

/// Pids of the language servers of this test: processes whose cwd is in its
/// workspace and whose command line names `program`.
fn servers_of(env: &Env, program: &str) -> Vec<i32> {
    let work = env.workdir();
    let mut found = Vec::new();
    for entry in std::fs::read_dir("/proc").unwrap().flatten() {
        let Ok(pid) = entry.file_name().to_string_lossy().parse::<i32>() else {
            continue;
        };
        let Ok(cwd) = std::fs::read_link(entry.path().join("cwd")) else {
            continue;
        };
        let cmdline = std::fs::read(entry.path().join("cmdline")).unwrap_or_default();
        let cmdline = String::from_utf8_lossy(&cmdline).replace('\0', " ");
        if cwd.starts_with(&work) && cmdline.contains(program) {
            found.push(pid);
        }
    }
    found
}

/// Waits until `pid` is gone (reaped), up to 10 s.
fn wait_gone(pid: i32) {
    let deadline = Instant::now() + Duration::from_secs(10);
    while Path::new(&format!("/proc/{pid}")).exists() {
        let state = std::fs::read_to_string(format!("/proc/{pid}/stat")).unwrap_or_default();
        if state.contains(") Z") {
            // A zombie is dead; its parent reaps it.
            std::thread::sleep(Duration::from_millis(10));
        }
        assert!(Instant::now() < deadline, "process {pid} is still there");
        std::thread::sleep(Duration::from_millis(20));
    }
}

#[test]
fn python_definition_references_hover_and_symbols_come_from_pylsp() {
    let env = Env::new();
    let server = start(&env);

    let definition = server.call_ok(
        "lsp",
        json!({"op": "definition", "path": "main.py", "line": 3, "column": 9}),
    );
    assert_eq!(definition, "util.py:1:5: def add(a, b):");

    // `symbol` in place of `column`.
    let by_symbol = server.call_ok(
        "lsp",
        json!({"op": "definition", "path": "main.py", "line": 4, "symbol": "add"}),
    );
    assert_eq!(by_symbol, "util.py:1:5: def add(a, b):");

    let references = server.call_ok(
        "lsp",
        json!({"op": "references", "path": "main.py", "line": 3, "symbol": "total"}),
    );
    assert_eq!(
        references,
        "main.py:3:1: total = add(1, 2)\nmain.py:4:13: again = add(total, 3)"
    );

    let hover = server.call_ok(
        "lsp",
        json!({"op": "hover", "path": "main.py", "line": 3, "symbol": "add"}),
    );
    assert!(hover.contains("add(a, b)"), "{hover}");
    assert!(hover.contains("Add two numbers."), "{hover}");

    let symbols = server.call_ok("lsp", json!({"op": "symbols", "path": "util.py"}));
    let lines: Vec<&str> = symbols.lines().collect();
    assert!(lines.contains(&"function add (1:1)"), "{symbols}");
    assert!(lines.contains(&"class Greeter (6:1)"), "{symbols}");
    assert!(
        lines
            .iter()
            .any(|l| l.starts_with("  ") && l.contains("greet")),
        "greet is nested under Greeter: {symbols}"
    );
}

#[test]
fn typescript_definition_references_hover_and_symbols_come_from_typescript_language_server() {
    let env = Env::new();
    let server = start(&env);

    let definition = server.call_ok(
        "lsp",
        json!({"op": "definition", "path": "web/main.ts", "line": 3, "symbol": "double"}),
    );
    assert_eq!(
        definition,
        "web/lib.ts:2:17: export function double(n: number): number {"
    );

    let references = server.call_ok(
        "lsp",
        json!({"op": "references", "path": "web/lib.ts", "line": 2, "column": 17}),
    );
    for expected in [
        "web/lib.ts:2:17: export function double(n: number): number {",
        "web/main.ts:1:10: import { double } from \"./lib\";",
        "web/main.ts:3:11: const x = double(21);",
        "web/main.ts:4:13: console.log(double(x));",
    ] {
        assert!(
            references.lines().any(|l| l == expected),
            "{expected} missing from:\n{references}"
        );
    }

    let hover = server.call_ok(
        "lsp",
        json!({"op": "hover", "path": "web/main.ts", "line": 3, "symbol": "double"}),
    );
    assert!(hover.contains("double(n: number): number"), "{hover}");
    assert!(hover.contains("Twice the number."), "{hover}");

    let symbols = server.call_ok("lsp", json!({"op": "symbols", "path": "web/lib.ts"}));
    let lines: Vec<&str> = symbols.lines().collect();
    assert!(lines.contains(&"function double (2:17)"), "{symbols}");
    assert!(lines.contains(&"class Counter (6:14)"), "{symbols}");
    assert!(lines.contains(&"  method bump (8:3)"), "{symbols}");
}

#[test]
fn a_file_changed_by_bash_is_queried_as_it_is_on_disk() {
    let env = Env::new();
    let server = start(&env);
    let before = server.call_ok("lsp", json!({"op": "symbols", "path": "util.py"}));
    assert!(!before.contains("renamed"), "{before}");

    server.call_ok(
        "bash",
        json!({"description": "append a function", "command": "printf '\\ndef renamed(x):\\n    return add(x, x)\\n' >> util.py"}),
    );
    let after = server.call_ok("lsp", json!({"op": "symbols", "path": "util.py"}));
    assert!(
        after.lines().any(|l| l == "function renamed (10:1)"),
        "{after}"
    );
    let definition = server.call_ok(
        "lsp",
        json!({"op": "definition", "path": "util.py", "line": 11, "symbol": "add"}),
    );
    assert_eq!(definition, "util.py:1:5: def add(a, b):");
}

#[test]
fn bad_positions_are_invalid_arguments_with_the_reason() {
    let env = Env::new();
    let server = start(&env);
    let cases = [
        (
            json!({"op": "hover", "path": "../outside.py", "line": 1, "column": 1}),
            "outside the workspace",
        ),
        (
            json!({"op": "hover", "path": "main.py", "line": 99, "column": 1}),
            "line 99 is past the end of main.py (4 lines)",
        ),
        (
            json!({"op": "hover", "path": "main.py", "line": 3, "symbol": "nope"}),
            "symbol `nope` is not on line 3",
        ),
        (
            json!({"op": "hover", "path": "main.py", "line": 3}),
            "needs a column or a symbol",
        ),
    ];
    std::fs::write(env.dir.path().join("outside.py"), "x = 1\n").unwrap();
    for (args, reason) in cases {
        let reply = server.call("lsp", args.clone());
        assert_eq!(
            reply.code.as_deref(),
            Some("INVALID_ARGUMENTS"),
            "{args}: {reply:?}"
        );
        assert!(reply.text.contains(reason), "{args}: {reply:?}");
    }
}

#[test]
fn unknown_extension_missing_binary_and_a_server_killed_twice_are_lsp_unavailable() {
    let env = Env::new();
    let server = start(&env);
    let schema_before = schema(&server);

    let unknown = server.call(
        "lsp",
        json!({"op": "hover", "path": "notes.xyz", "line": 1, "column": 1}),
    );
    assert_eq!(
        unknown.code.as_deref(),
        Some("LSP_UNAVAILABLE"),
        "{unknown:?}"
    );
    assert!(unknown.text.contains(".xyz"), "{unknown:?}");
    assert!(unknown.text.contains("pylsp (.py)"), "{unknown:?}");
    assert!(unknown.text.contains("typescript (.ts)"), "{unknown:?}");

    let missing = server.call(
        "lsp",
        json!({"op": "hover", "path": "thing.gh", "line": 1, "column": 1}),
    );
    assert_eq!(
        missing.code.as_deref(),
        Some("LSP_UNAVAILABLE"),
        "{missing:?}"
    );
    assert!(
        missing.text.contains("no-such-language-server-binary"),
        "{missing:?}"
    );

    // pylsp killed once: restarted, it answers; killed again: unavailable.
    let symbols = json!({"op": "symbols", "path": "util.py"});
    server.call_ok("lsp", symbols.clone());
    for round in 0..2 {
        let pids = servers_of(&env, "pylsp");
        assert_eq!(pids.len(), 1, "round {round}: {pids:?}");
        // SAFETY: sending a signal to a pid we just read.
        unsafe { libc::kill(pids[0], libc::SIGKILL) };
        wait_gone(pids[0]);
        let reply = server.call("lsp", symbols.clone());
        if round == 0 {
            assert!(!reply.is_error, "restarted once: {reply:?}");
            assert!(reply.text.contains("class Greeter"), "{reply:?}");
        } else {
            assert_eq!(reply.code.as_deref(), Some("LSP_UNAVAILABLE"), "{reply:?}");
            assert!(reply.text.contains("died again"), "{reply:?}");
        }
    }

    // The other language keeps answering, and the schema never changed.
    let ts = server.call_ok("lsp", json!({"op": "symbols", "path": "web/lib.ts"}));
    assert!(ts.contains("function double"), "{ts}");
    assert_eq!(schema(&server), schema_before);
}

#[test]
fn hot_replacing_the_lsp_plugin_keeps_the_warm_server() {
    let env = Env::new();
    write_projects(&env);
    std::fs::create_dir_all(env.plugins_dir()).unwrap();
    std::fs::copy(built_plugin("lsp"), env.plugins_dir().join("lsp.wasm")).unwrap();
    // A plugin from the directory is granted what dsh.toml says (not the embedded
    // plugin's defaults).
    let config = config() + "\n[plugins.lsp]\ninterfaces = [\"lsp\"]\n";
    let server = McpServer::start(&env, &config);
    let query = json!({"op": "hover", "path": "main.py", "line": 3, "symbol": "add"});
    let first = server.call_ok("lsp", query.clone());
    let pids = servers_of(&env, "pylsp");
    assert_eq!(pids.len(), 1, "{pids:?}");

    // A new version of the component: the same code with a custom section appended
    // (another digest), swapped in whole.
    let mut bytes = std::fs::read(built_plugin("lsp")).unwrap();
    let name = b"dsh-test-version";
    let payload = b"2";
    bytes.extend([
        0u8,
        (1 + name.len() + payload.len()) as u8,
        name.len() as u8,
    ]);
    bytes.extend(name);
    bytes.extend(payload);
    let staged = env.dir.path().join("lsp.staged");
    std::fs::write(&staged, &bytes).unwrap();
    let digest_before = plugin_digest(&env);
    std::fs::rename(&staged, env.plugins_dir().join("lsp.wasm")).unwrap();
    let deadline = Instant::now() + Duration::from_secs(60);
    while plugin_digest(&env) == digest_before {
        assert!(Instant::now() < deadline, "the new lsp plugin never served");
        std::thread::sleep(Duration::from_millis(50));
    }

    let second = server.call_ok("lsp", query);
    assert_eq!(second, first);
    assert_eq!(servers_of(&env, "pylsp"), pids, "the same server answered");
}

/// The digest of the serving `lsp` plugin, from the running server.
fn plugin_digest(env: &Env) -> String {
    let output = env.dsh().args(["plugins", "--json"]).output().unwrap();
    let plugins: Value = serde_json::from_slice(&output.stdout).unwrap_or(Value::Null);
    plugins
        .as_array()
        .and_then(|all| {
            all.iter()
                .find(|p| p["name"] == "lsp" && p["status"] == "serving")
        })
        .map(|p| p["digest"].to_string())
        .unwrap_or_default()
}

#[test]
fn language_servers_are_gone_after_the_host_ends() {
    let env = Env::new();
    let mut server = start(&env);
    server.call_ok("lsp", json!({"op": "symbols", "path": "util.py"}));
    server.call_ok("lsp", json!({"op": "symbols", "path": "web/lib.ts"}));
    let mut pids = servers_of(&env, "pylsp");
    pids.extend(servers_of(&env, "node"));
    assert!(pids.len() >= 2, "{pids:?}");

    server.close_stdin();
    assert!(server.wait_exit(Duration::from_secs(30)).is_some());
    for pid in pids {
        wait_gone(pid);
    }
}

#[test]
fn an_idle_server_is_shut_down_and_the_next_query_starts_another() {
    let env = Env::new();
    write_projects(&env);
    let config = config().replace("defaults = false", "defaults = false\nidle_ms = 1000");
    let server = McpServer::start(&env, &config);
    let query = json!({"op": "symbols", "path": "util.py"});
    let first = server.call_ok("lsp", query.clone());
    let pids = servers_of(&env, "pylsp");
    assert_eq!(pids.len(), 1, "{pids:?}");
    wait_gone(pids[0]);

    let second = server.call_ok("lsp", query);
    assert_eq!(second, first);
    let again = servers_of(&env, "pylsp");
    assert_eq!(again.len(), 1, "{again:?}");
    assert_ne!(again, pids, "a new server answered");
}

const GEOM_H: &str = "#ifndef GEOM_H
#define GEOM_H

struct point {
    int x;
    int y;
};

int point_sum(struct point p);

#endif
";

const GEOM_C: &str = "#include \"geom.h\"

int point_sum(struct point p) {
    return p.x + p.y;
}
";

const MAIN_C: &str = "#include \"geom.h\"

int main(void) {
    struct point p = {1, 2};
    return point_sum(p);
}
";

const USE_C: &str = "#include \"geom.h\"

int twice(struct point p) {
    return 2 * point_sum(p);
}
";

/// A C project for clangd: a header declaring `point_sum` and `struct point`, the
/// definition in `geom.c`, calls in `main.c` and `use.c`, and large filler files listed
/// before `geom.c` and `use.c` in `compile_commands.json`, so that clangd's background
/// index (about a second of work) has not reached them when the first query comes.
/// Returns the config: clangd alone, waiting up to `index_wait_ms`.
fn c_project(env: &Env, index_wait_ms: u64) -> String {
    c_project_with(env, 6, index_wait_ms)
}

/// The same C project without its filler files, indexed at once: for a test that needs
/// a real language server and not its index's timing.
pub fn small_c_project(env: &Env) -> String {
    c_project_with(env, 0, 30_000)
}

fn c_project_with(env: &Env, fillers: usize, index_wait_ms: u64) -> String {
    let clangd = find_on_path("clangd")
        .expect("clangd is not on PATH (.ci/run installs it: apt-get install clangd)");
    let work = env.workdir().canonicalize().unwrap();
    for (name, text) in [
        ("geom.h", GEOM_H),
        ("geom.c", GEOM_C),
        ("main.c", MAIN_C),
        ("use.c", USE_C),
    ] {
        std::fs::write(work.join(name), text).unwrap();
    }
    let mut files = vec!["main.c".to_string()];
    for i in 0..fillers {
        let mut filler = "static int f0(int a) { return a; }\n".to_string();
        for j in 1..3000 {
            filler += &format!(
                "static int f{j}(int a) {{ return a * {j} + f{}(a - 1); }}\n",
                j - 1
            );
        }
        filler += "int filler(void) { return f2999(1); }\n";
        let name = format!("filler{i}.c");
        std::fs::write(work.join(&name), filler).unwrap();
        files.push(name);
    }
    files.extend(["geom.c".to_string(), "use.c".to_string()]);
    let commands: Vec<Value> = files
        .iter()
        .map(|file| json!({ "directory": work, "file": file, "arguments": ["cc", "-c", file] }))
        .collect();
    std::fs::write(
        work.join("compile_commands.json"),
        serde_json::to_string(&commands).unwrap(),
    )
    .unwrap();
    format!(
        r#"
[lsp]
defaults = false
request_timeout_ms = 60000
index_wait_ms = {index_wait_ms}

[lsp.servers.clangd]
command = ["{}"]
extensions = ["c", "h"]
root_markers = ["compile_commands.json"]
"#,
        clangd.display()
    )
}

fn find_on_path(program: &str) -> Option<PathBuf> {
    std::env::split_paths(&std::env::var_os("PATH")?)
        .map(|dir| dir.join(program))
        .find(|path| path.is_file())
}

#[test]
fn clangd_answers_the_first_queries_of_a_fresh_session_from_its_finished_index() {
    let env = Env::new();
    let server = McpServer::start(&env, &c_project(&env, 30_000));
    let started = Instant::now();
    // The very first query: the definition in geom.c, not the header's declaration.
    let definition = server.call_ok(
        "lsp",
        json!({"op": "definition", "path": "main.c", "line": 5, "symbol": "point_sum"}),
    );
    let waited = started.elapsed();
    assert_eq!(
        crate::support::without_undo_line(&definition),
        "geom.c:3:5: int point_sum(struct point p) {"
    );

    let references = server.call_ok(
        "lsp",
        json!({"op": "references", "path": "main.c", "line": 5, "symbol": "point_sum"}),
    );
    assert_eq!(
        references,
        "geom.c:3:5: int point_sum(struct point p) {\n\
         geom.h:9:5: int point_sum(struct point p);\n\
         main.c:5:12: return point_sum(p);\n\
         use.c:4:16: return 2 * point_sum(p);"
    );

    let symbols = server.call_ok("lsp", json!({"op": "symbols", "path": "geom.h"}));
    let lines: Vec<&str> = symbols.lines().collect();
    assert!(lines.contains(&"struct point (4:8)"), "{symbols}");
    assert!(lines.contains(&"  field x (5:9)"), "{symbols}");
    assert!(lines.contains(&"function point_sum (9:5)"), "{symbols}");
    eprintln!("first definition after {waited:?}");
}

#[test]
fn a_clangd_answer_given_while_it_still_indexes_says_it_may_be_partial() {
    let env = Env::new();
    let server = McpServer::start(&env, &c_project(&env, 1));
    // clangd begins indexing (and says so) a moment after it opens the first file: a
    // definition answered before that moment is not one given while it indexes. Asked
    // until one is; the six large filler files keep it indexing for seconds.
    let deadline = Instant::now() + Duration::from_secs(20);
    let definition = loop {
        let definition = server.call_ok(
            "lsp",
            json!({"op": "definition", "path": "main.c", "line": 5, "symbol": "point_sum"}),
        );
        if definition.contains("(partial)") || Instant::now() > deadline {
            break definition;
        }
        std::thread::sleep(Duration::from_millis(20));
    };
    let note = definition.lines().last().unwrap_or("");
    assert!(
        note.starts_with("(partial):0:0: the index is still building: clangd was still indexing"),
        "{definition}"
    );
    assert!(note.contains("after 1 ms (indexing"), "{definition}");
}

#[test]
fn a_server_that_never_answers_is_a_timeout_after_request_timeout_ms() {
    let env = Env::new();
    std::fs::write(env.workdir().join("a.mute"), "nothing\n").unwrap();
    // It reads every request and answers none, `initialize` included.
    let config = r#"
[lsp]
defaults = false
request_timeout_ms = 500
[lsp.servers.mute]
command = ["sh", "-c", "cat > /dev/null"]
extensions = ["mute"]
"#;
    let server = McpServer::start(&env, config);
    for _ in 0..2 {
        let reply = server.call("lsp", json!({"op": "symbols", "path": "a.mute"}));
        assert_eq!(reply.code.as_deref(), Some("TIMEOUT"), "{reply:?}");
        assert!(
            reply.text.contains("500 ms") && reply.text.contains("mute"),
            "the limit and the server are named: {reply:?}"
        );
    }
    let other = server.call_ok(
        "bash",
        json!({"command": "echo still here", "description": "d"}),
    );
    assert!(other.starts_with("still here"), "{other}");
}

#[test]
fn with_no_servers_configured_the_default_one_on_path_answers() {
    let env = Env::new();
    write_projects(&env);
    let pylsp = venv_program("pylsp");
    let on_path = format!(
        "{}:{}",
        pylsp.parent().unwrap().display(),
        std::env::var("PATH").unwrap_or_default()
    );
    // No [lsp] at all: the built-in defaults, found on PATH.
    let mut command = env.dsh_configured("");
    command.env("PATH", &on_path);
    let server = McpServer::start_command(&env, command);
    let symbols = server.call_ok("lsp", json!({"op": "symbols", "path": "util.py"}));
    assert!(symbols.contains("class Greeter"), "{symbols}");
    assert_eq!(servers_of(&env, "pylsp").len(), 1);
    drop(server);

    // Not on PATH: no server for the extension; the message names the built-in one
    // that would serve it and the program it looked for.
    let mut command = env.dsh_configured("");
    command.env("PATH", "/usr/bin:/bin");
    let server = McpServer::start_command(&env, command);
    let reply = server.call("lsp", json!({"op": "symbols", "path": "util.py"}));
    assert_eq!(reply.code.as_deref(), Some("LSP_UNAVAILABLE"), "{reply:?}");
    assert!(
        reply.text.contains("no language server for .py files")
            && reply
                .text
                .contains("the built-in pylsp serves .py files but `pylsp` is not on PATH"),
        "{reply:?}"
    );
    // An extension no built-in server serves gets no such hint.
    let reply = server.call("lsp", json!({"op": "symbols", "path": "notes.xyz"}));
    assert_eq!(reply.code.as_deref(), Some("LSP_UNAVAILABLE"), "{reply:?}");
    assert!(!reply.text.contains("built-in"), "{reply:?}");
}
