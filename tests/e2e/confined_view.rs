//! A confined run's view of the machine, built from what is allowed: the attacks of the
//! second round (device nodes outside `/dev`, setuid files left behind, mounts of and
//! below dsh's state directory, a second procfs), each run first under `local`, where it
//! works (so the probe is real), then under `sandbox` and `container`, where it must fail
//! with nothing read or changed; a walk of the run's own `/proc/self/mountinfo` for every
//! kind of run (bash, a background job, a terminal, a language server); and the ordinary
//! work that must keep working (`/dev/null`, `/dev/tty`, its PTY, `/dev/urandom`,
//! `/dev/shm`, make, cargo, pip, npm).
//!
//! These tests make mounts and loop devices: they need root, as CI has (elsewhere they say
//! they are skipped, never under `CI=true`).

use std::os::unix::fs::{MetadataExt, PermissionsExt};
use std::path::{Path, PathBuf};
use std::process::Command;
use std::time::Duration;

use serde_json::json;

use crate::container_executor::can_run;
use crate::mcp_stdio::McpServer;
use crate::sandbox_files::{assert_probes, probes, terminal_id};
use crate::support::{unique_marker, wait_for, CallOutput, Env};

const LOCAL: &str = "";
const SANDBOX: &str = "[process.executor]\ndefault = \"sandbox\"\n";
const CONTAINER: &str = "[process.executor]\ndefault = \"container\"\n";

/// The confining executors: (name, configuration).
const CONFINED: [(&str, &str); 2] = [("sandbox", SANDBOX), ("container", CONTAINER)];

macro_rules! root_only {
    () => {
        if !can_run() {
            return;
        }
    };
}

/// `dsh call bash COMMAND` under `config`: the result's text (the call must have run).
fn bash(env: &Env, half: &str, config: &str, command: &str) -> String {
    let out: CallOutput = env.call_configured(
        config,
        "bash",
        &json!({"command": command, "description": "attack", "timeoutMs": 120000}),
        &[],
    );
    assert!(out.code.is_none(), "{half}: the call was refused: {out:?}");
    out.content
}

fn run(program: &str, args: &[&str]) -> String {
    let out = Command::new(program).args(args).output().unwrap();
    assert!(
        out.status.success(),
        "{program} {args:?}: {}",
        String::from_utf8_lossy(&out.stderr)
    );
    String::from_utf8_lossy(&out.stdout).trim().to_string()
}

/// A mount undone (recursively, lazily) when dropped.
struct Mounted(PathBuf);

impl Mounted {
    fn bind(source: &Path, target: &Path, recursive: bool) -> Mounted {
        std::fs::create_dir_all(target).unwrap();
        let flag = if recursive { "--rbind" } else { "--bind" };
        run("mount", &[flag, path(source), path(target)]);
        Mounted(target.to_path_buf())
    }
}

impl Drop for Mounted {
    fn drop(&mut self) {
        let _ = Command::new("umount").arg("-lR").arg(&self.0).status();
    }
}

fn path(p: &Path) -> &str {
    p.to_str().unwrap()
}

/// A loop device over a 1 MB image holding `marker` at offset 4096; detached when dropped.
struct Disk {
    image: PathBuf,
    device: PathBuf,
    rdev: u64,
}

impl Disk {
    fn new(dir: &Path, marker: &str) -> Disk {
        let image = dir.join("disk.img");
        let mut bytes = vec![0u8; 1 << 20];
        bytes[4096..4096 + marker.len()].copy_from_slice(marker.as_bytes());
        std::fs::write(&image, bytes).unwrap();
        let device = PathBuf::from(run("losetup", &["-f", "--show", path(&image)]));
        let rdev = std::fs::metadata(&device).unwrap().rdev();
        Disk {
            image,
            device,
            rdev,
        }
    }

    /// Makes a block node for this disk at `at` (mode 0660, root's), as an unpacked root
    /// filesystem's `dev/` has one.
    fn node_at(&self, at: &Path) {
        std::fs::create_dir_all(at.parent().unwrap()).unwrap();
        let major = libc::major(self.rdev);
        let minor = libc::minor(self.rdev);
        run(
            "mknod",
            &[
                "-m660",
                path(at),
                "b",
                &major.to_string(),
                &minor.to_string(),
            ],
        );
    }

    /// The image's byte at 4096, as the host's file holds it.
    fn byte_at_4096(&self) -> u8 {
        std::fs::read(&self.image).unwrap()[4096]
    }
}

impl Drop for Disk {
    fn drop(&mut self) {
        let _ = Command::new("losetup").arg("-d").arg(&self.device).status();
    }
}

// =================================================================================
// 1. Device nodes anywhere but the run's own /dev.

