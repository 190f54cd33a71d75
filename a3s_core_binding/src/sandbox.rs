//! A `BashSandbox` whose commands wait for the host: the bash calls of a session's own agent
//! runs become pending tasks the host serves (Berth's bridge runs them on a LaneWorker).
//!
//! a3s-code-core 9.1.3 runs the tools of an agent run in-process through its fact spine, past
//! the lane queue; `SessionOptions::with_sandbox_handle` is its documented hook for a host that
//! owns the isolation boundary of bash. Each `exec` registers a task
//! `{task_id "sbx-<random>-<n>", session_id, lane "Execute", command_type "bash", payload {command},
//! timeout_ms}` and waits for `complete` (or the request's timeout, or cancellation: the task is
//! then withdrawn). Task ids are unique per session (`sbx-` never starts a queue task's id).

use std::collections::HashMap;
use std::sync::atomic::{AtomicU64, Ordering};
use std::sync::Mutex;

use a3s_code_core::sandbox::{
    BashSandbox, SandboxCommandRequest, SandboxExecutionOutput, SandboxOutput,
};
use tokio::sync::oneshot;

struct Waiting {
    task: serde_json::Value,
    reply: oneshot::Sender<SandboxOutput>,
}

/// The host-served sandbox of one session.
pub struct HostSandbox {
    default_timeout_ms: u64,
    /// Random per sandbox: task ids must be unique beyond this session (a LaneWorker's
    /// at-most-once claim drops a task whose id it has seen).
    token: u64,
    seq: AtomicU64,
    waiting: Mutex<HashMap<String, Waiting>>,
}

/// Removes a task that was never answered when its `exec` future ends (timeout, cancel).
struct Withdraw<'a>(&'a HostSandbox, String);

impl Drop for Withdraw<'_> {
    fn drop(&mut self) {
        self.0.lock().remove(&self.1);
    }
}

impl HostSandbox {
    pub fn new(default_timeout_ms: u64) -> Self {
        use std::hash::{BuildHasher, Hasher};
        let token = std::collections::hash_map::RandomState::new().build_hasher().finish();
        Self { default_timeout_ms, token, seq: AtomicU64::new(1), waiting: Mutex::default() }
    }

    fn lock(&self) -> std::sync::MutexGuard<'_, HashMap<String, Waiting>> {
        self.waiting.lock().unwrap_or_else(std::sync::PoisonError::into_inner)
    }

    /// The tasks waiting for the host, in the external-task shape, of session `session_id`.
    pub fn pending(&self, session_id: &str) -> Vec<serde_json::Value> {
        let tasks = self.lock().values().map(|w| w.task.clone()).collect::<Vec<_>>();
        tasks
            .into_iter()
            .map(|mut t| {
                t["session_id"] = serde_json::Value::String(session_id.to_string());
                t
            })
            .collect()
    }

    /// Answer task `task_id` with `{output, exit_code}`; false if it is not waiting.
    pub fn complete(&self, task_id: &str, result: &serde_json::Value) -> bool {
        let Some(w) = self.lock().remove(task_id) else {
            return false;
        };
        let output = SandboxOutput {
            stdout: result.get("output").and_then(|v| v.as_str()).unwrap_or("").to_string(),
            stderr: String::new(),
            exit_code: result.get("exit_code").and_then(|v| v.as_i64()).unwrap_or(0) as i32,
        };
        w.reply.send(output).is_ok()
    }

    async fn wait(&self, command: &str, timeout_ms: u64) -> SandboxExecutionOutput {
        let n = self.seq.fetch_add(1, Ordering::SeqCst);
        let task_id = format!("sbx-{:016x}-{n}", self.token);
        let (tx, rx) = oneshot::channel();
        let task = serde_json::json!({
            "task_id": task_id, "lane": "Execute",
            "command_type": "bash", "payload": {"command": command}, "timeout_ms": timeout_ms,
        });
        self.lock().insert(task_id.clone(), Waiting { task, reply: tx });
        let _withdraw = Withdraw(self, task_id);
        match tokio::time::timeout(std::time::Duration::from_millis(timeout_ms), rx).await {
            Ok(Ok(out)) => out.into(),
            _ => SandboxExecutionOutput {
                stdout: String::new(),
                stderr: "no answer from the host before the timeout".into(),
                exit_code: 1,
                timed_out: true,
            },
        }
    }
}

#[async_trait::async_trait]
impl BashSandbox for HostSandbox {
    async fn exec_command(&self, command: &str, _ws: &str) -> anyhow::Result<SandboxOutput> {
        let out = self.wait(command, self.default_timeout_ms).await;
        Ok(SandboxOutput { stdout: out.stdout, stderr: out.stderr, exit_code: out.exit_code })
    }

    async fn exec(&self, request: SandboxCommandRequest) -> anyhow::Result<SandboxExecutionOutput> {
        let timeout_ms = if request.timeout_ms == 0 { self.default_timeout_ms } else { request.timeout_ms };
        Ok(self.wait(&request.command, timeout_ms.min(self.default_timeout_ms)).await)
    }

    /// Nothing runs here: tasks still waiting are withdrawn by their own `exec` futures.
    async fn shutdown(&self) {}
}
