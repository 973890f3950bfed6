//! The processes of the control plane: the Go-built binaries, the folder, ports, and starting
//! a process that lives as long as the test process.

use std::path::{Path, PathBuf};
use std::process::{Child, Command, Stdio};
use std::sync::{mpsc, Mutex, OnceLock};

/// The folder of the Go-built servers, built first when missing (`scripts/need.sh kube-bin`,
/// whose messages reach the test's stderr); `APIAGG_KUBE_BIN` names another folder of them.
pub fn kube_binaries() -> PathBuf {
    static BIN: OnceLock<Result<PathBuf, String>> = OnceLock::new();
    let found = BIN.get_or_init(|| {
        if let Some(dir) = std::env::var_os("APIAGG_KUBE_BIN") {
            return Ok(PathBuf::from(dir));
        }
        let need = Path::new(env!("CARGO_MANIFEST_DIR")).join("../scripts/need.sh");
        let out = Command::new(&need)
            .arg("kube-bin")
            .stderr(Stdio::inherit())
            .output()
            .map_err(|e| format!("running {}: {e}", need.display()))?;
        let dir = String::from_utf8_lossy(&out.stdout).trim().to_string();
        match out.status.success() && !dir.is_empty() {
            true => Ok(PathBuf::from(dir)),
            false => Err(format!("scripts/need.sh kube-bin failed ({})", out.status)),
        }
    });
    let dir = found.clone().unwrap_or_else(|e| panic!("{e}"));
    for name in ["etcd", "kube-apiserver", "sample-apiserver", "kube-client"] {
        assert!(dir.join(name).exists(), "{} has no {name}", dir.display());
    }
    dir
}

/// `$TMPDIR/apiagg-real-kube-<pid>`, made fresh; the folders of processes that ended are removed.
pub(super) fn process_folder() -> PathBuf {
    const PREFIX: &str = "apiagg-real-kube-";
    let tmp = std::env::temp_dir();
    for entry in std::fs::read_dir(&tmp).into_iter().flatten().flatten() {
        let name = entry.file_name().to_string_lossy().to_string();
        if let Some(pid) = name.strip_prefix(PREFIX) {
            if !Path::new("/proc").join(pid).exists() {
                let _ = std::fs::remove_dir_all(entry.path());
            }
        }
    }
    let dir = tmp.join(format!("{PREFIX}{}", std::process::id()));
    let _ = std::fs::remove_dir_all(&dir);
    std::fs::create_dir_all(&dir).expect("real-kube folder");
    dir
}

/// A loopback port free now (taken by a server started right after; the servers of the control
/// plane bind without `SO_REUSEPORT`, so [`crate::hold_port`] cannot keep it for them).
pub fn free_port() -> u16 {
    let listener = std::net::TcpListener::bind("127.0.0.1:0").expect("bind");
    listener.local_addr().expect("addr").port()
}

/// Starts `command` from one thread that lives as long as the process: a parent-death signal
/// is sent when the thread that started the child ends, and a test's thread ends with the test.
pub(super) fn spawn_lasting(command: Command) -> std::io::Result<Child> {
    type Job = (Command, mpsc::Sender<std::io::Result<Child>>);
    static SPAWNER: OnceLock<Mutex<mpsc::Sender<Job>>> = OnceLock::new();
    let spawner = SPAWNER.get_or_init(|| {
        let (jobs, queue) = mpsc::channel::<Job>();
        std::thread::Builder::new()
            .name("real-kube-spawner".into())
            .spawn(move || {
                for (mut command, reply) in queue {
                    let _ = reply.send(command.spawn());
                }
            })
            .expect("spawner thread");
        Mutex::new(jobs)
    });
    let (reply, answer) = mpsc::channel();
    let sent = spawner.lock().expect("spawner").send((command, reply));
    sent.expect("spawner thread alive");
    answer.recv().expect("spawner answers")
}