#[test]
fn a_disk_node_in_the_workspace_elsewhere_or_behind_a_bound_dev_opens_in_no_confined_run() {
    root_only!();
    let env = Env::new();
    let marker = format!("DSHMARK{}", unique_marker().replace('-', ""));
    let disk = Disk::new(env.dir.path(), &marker);
    // A node in the workspace (made outside, before the call), one elsewhere, and `/dev`
    // bound into a chroot before dsh starts.
    disk.node_at(&env.workdir().join("rootfs/dev/sda"));
    let elsewhere = env.dir.path().join("out/disk");
    disk.node_at(&elsewhere);
    let chroot_dev = env.dir.path().join("chroot/dev");
    let _bound = Mounted::bind(Path::new("/dev"), &chroot_dev, true);
    let loop_name = disk.device.file_name().unwrap().to_str().unwrap();
    let tail = &marker[1..];
    let read = |node: &str| {
        format!(
            "dd if={node} bs=4096 skip=1 count=1 status=none | tr -d '\\000' | grep -ac {tail} >/dev/null"
        )
    };
    let attack = |write: char| {
        let mut list = vec![
            ("read_workspace", read("rootfs/dev/sda")),
            ("read_elsewhere", read(path(&elsewhere))),
            (
                "read_bound_dev",
                read(&format!("{}/{loop_name}", path(&chroot_dev))),
            ),
        ];
        if Path::new("/dev/kvm").exists() {
            list.push(("open_kvm", format!("exec 3<{}/kvm", path(&chroot_dev))));
        }
        list.push((
            "write_workspace",
            format!(
                "printf {write} | dd of=rootfs/dev/sda bs=1 seek=4096 conv=notrunc,fsync status=none"
            ),
        ));
        probes(&list)
    };
    let mut names = vec!["read_workspace", "read_elsewhere", "read_bound_dev"];
    if Path::new("/dev/kvm").exists() {
        names.push("open_kvm");
    }
    names.push("write_workspace");

    let text = bash(&env, "local", LOCAL, &attack('L'));
    assert_probes("local", &text, &names, true);
    assert_eq!(
        disk.byte_at_4096(),
        b'L',
        "the local write did not land: {text}"
    );

    for (half, config) in CONFINED {
        let text = bash(&env, half, config, &attack('C'));
        assert_probes(half, &text, &names, false);
        assert!(!text.contains(tail), "{half}: the marker was read: {text}");
        assert_eq!(
            disk.byte_at_4096(),
            b'L',
            "{half}: the disk image was written: {text}"
        );
    }
}

// =================================================================================
// 2. Setuid and setgid files a run leaves behind.

/// Files under `root` whose mode has the setuid or setgid bit.
fn set_id_files(root: &Path) -> Vec<(PathBuf, u32)> {
    let mut found = Vec::new();
    let mut stack = vec![root.to_path_buf()];
    while let Some(dir) = stack.pop() {
        for entry in std::fs::read_dir(&dir).unwrap().flatten() {
            let meta = entry.path().symlink_metadata().unwrap();
            if meta.is_dir() {
                stack.push(entry.path());
            }
            if !meta.file_type().is_symlink() && meta.mode() & 0o6000 != 0 {
                found.push((entry.path(), meta.mode()));
            }
        }
    }
    found
}

/// What `FILE -p -c 'id -u'` prints run by `nobody` (uid 65534): `0` for a setuid-root
/// shell, its own uid otherwise.
fn euid_as_nobody(file: &Path) -> String {
    let out = Command::new("setpriv")
        .args([
            "--reuid=65534",
            "--regid=65534",
            "--clear-groups",
            "--inh-caps=-all",
        ])
        .arg(file)
        .args(["-p", "-c", "id -u"])
        .output()
        .unwrap();
    String::from_utf8_lossy(&out.stdout).trim().to_string()
}

