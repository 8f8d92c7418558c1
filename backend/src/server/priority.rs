//! The server's model work (classifying, editing, generating, jobs) runs at a lower scheduling
//! priority than its request handling, so that on a machine whose cores the models keep busy,
//! the async threads still answer at once: `/api/health`, refusals with 503, downloads. On Linux
//! each compute thread's nice value is raised to [`COMPUTE_NICE`]; elsewhere nothing changes.

use tokio_util::sync::CancellationToken;

use super::error::{ApiError, ApiResult};

/// The nice value of compute threads (request handling stays at the process's own, 0 by
/// default): under Linux's scheduler a thread at nice 0 gets about nine times the CPU share of
/// one at nice 10 when both want it.
pub const COMPUTE_NICE: i32 = 10;

/// Lowers the calling thread's priority to [`COMPUTE_NICE`] (once per thread; a lowered thread
/// stays lowered, as unprivileged processes cannot raise it back).
pub fn lower_this_thread() {
    #[cfg(target_os = "linux")]
    {
        thread_local! {
            static LOWERED: std::cell::Cell<bool> = const { std::cell::Cell::new(false) };
        }
        if LOWERED.replace(true) {
            return;
        }
        // SAFETY: gettid has no preconditions; setpriority only reads its arguments.
        let result = unsafe {
            let thread = libc::gettid() as libc::id_t;
            libc::setpriority(libc::PRIO_PROCESS, thread, COMPUTE_NICE)
        };
        if result != 0 {
            tracing::debug!(
                "cannot lower a compute thread's priority: {}",
                std::io::Error::last_os_error()
            );
        }
    }
}

/// Makes rayon's global pool (burn's CPU kernels, retrieval) run at the compute priority; call
/// before anything uses it. Returns false when the pool had already started.
pub fn lower_rayon_pool() -> bool {
    rayon::ThreadPoolBuilder::new()
        .start_handler(|_| lower_this_thread())
        .build_global()
        .is_ok()
}

/// Runs blocking model work at the compute priority on tokio's blocking pool.
pub async fn spawn_compute<T: Send + 'static>(
    work: impl FnOnce() -> T + Send + 'static,
) -> Result<T, tokio::task::JoinError> {
    tokio::task::spawn_blocking(move || {
        lower_this_thread();
        work()
    })
    .await
}

/// Model work that was told to stop because its deadline passed.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct PastDeadline;

/// Runs model work like [`spawn_compute`], handing it a token that is cancelled when `deadline`
/// passes or the returned future is dropped (its client left); the work is to stop soon after
/// (the embedded LLM stops at its next token). The server's edits and completions run here.
pub async fn spawn_cancellable<T: Send + 'static>(
    deadline: std::time::Duration,
    work: impl FnOnce(CancellationToken) -> T + Send + 'static,
) -> Result<Result<T, tokio::task::JoinError>, PastDeadline> {
    let cancel = CancellationToken::new();
    let _give_up = cancel.clone().drop_guard();
    tokio::time::timeout(deadline, spawn_compute(move || work(cancel)))
        .await
        .map_err(|_| PastDeadline)
}

#[cfg(all(test, target_os = "linux"))]
mod tests {
    use super::*;

    fn nice_of_this_thread() -> i32 {
        // SAFETY: as above.
        unsafe { libc::getpriority(libc::PRIO_PROCESS, libc::gettid() as libc::id_t) }
    }

    #[test]
    fn a_compute_thread_runs_at_the_lower_priority_and_others_do_not() {
        let before = std::thread::spawn(nice_of_this_thread).join().unwrap();
        let lowered = std::thread::spawn(|| {
            lower_this_thread();
            lower_this_thread();
            nice_of_this_thread()
        })
        .join()
        .unwrap();
        assert_eq!(lowered, COMPUTE_NICE.max(before));
        let other = std::thread::spawn(nice_of_this_thread).join().unwrap();
        assert_eq!(other, before, "only the calling thread is lowered");
    }
}

/// Runs model code on a blocking thread; its errors and panics become 500s.
pub async fn blocking<T: Send + 'static>(
    work: impl FnOnce() -> anyhow::Result<T> + Send + 'static,
) -> ApiResult<T> {
    finished(spawn_compute(work).await)
}

/// The result of model work run on a blocking thread; its errors and panics as 500s.
pub fn finished<T>(joined: Result<anyhow::Result<T>, tokio::task::JoinError>) -> ApiResult<T> {
    match joined {
        Ok(result) => result.map_err(ApiError::internal),
        Err(panic) => Err(ApiError::internal(anyhow::anyhow!(
            "a worker panicked: {panic}"
        ))),
    }
}
