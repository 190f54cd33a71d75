//! `berth_a3s_core`: Berth's thin PyO3 binding over `a3s-code-core` 9.x.
//!
//! It exposes exactly what Berth's bridge and its tests use, as plain Python values and JSON
//! strings (the Python side, `session_runtime.a3s_core`, parses them):
//!
//! - `Agent(config)`: an agent from an ACL config (a path or inline text);
//! - `Agent.session(...)` / `Agent.resume_session(...)`: an `AgentSession` bound to a workspace,
//!   optionally with a `Store` (a3s-code-core's `FileSessionStore`) and an external Execute lane
//!   (the lane queue for host tool calls, plus a host-served bash sandbox, `sandbox.rs`, for the
//!   bash calls of the session's own agent runs);
//! - `Session.pending_external_tasks()`, `Session.complete_external_task(...)`, `tool`, `send`,
//!   `resume_run`, `save`, `close`;
//! - `Store.acquire_writer_lease(holder)`, `Store.writer_lease()`, snapshot and loop-checkpoint
//!   load/save (the store's own JSON shapes);
//! - `checkpoint_export(snapshot, loop_checkpoint)` / `checkpoint_open(export)`: the
//!   `SessionCheckpointExportV1` artifact in its cross-language wire form (`descriptor` plus
//!   `contentBase64`), validated by a3s-code-core itself; `checkpoint_open` returns its payload
//!   `{schema, snapshot, logical_resume}`. A session made with `export_dir` writes the export of
//!   every completed tool round there (a3s-code-core's live checkpoint export sink).
//!
//! Every blocking call runs on one process-wide Tokio runtime with the GIL released.

mod sandbox;

use std::sync::{Arc, OnceLock};

use sandbox::HostSandbox;

use a3s_code_core::permissions::{PermissionDecision, PermissionPolicy};
use a3s_code_core::queue::{
    ExternalTaskResult, LaneHandlerConfig, SessionLane, SessionQueueConfig, TaskHandlerMode,
};
use a3s_code_core::session_checkpoint::{SdkSessionCheckpointExportV1, SessionCheckpointExportSink};
use a3s_code_core::store::{FileSessionStore, SessionSnapshotV1, SessionStore};
use a3s_code_core::{loop_checkpoint::LoopCheckpoint, AgentResult, PlanningMode};
use a3s_code_core::{SessionCheckpointExportV1, SessionOptions};
use pyo3::exceptions::{PyRuntimeError, PyValueError};
use pyo3::prelude::*;

/// The `a3s-code-core` version this binding was built against: Cargo.toml's pin (held equal
/// by tests/unit/test_a3s_core_binding.py).
const CORE_VERSION: &str = "9.1.3";

fn runtime() -> &'static tokio::runtime::Runtime {
    static RT: OnceLock<tokio::runtime::Runtime> = OnceLock::new();
    RT.get_or_init(|| {
        tokio::runtime::Builder::new_multi_thread()
            .worker_threads(2)
            .enable_all()
            .build()
            .expect("tokio runtime")
    })
}