#[test]
fn a_confined_run_leaves_no_setuid_or_setgid_file_and_no_file_capability() {
    root_only!();
    let env = Env::new();
    // `nobody` must reach the workspace to run what was left there.
    std::fs::set_permissions(env.dir.path(), std::fs::Permissions::from_mode(0o755)).unwrap();
    std::fs::set_permissions(env.workdir(), std::fs::Permissions::from_mode(0o777)).unwrap();
    let attack = |who: &str| {
        probes(&[
            (
                "chmod_4755",
                format!("cp /bin/bash rootsh-{who} && chmod 4755 rootsh-{who}"),
            ),
            ("chmod_u_s", format!("cp /bin/bash us-{who} && chmod u+s us-{who}")),
            ("chmod_g_s", format!("cp /bin/bash gs-{who} && chmod g+s gs-{who}")),
            ("install_4755", format!("install -m 4755 /bin/bash inst-{who}")),
            (
                "open_creat_6755",
                format!(
                    "python3 -c 'import os,sys; os.close(os.open(sys.argv[1], os.O_CREAT|os.O_WRONLY, 0o6755))' oc-{who} && [ -u oc-{who} ]"
                ),
            ),
            (
                "mknod_4755",
                format!("python3 -c 'import os,stat,sys; os.mknod(sys.argv[1], stat.S_IFREG|0o4755)' mk-{who} && [ -u mk-{who} ]"),
            ),
            ("mkdir_2755", format!("mkdir -m 2755 dir-{who} && [ -g dir-{who} ]")),
            (
                "file_caps",
                format!(
                    "cp /bin/bash fcap-{who} && python3 -c 'import os,struct,sys; os.setxattr(sys.argv[1], \"security.capability\", struct.pack(\"<IIIII\", 0x02000001, 3, 0, 0, 0))' fcap-{who}"
                ),
            ),
        ])
    };
    let names = [
        "chmod_4755",
        "chmod_u_s",
        "chmod_g_s",
        "install_4755",
        "open_creat_6755",
        "mknod_4755",
        "mkdir_2755",
        "file_caps",
    ];
    let text = bash(&env, "local", LOCAL, &attack("l"));
    assert_probes("local", &text, &names, true);
    assert_eq!(
        euid_as_nobody(&env.workdir().join("rootsh-l")),
        "0",
        "the local half's setuid shell does not give root: the probe proves nothing"
    );
    let before = set_id_files(&env.workdir()).len();
    for (half, config) in CONFINED {
        let who = &half[..1];
        let text = bash(&env, half, config, &attack(who));
        assert_probes(half, &text, &names, false);
        let left: Vec<(PathBuf, u32)> = set_id_files(&env.workdir())
            .into_iter()
            .filter(|(p, _)| {
                p.file_name()
                    .and_then(|n| n.to_str())
                    .is_some_and(|n| n.ends_with(&format!("-{who}")))
            })
            .collect();
        assert!(
            left.is_empty(),
            "{half} left set-id files: {left:?}\n{text}"
        );
        let shell = env.workdir().join(format!("rootsh-{who}"));
        if shell.exists() {
            assert_eq!(
                euid_as_nobody(&shell),
                "65534",
                "{half}: the copied shell gives another user root"
            );
        }
        let fcap = env.workdir().join(format!("fcap-{who}"));
        if fcap.exists() {
            let caps = Command::new("getfattr")
                .args(["-n", "security.capability"])
                .arg(&fcap)
                .output();
            assert!(
                caps.is_err() || !caps.unwrap().status.success(),
                "{half}: a file capability was set on {}",
                fcap.display()
            );
        }
    }
    assert_eq!(set_id_files(&env.workdir()).len(), before);
}

#[test]
fn a_confined_run_can_neither_make_a_device_node_nor_give_a_file_to_another_user() {
    root_only!();
    let env = Env::new();
    let attack = |who: &str| {
        probes(&[
            ("mknod_char", format!("mknod null-{who} c 1 3")),
            ("chown", format!("touch own-{who} && chown 1234 own-{who}")),
            ("chgrp", format!("touch grp-{who} && chgrp 1234 grp-{who}")),
        ])
    };
    let names = ["mknod_char", "chown", "chgrp"];
    // Under `local` (root here) each works: the probes are real.
    let text = bash(&env, "local", LOCAL, &attack("l"));
    assert_probes("local", &text, &names, true);
    for (half, config) in CONFINED {
        let who = &half[..1];
        let text = bash(&env, half, config, &attack(who));
        assert_probes(half, &text, &names, false);
        let node = env.workdir().join(format!("null-{who}"));
        assert!(
            std::fs::symlink_metadata(&node).is_err(),
            "{half} made a node: {text}"
        );
        for file in [format!("own-{who}"), format!("grp-{who}")] {
            if let Ok(meta) = std::fs::metadata(env.workdir().join(&file)) {
                assert!(
                    meta.uid() != 1234 && meta.gid() != 1234,
                    "{half}: {file} was given to another user: {text}"
                );
            }
        }
    }
}

// =================================================================================
// 3. dsh's state through mounts of and below it.

fn key_hex(env: &Env) -> String {
    std::fs::read(env.state_dir().join("cache/key"))
        .unwrap()
        .iter()
        .map(|b| format!("{b:02x}"))
        .collect()
}

fn read_key(at: &Path) -> String {
    probes(&[(
        "read_key",
        format!(
            "k=$(od -An -tx1 -v {}) && echo \"key=$(echo $k | tr -d ' ')\"",
            path(at)
        ),
    )])
}

