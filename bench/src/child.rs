//! Child processes whose output a harness reads while they run (the crash harnesses).

use std::io::{BufRead, BufReader, Read};
use std::process::{Child, Command, Stdio};
use std::sync::mpsc;
use std::thread::JoinHandle;

/// Spawns `cmd` with standard input closed and its output piped: the child, its standard
/// output line by line (a thread forwards each as it comes), and a thread that collects its
/// standard error until it exits. Panics when the command cannot start.
pub fn spawn_reading(mut cmd: Command) -> (Child, mpsc::Receiver<String>, JoinHandle<String>) {
    let mut child = cmd
        .stdin(Stdio::null())
        .stdout(Stdio::piped())
        .stderr(Stdio::piped())
        .spawn()
        .unwrap_or_else(|e| panic!("spawn {cmd:?}: {e}"));
    let out = child.stdout.take().expect("piped");
    let mut err = child.stderr.take().expect("piped");
    let (tx, lines) = mpsc::channel();
    std::thread::spawn(move || {
        for line in BufReader::new(out).lines().map_while(Result::ok) {
            if tx.send(line).is_err() {
                break;
            }
        }
    });
    let stderr = std::thread::spawn(move || {
        let mut s = String::new();
        let _ = err.read_to_string(&mut s);
        s
    });
    (child, lines, stderr)
}
