//! Running kubectl against the processes under test.

use std::process::Command;

/// The kubectl 1.32 binary itself (`kubectl` on the PATH picks one by the server's version).
pub const KUBECTL_132_BIN: &str = "/usr/lib/google-cloud-sdk/bin/kubectl.1.32";

/// The kubectl 1.27 binary (it asks only for v2beta1 discovery and protobuf OpenAPI v2).
pub const KUBECTL_127_BIN: &str = "/usr/lib/google-cloud-sdk/bin/kubectl.1.27";

/// The kubectl 1.33 binary (the newest here).
pub const KUBECTL_133_BIN: &str = "/usr/lib/google-cloud-sdk/bin/kubectl.1.33";

/// Runs a kubectl command with `args` and a fresh cache dir (so kubectl's disk cache never
/// answers for the server); returns success, stdout and stderr.
pub fn kubectl_output(mut command: Command, args: &[&str]) -> (bool, String, String) {
    let cache = tempfile::tempdir().expect("cache dir");
    let out = command
        .arg("--cache-dir")
        .arg(cache.path())
        .args(args)
        .output()
        .unwrap_or_else(|e| panic!("run kubectl: {e}"));
    (
        out.status.success(),
        String::from_utf8_lossy(&out.stdout).to_string(),
        String::from_utf8_lossy(&out.stderr).to_string(),
    )
}

/// [`kubectl_output`] that must succeed; returns stdout.
pub fn kubectl_ok(command: Command, args: &[&str]) -> String {
    let (ok, stdout, stderr) = kubectl_output(command, args);
    assert!(ok, "kubectl {args:?}: {stderr}\n{stdout}");
    stdout
}

/// Runs kubectl `binary` against a gateway on loopback `port` (plain HTTP); returns success,
/// stdout and stderr.
pub fn kubectl(binary: &str, port: u16, args: &[&str]) -> (bool, String, String) {
    let mut command = Command::new(binary);
    command.args(["--server", &format!("http://127.0.0.1:{port}")]);
    kubectl_output(command, args)
}