#[test]
fn the_cache_key_stays_unread_through_a_bind_of_the_cache_and_through_a_volumes_source() {
    root_only!();
    let env = Env::new();
    // A first call: the state directory, its cache and key exist.
    bash(&env, "setup", SANDBOX, "true");
    let key = key_hex(&env);
    // STATE/cache bound elsewhere before dsh starts.
    let elsewhere = env.dir.path().join("elsewhere");
    {
        let _bound = Mounted::bind(&env.state_dir().join("cache"), &elsewhere, false);
        let attack = read_key(&elsewhere.join("key"));
        let text = bash(&env, "local", LOCAL, &attack);
        assert_probes("local", &text, &["read_key"], true);
        assert!(text.contains(&key), "local: {text}");
        for (half, config) in CONFINED {
            let text = bash(&env, half, config, &attack);
            assert_probes(half, &text, &["read_key"], false);
            assert!(!text.contains(&key), "{half}: the key leaked: {text}");
        }
    }
    // STATE/cache a volume bound from another directory: the run would read the key at
    // the volume's source.
    let source = env.dir.path().join("volume");
    std::fs::create_dir_all(&source).unwrap();
    for entry in std::fs::read_dir(env.state_dir().join("cache"))
        .unwrap()
        .flatten()
    {
        if entry.file_type().unwrap().is_file() {
            std::fs::copy(entry.path(), source.join(entry.file_name())).unwrap();
        }
    }
    let _volume = Mounted::bind(&source, &env.state_dir().join("cache"), false);
    let attack = read_key(&source.join("key"));
    let text = bash(&env, "local", LOCAL, &attack);
    assert_probes("local", &text, &["read_key"], true);
    for (half, config) in CONFINED {
        let text = bash(&env, half, config, &attack);
        assert_probes(half, &text, &["read_key"], false);
        assert!(!text.contains(&key), "{half}: the key leaked: {text}");
    }
}

// =================================================================================
// 4. One procfs.

#[test]
fn a_second_procfs_shows_no_host_process_to_a_confined_run() {
    root_only!();
    let env = Env::new();
    let mut bystander = Command::new("sleep").arg("301").spawn().unwrap();
    let pid = bystander.id();
    let proc2 = env.dir.path().join("chroot/proc");
    std::fs::create_dir_all(&proc2).unwrap();
    run("mount", &["-t", "proc", "proc", path(&proc2)]);
    let _mounted = Mounted(proc2.clone());
    let attack = probes(&[(
        "bystander_seen",
        format!(
            "[ -d {}/{pid} ] && cat {}/{pid}/cmdline | tr '\\000' ' ' && echo",
            path(&proc2),
            path(&proc2)
        ),
    )]);
    let text = bash(&env, "local", LOCAL, &attack);
    assert_probes("local", &text, &["bystander_seen"], true);
    for (half, config) in CONFINED {
        let text = bash(&env, half, config, &attack);
        assert_probes(half, &text, &["bystander_seen"], false);
        assert!(!text.contains("sleep 301"), "{half}: {text}");
    }
    let _ = bystander.kill();
    let _ = bystander.wait();
}

// =================================================================================
// 5. The view itself: every mount of every kind of run.

/// One line of a mountinfo text: its id and its parent's, its filesystem's device, its
/// root in that filesystem, its mount point, its per-mount options and its type.
struct ViewMount {
    id: String,
    parent: String,
    device: String,
    root: PathBuf,
    point: PathBuf,
    options: String,
    fstype: String,
}

fn view_mounts(mountinfo: &str) -> Vec<ViewMount> {
    let unescape = |s: &str| PathBuf::from(s.replace("\\040", " ").replace("\\011", "\t"));
    mountinfo
        .lines()
        .filter_map(|line| {
            let fields: Vec<&str> = line.split(' ').collect();
            let dash = fields.iter().position(|f| *f == "-")?;
            Some(ViewMount {
                id: fields[0].to_string(),
                parent: fields[1].to_string(),
                device: fields[2].to_string(),
                root: unescape(fields[3]),
                point: unescape(fields[4]),
                options: fields[5].to_string(),
                fstype: fields.get(dash + 1)?.to_string(),
            })
        })
        .collect()
}

/// The state directory as the host's mount table places it: (device, path inside its
/// filesystem).
fn state_region(state: &Path) -> (String, PathBuf) {
    let host = view_mounts(&std::fs::read_to_string("/proc/self/mountinfo").unwrap());
    let state = std::fs::canonicalize(state).unwrap();
    let on = host
        .iter()
        .filter(|m| state.starts_with(&m.point))
        .max_by_key(|m| m.point.components().count())
        .unwrap();
    (
        on.device.clone(),
        on.root.join(state.strip_prefix(&on.point).unwrap()),
    )
}

