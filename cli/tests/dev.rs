//! `stowage dev` needs nothing beside the binary: started from `/`, with no `../shared`, it
//! serves a hub with Trainer's CRDs and runtimes installed (compiled in) and writes kubeconfigs
//! that kubectl can use.

use std::io::{BufRead, BufReader};
use std::path::PathBuf;
use std::process::{Child, Command, Stdio};
use std::time::{Duration, Instant};

struct Killed(Child);

impl Drop for Killed {
    fn drop(&mut self) {
        let _ = self.0.kill();
        let _ = self.0.wait();
    }
}

#[test]
fn dev_runs_from_the_root_directory_with_the_upstream_objects_compiled_in() {
    let dir: PathBuf = std::env::temp_dir().join(format!("stowage-dev-from-root-{}", std::process::id()));
    let _ = std::fs::remove_dir_all(&dir);
    let mut child = Command::new(env!("CARGO_BIN_EXE_stowage"))
        .args(["dev", "--dir"])
        .arg(&dir)
        .current_dir("/")
        .stdin(Stdio::null())
        .stdout(Stdio::piped())
        .stderr(Stdio::piped())
        .spawn()
        .expect("stowage dev starts");
    let stdout = child.stdout.take().expect("stdout");
    let stderr = child.stderr.take().expect("stderr");
    let _guard = Killed(child);
    // The banner ends with how to stop it: by then every kubeconfig is written.
    let mut banner = String::new();
    for line in BufReader::new(stdout).lines() {
        let line = line.expect("utf-8 output");
        banner.push_str(&line);
        banner.push('\n');
        if line.contains("Ctrl-C") {
            break;
        }
    }
    let hub = dir.join("hub.kubeconfig");
    assert!(
        hub.is_file(),
        "no {} after the banner:\n{banner}\nstderr:\n{}",
        hub.display(),
        std::io::read_to_string(stderr).unwrap_or_default()
    );
    assert!(!banner.contains("trainjobs,placements"), "kubectl refuses `get A,B -w`; the banner must not offer it");

    // The runtimes are installed from the bundled copies; wait for the hub to list them.
    let deadline = Instant::now() + Duration::from_secs(60);
    let listed = loop {
        let out = Command::new("kubectl")
            .arg("--kubeconfig")
            .arg(&hub)
            .args(["get", "clustertrainingruntimes", "-o", "name"])
            .output()
            .expect("kubectl runs");
        let text = String::from_utf8_lossy(&out.stdout).into_owned();
        if out.status.success() && text.contains("torch-distributed") || Instant::now() > deadline {
            break text;
        }
        std::thread::sleep(Duration::from_millis(200));
    };
    for runtime in ["torch-distributed", "deepspeed-distributed", "mpi-distributed"] {
        assert!(listed.contains(&format!("clustertrainingruntime.trainer.kubeflow.org/{runtime}")), "{listed}");
    }

    // Everything in examples/ applies as it is (the dev fleet file lives elsewhere).
    let examples = concat!(env!("CARGO_MANIFEST_DIR"), "/../examples/");
    let applied = Command::new("kubectl")
        .arg("--kubeconfig")
        .arg(&hub)
        .args(["apply", "-f", examples])
        .output()
        .expect("kubectl");
    let out = String::from_utf8_lossy(&applied.stdout).into_owned();
    assert!(
        applied.status.success(),
        "kubectl apply -f examples/: {}{}",
        out,
        String::from_utf8_lossy(&applied.stderr)
    );
    for created in ["queue.stowage.dev/team-a created", "trainjob.trainer.kubeflow.org/"] {
        assert!(out.contains(created), "{out}");
    }
    let _ = std::fs::remove_dir_all(&dir);
}