/// Run `fut` to completion on the shared runtime with the GIL released.
fn block<F, T>(py: Python<'_>, fut: F) -> T
where
    F: std::future::Future<Output = T> + Send,
    T: Send,
{
    py.detach(|| runtime().block_on(fut))
}

fn err<E: std::fmt::Display>(e: E) -> PyErr {
    PyRuntimeError::new_err(format!("{e:#}"))
}

fn bad_json<E: std::fmt::Display>(what: &str, e: E) -> PyErr {
    PyValueError::new_err(format!("{what}: {e}"))
}

fn to_json<T: serde::Serialize>(value: &T) -> PyResult<String> {
    serde_json::to_string(value).map_err(err)
}

/// a3s-code-core's `FileSessionStore` on one directory (shared by the sessions given it, so a
/// writer lease acquired here fences their commits too).
#[pyclass(frozen)]
struct Store {
    inner: Arc<FileSessionStore>,
    dir: String,
}

#[pymethods]
impl Store {
    #[new]
    fn new(py: Python<'_>, dir: String) -> PyResult<Self> {
        let d = dir.clone();
        let inner = block(py, async move { FileSessionStore::new(d).await }).map_err(err)?;
        Ok(Self { inner: Arc::new(inner), dir })
    }

    #[getter]
    fn dir(&self) -> String {
        self.dir.clone()
    }

    /// Acquire (or take over) the store's writer lease; JSON of `SessionStoreWriterLeaseV1`.
    fn acquire_writer_lease(&self, py: Python<'_>, holder_id: String) -> PyResult<String> {
        let s = Arc::clone(&self.inner);
        let lease = block(py, async move { s.acquire_writer_lease(&holder_id).await });
        to_json(&lease.map_err(err)?)
    }

    /// The durable writer lease (JSON), or None.
    fn writer_lease(&self, py: Python<'_>) -> PyResult<Option<String>> {
        let s = Arc::clone(&self.inner);
        let lease = block(py, async move { s.writer_lease().await }).map_err(err)?;
        lease.map(|l| to_json(&l)).transpose()
    }

    /// Commit one `SessionSnapshotV1` (JSON); fenced by the writer lease.
    fn save_snapshot(&self, py: Python<'_>, snapshot_json: &str) -> PyResult<()> {
        let snap: SessionSnapshotV1 =
            serde_json::from_str(snapshot_json).map_err(|e| bad_json("snapshot", e))?;
        let s = Arc::clone(&self.inner);
        block(py, async move { s.save_snapshot(&snap).await }).map_err(err)
    }

    fn load_snapshot(&self, py: Python<'_>, session_id: String) -> PyResult<Option<String>> {
        let s = Arc::clone(&self.inner);
        let snap = block(py, async move { s.load_snapshot(&session_id).await }).map_err(err)?;
        snap.map(|v| to_json(&v)).transpose()
    }

    fn save_loop_checkpoint(&self, py: Python<'_>, checkpoint_json: &str) -> PyResult<()> {
        let cp: LoopCheckpoint =
            serde_json::from_str(checkpoint_json).map_err(|e| bad_json("loop checkpoint", e))?;
        let s = Arc::clone(&self.inner);
        block(py, async move { s.save_loop_checkpoint(&cp.run_id, &cp).await }).map_err(err)
    }

    fn load_loop_checkpoint(&self, py: Python<'_>, run_id: String) -> PyResult<Option<String>> {
        let s = Arc::clone(&self.inner);
        let cp = block(py, async move { s.load_loop_checkpoint(&run_id).await }).map_err(err)?;
        cp.map(|v| to_json(&v)).transpose()
    }

    fn list(&self, py: Python<'_>) -> PyResult<Vec<String>> {
        let s = Arc::clone(&self.inner);
        block(py, async move { s.list().await }).map_err(err)
    }
}

/// Writes each checkpoint a live run exports (at completed tool-round boundaries) to
/// `<dir>/<seq>-<descriptor digest>.json` in the wire form, so a host can pick the last one.
struct DirExportSink {
    dir: std::path::PathBuf,
    seq: std::sync::atomic::AtomicU64,
}

#[async_trait::async_trait]
impl SessionCheckpointExportSink for DirExportSink {
    async fn export_checkpoint(&self, checkpoint: SessionCheckpointExportV1) -> anyhow::Result<()> {
        let sdk = SdkSessionCheckpointExportV1::from_export(&checkpoint);
        let n = self.seq.fetch_add(1, std::sync::atomic::Ordering::SeqCst);
        let digest = sdk.descriptor.descriptor_digest.replace(':', "-");
        let path = self.dir.join(format!("{n:06}-{digest}.json"));
        let tmp = path.with_extension("tmp");
        tokio::fs::create_dir_all(&self.dir).await?;
        tokio::fs::write(&tmp, serde_json::to_vec(&sdk)?).await?;
        tokio::fs::rename(&tmp, &path).await?;
        Ok(())
    }
}

/// An a3s-code-core `Agent`.
#[pyclass(frozen)]
struct Agent {
    inner: Arc<a3s_code_core::Agent>,
}

/// Options of a session: allow every tool, no planning; the store, external Execute lane (and
/// the host-served bash sandbox that puts the agent runs' bash calls there too) and checkpoint
/// export sink when given.
fn options(
    session_id: Option<String>,
    store: Option<&Store>,
    external_timeout_ms: Option<u64>,
    export_dir: Option<String>,
    sandbox: Option<Arc<HostSandbox>>,
) -> SessionOptions {
    let mut o = SessionOptions::new()
        .with_permission_policy(PermissionPolicy {
            default_decision: PermissionDecision::Allow,
            ..PermissionPolicy::default()
        })
        .with_planning_mode(PlanningMode::Disabled);
    if let Some(id) = session_id {
        o = o.with_session_id(id);
    }
    if let Some(st) = store {
        let dynstore: Arc<dyn SessionStore> = st.inner.clone();
        o = o.with_session_store(dynstore).with_auto_save(true);
    }
    if let Some(dir) = export_dir {
        let sink = DirExportSink { dir: dir.into(), seq: std::sync::atomic::AtomicU64::new(0) };
        o = o.with_session_checkpoint_export_sink(Arc::new(sink));
    }
    if let Some(sb) = sandbox {
        let handle: Arc<dyn a3s_code_core::sandbox::BashSandbox> = sb;
        o = o.with_sandbox_handle(handle);
    }
    if let Some(timeout_ms) = external_timeout_ms {
        let mut qc = SessionQueueConfig::default();
        qc.lane_handlers.insert(
            SessionLane::Execute,
            LaneHandlerConfig { mode: TaskHandlerMode::External, timeout_ms },
        );
        o = o.with_queue_config(qc);
    }
    o
}

#[pymethods]
impl Agent {
    #[new]
    fn new(py: Python<'_>, config: String) -> PyResult<Self> {
        let agent = block(py, async move { a3s_code_core::Agent::new(config).await });
        Ok(Self { inner: Arc::new(agent.map_err(err)?) })
    }

    /// A new session on `workspace`. With `store`, it is saved there (auto-save); with
    /// `external_timeout_ms`, its Execute lane (bash, write, edit) is external; with
    /// `export_dir`, every tool round's `SessionCheckpointExportV1` is written there.
    #[pyo3(signature = (workspace, session_id=None, store=None, external_timeout_ms=None, export_dir=None))]
    fn session(
        &self,
        py: Python<'_>,
        workspace: String,
        session_id: Option<String>,
        store: Option<PyRef<'_, Store>>,
        external_timeout_ms: Option<u64>,
        export_dir: Option<String>,
    ) -> PyResult<Session> {
        let sb = host_sandbox(external_timeout_ms);
        let o = options(session_id, store.as_deref(), external_timeout_ms, export_dir, sb.clone());
        let a = Arc::clone(&self.inner);
        let s = block(py, async move { a.session_async(workspace, Some(o)).await }).map_err(err)?;
        Ok(Session { inner: Arc::new(s), sandbox: sb })
    }

    /// Resume the session `session_id` persisted in `store`.
    #[pyo3(signature = (session_id, store, external_timeout_ms=None))]
    fn resume_session(
        &self,
        py: Python<'_>,
        session_id: String,
        store: PyRef<'_, Store>,
        external_timeout_ms: Option<u64>,
    ) -> PyResult<Session> {
        let sb = host_sandbox(external_timeout_ms);
        let o = options(None, Some(&store), external_timeout_ms, None, sb.clone());
        let a = Arc::clone(&self.inner);
        let s = block(py, async move { a.resume_session_async(&session_id, o).await });
        Ok(Session { inner: Arc::new(s.map_err(err)?), sandbox: sb })
    }
}

fn host_sandbox(timeout_ms: Option<u64>) -> Option<Arc<HostSandbox>> {
    timeout_ms.map(|t| Arc::new(HostSandbox::new(t)))
}

/// An a3s-code-core `AgentSession` (and its host-served bash sandbox, if its lane is external).
#[pyclass(frozen)]
struct Session {
    inner: Arc<a3s_code_core::AgentSession>,
    sandbox: Option<Arc<HostSandbox>>,
}

fn result_json(r: &AgentResult) -> PyResult<String> {
    to_json(&serde_json::json!({
        "text": r.text,
        "tool_calls_count": r.tool_calls_count,
        "total_tokens": r.usage.total_tokens,
        "messages": r.messages,
    }))
}

#[pymethods]
impl Session {
    #[getter]
    fn id(&self) -> String {
        self.inner.id().to_string()
    }

    /// Run one prompt to its end; JSON `{text, tool_calls_count, total_tokens, messages}`.
    fn send(&self, py: Python<'_>, prompt: String) -> PyResult<String> {
        let s = Arc::clone(&self.inner);
        let r = block(py, async move { s.send(&prompt, None).await }).map_err(err)?;
        result_json(&r)
    }

    /// Resume from the loop checkpoint of `run_id`; same JSON as `send`.
    fn resume_run(&self, py: Python<'_>, run_id: String) -> PyResult<String> {
        let s = Arc::clone(&self.inner);
        let r = block(py, async move { s.resume_run(&run_id).await }).map_err(err)?;
        result_json(&r)
    }

    /// Run one tool as the host (`AgentSession::tool`): through the session's lane queue, so
    /// an external Execute lane makes bash/write/edit pending external tasks. JSON
    /// `{name, output, exit_code}`.
    fn tool(&self, py: Python<'_>, name: String, args_json: &str) -> PyResult<String> {
        let args: serde_json::Value =
            serde_json::from_str(args_json).map_err(|e| bad_json("tool arguments", e))?;
        let s = Arc::clone(&self.inner);
        let r = block(py, async move { s.tool(&name, args).await }).map_err(err)?;
        to_json(&serde_json::json!({"name": r.name, "output": r.output, "exit_code": r.exit_code}))
    }

    /// JSON list of `{task_id, session_id, lane, command_type, payload, timeout_ms}`: the lane
    /// queue's external tasks and the agent runs' bash calls waiting in the host sandbox.
    fn pending_external_tasks(&self, py: Python<'_>) -> PyResult<String> {
        let s = Arc::clone(&self.inner);
        let tasks = block(py, async move { s.pending_external_tasks().await });
        let mut all: Vec<serde_json::Value> =
            tasks.iter().map(serde_json::to_value).collect::<Result<_, _>>().map_err(err)?;
        if let Some(sb) = &self.sandbox {
            all.extend(sb.pending(self.inner.id()));
        }
        to_json(&all)
    }

    /// Complete one external task; `result_json` is `{output, exit_code}`. True if it was open.
    #[pyo3(signature = (task_id, success, result_json, error=None))]
    fn complete_external_task(
        &self,
        py: Python<'_>,
        task_id: String,
        success: bool,
        result_json: &str,
        error: Option<String>,
    ) -> PyResult<bool> {
        let result: serde_json::Value =
            serde_json::from_str(result_json).map_err(|e| bad_json("result", e))?;
        if let Some(sb) = &self.sandbox {
            if sb.complete(&task_id, &result) {
                return Ok(true);
            }
        }
        let r = ExternalTaskResult { success, result, error };
        let s = Arc::clone(&self.inner);
        Ok(block(py, async move { s.complete_external_task(&task_id, r).await }))
    }

    fn save(&self, py: Python<'_>) -> PyResult<()> {
        let s = Arc::clone(&self.inner);
        block(py, async move { s.save().await }).map_err(err)
    }

    fn close(&self, py: Python<'_>) {
        let s = Arc::clone(&self.inner);
        block(py, async move { s.close().await })
    }
}

/// `SessionCheckpointExportV1` of a snapshot (and optionally a loop checkpoint), in the
/// cross-language wire form `{descriptor, contentBase64}` (JSON). Errors name the failed check.
#[pyfunction]
#[pyo3(signature = (snapshot_json, loop_checkpoint_json=None))]
fn checkpoint_export(snapshot_json: &str, loop_checkpoint_json: Option<&str>) -> PyResult<String> {
    let snap: SessionSnapshotV1 =
        serde_json::from_str(snapshot_json).map_err(|e| bad_json("snapshot", e))?;
    let cp: Option<LoopCheckpoint> = loop_checkpoint_json
        .map(serde_json::from_str)
        .transpose()
        .map_err(|e| bad_json("loop checkpoint", e))?;
    let export = SessionCheckpointExportV1::new(snap, cp).map_err(err)?;
    to_json(&SdkSessionCheckpointExportV1::from_export(&export))
}

/// Validate a wire-form export and open it: JSON `{snapshot, loop_checkpoint}`.
#[pyfunction]
fn checkpoint_open(export_json: &str) -> PyResult<String> {
    let sdk: SdkSessionCheckpointExportV1 =
        serde_json::from_str(export_json).map_err(|e| bad_json("checkpoint export", e))?;
    let content = base64_decode(&sdk.content_base64)?;
    let export = SessionCheckpointExportV1::from_parts(sdk.descriptor, content).map_err(err)?;
    let payload = export.open().map_err(err)?;
    to_json(&payload)
}

fn base64_decode(text: &str) -> PyResult<Vec<u8>> {
    Python::attach(|py| {
        let b64 = py.import("base64")?;
        b64.call_method1("b64decode", (text,))?.extract::<Vec<u8>>()
    })
}

#[pyfunction]
fn core_version() -> &'static str {
    CORE_VERSION
}

#[pymodule]
fn berth_a3s_core(m: &Bound<'_, PyModule>) -> PyResult<()> {
    m.add_class::<Agent>()?;
    m.add_class::<Session>()?;
    m.add_class::<Store>()?;
    m.add_function(wrap_pyfunction!(checkpoint_export, m)?)?;
    m.add_function(wrap_pyfunction!(checkpoint_open, m)?)?;
    m.add_function(wrap_pyfunction!(core_version, m)?)?;
    Ok(())
}