/// What is wrong with a run's view (`mountinfo`, its own): a mount without `nodev` (but
/// the device nodes it is given) or `nosuid`, a procfs but `/proc`, a mount reaching the
/// state directory (`region`) other than the run's own slot.
fn view_faults(who: &str, mountinfo: &str, region: &(String, PathBuf)) -> Vec<String> {
    let mounts = view_mounts(mountinfo);
    assert!(mounts.len() > 3, "{who}: no mount table read: {mountinfo}");
    let given = [
        "/dev/null",
        "/dev/zero",
        "/dev/full",
        "/dev/random",
        "/dev/urandom",
        "/dev/tty",
    ];
    // A mount with another mounted on its very mount point is hidden whole.
    let hidden = |mount: &ViewMount| {
        mounts
            .iter()
            .any(|m| m.parent == mount.id && m.point == mount.point)
    };
    let mut faults = Vec::new();
    for (index, mount) in mounts.iter().enumerate() {
        let options: Vec<&str> = mount.options.split(',').collect();
        let device_node = given.iter().any(|g| mount.point == Path::new(g))
            || mount.point.starts_with("/dev/pts/");
        if !options.contains(&"nosuid") {
            faults.push(format!("{}: no nosuid", mount.point.display()));
        }
        if !options.contains(&"nodev") && !device_node {
            faults.push(format!("{}: no nodev", mount.point.display()));
        }
        if hidden(mount) {
            continue;
        }
        if mount.fstype == "proc" && mount.point != Path::new("/proc") {
            faults.push(format!("{}: a second procfs", mount.point.display()));
        }
        // Reaching the state directory: a mount of its filesystem whose root lies above
        // it (and whose way to it nothing covers) or inside it (but the run's own slot).
        if mount.device != region.0 {
            continue;
        }
        let own_slot = mount.root.starts_with(region.1.join("sandbox-tmp"));
        if mount.root.starts_with(&region.1) && !own_slot {
            faults.push(format!(
                "{}: shows {} of the state directory",
                mount.point.display(),
                mount.root.display()
            ));
        } else if let Ok(rest) = region.1.strip_prefix(&mount.root) {
            let place = mount.point.join(rest);
            let covered = mounts.iter().enumerate().any(|(other, m)| {
                other != index
                    && place.starts_with(&m.point)
                    && (m.point.components().count() > mount.point.components().count()
                        || (m.point == mount.point && other > index))
            });
            if !covered {
                faults.push(format!(
                    "{}: reaches the state directory at {}",
                    mount.point.display(),
                    place.display()
                ));
            }
        }
    }
    let procs = mounts
        .iter()
        .filter(|m| m.fstype == "proc" && !hidden(m))
        .count();
    if procs != 1 {
        faults.push(format!("{procs} procfs mounts"));
    }
    faults
}

fn lsp_config(executor: &str, out: &Path) -> String {
    format!(
        "{executor}\n[lsp]\ndefaults = false\nrequest_timeout_ms = 2000\n\n[lsp.servers.view]\ncommand = [\"bash\", \"-c\", \"cat /proc/self/mountinfo > {}.tmp && mv {}.tmp {}; exec sleep 30\"]\nextensions = [\"zz\"]\nroot_markers = []\n",
        path(out),
        path(out),
        path(out)
    )
}

#[test]
fn every_mount_a_confined_run_sees_is_nodev_and_nosuid_with_one_procfs_and_no_way_to_the_state() {
    root_only!();
    let env = Env::new();
    // Things of the host a view built by hiding would let through: `/dev` bound
    // elsewhere, a second procfs, the state directory's cache bound elsewhere.
    let chroot = env.dir.path().join("chroot");
    let _dev = Mounted::bind(Path::new("/dev"), &chroot.join("dev"), true);
    std::fs::create_dir_all(chroot.join("proc")).unwrap();
    run("mount", &["-t", "proc", "proc", path(&chroot.join("proc"))]);
    let _proc = Mounted(chroot.join("proc"));
    bash(&env, "setup", SANDBOX, "true");
    let _cache = Mounted::bind(
        &env.state_dir().join("cache"),
        &env.dir.path().join("cache-elsewhere"),
        false,
    );
    let region = state_region(&env.state_dir());
    std::fs::write(env.workdir().join("x.zz"), "nothing\n").unwrap();

    // The probe works: an unconfined run's view has what the confined ones must not.
    let local = bash(&env, "local", LOCAL, "cat /proc/self/mountinfo");
    assert!(
        !view_faults("local", &local, &region).is_empty(),
        "the local view shows nothing to find: the walk proves nothing\n{local}"
    );

    for (half, config) in CONFINED {
        let mut views: Vec<(String, String)> = Vec::new();
        views.push((
            format!("{half} bash"),
            bash(&env, half, config, "cat /proc/self/mountinfo"),
        ));
        let lsp_out = env.workdir().join(format!("mi-lsp-{half}.txt"));
        let config_file = env.dir.path().join(format!("dsh-view-{half}.toml"));
        std::fs::write(&config_file, lsp_config(config, &lsp_out)).unwrap();
        let mut command = env.dsh();
        command.arg("--config").arg(&config_file);
        let server = McpServer::start_command(&env, command);
        // A background job.
        let started = server.call_ok(
            "bash",
            json!({"command": format!("cat /proc/self/mountinfo > mi-job-{half}.txt"), "description": "view", "run_in_background": true}),
        );
        let job_file = env.workdir().join(format!("mi-job-{half}.txt"));
        assert!(
            wait_for(Duration::from_secs(30), || job_file.exists()),
            "{half}: the job did not run: {started}"
        );
        // A terminal.
        let opened = server.call_ok("terminal_open", json!({}));
        let id = terminal_id(&opened);
        let term_file = env.workdir().join(format!("mi-term-{half}.txt"));
        server.call_ok(
            "terminal_send",
            json!({"id": id, "input": format!("cat /proc/self/mountinfo > mi-term-{half}.txt.tmp && mv mi-term-{half}.txt.tmp mi-term-{half}.txt")}),
        );
        assert!(
            wait_for(Duration::from_secs(30), || term_file.exists()),
            "{half}: the terminal did not write its view"
        );
        // A language server.
        let _ = server.call("lsp", json!({"op": "symbols", "path": "x.zz", "line": 1}));
        assert!(
            wait_for(Duration::from_secs(30), || lsp_out.exists()),
            "{half}: the language server did not write its view"
        );
        drop(server);
        wait_for(Duration::from_secs(2), || false);
        for (who, file) in [
            ("job", &job_file),
            ("terminal", &term_file),
            ("language server", &lsp_out),
        ] {
            views.push((
                format!("{half} {who}"),
                std::fs::read_to_string(file).unwrap(),
            ));
        }
        for (who, view) in &views {
            let faults = view_faults(who, view, &region);
            assert!(
                faults.is_empty(),
                "{who}: the view is not what it must be: {faults:#?}\n{view}"
            );
        }
    }
}

// =================================================================================
// 6. What confined runs legitimately use keeps working.

#[test]
fn devices_a_run_uses_and_the_usual_builds_still_work_confined() {
    root_only!();
    let env = Env::new();
    let ws = env.workdir();
    std::fs::write(
        ws.join("Makefile"),
        "out.txt: in.txt\n\tcp in.txt out.txt\n",
    )
    .unwrap();
    std::fs::write(ws.join("in.txt"), "made\n").unwrap();
    std::fs::create_dir_all(ws.join("crate/src")).unwrap();
    std::fs::write(
        ws.join("crate/Cargo.toml"),
        "[package]\nname = \"tiny\"\nversion = \"0.1.0\"\nedition = \"2021\"\n",
    )
    .unwrap();
    std::fs::write(
        ws.join("crate/src/main.rs"),
        "fn main() { println!(\"tiny-ran\"); }\n",
    )
    .unwrap();
    // A wheel made by hand (no build backend needed, nothing fetched).
    run(
        "python3",
        &[
            "-c",
            "import sys, zipfile\n\
             with zipfile.ZipFile(sys.argv[1], 'w') as z:\n\
             \x20   z.writestr('tinypkg/__init__.py', \"VALUE = 'py-ran'\\n\")\n\
             \x20   z.writestr('tinypkg-0.1.dist-info/METADATA', 'Metadata-Version: 2.1\\nName: tinypkg\\nVersion: 0.1\\n')\n\
             \x20   z.writestr('tinypkg-0.1.dist-info/WHEEL', 'Wheel-Version: 1.0\\nGenerator: test\\nRoot-Is-Purelib: true\\nTag: py3-none-any\\n')\n\
             \x20   z.writestr('tinypkg-0.1.dist-info/RECORD', 'tinypkg/__init__.py,,\\ntinypkg-0.1.dist-info/METADATA,,\\ntinypkg-0.1.dist-info/WHEEL,,\\ntinypkg-0.1.dist-info/RECORD,,\\n')\n",
            path(&ws.join("tinypkg-0.1-py3-none-any.whl")),
        ],
    );
    std::fs::create_dir_all(ws.join("npmpkg")).unwrap();
    std::fs::write(
        ws.join("npmpkg/package.json"),
        "{\"name\":\"tiny\",\"version\":\"1.0.0\",\"lockfileVersion\":3}\n",
    )
    .unwrap();
    std::fs::write(
        ws.join("npmpkg/package-lock.json"),
        "{\"name\":\"tiny\",\"version\":\"1.0.0\",\"lockfileVersion\":3,\"requires\":true,\"packages\":{\"\":{\"name\":\"tiny\",\"version\":\"1.0.0\"}}}\n",
    )
    .unwrap();
    // The interpreter itself, not a version manager's shim (pyenv's rehashes its shims
    // after an install, outside the workspace).
    let python = run("python3", &["-c", "import sys; print(sys.executable)"]);
    let cargo = which("cargo");
    // A container's root is not the host's: it runs only what others may (`/root` is
    // 0700 here, where rustup and pyenv live), so its half uses Debian's python.
    let others_python = ["/usr/bin/python3", python.as_str()]
        .into_iter()
        .find(|p| reachable_by_others(Path::new(p)))
        .map(str::to_string);
    let npm = which("npm");
    let home = "export HOME=$PWD/home-$WHO; mkdir -p $HOME";
    let script = |who: &str, python: &Option<String>, cargo: &Option<String>| {
        let mut list = vec![
            ("dev_null", "echo x > /dev/null && [ -z \"$(head -c 4 /dev/null)\" ]".to_string()),
            ("dev_zero", "[ \"$(head -c 4 /dev/zero | wc -c)\" = 4 ]".to_string()),
            ("dev_urandom", "[ \"$(head -c 16 /dev/urandom | wc -c)\" = 16 ]".to_string()),
            (
                "dev_shm",
                format!("echo s > /dev/shm/x-{who} && [ \"$(cat /dev/shm/x-{who})\" = s ] && rm /dev/shm/x-{who}"),
            ),
            (
                "posix_shm",
                "python3 -c 'from multiprocessing import shared_memory as s; m=s.SharedMemory(create=True,size=64); m.buf[0]=7; n=s.SharedMemory(m.name); assert n.buf[0]==7; n.close(); m.close(); m.unlink()'".to_string(),
            ),
            ("stderr_reopen", "echo e > /dev/stderr".to_string()),
            ("make", "rm -f out.txt && make -s && [ \"$(cat out.txt)\" = made ]".to_string()),
        ];
        if let Some(cargo) = &cargo {
            list.push((
                "cargo_build",
                format!(
                    "( cd crate && CARGO_HOME=$PWD/../home-{who}/.cargo CARGO_TARGET_DIR=$PWD/../target-{who} {cargo} build --offline -q && ../target-{who}/debug/tiny )"
                ),
            ));
        }
        if let Some(python) = python {
            list.push((
                "pip_install_user",
                format!(
                    "( WHO={who}; {home}; {python} -m pip install --user --no-index --break-system-packages -q ./tinypkg-0.1-py3-none-any.whl && cd / && {python} -c 'import tinypkg; print(tinypkg.VALUE)' )"
                ),
            ));
        }
        if let Some(npm) = &npm {
            list.push((
                "npm_ci",
                format!("( WHO={who}; {home}; cd npmpkg && {npm} ci --offline --no-audit --no-fund -s )"),
            ));
        }
        probes(&list)
    };
    let python = Some(python);
    for (half, config) in [("local", LOCAL), CONFINED[0], CONFINED[1]] {
        let (python, cargo) = match half {
            "container" => {
                let cargo = cargo.clone().filter(|c| reachable_by_others(Path::new(c)));
                if cargo.is_none() {
                    eprintln!("container: no cargo others may run here: its probe is skipped");
                }
                (&others_python, cargo)
            }
            _ => (&python, cargo.clone()),
        };
        let text = bash(&env, half, config, &script(&half[..1], python, &cargo));
        let mut names = vec![
            "dev_null",
            "dev_zero",
            "dev_urandom",
            "dev_shm",
            "posix_shm",
            "stderr_reopen",
            "make",
        ];
        if cargo.is_some() {
            names.push("cargo_build");
        }
        if python.is_some() {
            names.push("pip_install_user");
        }
        if npm.is_some() {
            names.push("npm_ci");
        }
        assert_probes(half, &text, &names, true);
    }

    // A terminal: /dev/tty, its own PTY by name.
    for (half, config) in CONFINED {
        let config_file = env.dir.path().join(format!("dsh-tty-{half}.toml"));
        std::fs::write(&config_file, config).unwrap();
        let mut command = env.dsh();
        command.arg("--config").arg(&config_file);
        let server = McpServer::start_command(&env, command);
        let opened = server.call_ok("terminal_open", json!({}));
        let id = terminal_id(&opened);
        let sent = server.call_ok(
            "terminal_send",
            json!({"id": id, "input": "echo tty-$(tty | cut -c1-9) > /dev/tty; echo own > $(tty) && echo pty-ok; echo hi > /dev/tty && echo devtty-ok", "wait": {"pattern": "devtty-ok|rror", "timeout_ms": 10000}}),
        );
        for want in ["tty-/dev/pts/", "pty-ok", "devtty-ok"] {
            assert!(sent.contains(want), "{half}: no {want} in {sent}");
        }
    }
}

/// Whether a user other than the owner may run `file` (every directory on its way, and
/// the file, executable by others).
fn reachable_by_others(file: &Path) -> bool {
    let Ok(real) = std::fs::canonicalize(file) else {
        return false;
    };
    real.ancestors()
        .all(|p| std::fs::metadata(p).is_ok_and(|m| m.mode() & 0o001 != 0))
}

/// The absolute path of `program` on PATH.
fn which(program: &str) -> Option<String> {
    let out = Command::new("bash")
        .args(["-c", &format!("command -v {program}")])
        .output()
        .ok()?;
    let found = String::from_utf8_lossy(&out.stdout).trim().to_string();
    (out.status.success() && !found.is_empty()).then_some(found)
}

// =================================================================================
// 7. Mounts made while a run runs.

/// What `ls DIR` shows in a terminal opened before the host mounted a tmpfs on `DIR`
/// holding a file (`local`: the file; a confined run: nothing, its mounts are private).
fn seen_after_a_later_mount(env: &Env, config: &str, who: &str) -> String {
    let config_file = env.dir.path().join(format!("dsh-later-{who}.toml"));
    std::fs::write(&config_file, config).unwrap();
    let mut command = env.dsh();
    command.arg("--config").arg(&config_file);
    let server = McpServer::start_command(env, command);
    let opened = server.call_ok("terminal_open", json!({}));
    let id = terminal_id(&opened);
    let dir = env.dir.path().join(format!("later-{who}"));
    std::fs::create_dir_all(&dir).unwrap();
    run("mount", &["-t", "tmpfs", "tmpfs", path(&dir)]);
    let _mounted = Mounted(dir.clone());
    std::fs::write(dir.join("mounted-later"), "x").unwrap();
    server.call_ok(
        "terminal_send",
        json!({"id": id, "input": format!("ls -A {} | sed 's/^/seen=/'; echo listed", path(&dir)), "wait": {"pattern": "^listed", "timeout_ms": 10000}}),
    )
}

#[test]
fn a_mount_the_host_makes_while_a_confined_run_runs_never_reaches_it() {
    root_only!();
    let env = Env::new();
    let text = seen_after_a_later_mount(&env, LOCAL, "local");
    assert!(
        text.contains("seen=mounted-later"),
        "local: the later mount is not seen: the probe proves nothing\n{text}"
    );
    for (half, config) in CONFINED {
        let text = seen_after_a_later_mount(&env, config, half);
        assert!(text.contains("listed"), "{half}: {text}");
        assert!(
            !text.contains("seen=mounted-later"),
            "{half}: a mount made while the run ran reached it\n{text}"
        );
    }
}

/// What a bash call of a server started before `STATE/cache` was bound elsewhere prints
/// when it reads the key there (`who`: the executor's configuration).
fn key_read_after_a_later_bind(env: &Env, config: &str, who: &str) -> String {
    let config_file = env.dir.path().join(format!("dsh-later-bind-{who}.toml"));
    std::fs::write(&config_file, config).unwrap();
    let mut command = env.dsh();
    command.arg("--config").arg(&config_file);
    let server = McpServer::start_command(env, command);
    // A first run: the slots and their steps are built from the table as it was.
    server.call_ok("bash", json!({"command": "true", "description": "first"}));
    let elsewhere = env.dir.path().join(format!("bound-later-{who}"));
    let _bound = Mounted::bind(&env.state_dir().join("cache"), &elsewhere, false);
    server.call_ok(
        "bash",
        json!({"command": read_key(&elsewhere.join("key")), "description": "read the key"}),
    )
}

#[test]
fn a_bind_of_the_state_made_after_dsh_started_is_covered_for_the_next_run() {
    root_only!();
    let env = Env::new();
    bash(&env, "setup", SANDBOX, "true");
    let key = key_hex(&env);
    let text = key_read_after_a_later_bind(&env, LOCAL, "local");
    assert_probes("local", &text, &["read_key"], true);
    assert!(text.contains(&key), "local: {text}");
    for (half, config) in CONFINED {
        let text = key_read_after_a_later_bind(&env, config, half);
        assert_probes(half, &text, &["read_key"], false);
        assert!(!text.contains(&key), "{half}: the key leaked: {text}");
    }
}
